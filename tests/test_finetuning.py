"""`xlnet-tf finetune` from a checkpoint made by `xlnet-tf pretrain` in the test: classification and regression
learn, span extraction reaches non-trivial exact match, RACE runs end to end; evaluate and predict agree."""

import json
import os
import random
import subprocess

import numpy as np
import pytest

from conftest import warm_command
from xlnet_tf.cli import main

pytestmark = pytest.mark.slow  # trains, serves or starts processes: `make test` only, not `make test-quick`

WORDS = ("alpha beta gamma delta epsilon zeta theta iota kappa lambda sigma omega river stone cloud forest "
         "lamp window garden bridge paper music silver copper winter summer").split()


@pytest.fixture(scope="module")
def pretrained(tmp_path_factory):
    """A tiny model pretrained for 60 steps on the bundled documentation text, by the CLI."""
    from test_pretraining import corpus_lines

    root = tmp_path_factory.mktemp("finetune")
    corpus = root / "corpus.txt"
    corpus.write_text("\n".join(list(corpus_lines()) + [" ".join(WORDS)] * 20), encoding="utf-8")
    assert main(["train-spm", "--input", str(corpus), "--model-prefix", str(root / "spm"), "--vocab-size", "800"]) == 0
    assert main(["create-pretraining-data", "--input", str(corpus), "--spm-model", str(root / "spm.model"),
                 "--output-dir", str(root / "data"), "--seq-len", "64", "--reuse-len", "32"]) == 0
    assert main(["pretrain", "--data-dir", str(root / "data"), "--model-dir", str(root / "pretrained"),
                 "--model-size", "tiny", "--train-steps", "60", "--batch-size", "8", "--learning-rate", "2e-3",
                 "--strategy", "one_device", "--steps-per-loop", "20"]) == 0
    return root


def finetune_args(root, task, train, dev, steps, *extra, name=None):
    return ["finetune", "--task", task, "--train-file", str(train), "--eval-file", str(dev), "--init-checkpoint",
            str(root / "pretrained"), "--model-dir", str(root / f"ft-{name or task}"), "--train-steps", str(steps),
            "--batch-size", "16", "--learning-rate", "1e-3", "--warmup-steps", "10", "--strategy", "one_device",
            "--steps-per-loop", "25", "--layer-decay", "0.9", *extra]


def finetune(root, task, train, dev, steps, *extra, name=None):
    model_dir = root / f"ft-{name or task}"
    assert main(finetune_args(root, task, train, dev, steps, *extra, name=name)) == 0
    return model_dir, json.loads((model_dir / "eval_results.json").read_text())


