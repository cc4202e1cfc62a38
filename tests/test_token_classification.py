"""Token classification end to end: the head equals transformers' XLNetForTokenClassification (golden outputs),
its loss skips unscored positions, and `xlnet-tf finetune / evaluate / predict --task token-classification`
learn a tagging task made in the test, with sentences longer than one window."""

import json
import os

import numpy as np
import pydoc_data.topics
import pytest

from xlnet_tf.cli import main
from xlnet_tf.errors import UserError

FIXTURES = os.path.join(os.path.dirname(__file__), "fixtures", "transformers")
ENCODER = ("input_ids", "segment_ids", "padding_mask")
PEOPLE = ["Alice", "Bob Marley", "Carol Smith", "Dmitri Ivanov", "Eve", "Frank Lloyd Wright", "Grace Hopper"]
PLACES = ["Paris", "New York", "Rio de Janeiro", "Tokyo", "Berlin", "Buenos Aires", "Cairo"]
# names of people AND places: only the word before tells which ("with Jordan" PER, "in Jordan" LOC)
AMBIGUOUS = ["Jordan", "Georgia", "Florence", "Chelsea"]
CUES = {"PER": ["with", "told"], "LOC": ["in", "from"]}


def check(name, value, bound, ok):
    print(f"{name}: {value} (bound {bound})")
    assert ok, name


def test_head_matches_transformers(tmp_path):
    import tensorflow as tf

    from xlnet_tf.heads import token_classification_loss
    from xlnet_tf.tasks import load_finetuned

    head = next(case for case in json.load(open(os.path.join(FIXTURES, "cases.json")))["heads"]
                if case["head"] == "token_classification")
    out = str(tmp_path / "converted")
    assert main(["convert", "huggingface", os.path.join(FIXTURES, head["dir"]), out, "--max-seq-len", "12"]) == 0
    model, finetune_config = load_finetuned(out, dropout=0.0, dropatt=0.0)
    names = finetune_config["label_names"]
    check("converted task / labels", (finetune_config["task"], names),
          "token-classification, id2label in id order",
          finetune_config["task"] == "token-classification" and names == ["O", "B-LOC", "B-PER", "I-LOC", "I-PER"])
    data = dict(np.load(os.path.join(FIXTURES, head["file"])))
    logits = model({k: data[k] for k in ENCODER}, training=False)["logits"].numpy()
    real = data["padding_mask"] > 0
    diff = float(np.abs(logits - data["logits"])[real].max())
    check("logits at real positions (3 rows, lengths 12/8/4), max |diff| vs transformers", f"{diff:.2e}", "<= 1e-4",
          diff <= 1e-4)
    total, count = token_classification_loss({"logits": tf.constant(logits)}, {"label_ids": data["labels"]})
    loss_diff = abs(float(total / count) - float(data["loss"]))
    check(f"loss over the {int(count)} scored positions vs transformers' CrossEntropyLoss(ignore_index=-100)",
          f"{loss_diff:.2e}", "<= 1e-5", loss_diff <= 1e-5 and int(count) == int((data["labels"] >= 0).sum()))


def test_loss_skips_positions_that_are_not_scored():
    import tensorflow as tf

    from xlnet_tf.heads import token_classification_loss

    rng = np.random.default_rng(0)
    logits = tf.Variable(rng.normal(0, 2, (3, 7, 4)).astype(np.float32))
    labels = rng.integers(0, 4, (3, 7)).astype(np.int32)
    labels[rng.random((3, 7)) < 0.4] = -100
    with tf.GradientTape() as tape:
        total, count = token_classification_loss({"logits": logits}, {"label_ids": labels})
    gradient = tape.gradient(total, logits).numpy()
    scored = labels >= 0
    z = logits.numpy()
    log_probs = z - z.max(-1, keepdims=True) - np.log(np.exp(z - z.max(-1, keepdims=True)).sum(-1, keepdims=True))
    manual = -sum(log_probs[b, t, labels[b, t]] for b, t in zip(*np.nonzero(scored)))
    check("summed loss vs numpy", f"{abs(float(total) - manual):.2e}", "<= 1e-4", abs(float(total) - manual) <= 1e-4)
    check("count = scored positions", int(count), int(scored.sum()), int(count) == int(scored.sum()))
    leaked = float(np.abs(gradient[~scored]).max())
    check("gradient at unscored positions", leaked, "== 0", leaked == 0.0)


