"""Evaluation during fine-tuning (`finetune --eval-every`): on a task made to overfit, the best checkpoint beats the
last and is what evaluate, predict and export use; early stopping stops where its rule says; a resumed run keeps
the best; `evaluate --all-checkpoints` lists every checkpoint; a directory fine-tuned without evaluation is as
before; bad flags are refused. Every checked figure is printed with its bound (run with -s).

The overfitting is built in: a quarter of the training rows carry the wrong label, and the eval file holds those
same texts with their right labels (plus a few fresh rows). Once the model memorises its training rows, its
accuracy on them falls, whatever it learnt before; a tiny model at a high learning rate does that in ~60 steps.
"""

from __future__ import annotations

import json
import random

import numpy as np
import pytest

from conftest import check, run_cli as run
from xlnet_tf.cli import main

WORDS = "alpha beta gamma delta epsilon zeta theta iota kappa lambda sigma omega stone cloud forest lamp".split()
CONFIG = dict(n_token=400, d_model=32, n_layer=2, n_head=4, d_head=8, d_inner=48, ff_activation="gelu", untie_r=True)


@pytest.fixture(scope="module")
def work(tmp_path_factory):
    """Training and eval files (see the module docstring), a SentencePiece model and a tiny config."""
    from conftest import tiny_spm

    root = tmp_path_factory.mktemp("eval-during-training")
    rng = random.Random(0)
    rows = []
    for i in range(64):
        text = " ".join(rng.choice(WORDS) for _ in range(5)) + (" river" if i % 2 else "")
        rows.append((text, "yes" if i % 2 else "no"))
    train = [(t, {"yes": "no", "no": "yes"}[label]) if i % 4 == 0 else (t, label) for i, (t, label) in enumerate(rows)]
    dev = [r for i, r in enumerate(rows) if i % 4 == 0]
    for i in range(8):
        dev.append((" ".join(rng.choice(WORDS) for _ in range(5)) + (" river" if i % 2 else ""),
                    "yes" if i % 2 else "no"))
    for name, data in (("train.tsv", train), ("dev.tsv", dev)):
        (root / name).write_text("text\tlabel\n" + "".join(f"{t}\t{label}\n" for t, label in data), encoding="utf-8")
    (root / "config.json").write_text(json.dumps(CONFIG), encoding="utf-8")
    spm = tiny_spm(root, [t for t, _ in rows])
    return {"root": root, "spm": spm, "dev": dev}


def finetune_argv(work, model_dir, steps, *extra, seed=0):
    root = work["root"]
    return ["finetune", "--task", "classification", "--train-file", root / "train.tsv", "--eval-file", root / "dev.tsv",
            "--spm-model", work["spm"], "--config", root / "config.json", "--model-dir", model_dir, "--train-steps",
            steps, "--batch-size", 8, "--learning-rate", "3e-3", "--strategy", "one_device", "--steps-per-loop", 10,
            "--dropout", 0, "--dropatt", 0, "--seed", seed, "--max-seq-len", 16, *extra]


def evals_of(model_dir):
    from xlnet_tf.training.summaries import read_log

    return read_log(str(model_dir / "train_log.jsonl"), "eval")


@pytest.fixture(scope="module")
def evaluated(work):
    """A run of 100 steps scored every 10, checkpoints every 20 (all kept)."""
    model_dir = work["root"] / "evaluated"
    code = main([str(a) for a in finetune_argv(work, model_dir, 100, "--eval-every", 10, "--save-every", 20,
                                              "--keep-checkpoints", 10)])
    assert code == 0
    return model_dir


