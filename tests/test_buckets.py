"""Length buckets (xlnet_tf.data.buckets) and their use in fine-tuning, evaluation and prediction.

Per-example outputs of every head (and of the encoder) with rows padded to their bucket equal those with
rows padded to max_seq_len; the training plan is a deterministic, resumable shuffle in which every batch
is one bucket; XLA compiles one program per bucket; a resumed bucketed run ends bit-identical. Every checked
figure is printed with its bound.
"""

import numpy as np
import pytest
import tensorflow as tf

from conftest import tiny_config
from xlnet_tf.config import RunOptions
from xlnet_tf.data import buckets
from xlnet_tf.data import graph_features as gf
from xlnet_tf.errors import UserError
from xlnet_tf.heads import build_head_model
from xlnet_tf.training.finetune import INPUTS, LABELS, LEFT_PADDED, TaskInput, crop, run_model

TOLERANCE = 1e-5
L = 48
RUN = RunOptions(dropout=0.0, dropatt=0.0, initializer_range=0.3)  # wide weights: outputs depend on the input


def check(name, got, want, bound=TOLERANCE):
    diff = float(np.max(np.abs(np.asarray(got, np.float64) - np.asarray(want, np.float64)), initial=0.0))
    print(f"{name}: max|diff| = {diff:.2e} (bound {bound:.0e})")
    assert diff <= bound, name


def ragged_ids(rng, lengths, vocab=64):
    return tf.ragged.constant([rng.integers(9, vocab, size=n).tolist() for n in lengths], dtype=tf.int32,
                              row_splits_dtype=tf.int64)


def numpy_dict(features):
    return {k: np.asarray(v) for k, v in features.items()}


def mixed_lengths(rng, n):
    """Lengths like real sentences: mostly short, a long tail, some beyond max_seq_len (truncated)."""
    return np.minimum(rng.geometric(0.08, size=n), 80)


# ----------------------------------------------------------------------------------------------------
# Boundaries and plans


def test_boundaries_parse_auto_and_assign():
    assert buckets.parse_boundaries("none", 128) == (128,)
    assert buckets.parse_boundaries("16,32", 128) == (16, 32, 128)
    assert buckets.parse_boundaries(" 16, 64,128 ", 128) == (16, 64, 128)
    assert buckets.parse_boundaries("auto", 128) == "auto"
    for bad in ("32,16", "0,8", "16,x", "200", ""):
        with pytest.raises(UserError, match="--bucket-boundaries") as error:
            buckets.parse_boundaries(bad, 128)
        print(f"--bucket-boundaries {bad!r}: {error.value}")

    # Three clusters of lengths: the automatic boundaries find them (multiples of 8, ending at max_seq_len).
    rng = np.random.default_rng(0)
    lengths = np.concatenate([rng.integers(5, 15, 600), rng.integers(30, 40, 300), rng.integers(90, 100, 100)])
    chosen = buckets.auto_boundaries(lengths, 128, min_rows=32)
    real, padded = buckets.padding_cost(lengths, chosen)
    fixed = len(lengths) * 128
    print(f"auto boundaries {chosen}: {real} real tokens in {padded} positions ({fixed} at max_seq_len; "
          f"bound <= 1.25 x real)")
    assert chosen[-1] == 128 and all(b % 8 == 0 for b in chosen) and padded <= 1.25 * real
    assert 40 in chosen and 104 in chosen and len(chosen) <= 5  # 4 buckets with rows + the empty tail
    for rows, want in (([20] * 50, (24, 128)), ([5] * 3, (8, 128)), ([128] * 9, (128,))):
        got = buckets.auto_boundaries(rows, 128, min_rows=32)
        print(f"auto boundaries of {len(rows)} rows of length {rows[0]}: {got} (expected {want})")
        assert got == want
    assert buckets.assign([1, 16, 17, 40, 41, 128], (16, 40, 128)).tolist() == [0, 0, 1, 1, 2, 2]