# -- a tagging task: people and places inside documentation sentences --------------------------------------


def tagged_sentences(count, seed, long_every=0):
    """Sentences of CPython documentation words (lower-case) with 1-2 names of people (PER) and places (LOC)
    inserted, BIO tags, a third of them names of both kinds that only the word before decides (`CUES`);
    every `long_every`-th sentence has 40-60 words (more than one 32-piece window)."""
    rng = np.random.default_rng(seed)
    words = [w for text in pydoc_data.topics.topics.values() for w in text.split() if w.isalpha() and w.islower()]
    out = []
    for k in range(count):
        n = int(rng.integers(40, 61)) if long_every and k % long_every == 0 else int(rng.integers(4, 12))
        start = int(rng.integers(0, len(words) - n))
        sentence = [(w, "O") for w in words[start:start + n]]
        for _ in range(int(rng.integers(1, 3 if n < 40 else 5))):
            kind, names = ("PER", PEOPLE) if rng.random() < 0.5 else ("LOC", PLACES)
            name = [(w, ("B-" if i == 0 else "I-") + kind) for i, w in enumerate(
                names[int(rng.integers(len(names)))].split())]
            if rng.random() < 1 / 3:
                cues = CUES[kind]
                name = [(cues[int(rng.integers(len(cues)))], "O"), (AMBIGUOUS[int(rng.integers(4))], "B-" + kind)]
            at = int(rng.integers(0, len(sentence) + 1))
            if at < len(sentence) and sentence[at][1].startswith("I-"):
                continue  # never inside another name
            sentence[at:at] = name
        out.append(sentence)
    return out