@pytest.mark.slow
def test_best_beats_last_and_is_used(work, evaluated, capsys, tmp_path):
    import tensorflow as tf

    evals = evals_of(evaluated)
    best = json.loads((evaluated / "best" / "best.json").read_text())
    results = json.loads((evaluated / "eval_results.json").read_text())
    steps = [r["step"] for r in evals]
    check("evaluated steps", steps, "10, 20, ..., 100", steps == list(range(10, 101, 10)))
    top = max(r["eval"]["accuracy"] for r in evals)
    check("best.json value = the log's highest accuracy (first reached)", (best["value"], best["step"]),
          (top, next(r["step"] for r in evals if r["eval"]["accuracy"] == top)),
          best["value"] == top and best["step"] == next(r["step"] for r in evals if r["eval"]["accuracy"] == top))
    last = evals[-1]["eval"]["accuracy"]
    check("best accuracy - last accuracy", round(best["value"] - last, 4), "> 0.1", best["value"] - last > 0.1)
    check("eval_results.json: the best's, with the last's", (results["checkpoint"], results["step"],
                                                             results["accuracy"], results["last"]["accuracy"]),
          ("best", best["step"], best["value"], last),
          (results["checkpoint"], results["step"], results["accuracy"], results["last"]["accuracy"])
          == ("best", best["step"], best["value"], last))
    check("best/ files", sorted(p.name for p in (evaluated / "best").iterdir()),
          "best.json, model.ckpt.*, xlnet_config.json",
          {"best.json", "model.ckpt.index", "xlnet_config.json"} <= {p.name for p in (evaluated / "best").iterdir()})
    check("training_curve.png written", (evaluated / "training_curve.png").stat().st_size, "> 0",
          (evaluated / "training_curve.png").stat().st_size > 0)
    tags = {v.tag for path in (evaluated / "train").glob("events.*")
            for event in tf.compat.v1.train.summary_iterator(str(path)) for v in event.summary.value}
    check("TensorBoard tags", sorted(t for t in tags if t.startswith("eval/")), "eval/accuracy among them",
          "eval/accuracy" in tags and "loss" in tags)

    code, out, _ = run(["evaluate", "--model-dir", evaluated, "--eval-file", work["root"] / "dev.tsv"], capsys)
    default = json.loads(out)
    check("evaluate (default): accuracy, checkpoint", (default["accuracy"], default["checkpoint"]["checkpoint"],
                                                        default["checkpoint"]["step"]),
          (best["value"], "best", best["step"]), code == 0 and default["accuracy"] == best["value"]
          and default["checkpoint"]["checkpoint"] == "best" and default["checkpoint"]["step"] == best["step"])
    code, out, _ = run(["evaluate", "--model-dir", evaluated, "--eval-file", work["root"] / "dev.tsv", "--checkpoint",
                        "last"], capsys)
    check("evaluate --checkpoint last: accuracy", json.loads(out)["accuracy"], last,
          code == 0 and json.loads(out)["accuracy"] == last)

    texts = [t for t, _ in work["dev"]]
    (tmp_path / "input.tsv").write_text("text\n" + "".join(f"{t}\n" for t in texts), encoding="utf-8")
    code, out, _ = run(["predict", "--model-dir", evaluated, "--input", tmp_path / "input.tsv", "--output",
                        tmp_path / "best.jsonl"], capsys)
    check("predict says which checkpoint", out.splitlines()[0], f"checkpoint: best (step {best['step']}, ...",
          code == 0 and out.startswith(f"checkpoint: best (step {best['step']}, accuracy"))
    predicted = [json.loads(line) for line in open(tmp_path / "best.jsonl")]
    code, out, _ = run(["export", "--model-dir", evaluated, "--export-base", tmp_path / "exports" / "cls"], capsys)
    lines = out.strip().splitlines()
    check("export says which checkpoint", lines[0], f"checkpoint: best (step {best['step']}, ...",
          code == 0 and lines[0].startswith(f"checkpoint: best (step {best['step']}"))
    served = tf.saved_model.load(lines[-1]).signatures["serving_default"](text=tf.constant(texts))
    gap = float(np.abs(served["probabilities"].numpy() - np.array([p["probabilities"] for p in predicted])).max())
    check("export's probabilities vs the best model's (predict)", f"{gap:.2e}", "< 1e-4", gap < 1e-4)
    labels = [label.decode() for label in served["label"].numpy()]
    accuracy = float(np.mean([a == b for a, (_, b) in zip(labels, work["dev"])]))
    check("export's accuracy on the eval file", accuracy, best["value"], abs(accuracy - best["value"]) < 1e-9)


@pytest.mark.slow
def test_all_checkpoints(work, evaluated, capsys):
    code, out, _ = run(["evaluate", "--model-dir", evaluated, "--eval-file", work["root"] / "dev.tsv",
                        "--all-checkpoints"], capsys)
    lines = out.strip().splitlines()
    listed = json.loads((evaluated / "eval_all_checkpoints.json").read_text())
    names = [row["checkpoint"] for row in listed["checkpoints"]]
    check("checkpoints listed", names, "ckpt-20 ... ckpt-100, best",
          code == 0 and names == [f"ckpt-{s}" for s in range(20, 101, 20)] + ["best"])
    check("printed lines", len(lines), len(names) + 1, len(lines) == len(names) + 1)
    by_step = {r["step"]: r["eval"]["accuracy"] for r in evals_of(evaluated)}
    for row in listed["checkpoints"]:
        check(f"{row['checkpoint']} accuracy = the log's at step {row['step']}", row["metrics"]["accuracy"],
              by_step[row["step"]], row["metrics"]["accuracy"] == by_step[row["step"]])
    best = json.loads((evaluated / "best" / "best.json").read_text())
    check("best by accuracy", (listed["best_value"], lines[-1][:40]), best["value"],
          listed["best_value"] == best["value"] and lines[-1].startswith("best by accuracy"))