def test_training_plan_is_a_resumable_shuffle_of_whole_buckets():
    rng = np.random.default_rng(1)
    lengths = mixed_lengths(rng, 300)
    bounds = (8, 16, 32, 80)
    rows_bucket = buckets.assign(lengths, bounds)
    plan = buckets.training_plan(rows_bucket, len(bounds), batch_size=8, steps=200, accum=2, seed=5, widths=bounds)
    assert plan.batches.shape == (400, 8) and plan.step_bucket.shape == (200,)
    micro_bucket = np.repeat(plan.step_bucket, 2)
    mixed = sum(len(set(rows_bucket[b])) != 1 or rows_bucket[b][0] != k for b, k in zip(plan.batches, micro_bucket))
    print(f"micro-batches holding rows of another bucket than their step's: {mixed} (bound 0)")
    assert mixed == 0
    switches = int((np.diff(plan.step_bucket) != 0).sum())
    print(f"bucket changes between consecutive steps: {switches} of 199 (buckets interleave: bound >= 60)")
    assert switches >= 60
    # The stream reads every row once per epoch: over the first 300 rows taken, no row twice per bucket.
    seen = plan.batches.reshape(-1)
    counts = np.bincount(seen, minlength=300)
    print(f"times each row was read in {len(seen)} reads of 300 rows: min {counts.min()}, max {counts.max()} "
          f"(a shuffle, not sampling with replacement: max - min <= 2)")
    assert counts.max() - counts.min() <= 2
    again = buckets.training_plan(rows_bucket, len(bounds), batch_size=8, steps=200, accum=2, seed=5, widths=bounds)
    assert np.array_equal(again.batches, plan.batches) and np.array_equal(again.step_bucket, plan.step_bucket)
    other = buckets.training_plan(rows_bucket, len(bounds), batch_size=8, steps=200, accum=2, seed=6, widths=bounds)
    assert not np.array_equal(other.batches, plan.batches)
    # Resuming at step 77: each bucket's batches from there on are the tail of its full sequence.
    for k in range(len(bounds)):
        full, tail = plan.bucket_batches(k), plan.bucket_batches(k, 77)
        assert np.array_equal(full[len(full) - len(tail):], tail)
    # A TPU-style plan: runs of 5 steps read one bucket.
    runs = buckets.training_plan(rows_bucket, len(bounds), batch_size=8, steps=50, run_length=5, seed=0)
    blocks = runs.step_bucket.reshape(10, 5)
    assert (blocks == blocks[:, :1]).all()
    change = int(np.argmax(runs.step_bucket != runs.step_bucket[0]))
    assert change % 5 == 0 and runs.run_length(0, 50) == change and runs.run_length(change - 2, 10) == 2
    print(f"run_length 5: buckets by step {runs.step_bucket.tolist()} (runs of 5 checked)")
    # Fewer rows than one batch still trains (batches span epochs).
    tiny = buckets.training_plan(np.zeros(3, np.int64), 1, batch_size=8, steps=4)
    assert tiny.batches.shape == (4, 8) and set(tiny.batches.reshape(-1)) == {0, 1, 2}


def test_inference_batches_cover_every_row_once():
    rows_bucket = np.array([2, 0, 1, 0, 2, 2, 1, 0, 0, 2])
    got = buckets.inference_batches(rows_bucket, 3)
    print(f"inference batches: {[(k, r.tolist()) for k, r in got]}")
    assert [(k, r.tolist()) for k, r in got] == [(0, [1, 3, 7]), (0, [8]), (1, [2, 6]), (2, [0, 4, 5]), (2, [9])]


# ----------------------------------------------------------------------------------------------------
# Exactness: outputs with bucketing == outputs with fixed padding


def _compare_heads(task, model, features, boundaries, what):
    fixed = run_model(model, task, features, batch_size=5, boundaries=(L,))
    bucketed = run_model(model, task, features, batch_size=5, boundaries=boundaries)
    widths = sorted({boundaries[b] for b in buckets.assign(features["length"], boundaries)})
    print(f"{task}: {len(features['length'])} rows of lengths {int(features['length'].min())}.."
          f"{int(features['length'].max())} in buckets of widths {widths}")
    for key in what:
        if key in ("start_top_index", "end_top_index"):
            same = np.array_equal(fixed[key], bucketed[key])
            print(f"{task} {key}: equal = {same}")
            assert same
        else:
            check(f"{task} {key} bucketed vs padded to max_seq_len", bucketed[key], fixed[key])
    return fixed


