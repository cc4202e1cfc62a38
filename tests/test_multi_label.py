"""`xlnet-tf finetune --task multi-label`: texts with 0-3 labels made in the test from CPython's documentation
sentences, sigmoid scores and binary cross-entropy, thresholds tuned on the dev file and recorded, and
`evaluate` / `predict` using them. The head's parity with transformers' multi_label_classification is in
test_heads."""

import json
import re

import numpy as np
import pydoc_data.topics
import pytest

from xlnet_tf.cli import main

# Fine-tuning steps: dev micro F1 was 0.984 / 0.988 after 100 / 200 steps of an 800-step run (0.986 at 800; bound
# 0.9), so the test runs 200.
STEPS = 200

KEYWORDS = ("class", "function", "object", "value")


def check(name, value, bound, ok):
    print(f"{name}: {value} (bound {bound})")
    assert ok, name


def labelled_sentences():
    """(line, labels): lines of the documentation; the labels are the KEYWORDS the line mentions (as words),
    0 to 3 of them."""
    out = []
    for text in pydoc_data.topics.topics.values():
        for line in text.splitlines():
            words = re.findall(r"[a-z]+", line.lower())  # "class," and "(class" mention it too
            if not 4 <= len(words) <= 30:
                continue
            labels = [k for k in KEYWORDS if k in words]
            if len(labels) <= 3:
                out.append((" ".join(line.split()), labels))
    rng = np.random.default_rng(0)
    rng.shuffle(out)
    return out


@pytest.fixture(scope="module")
def task(tmp_path_factory):
    root = tmp_path_factory.mktemp("multi_label")
    rows = labelled_sentences()
    with_labels = [r for r in rows if r[1]][:900]
    without = [r for r in rows if not r[1]][:400]
    data = with_labels + without
    np.random.default_rng(1).shuffle(data)
    train, dev = data[:1000], data[1000:]
    (root / "train.tsv").write_text("text_a\tlabel\n" + "".join(f"{t}\t{';'.join(ls)}\n" for t, ls in train),
                                    encoding="utf-8")
    (root / "dev.jsonl").write_text("".join(json.dumps({"text_a": t, "label": ls}) + "\n" for t, ls in dev),
                                    encoding="utf-8")
    lines = [line.strip() for _, text in sorted(pydoc_data.topics.topics.items())
             for line in text.splitlines() if line.strip()][:2000]
    (root / "corpus.txt").write_text("\n".join(lines) + "\n", encoding="utf-8")
    assert main(["train-spm", "--input", str(root / "corpus.txt"), "--model-prefix", str(root / "spm"),
                 "--vocab-size", "800"]) == 0
    model_dir = root / "model"
    assert main(["finetune", "--task", "multi-label", "--train-file", str(root / "train.tsv"), "--label-separator", ";",
                 "--eval-file", str(root / "dev.jsonl"), "--tune-thresholds", "--spm-model", str(root / "spm.model"),
                 "--model-size", "tiny", "--model-dir", str(model_dir), "--max-seq-len", "48",
                 "--train-steps", str(STEPS), "--batch-size", "16", "--learning-rate", "1e-3", "--dropout", "0",
                 "--dropatt", "0", "--warmup-steps", "20", "--strategy", "one_device",
                 "--steps-per-loop", "100"]) == 0
    return root, model_dir, dev


@pytest.mark.slow
def test_multi_label_learns_with_tuned_thresholds(task, tmp_path):
    from xlnet_tf.metrics import multi_label_metrics

    root, model_dir, dev = task
    config = json.loads((model_dir / "finetune_config.json").read_text())
    results = json.loads((model_dir / "eval_results.json").read_text())
    check("label names (sorted)", config["label_names"], sorted(KEYWORDS), config["label_names"] == sorted(KEYWORDS))
    counts = np.bincount([len(ls) for _, ls in dev], minlength=4)
    print(f"dev: {len(dev)} texts with 0 / 1 / 2 / 3 labels: {counts.tolist()}")
    check("thresholds tuned on the dev file, recorded", [round(t, 3) for t in config["thresholds"]],
          "4 values in (0, 1)", len(config["thresholds"]) == 4 and all(0 < t < 1 for t in config["thresholds"])
          and results["thresholds"] == config["thresholds"])
    check(f"micro F1 (which of 4 words a sentence mentions; tiny model from scratch, {STEPS} steps of 16)",
          f"{results['micro_f1']:.3f} (macro {results['macro_f1']:.3f}, subset accuracy "
          f"{results['subset_accuracy']:.3f})", ">= 0.9", results["micro_f1"] >= 0.9)
    check("per-label F1", {k: round(v["f1"], 3) for k, v in results["per_label"].items()}, ">= 0.8 each",
          all(v["f1"] >= 0.8 for v in results["per_label"].values()))
    none_f1 = multi_label_metrics([[k in ls for k in sorted(KEYWORDS)] for _, ls in dev], np.zeros((len(dev), 4)))
    print(f"predicting no label: micro F1 {none_f1['micro_f1']:.3f}, subset accuracy {none_f1['subset_accuracy']:.3f}")

    output = tmp_path / "predictions.jsonl"
    assert main(["predict", "--model-dir", str(model_dir), "--input", str(root / "dev.jsonl"), "--output",
                 str(output)]) == 0
    rows = [json.loads(line) for line in open(output, encoding="utf-8")]
    by_threshold = all(r["labels"] == [n for n, t in zip(config["label_names"], config["thresholds"])
                                       if r["scores"][n] >= t] for r in rows)
    check("predict: labels = the scores at or above the recorded thresholds", by_threshold, True, by_threshold)
    again = multi_label_metrics([[k in ls for k in config["label_names"]] for _, ls in dev],
                                [[n in r["labels"] for n in config["label_names"]] for r in rows],
                                config["label_names"])
    check("micro F1 recomputed from predict's labels", again["micro_f1"], f"= evaluate's {results['micro_f1']}",
          again["micro_f1"] == results["micro_f1"])
    assert main(["evaluate", "--model-dir", str(model_dir), "--eval-file", str(root / "dev.jsonl")]) == 0


