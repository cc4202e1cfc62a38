"""Evaluation and prediction after fine-tuning run under the training strategy: each batch split across the
replicas by one `strategy.run`, gathered back in row order, equal to the model run on one device."""

import subprocess
import sys
import textwrap

SCRIPT = textwrap.dedent("""
    import numpy as np
    import tensorflow as tf

    from xlnet_tf.training.strategies import make_strategy

    strategy = make_strategy("mirrored", cpu_devices=2)  # before TensorFlow initialises its devices
    from xlnet_tf.config import RunOptions, XLNetConfig
    from xlnet_tf.heads import build_head_model
    from xlnet_tf.training import finetune

    config = XLNetConfig(n_token=64, d_model=32, n_layer=2, n_head=4, d_head=8, d_inner=48)
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
""")


def test_evaluation_runs_under_the_strategy():
    output = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, timeout=300)
    line = next((l for l in output.stdout.splitlines() if l.startswith("RESULT")), None)
    assert line, output.stdout[-2000:] + output.stderr[-3000:]
    values = dict(item.split("=") for item in line.split()[1:])
    print(f"mirrored on 2 logical CPUs, 37 rows in batches of 8 by length bucket: {values['rows']} rows back "
          f"(bound 37), logits vs one device max |diff| {float(values['diff']):.2e} (bound 1e-5; logits spread "
          f"{values['spread']}), strategy.run traced {values['traced_runs']} times (bound >= 1)")
    assert values["replicas"] == "2" and values["rows"] == "37" and int(values["traced_runs"]) >= 1
    assert float(values["diff"]) <= 1e-5 and float(values["spread"]) > 0.01