def test_every_head_gives_the_same_outputs_with_buckets(rng):
    import keras

    config = tiny_config()
    boundaries = (8, 16, 24, L)
    keras.utils.set_random_seed(3)

    # Classification (pairs and single texts mixed) and regression: left-padded, <cls> last.
    n = 23
    len_a, len_b = mixed_lengths(rng, n), mixed_lengths(rng, n)
    len_b[::3] = 0  # single-sentence rows in the same batch
    pair = numpy_dict(gf.classification_inputs(ragged_ids(rng, len_a), ragged_ids(rng, len_b), L))
    pair["label_ids"] = np.zeros(n, np.int32)
    assert pair["has_b"].sum() < n and pair["length"].max() == L and pair["length"].min() <= 8
    classifier = build_head_model("classification", config, RUN, num_labels=3)
    fixed = _compare_heads("classification", classifier, pair, boundaries, ["logits"])
    print(f"classification logits spread over rows = {np.ptp(fixed['logits'][:, 0]):.3f} (bound > 1e-2)")
    assert np.ptp(fixed["logits"][:, 0]) > 1e-2
    regressor = build_head_model("regression", config, RUN)
    _compare_heads("regression", regressor, pair, boundaries, ["predictions"])

    # Encoder states at the real positions (the reusable encoder's and `encode`'s output).
    rows = np.argsort(pair["length"])[:7]
    width = 24
    full = classifier.transformer({k: pair[k][rows] for k in INPUTS["classification"]}, training=False)
    cut = classifier.transformer(crop({k: pair[k][rows] for k in INPUTS["classification"]}, width, True),
                                 training=False)
    real = pair["padding_mask"][rows][:, -width:, None]
    check("encoder sequence_output at real positions, width 24 vs 48",
          np.asarray(cut["sequence_output"]) * real, np.asarray(full["sequence_output"])[:, -width:] * real)

    # SQuAD: right-padded windows, p_mask, several windows per context.
    q_len, c_len = np.minimum(mixed_lengths(rng, 9), 12), mixed_lengths(rng, 9) + 5
    c_ids = ragged_ids(rng, c_len)
    starts = tf.ragged.range(c_ids.row_lengths())
    windows = numpy_dict(gf.squad_windows(ragged_ids(rng, q_len), c_ids, starts, starts + 1, L, doc_stride=16,
                                          max_query_len=10))
    windows.update(p_mask=windows["p_mask"], cls_index=windows["cls_index"])
    squad = build_head_model("squad", config, RUN)
    print(f"squad windows: {len(windows['length'])} from 9 contexts")
    _compare_heads("squad", squad, windows, boundaries, ["start_top_log_probs", "start_top_index",
                                                         "end_top_log_probs", "end_top_index", "cls_logits"])
    fixed = run_model(squad, "squad", windows, 5, (L,))
    bucketed = run_model(squad, "squad", windows, 5, boundaries)
    real = windows["padding_mask"] == 1
    check("squad start_logits at real positions", bucketed["start_logits"][real], fixed["start_logits"][real])

    # RACE: four option rows per question, left-padded.
    n, c = 6, 4
    article, qa = ragged_ids(rng, mixed_lengths(rng, n)), ragged_ids(rng, np.minimum(mixed_lengths(rng, n * c), 20))
    race = gf.race_inputs(article, qa, c, L, max_qa_len=16)
    race = {k: np.asarray(race[k]).reshape(n, c, L) for k in ("input_ids", "segment_ids", "padding_mask")}
    race["length"] = race["padding_mask"].sum(-1).max(-1)
    chooser = build_head_model("race", config, RUN)
    _compare_heads("race", chooser, race, boundaries, ["logits"])


