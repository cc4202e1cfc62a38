"""Length buckets and strata (xlnet_tf.data.buckets) and their use in fine-tuning, evaluation and prediction.

Per-example outputs of every head (and of the encoder) with rows padded to their bucket equal those with
rows padded to max_seq_len; training batches mirror the data's length distribution (one part per length
stratum), read every row once per epoch and are a pure function of the seed; XLA compiles one program for
every step; a resumed run ends bit-identical. Every checked figure is printed with its bound.
"""

import numpy as np
import pytest
import tensorflow as tf

from conftest import check_close as check, ragged_ids, resumes_bit_identical, tiny_config
from xlnet_tf.config import RunOptions
from xlnet_tf.data import buckets
from xlnet_tf.data import graph_features as gf
from xlnet_tf.errors import UserError
from xlnet_tf.tasks import build_head_model
from xlnet_tf.training.finetune import INPUTS, LABELS, LEFT_PADDED, TaskInput, crop, run_model

L = 48
RUN = RunOptions(dropout=0.0, dropatt=0.0, initializer_range=0.3)  # wide weights: outputs depend on the input


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


def test_strata_hold_whole_batch_shares_and_fit_their_widths():
    rng = np.random.default_rng(1)
    lengths = mixed_lengths(rng, 3000)
    for batch, spec in ((32, "auto"), (8, "auto"), (32, "16,32"), (32, "none")):
        strata = buckets.stratify(lengths, batch, 80, spec)
        sizes = [len(r) for r in strata.rows]
        fit = all(lengths[r].max() <= w for r, w in zip(strata.rows, strata.widths))
        rows = np.sort(np.concatenate(strata.rows))
        per_batch = sum(c * w for c, w in zip(strata.counts, strata.widths)) / batch
        print(f"batch {batch}, {spec}: widths {strata.widths}, rows per batch {strata.counts}, stratum sizes {sizes} "
              f"(each count / batch x 3000 within 1 row per share); padded/real {per_batch / lengths.mean():.2f} "
              f"(fixed: {80 / lengths.mean():.2f}; bound with auto < 2.2)")
        assert fit and sum(strata.counts) == batch and np.array_equal(rows, np.arange(3000))
        assert all(abs(n - c * 3000 / batch) <= c for n, c in zip(sizes, strata.counts))
        assert list(strata.widths) == sorted(strata.widths) and len(strata.widths) <= 4
        if spec == "auto":
            assert all(w % 8 == 0 or w == 80 for w in strata.widths) and per_batch / lengths.mean() < 2.2
    assert buckets.stratify(lengths, 32, 80, "none").widths == (80,)
    assert set(buckets.stratify(lengths, 32, 80, "16,32").widths) <= {16, 32, 80}
    few = buckets.stratify([5, 6, 70], 8, 128)
    print(f"3 rows for batches of 8: widths {few.widths}, counts {few.counts}, rows {[r.tolist() for r in few.rows]}")
    assert sum(few.counts) == 8 and all(len(r) for r in few.rows)