def test_thresholds_and_metrics_by_hand():
    from xlnet_tf.metrics import multi_label_metrics, tune_thresholds

    labels = np.array([[1, 0], [1, 1], [0, 0], [0, 1]])
    scores = np.array([[0.9, 0.2], [0.3, 0.6], [0.1, 0.7], [0.2, 0.8]])
    thresholds = tune_thresholds(labels, scores)
    # label 0: scores of positives 0.9 / 0.3, negatives 0.1 / 0.2 -> a cut between 0.2 and 0.3 (F1 1.0)
    # label 1: positives 0.6 / 0.8, negatives 0.2 / 0.7 -> best F1 0.8 for any cut in (0.2, 0.6]: 0.5, the default
    check("tuned thresholds", thresholds, "[0.25, 0.5]", np.allclose(thresholds, [0.25, 0.5]))
    got = multi_label_metrics(labels, scores >= np.array(thresholds), ["a", "b"])
    check("micro / macro F1, subset accuracy", (round(got["micro_f1"], 4), round(got["macro_f1"], 4),
                                               got["subset_accuracy"]), "(0.8889, 0.9, 0.75)",
          np.allclose([got["micro_f1"], got["macro_f1"], got["subset_accuracy"]], [8 / 9, 0.9, 0.75]))


@pytest.mark.slow
def test_export_answers_as_predict_and_classify_gives_every_label(task, tmp_path, capsys):
    """The export's serving_default: each label's sigmoid and the labels at or above the recorded thresholds,
    as `predict`; its classification signature (TensorFlow Serving's Classify) every label with its score;
    batch prediction keeps each row's own labels."""
    import tensorflow as tf

    from xlnet_tf.export import ops
    from xlnet_tf.export.exporter import export_model
    from xlnet_tf.pipelines.predict import LoadedExport
    from xlnet_tf.serving.client import text_examples

    root, model_dir, dev = task
    output = tmp_path / "predictions.jsonl"
    assert main(["predict", "--model-dir", str(model_dir), "--input", str(root / "dev.jsonl"), "--output",
                 str(output)]) == 0
    rows = [json.loads(line) for line in open(output, encoding="utf-8")]
    path = export_model(str(model_dir), str(tmp_path / "exports" / "ml"))
    check("ops outside TensorFlow Serving's allowlist", sorted(ops.disallowed_ops(path)), "none",
          not ops.disallowed_ops(path))
    loaded = tf.saved_model.load(path)
    texts = [t for t, _ in dev]
    out = loaded.signatures["serving_default"](text=tf.constant(texts))
    names = json.loads((model_dir / "finetune_config.json").read_text())["label_names"]
    served = [[v.decode() for v in row[:n]] for row, n in zip(out["labels"].numpy(), out["num_predicted"].numpy())]
    check("export labels = predict's (300 texts)", served == [r["labels"] for r in rows], True,
          served == [r["labels"] for r in rows])
    diff = float(np.abs(out["scores"].numpy() - np.array([[r["scores"][n] for n in names] for r in rows])).max())
    check("export scores vs predict's, max |diff|", f"{diff:.2e}", "<= 1e-5", diff <= 1e-5)
    examples = text_examples({"text": texts[:5]}).SerializeToString()  # a tf.train.Input of 5 Examples
    from tensorflow_serving.apis import input_pb2

    parsed = input_pb2.Input.FromString(examples)
    serialized = [e.SerializeToString() for e in parsed.example_list.examples]
    classified = loaded.signatures["classification"](inputs=tf.constant(serialized))
    classes = [[c.decode() for c in row] for row in classified["classes"].numpy()]
    check("classification signature: every label with its sigmoid score", classes[0], names,
          all(c == names for c in classes) and np.allclose(classified["scores"].numpy(), out["scores"].numpy()[:5],
                                                          atol=1e-6))
    export = LoadedExport(path)
    batch = export.predict([{"inputs": {"text": t}} for t in texts[:6]])
    alone = [export.predict([{"inputs": {"text": t}}])[0] for t in texts[:6]]
    same = ([(b["labels"], b["num_predicted"]) for b in batch] == [(a["labels"], a["num_predicted"]) for a in alone]
            and np.allclose([b["scores"] for b in batch], [a["scores"] for a in alone], atol=1e-6))
    check("batch prediction: a row's labels (and scores to 1e-6) whatever the batch", same, True,
          same and [b["labels"] for b in batch] == [r["labels"] for r in rows[:6]])

    from xlnet_tf.serving import Client, serve

    server = serve(model_base_path=str(tmp_path / "exports" / "ml"), model_name="ml", port=0, rest_api_port=None).start()
    try:
        with Client(server.grpc_target, "ml") as client:
            got = client.classify(texts[:4])
        check("Client.classify over gRPC: labels", [g["labels"] for g in got], "predict's",
              [g["labels"] for g in got] == [r["labels"] for r in rows[:4]])
        earlier = capsys.readouterr().out
        some = next(i for i, r in enumerate(rows) if r["labels"])  # a text with labels
        assert main(["query", "--server", server.grpc_target, "--model", "ml", "--text", texts[some]]) == 0
        printed = capsys.readouterr().out
        print(earlier + printed)
        want = f"{texts[some]!r}: {', '.join(rows[some]['labels'])}  scores"
        check("`xlnet-tf query` prints the labels that apply", want in printed, True, want in printed)
    finally:
        server.stop(1)
