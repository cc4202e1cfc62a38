"""The benchmark suite: FLOP counts by hand, the synthetic batches, the plan of cases, targets and report on
fabricated rows, the worker's statuses, and one tiny end-to-end run of `xlnet-tf benchmark`.

Speed is never asserted; every checked figure is printed next to its bound (run with -s to see them).
"""

import dataclasses
import json
import math
import os
import subprocess
import sys

import numpy as np
import pytest

from xlnet_tf import cli
from xlnet_tf.benchmarks import report
from xlnet_tf.benchmarks.common import Case, synthetic_batch
from xlnet_tf.benchmarks.flops import step_flops
from xlnet_tf.benchmarks.suite import (BenchmarkOptions, add_ratios, evaluate_targets, machine_info, plan_cases,
                                       summarize)

SMALL = {"n_token": 50, "d_model": 8, "n_layer": 2, "n_head": 2, "d_head": 4, "d_inner": 16}


def small_case(task, **changes):
    values = dict(batch_size=2, seq_len=6, size=tuple(sorted({**SMALL, **changes.pop("size", {})}.items())))
    return Case("xlnet-tf", task, **{**values, **changes})


def check(name, got, expected, rel=1e-12):
    print(f"{name} {got} (bound == {expected})")
    assert got == pytest.approx(expected, rel=rel), name


def test_step_flops_by_hand():
    # B=2, T=6, d=8, inner = n_head * d_head = 8, d_inner=16, 2 layers; a matmul [m,k]x[k,n] is 2mkn.
    keys_values = 2 * (2 * 6) * 8 * 8 * 2  # k and v projections of the 12 rows: 3072
    positions = 2 * (2 * 6) * 8 * 8  # 2T relative positions projected once per batch: 1536
    q_and_o = 2 * 12 * 8 * 8 * 2  # 3072
    attention = 2 * 12 * 8 * (6 + 12 + 6)  # q.k over 6 keys, q.r over 12 positions, probs.v: 4608
    feed_forward = 2 * 12 * 8 * 16 * 2  # 6144
    inference = 2 * (keys_values + positions + q_and_o + attention + feed_forward)
    check("inference flops", step_flops(small_case("inference")), inference)
    check("inference flops (literal)", inference, 36864)
    # Fine-tuning reads the last layer only at the <cls>: its q/o, attention and feed-forward for 1 row of 6;
    # the classifier head is the summary (8 x 8) and the logits (8 x 2) on the 2 rows.
    one_row = (q_and_o + attention + feed_forward) // 6
    last_layer_saved = q_and_o + attention + feed_forward - one_row
    head = 2 * 2 * 8 * (8 + 2)
    check("finetune flops", step_flops(small_case("finetune")), 3 * (inference - last_layer_saved + head))
    # The LM head (d x n_token at each of the P targets) is counted three times (forward + backward).
    case = small_case("pretrain", seq_len=12, span_ratio=3)
    wider = small_case("pretrain", seq_len=12, span_ratio=3, size={"n_token": 150})
    predict = case.num_predict
    check("num_predict", predict, 4)
    check("pretrain flops growth with n_token", step_flops(wider) - step_flops(case), 3 * 2 * 2 * predict * 8 * 100)
    # Pretraining reads only the query stream: the last layer has no content rows, and each layer P = 4 query rows.
    rows = 2 * 12
    content_rows = 2 * rows * 8 * 8 * 2 + 2 * rows * 8 * (12 + 24 + 12) + 2 * rows * 8 * 16 * 2
    query_rows = content_rows * predict // 12
    shared = 2 * rows * 8 * 8 * 2 + 2 * 24 * 8 * 8  # keys/values and positions, every layer
    lm_head = 2 * 2 * predict * 8 * 50
    check("pretrain flops", step_flops(case), 3 * (2 * (shared + query_rows) + content_rows + lm_head))


