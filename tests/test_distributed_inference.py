"""Evaluation and prediction run under a strategy (after fine-tuning: the training one; `evaluate` / `predict
--strategy`): each batch split across the replicas by one `strategy.run`, gathered back in row order, equal to
the model run on one device; a saved directory loaded under the strategy predicts what it predicts alone."""

import subprocess
import sys
import textwrap
import pytest

pytestmark = pytest.mark.slow  # trains, serves or starts processes: `make test` only, not `make test-quick`

SCRIPT = textwrap.dedent("""
    import numpy as np
    import tensorflow as tf

    from xlnet_tf.training.strategies import make_strategy

    strategy = make_strategy("mirrored", cpu_devices=2)  # before TensorFlow initialises its devices
    from xlnet_tf.config import RunOptions, XLNetConfig
    from xlnet_tf.tasks import build_head_model
    from xlnet_tf.training import finetune

    config = XLNetConfig(n_token=200, d_model=32, n_layer=2, n_head=4, d_head=8, d_inner=48)
    with strategy.scope():
        model = build_head_model("classification", config, RunOptions(dropout=0.0, dropatt=0.0,
                                 initializer_range=0.3), num_labels=3)
    rng = np.random.default_rng(0)
    rows, width = 37, 24
    lengths = rng.integers(3, width + 1, rows)
    ids = rng.integers(9, 64, (rows, width)).astype(np.int32)
    real = np.arange(width)[None, :] >= width - lengths[:, None]  # left-padded rows, as the features are
    features = {"input_ids": np.where(real, ids, 5).astype(np.int32),
                "segment_ids": np.where(real, 0, 4).astype(np.int32),
                "padding_mask": real.astype(np.float32), "length": lengths}
    features["segment_ids"][:, -1] = 2
    calls = []
    run = strategy.run
    strategy.run = lambda *a, **k: calls.append(1) or run(*a, **k)
    split = finetune.run_model(model, "classification", features, batch_size=8, strategy=strategy)
    strategy.run = run
    alone = finetune.run_model(model, "classification", features, batch_size=8)
    diff = float(np.max(np.abs(split["logits"] - alone["logits"])))
    print(f"RESULT replicas={strategy.num_replicas_in_sync} traced_runs={len(calls)} rows={len(split['logits'])} "
          f"diff={diff} spread={float(np.std(alone['logits'])):.3f}")

    # Packed rows (a packed model's evaluate / predict): one packed call per replica in each strategy.run.
    from xlnet_tf.data import packing
    from xlnet_tf.training import finetune as ft

    drawn, runs = [0], []  # packed batches drawn so far; batches per strategy.run of packed rows
    packed_run, replicated = ft.packed_inference, ft._replicated_call
    def counting(model, strategy):
        run = packed_run(model, strategy)
        def counted(batches):
            def source():
                for batch in batches:
                    drawn[0] += 1
                    yield batch
            return run(source())
        return counted
    def counting_step(model, strategy):
        step = replicated(model, strategy)
        def counted(parts):
            runs.append(drawn[0] - sum(runs))  # 0 for the by-bucket runs
            return step(parts)
        return counted
    ft.packed_inference, ft._replicated_call = counting, counting_step
    fit = lengths <= 16  # rows of 16: the longer ones run by bucket
    shape, layouts = packing.inference_layouts(lengths[fit], 4, 16)
    packed_split = finetune.run_model(model, "classification", features, batch_size=4, strategy=strategy,
                                      packed_width=16)
    ft.packed_inference, ft._replicated_call = packed_run, replicated
    batches = [n for n in runs if n]
    packed_alone = finetune.run_model(model, "classification", features, batch_size=4, packed_width=16)
    print(f"PACKED calls={len(layouts)} groups={len(batches)} most={max(batches)} fit={int(fit.sum())} "
          f"diff={float(np.max(np.abs(packed_split['logits'] - alone['logits'])))} "
          f"alone_diff={float(np.max(np.abs(packed_alone['logits'] - alone['logits'])))}")

    # `xlnet-tf predict --strategy mirrored`: a saved directory loaded under the strategy, vs one device.
    import json, os, sys, pydoc_data.topics
    from xlnet_tf.heads import save_finetuned
    from xlnet_tf.tokenization import train_spm

    work = sys.argv[1]
    lines = [l.strip() for t in list(pydoc_data.topics.topics.values())[:40] for l in t.splitlines() if l.strip()]
    with open(os.path.join(work, "corpus.txt"), "w") as f:
        f.write("\\n".join(lines) + "\\n")
    spm = train_spm(os.path.join(work, "corpus.txt"), os.path.join(work, "spiece"), 150, minloglevel=2)
    finetune_config = {"task": "classification", "max_seq_len": 24, "lower_case": False, "spm_model": "spiece.model",
                       "num_labels": 3, "label_names": ["a", "b", "c"], "pairs": False}
    save_finetuned(model, os.path.join(work, "model"), finetune_config, extra_files=[spm])
    with open(os.path.join(work, "rows.tsv"), "w") as f:
        f.write("text_a\\n" + "".join(l[:rng.integers(5, 120)].replace("\\t", " ") + "\\n" for l in lines[:29]))
    out = {}
    for name, chosen in (("split", strategy), ("alone", None)):
        path = os.path.join(work, name + ".jsonl")
        finetune.predict(os.path.join(work, "model"), os.path.join(work, "rows.tsv"), path, 8, chosen)
        out[name] = np.array([json.loads(l)["probabilities"] for l in open(path)])
    print(f"PREDICT rows={len(out['split'])} diff={float(np.max(np.abs(out['split'] - out['alone'])))}")
""")


