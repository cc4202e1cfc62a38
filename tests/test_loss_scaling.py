"""float16 training (the mixed_float16 policy) with dynamic loss scaling in the one training loop: overflowing
steps are skipped (no update, no step, no learning-rate step) and the scale halved; finite steps grow it; the
scale and its counters are checkpointed (an interrupted run resumes exactly) and logged; overflow at scale 1
stops the run as diverged; without overflow the losses are float32's. A tiny XLNet classifier on the CPU (float16 is emulated there: slow, but exact)."""

import json
import signal

import numpy as np
import pytest
import tensorflow as tf

from conftest import tiny_config

pytestmark = pytest.mark.slow  # trains, serves or starts processes: `make test` only, not `make test-quick`

SEQ, ROWS, BATCH = 12, 32, 8


def check(label, value, bound, ok):
    print(f"  CHECK {label}: {value} (bound: {bound}) -> {'ok' if ok else 'FAILED'}")
    assert ok, f"{label}: {value} (bound: {bound})"


def examples(seed=3):
    """Classification rows with left padding, two segments and <cls> last (numpy, [ROWS, SEQ])."""
    rng = np.random.default_rng(seed)
    ids = rng.integers(9, 64, size=(ROWS, SEQ)).astype(np.int32)
    pad = rng.integers(0, SEQ // 2, size=ROWS)
    mask = (np.arange(SEQ)[None, :] < pad[:, None]).astype(np.float32)
    segments = np.broadcast_to(np.where(np.arange(SEQ) < SEQ // 2, 0, 1), (ROWS, SEQ)).astype(np.int32)
    segments[:, -1] = 2
    ids = np.where(mask > 0, 5, ids)
    return {"input_ids": ids, "segment_ids": segments, "padding_mask": mask,
            "label_ids": (ids[:, -2] % 2).astype(np.int32)}


def dataset_fn(context, start_batch):
    data = tf.data.Dataset.from_tensor_slices(examples()).repeat()
    return data.batch(BATCH, drop_remainder=True).skip(start_batch)


def trainer(directory, loss_multiplier=1.0, dtype="mixed_float16", **options):
    import keras

    from xlnet_tf.config import RunOptions
    from xlnet_tf.heads import classification_loss
    from xlnet_tf.tasks import build_head_model
    from xlnet_tf.training.loop import Trainer, TrainingOptions

    keras.utils.set_random_seed(2)

    def loss_fn(outputs, batch):
        total, weight = classification_loss(outputs, batch)
        return tf.cast(total, tf.float32) * loss_multiplier, weight  # in float32: finite up to 3.4e38

    settings = dict(train_steps=6, batch_size=BATCH, learning_rate=1e-3, save_every=3, steps_per_loop=1)
    settings.update(options)
    return Trainer(tf.distribute.OneDeviceStrategy("/cpu:0"),
                   lambda: build_head_model("classification", tiny_config(n_layer=1),
                                            RunOptions(dropout=0.0, dropatt=0.0), dtype=dtype),
                   loss_fn, dataset_fn, TrainingOptions(**settings), directory)


def _weights(t):
    return [v.numpy() for v in t.model.weights + t.optimizer.variables]


def largest(a, b):
    return max(float(np.max(np.abs(x.astype(np.float64) - y.astype(np.float64)), initial=0.0)) for x, y in zip(a, b))


def test_float16_loss_falls_as_float32s(tmp_path):
    # The same run (seeds, data, schedule) in float32 and in float16 from Keras' initial scale 2^15.
    runs = {}
    for name, dtype in (("float32", "float32"), ("float16", "mixed_float16")):
        t = trainer(tmp_path / name, dtype=dtype, train_steps=32, save_every=100, steps_per_loop=4, learning_rate=3e-3)
        runs[name] = [r["loss"] for r in t.train()], t.skipped()
    (full, _), (half, skipped) = runs["float32"], runs["float16"]
    print(f"  losses float32 {np.round(full, 3).tolist()}\n  losses float16 {np.round(half, 3).tolist()}")
    check("float32 loss falls", f"{full[0]:.3f} -> {full[-1]:.3f}", "by > 0.05", full[-1] < full[0] - 0.05)
    check("float16 steps skipped from 2^15", skipped, "== 0", skipped == 0)
    gap = float(np.max(np.abs(np.subtract(half, full))))
    check("float16 vs float32 losses, max |diff| over the calls", f"{gap:.4f}", "<= 0.02", gap <= 0.02)


def test_overflowing_steps_are_skipped_and_the_scale_comes_down(tmp_path):
    # 2^28 overflows float16 (largest finite 65504) in the gradients: steps are skipped until the scale is small.
    t = trainer(tmp_path / "m", initial_loss_scale=2.0 ** 28, loss_scale_growth_steps=2)
    check("compute dtype", t.model.compute_dtype, "float16, float32 weights",
          t.model.compute_dtype == "float16" and all(v.dtype == "float32" for v in t.model.trainable_weights))
    records = t.train()
    skipped = t.skipped()
    log = [json.loads(line) for line in open(tmp_path / "m" / "train_log.jsonl")]
    print("  log:", [(r["step"], r["loss_scale"], r["skipped_steps"], round(r["grad_norm"], 3)) for r in log])
    check("steps skipped (overflow)", skipped, ">= 5 (2^28 halved at least to 2^23)", skipped >= 5)
    check("optimizer steps applied", int(t.step.numpy()), "== 6", int(t.step.numpy()) == 6)
    check("the optimizer's own iterations (learning-rate schedule)", int(t.optimizer.iterations.numpy()), "== 6",
          int(t.optimizer.iterations.numpy()) == 6)
    scale = float(t.loss_scale.numpy())
    check("loss scale at the end", scale, "< 2^24 and >= 1 (halved per overflow, doubled every 2 finite steps)",
          1.0 <= scale < 2.0 ** 24)
    check("the log's loss scale and skipped steps", (log[-1]["loss_scale"], log[-1]["skipped_steps"]),
          f"== ({scale}, {skipped})", (log[-1]["loss_scale"], log[-1]["skipped_steps"]) == (scale, skipped))
    check("loss logged for every call (applied or skipped steps)", [round(r["loss"], 3) for r in records], "finite",
          all(np.isfinite(r["loss"]) for r in records))


def test_an_interrupted_float16_run_resumes_exactly(tmp_path):
    straight = trainer(tmp_path / "straight", initial_loss_scale=2.0 ** 24, loss_scale_growth_steps=2)
    straight.train()
    first = trainer(tmp_path / "resumed", initial_loss_scale=2.0 ** 24, loss_scale_growth_steps=2)
    counts = first.inputs.token_counts

    def stop_after_three(first_step, end_step):  # as SIGTERM would: the loop saves and stops
        if end_step >= 3:
            first._on_signal(signal.SIGTERM, None)
        return counts(first_step, end_step)

    first.inputs.token_counts = stop_after_three
    first.train()
    stopped = (int(first.step.numpy()), first.skipped(), float(first.loss_scale.numpy()))
    resumed = trainer(tmp_path / "resumed", initial_loss_scale=2.0 ** 24, loss_scale_growth_steps=2)
    resumed.train()
    print(f"  stopped at (step, skipped, scale) {stopped}; straight run skipped {straight.skipped()}")
    check("stopped part-way, after skipping", stopped[0], "< 6 and skipped > 0", stopped[0] < 6 and stopped[1] > 0)
    state = lambda t: (int(t.step.numpy()), t.skipped(), float(t.loss_scale.numpy()), int(t.good_steps.numpy()))
    check("(step, skipped, scale, good steps) resumed vs straight", state(resumed), f"== {state(straight)}",
          state(resumed) == state(straight))
    diff = largest(_weights(straight), _weights(resumed))
    check("weights and optimizer state, resumed vs straight: max |diff|", f"{diff:.1e}", "== 0", diff == 0.0)


def test_overflow_at_scale_one_stops_the_run(tmp_path):
    from xlnet_tf.training.loop import TrainingDiverged

    # A loss of ~1e37 (finite in float32) overflows float16 gradients at any scale: 4 -> 2 -> 1, then the run stops.
    t = trainer(tmp_path / "m", loss_multiplier=1e37, initial_loss_scale=4.0, train_steps=10)
    with pytest.raises(TrainingDiverged) as raised:
        t.train()
    print(f"  {raised.value}")
    check("skipped steps", t.skipped(), "== 3 (at scale 4, 2, then 1, which stops the run)", t.skipped() == 3)
    check("checkpoints written", t.manager.checkpoints, "none (no step was applied)", not t.manager.checkpoints)
    check("steps applied", int(t.step.numpy()), "== 0", int(t.step.numpy()) == 0)
    check("the message", "loss scale now 1" in str(raised.value), "names the scale",
          "loss scale now 1" in str(raised.value))