class FinetuneBeside:
    """The same `xlnet-tf finetune` in its own process (forked by `launcher`, tests/conftest.py `warm_cli`),
    started on entering the `with` block while the test goes on; `result()` waits for it -> (model_dir, eval
    results). Stopped if the block fails first."""

    def __init__(self, launcher, root, task, train, dev, steps, *extra, name=None):
        self.launcher = launcher
        self.model_dir = root / f"ft-{name or task}"
        self.args = finetune_args(root, task, train, dev, steps, *extra, name=name)
        self.console = root / f"ft-{name or task}.console.txt"

    def __enter__(self):
        with open(self.console, "w", encoding="utf-8") as out:
            self.process = subprocess.Popen(warm_command(self.launcher, *self.args), stdout=out,
                                            stderr=subprocess.STDOUT, env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2"))
        return self

    def result(self):
        self.process.wait(timeout=900)
        assert self.process.returncode == 0, self.console.read_text(encoding="utf-8", errors="replace")[-3000:]
        return self.model_dir, json.loads((self.model_dir / "eval_results.json").read_text())

    def __exit__(self, *exc):
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait()


def sentence(rng, n=8):
    return " ".join(rng.choice(WORDS) for _ in range(n))


def padding_overhead(model_dir):
    """(real tokens, padded positions) over a fine-tuning run's log."""
    records = [json.loads(line) for line in open(model_dir / "train_log.jsonl")]
    return sum(r["tokens"] for r in records), sum(r["padded_tokens"] for r in records)


def test_classification_and_regression(pretrained, span_run, warm_cli, tmp_path):  # span_run: goes on meanwhile
    rng = random.Random(0)

    def rows(count, regression):
        out = []
        for _ in range(count):
            text = sentence(rng, min(2 + int(rng.expovariate(1 / 4)), 30))  # mostly short, a long tail
            score = text.split().count("river") + text.split().count("stone")
            out.append((text, f"{float(score):.1f}" if regression else ("yes" if score else "no")))
        return out

    for task in ("classification", "regression"):  # length strata vs fixed padding (packing: test_packing)
        for name, count in (("train", 600), ("dev", 150)):
            lines = ["text_a\tlabel"] + [f"{t}\t{y}" for t, y in rows(count, task == "regression")]
            (tmp_path / f"{task}-{name}.tsv").write_text("\n".join(lines) + "\n")
    dev_labels = [line.rstrip("\n").split("\t")[1] for line in open(tmp_path / "classification-dev.tsv")][1:]
    majority = max(dev_labels.count("yes"), dev_labels.count("no")) / len(dev_labels)
    accuracy, overhead = {}, {}
    # The regression run in its own process while this one fine-tunes the classifiers.
    regression = FinetuneBeside(warm_cli, pretrained, "regression", tmp_path / "regression-train.tsv",
                                tmp_path / "regression-dev.tsv", 200, "--max-seq-len", "24",
                                "--recompute", "blocks")  # the same gradients, less memory
    with regression:
        # Explicit widths: `auto` keeps one stratum for a tiny model's 100 steps, where an extra model call costs more
        # than its padding (test_buckets checks that choice). 100 steps: the loss is ~0.02 by step 100 of 200 (0.993
        # either way after 200).
        for buckets in ("16,32", "none"):
            model_dir, results = finetune(pretrained, "classification", tmp_path / "classification-train.tsv",
                                          tmp_path / "classification-dev.tsv", 100, "--max-seq-len", "48",
                                          "--bucket-boundaries", buckets, "--packing", "none",
                                          name=f"classification-{buckets.replace(',', '-')}")
            accuracy[buckets] = results["accuracy"]
            real, padded = padding_overhead(model_dir)
            overhead[buckets] = padded / real
            config = json.loads((model_dir / "finetune_config.json").read_text())
            print(f"classification ('does the sentence mention river or stone?') --bucket-boundaries {buckets} "
                  f"{config['bucket_boundaries']}: accuracy {results['accuracy']:.3f} (bound >= 0.85; majority "
                  f"class {majority:.2f}); {real} real tokens in {padded} padded positions ({padded / real:.2f}x)")
            assert results["accuracy"] >= 0.85
        model_dir, results = regression.result()
    print(f"accuracy strata - none = {accuracy['16,32'] - accuracy['none']:+.3f} (bound |.| <= 0.05); padded "
          f"positions per real token {overhead['16,32']:.2f} vs {overhead['none']:.2f} (bound strata <= 0.75 x none)")
    assert abs(accuracy["16,32"] - accuracy["none"]) <= 0.05 and overhead["16,32"] <= 0.75 * overhead["none"]
    print(f"regression (count of river/stone): Pearson {results['pearson']:.3f}, Spearman {results['spearman']:.3f} "
          f"(bound Pearson >= 0.6)")
    assert results["pearson"] >= 0.6
    # evaluate and predict on the saved directory agree with the run's own evaluation.
    assert main(["evaluate", "--model-dir", str(model_dir), "--eval-file", str(tmp_path / "regression-dev.tsv")]) == 0
    assert main(["predict", "--model-dir", str(model_dir), "--input", str(tmp_path / "regression-dev.tsv"),
                 "--output", str(tmp_path / "pred.jsonl")]) == 0
    predictions = [json.loads(line)["prediction"] for line in open(tmp_path / "pred.jsonl")]
    assert len(predictions) == 150
    config = json.loads((model_dir / "finetune_config.json").read_text())
    assert config["task"] == "regression" and config["max_seq_len"] == 24 and config["pairs"] is False
    # predict batches by bucket; its lines are in input order: each equals the row padded to max_seq_len.
    from xlnet_tf.training.finetune import load_for_inference, load_task_data, run_model

    model, _, tokenizer = load_for_inference(str(model_dir))
    data = load_task_data("regression", tmp_path / "regression-dev.tsv", tokenizer, 24)
    fixed = run_model(model, "regression", data.features, boundaries=(24,))["predictions"]
    diff = float(np.max(np.abs(np.array(predictions) - fixed)))
    print(f"predict (buckets {config['bucket_boundaries']}) vs rows padded to 24, in input order: max|diff| "
          f"{diff:.1e} (bound 1e-5)")
    assert diff <= 1e-5 and len(config["bucket_boundaries"]) > 1


def squad_file(path, rng, count, impossible_every=0):
    data = []
    for i in range(count):
        words = [rng.choice(WORDS) for _ in range(18)]
        colour = rng.choice(["red", "green", "blue", "yellow"])
        position = rng.randrange(2, 16)
        words[position:position] = ["the", "colour", "is", colour]
        context = " ".join(words)
        impossible = bool(impossible_every) and i % impossible_every == 0
        if impossible:
            context = context.replace(f"the colour is {colour}", "the shape is round")
        start = context.find(f"colour is {colour}") + len("colour is ")
        qa = {"id": f"q{i}", "question": "what is the colour", "is_impossible": impossible,
              "answers": [] if impossible else [{"text": colour, "answer_start": start}]}
        data.append({"title": f"t{i}", "paragraphs": [{"context": context, "qas": [qa]}]})
    path.write_text(json.dumps({"version": "v2.0", "data": data}))


@pytest.fixture(scope="module")
def span_run(pretrained, warm_cli):
    """The SQuAD fine-tune, started in its own process as soon as the pretrained model exists (the
    classification test runs meanwhile); test_span_extraction checks it. -> (FinetuneBeside, its folder)."""
    folder = pretrained / "span"
    folder.mkdir()
    rng = random.Random(1)
    squad_file(folder / "train.json", rng, 500, impossible_every=5)
    squad_file(folder / "dev.json", rng, 100, impossible_every=5)
    with FinetuneBeside(warm_cli, pretrained, "squad", folder / "train.json", folder / "dev.json", 250,
                        "--max-seq-len", "48", "--max-query-len", "8", "--recompute", "attention") as run:
        yield run, folder


def test_span_extraction(span_run):
    run, folder = span_run
    model_dir, results = run.result()
    print(f"span extraction (SQuAD 2.0 style, 20% unanswerable): EM {results['exact_match']:.1f}, F1 {results['f1']:.1f}, "
          f"best F1 {results['best_f1']:.1f} at threshold {results['best_f1_thresh']:.3f} (bound best EM >= 50)")
    assert results["best_exact"] >= 50
    assert main(["predict", "--model-dir", str(model_dir), "--input", str(folder / "dev.json"),
                 "--output", str(folder / "answers.json")]) == 0
    answers = json.loads((folder / "answers.json").read_text())
    odds = json.loads((folder / "answers.json.null_odds.json").read_text())
    assert len(answers) == 100 and set(odds) == set(answers)


def test_race_runs_end_to_end(pretrained, tmp_path):
    rng = random.Random(2)
    directory = tmp_path / "race"
    directory.mkdir()
    for i in range(40):
        colour = rng.choice(["red", "green", "blue", "yellow"])
        options = ["red", "green", "blue", "yellow"]
        article = f"{sentence(rng, 10)} the colour is {colour} {sentence(rng, 6)}"
        (directory / f"{i}.txt").write_text(json.dumps({
            "id": f"{i}.txt", "article": article, "questions": ["the colour is _ ."], "options": [options],
            "answers": ["ABCD"[options.index(colour)]]}))
    model_dir, results = finetune(pretrained, "race", directory, directory, 20, "--max-seq-len", "40")
    print(f"RACE-format multiple choice: accuracy {results['accuracy']:.3f} over {results['examples']} questions "
          f"(runs end to end; no learning bound after 20 steps)")
    config = json.loads((model_dir / "finetune_config.json").read_text())
    assert config["task"] == "race" and config["num_choices"] == 4 and 0.0 <= results["accuracy"] <= 1.0

    # The same questions with the article read as segments of 16 with memory, trained in float16 (dynamic loss
    # scaling through the segments' memory): predict (float32) equals the (float32) export.
    model_dir, results = finetune(pretrained, "race", directory, directory, 10, "--max-seq-len", "16",
                                  "--long-doc", "memory", "--max-doc-len", "48", "--mixed-precision", "float16",
                                  name="race-memory")
    config = json.loads((model_dir / "finetune_config.json").read_text())
    recorded = (config["long_doc"], config["max_doc_len"], config["mem_len"], config["max_qa_len"])
    assert recorded == ("memory", 48, 32, 13)
    log = [json.loads(line) for line in open(model_dir / "train_log.jsonl")]
    steps = [(r["step"], round(r["loss"], 3), r["loss_scale"], r["skipped_steps"]) for r in log]
    print(f"RACE with memory in float16: (step, loss, loss scale, skipped) {steps} (bound: step 10 reached, losses "
          f"finite)")
    assert log[-1]["step"] == 10 and all(np.isfinite(r["loss"]) for r in log) and "loss_scale" in log[-1]
    assert main(["predict", "--model-dir", str(model_dir), "--input", str(directory), "--output",
                 str(tmp_path / "race.jsonl")]) == 0
    predicted = [json.loads(line) for line in open(tmp_path / "race.jsonl")]
    assert main(["export", "--model-dir", str(model_dir), "--export-base", str(tmp_path / "exports" / "race")]) == 0
    import tensorflow as tf

    serving = tf.saved_model.load(str(tmp_path / "exports" / "race" / "1")).signatures["serving_default"]
    examples = [json.loads((directory / f"{i}.txt").read_text()) for i in range(40)]
    by_id = {row["id"]: row["probabilities"] for row in predicted}
    served = serving(article=tf.constant([e["article"] for e in examples]),
                     question=tf.constant([e["questions"][0] for e in examples]),
                     options=tf.constant([e["options"][0] for e in examples]))["probabilities"].numpy()
    want = np.array([by_id[f"{i}.txt-0"] for i in range(40)])  # RACE ids: file id, question index
    diff = np.abs(served - want).max()
    print(f"RACE with memory (segments of 16, articles up to 48 tokens): accuracy {results['accuracy']:.3f}; export "
          f"vs predict max |diff| {diff:.1e} (bound 1e-5)")
    assert diff <= 1e-5