@pytest.mark.slow
def test_early_stopping_and_resume(work, capsys):
    model_dir = work["root"] / "patience"
    patience, every = 3, 10
    flags = ("--eval-every", every, "--early-stopping-patience", patience, "--save-every", 1000)
    code, out, _ = run(finetune_argv(work, model_dir, 30, *flags, seed=1), capsys)
    first = json.loads((model_dir / "best" / "best.json").read_text())
    check("first run (30 steps): exit, evaluations", (code, [r["step"] for r in evals_of(model_dir)]),
          (0, [10, 20, 30]), code == 0 and [r["step"] for r in evals_of(model_dir)] == [10, 20, 30])

    code, out, _ = run(finetune_argv(work, model_dir, 200, *flags, seed=1), capsys)
    evals = evals_of(model_dir)
    best = json.loads((model_dir / "best" / "best.json").read_text())
    later = [r for r in evals if r["step"] > 30 and r["best"]]
    if later:  # replaced only by a strictly better evaluation of the resumed run
        check("resumed run's new best beats the first run's", (best["value"], first["value"]), "new > old",
              best["value"] > first["value"] and best["step"] == later[-1]["step"])
    else:
        check("best.json kept through the resume (step, value)", (best["step"], best["value"]),
              (first["step"], first["value"]), (best["step"], best["value"]) == (first["step"], first["value"]))
    stop = best["step"] + patience * every
    stopped = [r for r in evals if "early_stopping" in r]
    check("stop step (log) = best step + patience x eval_every", [r["step"] for r in stopped], [stop],
          [r["step"] for r in stopped] == [stop] and evals[-1]["step"] == stop)
    check("printed stop line", next((line for line in out.splitlines() if line.startswith("early stopping")), None),
          f"early stopping at step {stop}: ...", f"early stopping at step {stop}:" in out and code == 0)
    check("a checkpoint at the stop step", sorted(p.name for p in (model_dir / "checkpoints").glob("*.index")),
          f"ckpt-{stop}.index among them", (model_dir / "checkpoints" / f"ckpt-{stop}.index").exists())
    steps_seen = [r["step"] for r in evals]
    check("each step evaluated once over both runs", steps_seen, f"10 .. {stop} by 10",
          steps_seen == list(range(10, stop + 1, 10)))


@pytest.mark.slow
def test_without_evaluation_as_before(work, capsys):
    from xlnet_tf.tasks import choose_checkpoint

    model_dir = work["root"] / "plain"
    code, out, _ = run(finetune_argv(work, model_dir, 10), capsys)
    names = sorted(p.name for p in model_dir.iterdir())
    check("files", names, "no best/ nor eval_all_checkpoints.json", code == 0 and "best" not in names
          and "eval_all_checkpoints.json" not in names)
    check("log: no eval records", len(evals_of(model_dir)), 0, len(evals_of(model_dir)) == 0)
    results = json.loads((model_dir / "eval_results.json").read_text())
    check("eval_results.json keys", sorted(results), "no checkpoint / step / last",
          not {"checkpoint", "step", "last"} & set(results))
    check("printed: no best checkpoint line", "best checkpoint" in out, False, "best checkpoint" not in out)
    code, out, _ = run(["evaluate", "--model-dir", model_dir, "--eval-file", work["root"] / "dev.tsv"], capsys)
    printed = json.loads(out)
    check("evaluate output = eval_results.json", printed, results, code == 0 and printed == results)
    chosen = choose_checkpoint(model_dir)
    check("the checkpoint export / predict load", (chosen["checkpoint"], chosen["step"], chosen["given"]),
          ("last", 10, False), (chosen["checkpoint"], chosen["step"], chosen["given"]) == ("last", 10, False))


@pytest.mark.parametrize("extra, flag", [
    (("--eval-every", "5", "--no-eval-file"), "--eval-every"),
    (("--eval-every-epoch", "--no-eval-file"), "--eval-every-epoch"),
    (("--eval-every", "5", "--best-metric", "bleu"), "--best-metric"),
    (("--early-stopping-patience", "2"), "--early-stopping-patience"),
])
def test_bad_flags(tmp_path, capsys, extra, flag):
    (tmp_path / "train.tsv").write_text("text\tlabel\na b\tyes\nc d\tno\n", encoding="utf-8")
    (tmp_path / "none.model").write_bytes(b"")  # never read: the flags are refused first
    extra = list(extra)
    argv = ["finetune", "--task", "classification", "--train-file", tmp_path / "train.tsv", "--model-dir",
            tmp_path / "m", "--train-steps", 5, "--model-size", "tiny", "--spm-model", tmp_path / "none.model"]
    if "--no-eval-file" in extra:
        extra.remove("--no-eval-file")
    else:
        argv += ["--eval-file", tmp_path / "train.tsv"]
    code, out, err = run(argv + extra, capsys)
    lines = err.strip().splitlines()
    check(f"{flag}: exit, lines, flag named", (code, len(lines), lines[-1] if lines else ""), f"2, 1, {flag}",
          code == 2 and len(lines) == 1 and flag in lines[0] and "Traceback" not in err)
    if flag == "--best-metric":
        check("the task's metrics listed", lines[0], "accuracy, f1, macro_f1, mcc",
              "accuracy, f1, macro_f1, mcc" in err)