def test_task_input_batches_are_cropped_rows(rng):
    """The tf.data of one bucket yields exactly the plan's rows, cropped on the padding side, static shapes."""
    lengths = mixed_lengths(rng, 40)
    feats = numpy_dict(gf.classification_inputs(ragged_ids(rng, lengths), None, L))
    feats["label_ids"] = np.arange(40, dtype=np.int32)
    bounds = (16, 32, L)
    plan = buckets.training_plan(buckets.assign(feats["length"], bounds), 3, batch_size=4, steps=30, widths=bounds)
    inputs = TaskInput(feats, INPUTS["classification"] + LABELS["classification"], "classification", plan, 4)
    context = tf.distribute.InputContext(num_input_pipelines=1, input_pipeline_id=0, num_replicas_in_sync=2)
    for k in range(3):
        got = list(inputs.dataset(context, k, 11))
        want = plan.bucket_batches(k, 11).reshape(-1, 2)  # two replicas: two per-replica halves per batch
        assert len(got) == len(want)
        for batch, rows in zip(got, want):
            assert batch["input_ids"].shape == (2, bounds[k])
            assert batch["label_ids"].numpy().tolist() == rows.tolist()
            assert np.array_equal(batch["input_ids"].numpy(), feats["input_ids"][rows][:, -bounds[k]:])
            assert (feats["padding_mask"][rows][:, :-bounds[k]] == 0).all()  # only padding was cut
    real, padded = inputs.token_counts(0, 30)
    print(f"30 steps of 4 rows: {real} real tokens in {padded} padded positions "
          f"({30 * 4 * L} at max_seq_len); bound padded < 0.8 x fixed")
    assert real == int(sum(feats["length"][plan.batches.reshape(-1)])) and padded < 0.8 * 30 * 4 * L
    assert LEFT_PADDED["squad"] is False and LEFT_PADDED["race"] is True


# ----------------------------------------------------------------------------------------------------
# The training loop over buckets: one XLA program per bucket, exact resume


def _bucketed_trainer(rng, model_dir, steps, jit=False):
    import keras

    from xlnet_tf.heads import classification_loss
    from xlnet_tf.training.loop import Trainer, TrainingOptions

    local = np.random.default_rng(7)  # the same data for every trainer of a test
    lengths = mixed_lengths(local, 64)
    feats = numpy_dict(gf.classification_inputs(ragged_ids(local, lengths), None, L))
    feats["label_ids"] = (feats["length"] % 2).astype(np.int32)
    bounds = (16, 32, L)
    options = TrainingOptions(train_steps=steps, batch_size=8, steps_per_loop=4, save_every=4, learning_rate=1e-3,
                              jit_compile=jit, seed=3)
    plan = buckets.training_plan(buckets.assign(feats["length"], bounds), 3, 8, steps, seed=3, widths=bounds)
    inputs = TaskInput(feats, INPUTS["classification"] + LABELS["classification"], "classification", plan, 8)
    keras.utils.set_random_seed(11)
    build = lambda: build_head_model("classification", tiny_config(), RunOptions(dropout=0.1, dropatt=0.1),  # noqa
                                     num_labels=2)
    trainer = Trainer(tf.distribute.OneDeviceStrategy("/cpu:0"), build, classification_loss, None, options,
                      model_dir, inputs=inputs)
    return trainer, plan


def test_xla_compiles_one_program_per_bucket(rng, tmp_path):
    trainer, plan = _bucketed_trainer(rng, tmp_path / "xla", 12, jit=True)
    records = trainer.train()
    used = len(set(plan.step_bucket.tolist()))
    programs = trainer.traced_programs()
    print(f"--jit-compile over 12 steps reading {used} buckets: {programs} XLA programs (bound <= {used})")
    assert used == 3 and programs <= used
    ratio = records[-1]["padded_tokens_per_sec"] / records[-1]["tokens_per_sec"]
    print(f"log: {records[-1]['tokens_per_sec']:.0f} real tok/s, {records[-1]['padded_tokens_per_sec']:.0f} padded "
          f"(ratio {ratio:.2f}, bound >= 1)")
    assert ratio >= 1


def test_bucketed_training_resumes_bit_identical(rng, tmp_path):
    import signal

    straight, _ = _bucketed_trainer(rng, tmp_path / "straight", 8)
    straight.train()
    first, _ = _bucketed_trainer(rng, tmp_path / "resumed", 8)
    counts = first.inputs.token_counts

    def stop_after_step_3(first_step, end_step):  # as SIGTERM would: the loop saves and stops
        if end_step >= 3:
            first._stop_signal = signal.SIGTERM
        return counts(first_step, end_step)

    first.inputs.token_counts = stop_after_step_3
    first.train()
    stopped = int(first.step.numpy())
    second, _ = _bucketed_trainer(rng, tmp_path / "resumed", 8)
    second.train()
    diffs = [float(np.max(np.abs(a.numpy() - b.numpy()))) for a, b in zip(straight.model.weights, second.model.weights)]
    print(f"weights after 8 steps vs stopped at step {stopped} and resumed (dropout on, 3 buckets): "
          f"max |diff| {max(diffs):.1e} (bound 0)")
    assert 3 <= stopped < 8 and max(diffs) == 0.0