def test_auto_strata_count_each_extra_model_call():
    """`auto` weighs the positions a stratum saves against what its model call costs the run once
    (`part_positions`): a tiny model's short run keeps fewer strata; without that cost (or for a long run of a
    published size) the positions alone decide, as before."""
    from xlnet_tf.config import MODEL_SIZES

    rng = np.random.default_rng(1)
    lengths = mixed_lengths(rng, 3000)
    tiny, base = MODEL_SIZES["tiny"], MODEL_SIZES["base"]
    plain = buckets.stratify(lengths, 16, 80)
    costs = {"tiny, 300 steps": buckets.part_positions(tiny.d_model, tiny.d_inner, 300),
             "tiny, 100,000 steps": buckets.part_positions(tiny.d_model, tiny.d_inner, 100_000),
             "base, 1,000 steps": buckets.part_positions(base.d_model, base.d_inner, 1000)}
    chosen = {what: buckets.stratify(lengths, 16, 80, part_cost=cost) for what, cost in costs.items()}
    print(f"batches of 16 (max 80): positions alone: widths {plain.widths} ({plain.positions_per_row * 16:.0f} "
          f"positions a batch)")
    for what, strata in chosen.items():
        print(f"  {what}: an extra call worth {costs[what]:.2f} positions: widths {strata.widths} "
              f"({strata.positions_per_row * 16:.0f} positions)")
    assert len(plain.widths) >= 3
    assert len(chosen["tiny, 300 steps"].widths) < len(plain.widths)
    for what in ("tiny, 100,000 steps", "base, 1,000 steps"):
        strata = chosen[what]
        assert (strata.widths, strata.counts) == (plain.widths, plain.counts)
        assert all(np.array_equal(a, b) for a, b in zip(strata.rows, plain.rows))


def test_training_plan_mirrors_the_data_and_reads_each_row_once_per_epoch():
    rng = np.random.default_rng(1)
    lengths = mixed_lengths(rng, 300)
    strata = buckets.stratify(lengths, 8, 80)
    plan = buckets.training_plan(strata, steps=100, accum=2, replicas=2, seed=5)
    for k, (rows, count, batches) in enumerate(zip(strata.rows, strata.counts, plan.batches)):
        assert batches.shape == (200, 2 * count) and np.isin(batches, rows).all()
        epoch = len(rows) // (2 * count)  # micro-batches that read the stratum once
        first = batches[:epoch].reshape(-1)
        print(f"stratum {k} (width {strata.widths[k]}, {len(rows)} rows, {2 * count} per micro-batch): "
              f"distinct rows in its first epoch {len(set(first.tolist()))} of {len(first)} (bound: all)")
        assert len(set(first.tolist())) == len(first)
    counts = np.bincount(np.concatenate([b.reshape(-1) for b in plan.batches]), minlength=300)
    print(f"reads per row over 100 steps: min {counts.min()}, max {counts.max()} (a shuffle: max - min <= 2)")
    assert counts.max() - counts.min() <= 2
    again = buckets.training_plan(strata, steps=100, accum=2, replicas=2, seed=5)
    other = buckets.training_plan(strata, steps=100, accum=2, replicas=2, seed=6)
    assert all(np.array_equal(a, b) for a, b in zip(again.batches, plan.batches))
    assert not all(np.array_equal(a, b) for a, b in zip(other.batches, plan.batches))
    longer = buckets.training_plan(strata, steps=150, accum=2, replicas=2, seed=5)
    assert all(np.array_equal(a[:200], b) for a, b in zip(longer.batches, plan.batches))  # a prefix: resumable
    tiny = buckets.training_plan(buckets.stratify([3, 4, 5], 8, 16), steps=4)
    assert sum(b.shape[1] for b in tiny.batches) == 8 and set(np.concatenate(tiny.batches).reshape(-1)) == {0, 1, 2}


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


def test_inference_traces_the_model_once_for_every_bucket_and_batch_size(rng):
    """On one device, run_model's batches of several widths and sizes run one trace of the model (a trace is
    most of a small evaluation's time: it was traced three times, exact shapes then relaxed), and give what the
    model gives on every row padded to max_seq_len."""
    import keras

    keras.utils.set_random_seed(5)
    n, boundaries, batch_size = 23, (8, 16, 24, L), 4
    features = numpy_dict(gf.classification_inputs(ragged_ids(rng, mixed_lengths(rng, n)),
                                                   ragged_ids(rng, np.zeros(n, np.int64)), L))
    model = build_head_model("classification", tiny_config(), RUN, num_labels=3)

    class Counting:  # the model, counting its Python calls: one per trace
        calls = 0

        def __call__(self, batch, training):
            Counting.calls += 1
            return model(batch, training=training)

    bucketed = run_model(Counting(), "classification", features, batch_size, boundaries)
    shapes = {(len(rows), boundaries[bucket]) for bucket, rows in
              buckets.inference_batches(buckets.assign(features["length"], boundaries), batch_size)}
    print(f"batches of {len(shapes)} shapes (batch size, width) {sorted(shapes)} (bound >= 3): model traced "
          f"{Counting.calls} times (bound 1)")
    assert len(shapes) >= 3 and Counting.calls == 1
    check("logits by bucket vs rows padded to 48", bucketed["logits"],
          np.asarray(model({k: features[k] for k in INPUTS["classification"]}, training=False)["logits"]))