def test_synthetic_pretrain_batch():
    case = small_case("pretrain", batch_size=4, seq_len=12, span_ratio=3)
    batch, length, predict = 4, 12, case.num_predict
    features = synthetic_batch(case, seed=3)
    shapes = {k: v.shape for k, v in features.items()}
    print(f"shapes {shapes} (bound B={batch} T={length} P={predict})")
    for key in ("input_ids", "segment_ids", "padding_mask"):
        assert shapes[key] == (batch, length), key
    assert shapes["perm_mask"] == (batch, length, length)
    assert shapes["target_mapping"] == (batch, predict, length)
    assert shapes["target_ids"] == shapes["target_mask"] == (batch, predict)
    padding = features["padding_mask"]
    check("padded per odd row", int((padding[1::2] == 0).sum()), 2 * (length // 4))
    assert (padding[1::2, :length - length // 4] == 1).all() and (padding[0::2] == 1).all()
    mapping, perm = features["target_mapping"], features["perm_mask"]
    for b in range(batch):
        check(f"row {b} one-hot sums", mapping[b].sum(axis=1).tolist(), [1.0] * predict)
        assert set(np.unique(mapping[b])) <= {0.0, 1.0}
        targets = mapping[b].argmax(axis=1)
        assert len(set(targets.tolist())) == predict
        assert (padding[b, targets] == 1).all(), "a target on padding"
        assert (features["target_ids"][b] == features["input_ids"][b, targets]).all()
        others = np.setdiff1d(np.arange(length), targets)
        assert (perm[b, targets, targets] == 1).all(), "a target sees itself"
        assert (perm[b][np.ix_(others, others)] == 0).all(), "a non-target blocked from a non-target"
        for i in targets:
            for j in targets:
                if i != j:
                    assert perm[b, i, j] + perm[b, j, i] == 1, (b, i, j)
    again, other = synthetic_batch(case, seed=3), synthetic_batch(case, seed=4)
    assert all(np.array_equal(features[k], again[k]) for k in features)
    differing = [k for k in features if not np.array_equal(features[k], other[k])]
    print(f"arrays differing with another seed {differing} (bound: includes input_ids and perm_mask)")
    assert "input_ids" in differing and "perm_mask" in differing


def test_plan_cases_defaults():
    cases = plan_cases(BenchmarkOptions())
    print(f"cases planned {len(cases)} (bound == 36)")
    assert len(cases) == 36 and len(set(cases)) == len(cases)
    assert cases[0].implementation == "xlnet-tf"
    for case in cases:
        if case.implementation != "xlnet-tf":
            assert case.precision == "float32", case.label()
    assert not [c for c in cases if c.implementation == "transformers" and c.xla]
    assert not [c for c in cases if c.implementation == "keras-hub" and c.task == "pretrain"]
    assert not [c for c in cases if c.implementation == "model-garden" and c.task == "finetune"]
    long = [c for c in cases if c.seq_len == 512]
    assert {c.implementation for c in long if c.task == "inference"} == {
        "xlnet-tf", "xlnet-tf-savedmodel", "keras-hub", "model-garden", "transformers"}
    long_pretrain = [(c.implementation, c.precision, c.xla) for c in long if c.task == "pretrain"]
    assert sorted(long_pretrain) == [("transformers", "float32", False), ("xlnet-tf", "float32", False)]
    assert not [c for c in long if c.task == "finetune"]
    saved = {(c.task, c.precision, c.xla) for c in cases if c.implementation == "xlnet-tf-savedmodel"}
    assert saved == {("inference", "float32", False)}


def fabricated_results():
    """Rows as `summarize` makes them: ours 2 s vs keras-hub 3 s (met), ours 1 s vs transformers 2 s
    (pretraining, ratio 2 < 2.5: not met), Model Garden missing."""
    peaks = {"float32": 100.0}
    options = BenchmarkOptions(size=SMALL, batch_size=2, seq_len=6, long_seq_len=0)

    def row(implementation, task, result, precision="float32"):
        case = Case(implementation, task, 2, 6, precision, False, tuple(sorted(SMALL.items())))
        return summarize(case, result, peaks)

    rows = [
        row("xlnet-tf", "inference", {"status": "ok", "seconds": [2.5, 2.0, 1.0], "peak_mb": 10.0}),
        row("xlnet-tf", "inference", {"status": "ok", "seconds": [1.0], "peak_mb": 10.0,
                                      "rel_error_vs_float32": 0.01}, precision="bfloat16"),
        row("xlnet-tf", "pretrain", {"status": "ok", "seconds": [1.0], "peak_mb": 30.0, "loss_first": 4.0}),
        row("keras-hub", "inference", {"status": "ok", "seconds": [3.0], "peak_mb": 20.0}),
        row("transformers", "pretrain", {"status": "ok", "seconds": [2.0], "peak_mb": 40.0}),
        row("model-garden", "pretrain", {"status": "missing", "error": "No module named 'official'"}),
    ]
    add_ratios(rows)
    return {"machine": machine_info(), "matmul_peak_gflops": peaks, "matmul": {"status": "ok"},
            "options": {**dataclasses.asdict(options), "xla_modes": list(options.xla_modes)}, "rows": rows,
            "targets": evaluate_targets(rows, options), "wall_s": 12.0}


def test_targets_ratios_and_report(tmp_path, capsys):
    results = fabricated_results()
    report.write(results, str(tmp_path))
    printed = capsys.readouterr().out  # read first, so that the figures printed below stay visible
    rows, targets = results["rows"], {t["target"]: t for t in results["targets"]}
    check("median s of [2.5, 2, 1]", rows[0]["median_s"], 2.0)
    check("tokens/s", rows[0]["tokens_per_s"], 12 / 2.0)
    check("vs keras-hub", rows[0]["vs_keras-hub"], 1.5)
    check("pretrain vs transformers", rows[2]["vs_transformers"], 2.0)
    assert rows[2]["vs_model-garden"] is None and "tokens_per_s" not in rows[5]
    met = targets["inference float32 vs keras-hub float32"]
    check("inference target value", met["value"], 1.5)
    assert met["met"] is True
    missed = targets["pretraining float32 vs transformers float32"]
    check("pretrain vs transformers target", missed["value"], 2.0)
    assert missed["met"] is False
    absent = targets["pretraining float32 vs model-garden float32"]
    print(f"model-garden target {absent} (bound met None)")
    assert absent["met"] is None and absent["value"] is None and "not measured" in absent["detail"]
    error = targets["bfloat16 inference relative error vs float32"]
    check("bf16 rel error target", error["value"], 0.01)
    assert error["met"] is True
    markdown = report.format_markdown(results)
    table = [line for line in markdown.splitlines() if line.startswith("| ")]
    print(f"markdown table lines {len(table)} (bound == 1 header + {len(rows)} rows)")
    assert table[0].startswith("| implementation | task |") and len(table) == 1 + len(rows)
    assert "NOT MEASURED" in markdown and "NOT MET" in markdown
    assert "NOT MEASURED" in printed and "missing (1)" in printed
    loaded = json.loads((tmp_path / "results.json").read_text())
    assert loaded["rows"][0]["vs_keras-hub"] == pytest.approx(1.5)
    assert (tmp_path / "report.md").read_text() == markdown
    png = (tmp_path / "throughput.png").read_bytes()
    print(f"throughput.png {len(png)} bytes (bound > 8, PNG signature)")
    assert png[:4] == b"\x89PNG" and len(png) > 8


def test_worker_statuses(monkeypatch):
    from xlnet_tf.benchmarks import run_xlnet_tf
    from xlnet_tf.benchmarks.worker import measure_case

    tiny = {"batch_size": 2, "seq_len": 8, "size": SMALL, "warmup": 0, "iterations": 1}
    missing = measure_case({"implementation": "keras-hub", "task": "inference", **tiny})
    print(f"keras-hub {missing} (bound status missing)")
    assert missing["status"] == "missing" and "seconds" not in missing

    def heavy(*args):
        raise AssertionError("the SavedModel was exported before the case was rejected")

    monkeypatch.setattr(run_xlnet_tf, "export_random_classifier", heavy)
    for changes in ({"task": "finetune"}, {"task": "inference", "xla": True}):
        result = measure_case({"implementation": "xlnet-tf-savedmodel", **tiny, **changes})
        print(f"savedmodel {changes} {result} (bound status unsupported)")
        assert result["status"] == "unsupported" and "seconds" not in result


def test_cli_end_to_end(tmp_path):
    """One real `xlnet-tf benchmark` run (each case in its own worker process): the matmul peak and xlnet-tf
    measured, the references not installed here reported as missing."""
    out = tmp_path / "out"
    command = [sys.executable, "-m", "xlnet_tf.cli", "benchmark", "--model-size", "tiny", "--batch-size", "2",
               "--seq-len", "16", "--long-seq-len", "0", "--tasks", "inference,pretrain", "--precisions", "float32",
               "--xla", "off", "--implementations", "xlnet-tf,keras-hub,transformers", "--warmup", "0",
               "--iterations", "1", "--output-dir", str(out)]
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
    done = subprocess.run(command, capture_output=True, text=True, timeout=600, cwd=tmp_path, env=env)
    print(done.stdout)
    assert done.returncode == 0, done.stderr[-3000:]
    rows = json.loads((out / "results.json").read_text())["rows"]
    print(f"rows {[(r['implementation'], r['task'], r['status']) for r in rows]} (bound 2 ok, 3 missing)")
    assert len(rows) == 5
    for row in rows:
        if row["implementation"] == "xlnet-tf":
            print(f"{row['label']}: tokens/s {row['tokens_per_s']:.1f} (bound > 0), loss_first "
                  f"{row.get('loss_first')} (bound finite for pretrain), peak MB {row['peak_mb']:.0f}")
            assert row["status"] == "ok" and row["tokens_per_s"] > 0 and len(row["seconds"]) == 1
            if row["task"] == "pretrain":
                assert math.isfinite(row["loss_first"])
        else:
            assert row["status"] == "missing" and "tokens_per_s" not in row, row
    assert any(line.startswith("implementation") and "tokens/s" in line for line in done.stdout.splitlines())
    assert "NOT MEASURED" in done.stdout
    assert (out / "report.md").exists() and (out / "throughput.png").read_bytes()[:4] == b"\x89PNG"


@pytest.mark.parametrize("flags, named", [(["--tasks", "inference,nope"], "--tasks"),
                                          (["--iterations", "0"], "--iterations")])
def test_cli_flag_errors(capsys, tmp_path, flags, named):
    code = cli.main(["benchmark", "--output-dir", str(tmp_path / "never"), *flags])
    err = capsys.readouterr().err
    print(f"{flags}: exit {code} (bound == 2), stderr {err.strip()!r}")
    assert code == 2 and named in err
    assert not (tmp_path / "never").exists()