def write_conll(path, sentences, columns=("word", "pos", "tag"), tags=True):
    lines = ["-DOCSTART- -X- O", ""]
    for sentence in sentences:
        for word, tag in sentence:
            fields = {"word": word, "pos": "NN" if word[0].isupper() else "XX", "tag": tag}
            lines.append(" ".join(fields[c] for c in (columns if tags else ("word",))))
        lines.append("")
    path.write_text("\n".join(lines), encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def tagging(tmp_path_factory):
    """The task's files and a SentencePiece model trained on documentation text and the names."""
    root = tmp_path_factory.mktemp("tagging")
    lines = [line.strip() for _, text in sorted(pydoc_data.topics.topics.items())
             for line in text.splitlines() if line.strip()][:1500]
    corpus = root / "corpus.txt"
    corpus.write_text("\n".join(lines + [" ".join(PEOPLE + PLACES + AMBIGUOUS)] * 5) + "\n", encoding="utf-8")
    assert main(["train-spm", "--input", str(corpus), "--model-prefix", str(root / "spm"), "--vocab-size", "600"]) == 0
    train = write_conll(root / "train.conll", tagged_sentences(400, 1, long_every=10))
    dev_sentences = tagged_sentences(80, 2, long_every=8)
    dev = write_conll(root / "dev.conll", dev_sentences)
    return root, train, dev, dev_sentences


@pytest.fixture(scope="module")
def ner(tagging):
    """A tiny model fine-tuned from scratch on the task by `xlnet-tf finetune` -> its directory."""
    root, train, dev, dev_sentences = tagging
    model_dir = root / "ner"
    assert main(["finetune", "--task", "token-classification", "--train-file", str(train), "--eval-file", str(dev),
                 "--spm-model", str(root / "spm.model"), "--model-size", "tiny", "--model-dir", str(model_dir),
                 "--max-seq-len", "32", "--train-steps", "300", "--batch-size", "16", "--learning-rate", "2e-3",
                 "--warmup-steps", "20", "--strategy", "one_device", "--steps-per-loop", "50"]) == 0
    return model_dir


@pytest.mark.slow
def test_finetune_evaluate_and_predict(tagging, ner):
    from xlnet_tf.data import token_classification as tc
    from xlnet_tf.metrics import token_classification_metrics
    from xlnet_tf.training.finetune import _infer, load_for_inference, load_task_data, run_model

    root, train, dev, dev_sentences = tagging
    model_dir = ner
    config = json.loads((model_dir / "finetune_config.json").read_text())
    results = json.loads((model_dir / "eval_results.json").read_text())
    check("label names", config["label_names"], "O first, then sorted",
          config["label_names"] == ["O", "B-LOC", "B-PER", "I-LOC", "I-PER"])
    check("doc_stride recorded", config["doc_stride"], "(32 - 2) // 2 = 15", config["doc_stride"] == 15)
    log = [json.loads(line) for line in open(model_dir / "train_log.jsonl")]
    print(f"loss {log[0]['loss']:.3f} -> {log[-1]['loss']:.3f}")
    check("entity F1 on the dev file (people / places inside 80 sentences, 10 longer than a window)",
          f"{results['f1']:.3f} (precision {results['precision']:.3f}, recall {results['recall']:.3f}, word "
          f"accuracy {results['accuracy']:.3f}, {results['true_entities']} entities)", ">= 0.85",
          results["f1"] >= 0.85)
    check("per-type F1", {t: round(v["f1"], 3) for t, v in results["per_type"].items()}, "PER and LOC >= 0.7",
          set(results["per_type"]) == {"LOC", "PER"} and all(v["f1"] >= 0.7 for v in results["per_type"].values()))
    gold = [[t for _, t in s] for s in dev_sentences]
    majority = token_classification_metrics(gold, [["O"] * len(t) for t in gold])
    print(f"majority tag ('O' everywhere): entity F1 {majority['f1']:.3f}, word accuracy {majority['accuracy']:.3f}")

    # evaluate on the saved directory gives the run's own figures
    assert main(["evaluate", "--model-dir", str(model_dir), "--eval-file", str(dev)]) == 0
    again = json.loads((model_dir / "eval_results.json").read_text())
    check("evaluate F1 = the run's", again["f1"], results["f1"], again["f1"] == results["f1"])

    # predict from words alone (a one-column CoNLL file): every word tagged, entities = the tags' chunks
    words_only = write_conll(root / "words.conll", dev_sentences, tags=False)
    output = root / "predictions.jsonl"
    assert main(["predict", "--model-dir", str(model_dir), "--input", str(words_only), "--output", str(output)]) == 0
    rows = [json.loads(line) for line in open(output, encoding="utf-8")]
    same_words = [row["words"] for row in rows] == [[w for w, _ in s] for s in dev_sentences]
    check("predicted sentences / words", f"{len(rows)} sentences", "80, the input's words in order",
          len(rows) == 80 and same_words and all(len(r["tags"]) == len(r["words"]) == len(r["scores"]) for r in rows))
    spans_match = all([(e["type"], e["start"], e["end"]) for e in row["entities"]]
                      == tc.entity_spans(row["words"], row["tags"]) for row in rows)
    texts_match = all(e["text"] == " ".join(row["words"][e["start"]:e["end"]]) for row in rows
                      for e in row["entities"])
    check("entities are the tags' chunks, with their text", spans_match and texts_match, True,
          spans_match and texts_match)
    recomputed = token_classification_metrics([[t for _, t in s] for s in dev_sentences], [r["tags"] for r in rows])
    check("F1 recomputed from predict's tags", recomputed["f1"], f"= evaluate's {results['f1']}",
          recomputed["f1"] == results["f1"])
    found = {e["text"] for row in rows for e in row["entities"]}
    print(f"entities predicted: {sorted(found)[:12]} ...")
    ambiguous = [(t, p) for s, r in zip(dev_sentences, rows) for (w, t), p in zip(s, r["tags"]) if w in AMBIGUOUS]
    right = sum(t == p for t, p in ambiguous) / len(ambiguous)
    check(f"tags of the {len(ambiguous)} names that only the word before decides (PER or LOC)", f"{right:.3f}",
          ">= 0.9 (by the word alone: 0.5)", right >= 0.9)

    # rows batched by length buckets equal rows padded to max_seq_len (left-padded logits put back in place)
    model, finetune_config, tokenizer = load_for_inference(str(model_dir))
    data, bucketed = _infer(model, finetune_config, str(dev), tokenizer, batch_size=8)
    full = run_model(model, "token-classification", data.features, 8, boundaries=(32,))
    a, b = tc.word_values(data.features, bucketed["logits"]), tc.word_values(data.features, full["logits"])
    diff = max(float(np.abs(x - y).max()) for x, y in zip(a, b))
    check(f"word logits, length buckets {finetune_config['bucket_boundaries']} vs one width ({data.report['windows']} windows, "
          f"{data.report['multi_window_examples']} sentences in several)", f"{diff:.2e}", "<= 1e-5", diff <= 1e-5)
    check("sentences in several windows", data.report["multi_window_examples"], ">= 10",
          data.report["multi_window_examples"] >= 10)
    # the same model reading each sentence in ONE window of 256 (relative positions: any length runs)
    one = load_task_data("token-classification", str(dev), tokenizer, 256, label_list=finetune_config["label_names"])
    check("at 256 positions every sentence fits one window", one.report["multi_window_examples"], "0",
          one.report["multi_window_examples"] == 0)
    long_tags = tc.word_predictions(one.features, run_model(model, "token-classification", one.features, 8)["logits"])
    windowed = tc.word_predictions(data.features, bucketed["logits"])
    several = np.bincount(data.features["example_index"], minlength=len(dev_sentences)) > 1
    pairs = [(a, b) for k in np.flatnonzero(several) for a, b in zip(windowed[k], long_tags[k])]
    agree = sum(a == b for a, b in pairs) / len(pairs)
    check(f"long sentences: windows of 32 vs one window, the same tag on the {len(pairs)} words", f"{agree:.4f}",
          ">= 0.98", agree >= 0.98)


# -- a task that only context decides: the word after a cue is tagged, whatever the word ---------------------

# cue word -> (entity type, how many words after it the entity holds)
CONTEXT_CUES = {"from": ("LOC", 1), "with": ("PER", 2), "into": ("ORG", 1)}


def context_sentences(count, seed):
    """Sentences of CPython documentation words in which the 1 or 2 words after a cue (`CONTEXT_CUES`) are an
    entity: any word of the pool is tagged O in one place and B-/I- in another, only its neighbours decide."""
    rng = np.random.default_rng(seed)
    pool = sorted({w for text in pydoc_data.topics.topics.values() for w in text.split()
                   if w.isalpha() and w.islower() and 3 <= len(w) <= 8} - set(CONTEXT_CUES))
    out = []
    for _ in range(count):
        sentence = [(pool[int(i)], "O") for i in rng.integers(0, len(pool), int(rng.integers(3, 9)))]
        for _ in range(int(rng.integers(1, 3))):
            cue = list(CONTEXT_CUES)[int(rng.integers(len(CONTEXT_CUES)))]
            kind, size = CONTEXT_CUES[cue]
            entity = [(pool[int(i)], ("B-" if k == 0 else "I-") + kind)
                      for k, i in enumerate(rng.integers(0, len(pool), size))]
            at = int(rng.integers(0, len(sentence) + 1))
            while at < len(sentence) and sentence[at][1] != "O" or at and sentence[at - 1][0] in CONTEXT_CUES:
                at -= 1  # never inside another entity or between a cue and its entity
            sentence[at:at] = [(cue, "O")] + entity
        out.append(sentence)
    return out


@pytest.mark.slow
def test_tags_that_only_context_decides_are_learned(tagging, tmp_path):
    """A tiny model from scratch learns tags that no word decides alone (the default initialiser scales with the
    width: at the published 0.02 this run stays at the tag prior, entity F1 0.00); evaluate's F1 equals the
    metrics of predict's tags."""
    from xlnet_tf.metrics import token_classification_metrics

    root = tagging[0]
    train_sentences, dev_sentences = context_sentences(600, 11), context_sentences(150, 12)
    words = [w for s in train_sentences for w, _ in s]
    tagged = {w for s in train_sentences for w, t in s if t != "O"}
    both = sum(1 for w in tagged if any(x == w and t == "O" for s in train_sentences for x, t in s))
    check("entity words also tagged O elsewhere in the training file", f"{both} of {len(tagged)}", ">= 70%",
          both >= 0.7 * len(tagged))
    train = write_conll(tmp_path / "train.conll", train_sentences)
    dev = write_conll(tmp_path / "dev.conll", dev_sentences)
    model_dir = tmp_path / "context"
    assert main(["finetune", "--task", "token-classification", "--train-file", str(train), "--eval-file", str(dev),
                 "--spm-model", str(root / "spm.model"), "--model-size", "tiny", "--model-dir", str(model_dir),
                 "--max-seq-len", "32", "--train-steps", "300", "--batch-size", "32", "--learning-rate", "2e-3",
                 "--warmup-steps", "30", "--strategy", "one_device", "--steps-per-loop", "50"]) == 0
    results = json.loads((model_dir / "eval_results.json").read_text())
    gold = [[t for _, t in s] for s in dev_sentences]
    majority = token_classification_metrics(gold, [["O"] * len(t) for t in gold])
    log = [json.loads(line) for line in open(model_dir / "train_log.jsonl")]
    print(f"{len(words)} training words; loss {log[0]['loss']:.3f} -> {log[-1]['loss']:.3f}; majority tag ('O' "
          f"everywhere): entity F1 {majority['f1']:.3f}, word accuracy {majority['accuracy']:.3f}")
    check("entity F1 on the dev file (150 sentences)", f"{results['f1']:.3f} (precision {results['precision']:.3f}, "
          f"recall {results['recall']:.3f}, {results['true_entities']} entities)",
          f">= 0.8 (the majority tag: {majority['f1']:.3f})", results["f1"] >= 0.8)
    check("per-type F1", {t: round(v["f1"], 3) for t, v in results["per_type"].items()}, "each >= 0.6",
          set(results["per_type"]) == {"LOC", "ORG", "PER"} and all(v["f1"] >= 0.6 for v in results["per_type"].values()))

    assert main(["evaluate", "--model-dir", str(model_dir), "--eval-file", str(dev)]) == 0
    evaluated = json.loads((model_dir / "eval_results.json").read_text())
    output = tmp_path / "tags.jsonl"
    assert main(["predict", "--model-dir", str(model_dir), "--input", str(write_conll(tmp_path / "words.conll",
                 dev_sentences, tags=False)), "--output", str(output)]) == 0
    predicted = [json.loads(line)["tags"] for line in open(output, encoding="utf-8")]
    recomputed = token_classification_metrics(gold, predicted)
    check("evaluate's F1 = the metrics of predict's tags", f"{evaluated['f1']:.6f} vs {recomputed['f1']:.6f}",
          "equal", evaluated["f1"] == recomputed["f1"] == results["f1"])


@pytest.mark.slow
def test_jsonl_label_all_pieces_and_bad_input(tagging, tmp_path, capsys):
    root, _, _, _ = tagging
    sentences = tagged_sentences(60, 3)
    jsonl = tmp_path / "train.jsonl"
    jsonl.write_text("".join(json.dumps({"tokens": [w for w, _ in s], "tags": [t for _, t in s]}) + "\n"
                             for s in sentences), encoding="utf-8")
    model_dir = tmp_path / "all-pieces"
    args = ["finetune", "--task", "token-classification", "--train-file", str(jsonl), "--spm-model",
            str(root / "spm.model"), "--model-size", "tiny", "--model-dir", str(model_dir), "--max-seq-len", "24",
            "--train-steps", "4", "--batch-size", "8", "--strategy", "one_device"]
    assert main(args + ["--label-all-pieces", "--doc-stride", "5"]) == 0
    config = json.loads((model_dir / "finetune_config.json").read_text())
    check("recorded label_all_pieces / doc_stride", (config["label_all_pieces"], config["doc_stride"]), "(True, 5)",
          config["label_all_pieces"] is True and config["doc_stride"] == 5)
    log = [json.loads(line) for line in open(model_dir / "train_log.jsonl")]
    check("JSONL run: finite losses", [round(r["loss"], 3) for r in log], "finite",
          len(log) > 0 and all(np.isfinite(r["loss"]) for r in log))

    # a tag the model does not know, named with its file and line
    bad = tmp_path / "bad.conll"
    bad.write_text("Paris B-LOC\nis O\n\nTokyo B-CITY\n", encoding="utf-8")
    printed = [capsys.readouterr().out]  # the checks' lines, printed again at the end
    assert main(["evaluate", "--model-dir", str(model_dir), "--eval-file", str(bad)]) == 2
    err = capsys.readouterr().err
    check("unknown tag: message", err.strip().splitlines()[-1], f"names {bad}:4 and 'B-CITY'",
          f"{bad}:4" in err and "B-CITY" in err)
    for extra, text in ((["--tag-column", "1"], "--tag-column"), (["--long-doc", "memory", "--max-doc-len", "64"],
                                                                  "--long-doc memory")):
        flags = ["--task", "classification"] if extra[0] == "--tag-column" else []
        printed.append(capsys.readouterr().out)
        code = main(args + extra + flags)
        err = capsys.readouterr().err
        check(f"{' '.join(extra + flags)}: exit code and message", (code, err.strip().splitlines()[-1]),
              f"2, naming {text}", code == 2 and text in err)
    from xlnet_tf.data.token_classification import read_token_examples

    with pytest.raises(UserError) as info:
        read_token_examples(bad, tag_column=3)
    check("a tag column the file lacks", str(info.value), "names the file, line and column",
          f"{bad}, line 1" in str(info.value) and "tag_column 3" in str(info.value))
    print("".join(printed + [capsys.readouterr().out]))


def _session_outputs(path, signature_name, name, values):
    """A signature through a TF1 Session, as TensorFlow Serving runs it -> {alias: array}."""
    import tensorflow as tf
    import tensorflow_text  # noqa: F401

    graph = tf.Graph()
    with tf.compat.v1.Session(graph=graph) as session:
        meta = tf.compat.v1.saved_model.loader.load(session, ["serve"], path)
        signature = meta.signature_def[signature_name]
        aliases = sorted(signature.outputs)
        got = session.run([signature.outputs[a].name for a in aliases], {signature.inputs[name].name: values})
    return dict(zip(aliases, got))


def _decoded(array):
    return [[v.decode() if isinstance(v, bytes) else v for v in row] for row in array]


@pytest.mark.slow
def test_export_serves_tags_and_entities(tagging, ner, tmp_path, capsys):
    """The export's `words` signature (pre-split words) and `serving_default` (raw text, words split in the
    graph) give `xlnet-tf predict`'s tags and scores, with the entities' word spans and byte offsets; served by
    `xlnet-tf serve`, `xlnet-tf query` prints the entities."""
    from xlnet_tf.export import ops
    from xlnet_tf.export.exporter import export_model
    from xlnet_tf.serving import Client, serve
    from xlnet_tf.training.finetune import predict

    root, _, _, dev_sentences = tagging
    words = [[w for w, _ in s] for s in dev_sentences]
    words_file = write_conll(tmp_path / "words.conll", dev_sentences, tags=False)
    predict(str(ner), str(words_file), str(tmp_path / "predicted.jsonl"))
    predicted = [json.loads(line) for line in open(tmp_path / "predicted.jsonl", encoding="utf-8")]
    path = export_model(str(ner), str(tmp_path / "exports" / "ner"))
    bad = ops.disallowed_ops(path)
    check("ops outside TensorFlow Serving's allowlist", sorted(bad), "none", not bad)

    width = max(len(row) for row in words)
    padded = np.array([row + [""] * (width - len(row)) for row in words], object)
    out = _session_outputs(path, "words", "words", padded)
    tags = [row[:len(w)] for row, w in zip(_decoded(out["tags"]), words)]
    check("`words` signature (TF1 Session, 80 sentences padded with \"\"): tags = predict's", tags == [
        r["tags"] for r in predicted], True, tags == [r["tags"] for r in predicted])
    diff = max(float(np.abs(np.asarray(row[:len(w)]) - r["scores"]).max()) for row, w, r in
               zip(out["scores"], words, predicted))
    check("`words` signature: scores vs predict's, max |diff|", f"{diff:.2e}", "<= 1e-5", diff <= 1e-5)
    spans = [[(t, int(s), int(e)) for t, s, e in zip(types[:n], starts[:n], ends[:n])] for types, starts, ends, n in
             zip(_decoded(out["entity_type"]), out["entity_start"], out["entity_end"], out["num_entities"])]
    want = [[(e["type"], e["start"], e["end"]) for e in r["entities"]] for r in predicted]
    texts = [_decoded(out["entity_text"])[i][:n] for i, n in enumerate(out["num_entities"])]
    check("`words` signature: entity spans (word indices) and texts = predict's", spans == want, True,
          spans == want and texts == [[e["text"] for e in r["entities"]] for r in predicted])

    texts = [" ".join(row) for row in words] + ["Alice met Grace Hopper in Paris, then flew to Rio de Janeiro.", ""]
    out = _session_outputs(path, "serving_default", "text", np.array(texts, object))
    split = [row[:n] for row, n in zip(_decoded(out["words"]), out["num_words"])]
    check("serving_default: words split in the graph = the sentences' words", split[:80] == words, True,
          split[:80] == words)
    raw_tags = [row[:n] for row, n in zip(_decoded(out["tags"]), out["num_words"])]
    check("serving_default: tags = predict's", raw_tags[:80] == [r["tags"] for r in predicted], True,
          raw_tags[:80] == [r["tags"] for r in predicted])
    found = [(t, texts[-2].encode()[s:e].decode(), x) for t, s, e, x in
             zip(_decoded(out["entity_type"])[-2], out["entity_start"][-2], out["entity_end"][-2],
                 _decoded(out["entity_text"])[-2])][:int(out["num_entities"][-2])]
    print(f"raw text {texts[-2]!r}: words {split[-2]}, tags {raw_tags[-2]}, entities {found}")
    check("raw text: punctuation split off, entities = text[start:end] in bytes",
          [f[:2] for f in found], "[('PER', 'Alice'), ('PER', 'Grace Hopper'), ('LOC', 'Paris'), ('LOC', 'Rio de "
          "Janeiro')]", [f[:2] for f in found] == [("PER", "Alice"), ("PER", "Grace Hopper"), ("LOC", "Paris"),
                                                  ("LOC", "Rio de Janeiro")] and all(f[1] == f[2] for f in found))
    check("an empty text: no words, no entities", (int(out["num_words"][-1]), int(out["num_entities"][-1])), "(0, 0)",
          int(out["num_words"][-1]) == 0 and int(out["num_entities"][-1]) == 0)

    # batch prediction (Beam's RunInference handler): a row's words and entities whatever the batch holds
    from xlnet_tf.pipelines.predict import LoadedExport

    loaded = LoadedExport(path)
    batch = loaded.predict([{"inputs": {"text": t}} for t in texts[-4:]])
    alone = [loaded.predict([{"inputs": {"text": t}}])[0] for t in texts[-4:]]
    # scores to 1e-6: a batch pads rows to its longest, and float32 matmuls of other shapes round differently
    exact = [{k: v for k, v in row.items() if k != "scores"} for row in batch] == [
        {k: v for k, v in row.items() if k != "scores"} for row in alone]
    score_diff = max((float(np.abs(np.subtract(b["scores"], a["scores"])).max(initial=0.0)) for b, a in
                      zip(batch, alone)), default=0.0)
    check("batch prediction: 4 texts in one batch = each alone (padding cut to num_words / num_entities; scores "
          f"max |diff| {score_diff:.1e}, bound 1e-6)", exact, True,
          exact and score_diff <= 1e-6 and batch[-2]["words"] == split[-2] and batch[-1]["words"] == [])

    base = os.path.dirname(path)
    server = serve(model_base_path=base, model_name="ner", port=0, rest_api_port=None).start()
    try:
        with Client(server.grpc_target, "ner") as client:
            rows = client.tag(texts[-2:-1])
            check("Client.tag (serving_default over gRPC): entities", [(e["type"], e["text"]) for e in rows[0]["entities"]],
                  "the Session's", [(e["type"], e["text"]) for e in rows[0]["entities"]] == [f[:2] for f in found])
            rows = client.tag(words=words[:5])
            check("Client.tag(words=...) (the words signature): tags = predict's", [r["tags"] for r in rows],
                  "predict's", [r["tags"] for r in rows] == [r["tags"] for r in predicted[:5]])
        earlier = capsys.readouterr().out  # the checks printed so far, printed again below
        assert main(["query", "--server", server.grpc_target, "--model", "ner", "--text", texts[-2]]) == 0
        printed = capsys.readouterr().out
        print(earlier + printed)
        check("`xlnet-tf query --text` prints the entities", "LOC 'Rio de Janeiro'" in printed, True,
              "LOC 'Rio de Janeiro'" in printed and "PER 'Grace Hopper'" in printed)
    finally:
        server.stop(1)