@pytest.mark.slow
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


def test_a_batch_split_into_length_parts_has_the_whole_batch_loss_and_gradients(rng):
    """What a stratified training step computes: the loss summed over parts cropped to their widths, and its
    gradients, equal one call on the whole batch padded to max_seq_len (dropout off)."""
    import keras

    from xlnet_tf.heads import classification_loss, squad_loss

    keras.utils.set_random_seed(5)
    n = 10
    lengths = np.sort(mixed_lengths(rng, n))
    cls = numpy_dict(gf.classification_inputs(ragged_ids(rng, lengths), None, L))
    cls["label_ids"] = rng.integers(0, 3, n).astype(np.int32)
    c_ids = ragged_ids(rng, lengths + 4)
    starts = tf.ragged.range(c_ids.row_lengths())
    squad = numpy_dict(gf.squad_windows(ragged_ids(rng, np.full(n, 5)), c_ids, starts, starts + 1, L,
                                        doc_stride=16, max_query_len=8))
    labels = rng.integers(0, 3, len(squad["length"]))
    squad.update(start_positions=labels, end_positions=labels + 1, is_impossible=(labels == 0).astype(np.int32))
    for task, features, loss_fn in (("classification", cls, classification_loss), ("squad", squad, squad_loss)):
        model = build_head_model(task, tiny_config(), RUN, **({"num_labels": 3} if task == "classification" else {}))
        keys = INPUTS[task] + LABELS[task]
        order = np.argsort(features["length"])
        halves = np.array_split(order, 2)

        def loss_and_grads(parts):
            with tf.GradientTape() as tape:
                total = tf.add_n([loss_fn(model(p, training=True), p)[0] for p in parts])
            grads = tape.gradient(total, model.trainable_variables)
            return float(total), [tf.convert_to_tensor(g) for g in grads if g is not None]

        whole, whole_grads = loss_and_grads([{k: features[k] for k in keys}])
        parts = [crop({k: features[k][rows] for k in keys}, int(-(-features["length"][rows].max() // 8) * 8),
                      LEFT_PADDED[task]) for rows in halves]
        split, split_grads = loss_and_grads(parts)
        widths = [p["input_ids"].shape[1] for p in parts]
        print(f"{task}: parts of widths {widths} (whole batch {L})")
        check(f"{task} summed loss over parts vs the whole batch", split, whole)
        check(f"{task} gradients over parts vs the whole batch",
              max(float(tf.reduce_max(tf.abs(a - b))) for a, b in zip(split_grads, whole_grads)), 0.0)
        assert min(widths) < L


def test_task_input_batches_are_cropped_rows(rng):
    """The tf.data of a fine-tuning run yields the plan's rows, one part per stratum, each cropped on the
    padding side to its stratum's width (static shapes), split over the replicas."""
    lengths = mixed_lengths(rng, 40)
    feats = numpy_dict(gf.classification_inputs(ragged_ids(rng, lengths), None, L))
    feats["label_ids"] = np.arange(40, dtype=np.int32)
    strata = buckets.stratify(feats["length"], 4, L)
    plan = buckets.training_plan(strata, steps=30, replicas=2)
    inputs = TaskInput(feats, INPUTS["classification"] + LABELS["classification"], "classification", plan)
    context = tf.distribute.InputContext(num_input_pipelines=1, input_pipeline_id=0, num_replicas_in_sync=2)
    got = list(inputs.dataset(context, 11))
    assert len(got) == 2 * 19  # two per-replica batches per step
    for n, batch in enumerate(got):
        step, replica = 11 + n // 2, n % 2
        assert isinstance(batch, tuple) and len(batch) == len(strata.widths)
        for part, batches, count, width in zip(batch, plan.batches, strata.counts, strata.widths):
            rows = batches[step, replica * count:(replica + 1) * count]
            assert part["input_ids"].shape == (count, width)
            assert part["label_ids"].numpy().tolist() == rows.tolist()
            assert np.array_equal(part["input_ids"].numpy(), feats["input_ids"][rows][:, -width:])
            assert (feats["padding_mask"][rows][:, :-width] == 0).all()  # only padding was cut
    real, padded = inputs.token_counts(0, 30)
    print(f"strata widths {strata.widths}, rows per replica batch {strata.counts}: 30 steps of 8 rows hold {real} "
          f"real tokens in {padded} padded positions ({30 * 8 * L} at max_seq_len); bound padded < 0.8 x fixed")
    assert real == int(sum(feats["padding_mask"][b].sum() for b in plan.batches)) and padded < 0.8 * 30 * 8 * L
    assert LEFT_PADDED["squad"] is False and LEFT_PADDED["race"] is True


# ----------------------------------------------------------------------------------------------------
# The training loop over buckets: one XLA program per bucket, exact resume


def _bucketed_trainer(model_dir, steps, jit=False):
    import keras

    from xlnet_tf.heads import classification_loss
    from xlnet_tf.training.loop import Trainer, TrainingOptions

    local = np.random.default_rng(7)  # the same data for every trainer of a test
    lengths = mixed_lengths(local, 64)
    feats = numpy_dict(gf.classification_inputs(ragged_ids(local, lengths), None, L))
    feats["label_ids"] = (feats["length"] % 2).astype(np.int32)
    options = TrainingOptions(train_steps=steps, batch_size=8, steps_per_loop=4, save_every=4, learning_rate=1e-3,
                              jit_compile=jit, seed=3)
    strata = buckets.stratify(feats["length"], 8, L)
    plan = buckets.training_plan(strata, steps, seed=3)
    inputs = TaskInput(feats, INPUTS["classification"] + LABELS["classification"], "classification", plan)
    keras.utils.set_random_seed(11)
    build = lambda: build_head_model("classification", tiny_config(), RunOptions(dropout=0.1, dropatt=0.1),  # noqa
                                     num_labels=2)
    trainer = Trainer(tf.distribute.OneDeviceStrategy("/cpu:0"), build, classification_loss, None, options,
                      model_dir, inputs=inputs)
    return trainer, strata


@pytest.mark.slow
def test_xla_compiles_one_program_for_every_step(tmp_path):
    trainer, strata = _bucketed_trainer(tmp_path / "xla", 12, jit=True)
    records = trainer.train()
    programs = trainer.traced_programs()
    print(f"--jit-compile over 12 steps, batches of {len(strata.widths)} parts of widths {strata.widths}: "
          f"{programs} XLA program(s) (bound 1)")
    assert len(strata.widths) >= 2 and programs == 1
    ratio = records[-1]["padded_tokens_per_sec"] / records[-1]["tokens_per_sec"]
    print(f"log: {records[-1]['tokens_per_sec']:.0f} real tok/s, {records[-1]['padded_tokens_per_sec']:.0f} padded "
          f"(ratio {ratio:.2f}, bound >= 1)")
    assert ratio >= 1


@pytest.mark.slow
def test_bucketed_training_resumes_bit_identical(tmp_path):
    resumes_bit_identical(lambda path, steps: _bucketed_trainer(path, steps)[0], tmp_path, "dropout on, length strata")