def _values(output, tag):
    line = next((l for l in output.stdout.splitlines() if l.startswith(tag)), None)
    assert line, output.stdout[-2000:] + output.stderr[-3000:]
    return dict(item.split("=") for item in line.split()[1:])


def test_evaluation_runs_under_the_strategy(tmp_path):
    output = subprocess.run([sys.executable, "-c", SCRIPT, str(tmp_path)], capture_output=True, text=True,
                            timeout=300)
    values = _values(output, "RESULT")
    print(f"mirrored on 2 logical CPUs, 37 rows in batches of 8 by length bucket: {values['rows']} rows back "
          f"(bound 37), logits vs one device max |diff| {float(values['diff']):.2e} (bound 1e-5; logits spread "
          f"{values['spread']}), strategy.run traced {values['traced_runs']} times (bound >= 1)")
    assert values["replicas"] == "2" and values["rows"] == "37" and int(values["traced_runs"]) >= 1
    assert float(values["diff"]) <= 1e-5 and float(values["spread"]) > 0.01
    packed = _values(output, "PACKED")
    calls, groups = int(packed["calls"]), int(packed["groups"])
    print(f"packed rows of 16 ({packed['fit']} of 37 rows fit, the rest by bucket): {calls} packed calls in "
          f"{groups} strategy runs of up to {packed['most']} (bound ceil(calls / 2) = {-(-calls // 2)}, 2 a run); "
          f"logits vs one device unpacked max |diff| {float(packed['diff']):.2e}, one device packed "
          f"{float(packed['alone_diff']):.2e} (bound 1e-5)")
    assert calls > 2 and groups == -(-calls // 2) and packed["most"] == "2" and 0 < int(packed["fit"]) < 37
    assert float(packed["diff"]) <= 1e-5 and float(packed["alone_diff"]) <= 1e-5
    saved = _values(output, "PREDICT")
    print(f"predict on a saved directory loaded under the strategy: {saved['rows']} rows (bound 29), "
          f"probabilities vs one device max |diff| {float(saved['diff']):.2e} (bound 1e-6)")
    assert saved["rows"] == "29" and float(saved["diff"]) <= 1e-6
