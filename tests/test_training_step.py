"""The training step (xlnet_tf.training.loop): one `strategy.run` per optimizer step; with --jit-compile the whole
replica step (forward, backward, accumulation, all-reduce, clipping, AdamW, dropout seeds) is one XLA function, for
pretraining (two streams, memory) and fine-tuning (length parts); one all-reduce carries the gradients, and Keras'
optimizer sums none again; on two mirrored replicas the dropout masks differ, runs are reproducible and resume
exactly, and the update equals one device's. The mirrored checks run in one subprocess (this file run as a
script): logical CPUs must be configured before TensorFlow initialises its devices.
"""

import json
import os
import signal
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf

from conftest import permutation_inputs, tiny_config

pytestmark = pytest.mark.slow  # trains, serves or starts processes: `make test` only, not `make test-quick`

SEQ, PREDICT, MEM = 16, 4, 8
# Writes to variables, model math and random draws: none of them may run outside the compiled replica step.
STEP_OPS = ("Assign", "ResourceApply", "Einsum", "MatMul", "Random", "Softmax")


def pretraining_examples(rows=32, seed=0):
    """Two-stream inputs with padding and sampled factorization orders, and their targets (numpy, [rows, ...])."""
    rng = np.random.default_rng(seed)
    examples = permutation_inputs(rng, batch=rows, length=SEQ, num_predict=PREDICT)
    examples["target_ids"] = rng.integers(9, 64, size=(rows, PREDICT)).astype(np.int32)
    return examples


def stream(examples, global_batch):
    """A Trainer dataset_fn: the rows in order, `global_batch` per micro-batch, split over the replicas (the
    distributed iterator hands consecutive per-replica batches to consecutive replicas)."""

    def dataset_fn(context, start_batch):
        replicas = context.num_replicas_in_sync
        data = tf.data.Dataset.from_tensor_slices(examples).repeat()
        return data.batch(global_batch // replicas, drop_remainder=True).skip(start_batch * replicas)

    return dataset_fn


def pretraining_trainer(model_dir):
    """XLNetPretrainer (one layer, two streams, memory), dropout on, 2 micro-batches per step, XLA, one device."""
    import keras

    from xlnet_tf.config import RunOptions
    from xlnet_tf.model import XLNetPretrainer
    from xlnet_tf.training.loop import Trainer, TrainingOptions

    keras.utils.set_random_seed(1)
    # Attention dropout off: its masks would double the XLA compile time of this test.
    run = RunOptions(dropout=0.1, dropatt=0.0, mem_len=MEM, reuse_len=MEM)
    options = TrainingOptions(train_steps=8, batch_size=8, grad_accum_steps=2, learning_rate=1e-3, jit_compile=True)
    return Trainer(tf.distribute.OneDeviceStrategy("/cpu:0"), lambda: XLNetPretrainer(tiny_config(n_layer=1), run),
                   lambda outputs, batch: (outputs["loss_sum"], outputs["target_count"]),
                   stream(pretraining_examples(), 8), options, model_dir, model_kwargs={"sequence_output": False})


def classification_rows(count, longest, p, seed):
    """Classification features of `count` random rows (geometric lengths of parameter `p`, at most `longest`), each
    labelled by its length's parity (numpy dict)."""
    from xlnet_tf.data import graph_features as gf

    rng = np.random.default_rng(seed)
    lengths = np.minimum(rng.geometric(p, size=count), longest)
    ids = tf.ragged.constant([rng.integers(9, 64, size=n).tolist() for n in lengths], dtype=tf.int32,
                             row_splits_dtype=tf.int64)
    features = {k: np.asarray(v) for k, v in gf.classification_inputs(ids, None, longest).items()}
    features["label_ids"] = (features["length"] % 2).astype(np.int32)
    return features


def finetuning_trainer(model_dir):
    """Classification over length strata (every batch a tuple of parts), dropout off, XLA, one device."""
    import keras

    from xlnet_tf.config import RunOptions
    from xlnet_tf.data import buckets
    from xlnet_tf.heads import classification_loss
    from xlnet_tf.tasks import build_head_model
    from xlnet_tf.training.finetune import INPUTS, LABELS, TaskInput
    from xlnet_tf.training.loop import Trainer, TrainingOptions

    features = classification_rows(48, 32, 0.1, seed=3)
    strata = buckets.stratify(features["length"], 8, 32, "16")  # two parts: widths 16 and 32
    plan = buckets.training_plan(strata, 8, seed=3)
    inputs = TaskInput(features, INPUTS["classification"] + LABELS["classification"], "classification", plan)
    keras.utils.set_random_seed(2)
    options = TrainingOptions(train_steps=8, batch_size=8, learning_rate=1e-3, jit_compile=True)
    build = lambda: build_head_model("classification", tiny_config(n_layer=1),  # noqa: E731
                                     RunOptions(dropout=0.0, dropatt=0.0), num_labels=2)
    trainer = Trainer(tf.distribute.OneDeviceStrategy("/cpu:0"), build, classification_loss, None, options,
                      model_dir, inputs=inputs)
    return trainer, len(strata.widths)


@pytest.fixture
def autograph_conversions(monkeypatch):
    """The project's functions autograph converts while the test runs -> a list the test reads at its end.

    Every function autograph converts goes through `converted_call` (a `tf.function` traced with autograph,
    `strategy.run` and `tf.data`'s map each call it with the user's function; cached conversions too). Nothing
    in the project needs autograph: its loops are `tf.while_loop`s and its branches `tf.cond`s, and each
    conversion costs a cold process tenths of a second (a cold 10-step fine-tune: about 1 s of its 9)."""
    from tensorflow.python.autograph.impl import api

    converted, original = [], api.converted_call

    def spy(f, args, kwargs, caller_fn_scope=None, options=None):
        module = getattr(f, "__module__", None) or ""
        if module.split(".")[0] in ("xlnet_tf", "export", "serving"):
            converted.append(f"{module}.{getattr(f, '__qualname__', f)}")
        return original(f, args, kwargs, caller_fn_scope, options)

    monkeypatch.setattr(api, "converted_call", spy)
    return converted


def check_nothing_converted(converted, what):
    print(f"{what}: functions of the project autograph converted {sorted(set(converted))} (bound none)")
    assert not converted


class Calls:
    """Counts the host loop's `strategy.run` / `strategy.reduce` calls and records the size (number of tensors) of
    every replica-context all-reduce, while the step is traced."""

    def __init__(self, monkeypatch, strategy):
        self.runs, self.reduces, self.all_reduces = 0, 0, []
        run, reduce, all_reduce = strategy.run, strategy.reduce, tf.distribute.ReplicaContext.all_reduce

        def counted_run(*args, **kwargs):
            self.runs += 1
            return run(*args, **kwargs)

        def counted_reduce(*args, **kwargs):
            self.reduces += 1
            return reduce(*args, **kwargs)

        def recorded_all_reduce(context, reduce_op, value, options=None):
            self.all_reduces.append(len(tf.nest.flatten(value)))
            return all_reduce(context, reduce_op, value, options)

        monkeypatch.setattr(strategy, "run", counted_run)
        monkeypatch.setattr(strategy, "reduce", counted_reduce)
        monkeypatch.setattr(tf.distribute.ReplicaContext, "all_reduce", recorded_all_reduce)


def host_and_compiled_ops(trainer, iterator, mems):
    """(op types the traced host loop runs outside XLA functions, the XLA functions it calls, the ops inside them
    with every call expanded: one entry per op a call site runs) from the host loop's graph and its library."""
    graph = trainer._train_loop.get_concrete_function(iterator, mems, tf.constant(1)).graph.as_graph_def()
    library = {f.signature.name: f for f in graph.library.function}

    def callees(node):
        return [name for value in node.attr.values() for name in [value.func.name, *(f.name for f in value.list.func)]
                if name]

    def expanded(name):
        return [op for node in library[name].node_def for op in [node.op, *(
            inner for callee in callees(node) for inner in expanded(callee))]]

    host, compiled, pending = {n.op for n in graph.node}, set(), [c for n in graph.node for c in callees(n)]
    while pending:
        name = pending.pop()
        if library[name].attr["_XlaMustCompile"].b:
            compiled.add(name)
            continue
        host |= {n.op for n in library[name].node_def}
        pending += [c for n in library[name].node_def for c in callees(n)]
    return host, compiled, [op for name in compiled for op in expanded(name)]


def check_one_compiled_step(trainer, monkeypatch, what, trained, accum):
    """Runs 3 then 2 steps; checks one `strategy.run` per step, no host-side reduce, one traced XLA program that
    holds the whole step, and the all-reduces (accum scalar loss weights + [loss, gradients])."""
    iterator, mems = trainer.data_iterator(), trainer.initial_mems()
    calls = Calls(monkeypatch, trainer.strategy)
    first = trainer.run_steps(iterator, mems, 3)
    second = trainer.run_steps(iterator, first[3], 2)
    losses = [float(first[0]), float(second[0])]
    steps, iterations = int(trainer.step.numpy()), int(trainer.optimizer.iterations.numpy())
    print(f"{what}: strategy.run calls while tracing the host loop {calls.runs} (bound 1: the loop body is one "
          f"optimizer step, run 3 then 2 times: global step {steps}, optimizer iterations {iterations}, bound 5 "
          f"each); strategy.reduce calls {calls.reduces} (bound 0); losses {np.round(losses, 4).tolist()}")
    assert calls.runs == 1 and calls.reduces == 0 and steps == iterations == 5 and all(np.isfinite(losses))
    programs = trainer.traced_programs()
    print(f"{what}: XLA-compiled replica step traced {programs} time(s) over 2 host calls (bound 1)")
    assert programs == 1
    gradient_reduces = [n for n in calls.all_reduces if n > 1]
    print(f"{what}: replica-context all-reduces (tensors each) {calls.all_reduces}: {accum} scalar loss weight(s) "
          f"and one of 1 + {trained} trained variables' gradients (bound: exactly one carries gradients, none from "
          f"keras' optimizer)")
    assert gradient_reduces == [1 + trained] and sorted(calls.all_reduces) == [1] * accum + [1 + trained]
    host, compiled, inside = host_and_compiled_ops(trainer, iterator, trainer.initial_mems())
    on_host = sorted(op for op in host if any(kind in op for kind in STEP_OPS))
    writes = sum(op in ("AssignVariableOp", "AssignAddVariableOp") for op in inside)
    print(f"{what}: the host loop calls {len(compiled)} XLA function(s) (bound 1); step ops outside it {on_host} "
          f"(bound none); inside it {writes} variable writes (bound >= 3 x {trained}: AdamW's variable, m, v), "
          f"{inside.count('MatMul')} matmuls and {sum('Random' in op for op in inside)} random draws")
    assert len(compiled) == 1 and not on_host and writes >= 3 * trained and "MatMul" in inside
    return inside


def test_pretraining_step_is_one_strategy_run_and_one_xla_function(tmp_path, monkeypatch, autograph_conversions):
    """Two streams, memory carried between the 2 micro-batches of a step, dropout on."""
    trainer = pretraining_trainer(tmp_path / "m")
    trained = len(trainer.model.trainable_variables)
    inside = check_one_compiled_step(trainer, monkeypatch, "pretraining", trained, accum=2)
    draws = sum("Random" in op for op in inside)
    print(f"pretraining, dropout 0.1: random draws (the masks) inside the compiled step {draws} (bound > 0; none "
          f"outside it, nor writes to the seed states)")
    assert draws > 0
    check_nothing_converted(autograph_conversions, "pretraining, the memory's start and the compiled step")


def test_finetuning_step_over_length_parts_is_one_strategy_run_and_one_xla_function(tmp_path, monkeypatch,
                                                                                   autograph_conversions):
    trainer, parts = finetuning_trainer(tmp_path / "f")
    # mask_emb (the query stream's) gets no gradient when fine-tuning: the step leaves it alone.
    trained = len(trainer.model.trainable_variables) - 1
    print(f"fine-tuning batches: {parts} length parts each (bound >= 2)")
    assert parts >= 2
    check_one_compiled_step(trainer, monkeypatch, "fine-tuning", trained, accum=1)
    check_nothing_converted(autograph_conversions, "fine-tuning over length parts, compiled")


def test_packed_steps_inference_and_generation_convert_nothing_with_autograph(tmp_path, autograph_conversions):
    """The paths the compiled steps above do not take: a packed fine-tuning input (its layouts and its map), the
    step without XLA, inference on one device, and generation's decoding loop."""
    import keras

    from xlnet_tf.config import RunOptions
    from xlnet_tf.data import buckets, packing
    from xlnet_tf.decoding import GenerationOptions, generate_ids
    from xlnet_tf.heads import classification_loss
    from xlnet_tf.model import XLNetPretrainer
    from xlnet_tf.tasks import build_head_model
    from xlnet_tf.training.finetune import INPUTS, LABELS, TaskInput, distributed_inference
    from xlnet_tf.training.loop import Trainer, TrainingOptions

    features = classification_rows(32, 24, 0.15, seed=4)
    plan = buckets.training_plan(buckets.stratify(features["length"], 8, 24, "none"), 8, seed=3)
    sequences = packing.sequence_lengths(features)
    packed = packing.packed_plan(plan, sequences, packing.choose_width(sequences, 24))
    inputs = TaskInput(features, INPUTS["classification"] + LABELS["classification"], "classification", plan, packed)
    keras.utils.set_random_seed(2)
    build = lambda: build_head_model("classification", tiny_config(n_layer=1),  # noqa: E731
                                     RunOptions(dropout=0.1, dropatt=0.1), num_labels=2)
    trainer = Trainer(tf.distribute.OneDeviceStrategy("/cpu:0"), build, classification_loss, None,
                      TrainingOptions(train_steps=2, batch_size=8, learning_rate=1e-3), tmp_path / "p", inputs=inputs)
    loss = float(trainer.run_steps(trainer.data_iterator(), trainer.initial_mems(), 2)[0])
    print(f"2 packed steps ({packed.shape.rows} rows of {packed.shape.width}) without XLA: loss {loss:.3f} (bound "
          f"finite)")
    assert np.isfinite(loss)
    rows = {k: features[k][:5] for k in INPUTS["classification"]}
    logits = distributed_inference(trainer.model, None, 0)(rows)["logits"]
    print(f"inference on one device: logits {logits.shape} (bound (5, 2))")
    assert logits.shape == (5, 2)
    pretrainer = XLNetPretrainer(tiny_config(n_layer=1), RunOptions(dropout=0.0, dropatt=0.0))
    out = generate_ids(pretrainer, np.array([[11, 12, 13], [0, 14, 15]], np.int32),
                       np.array([[1, 1, 1], [0, 1, 1]], np.int32), GenerationOptions(max_new_tokens=2))
    print(f"generation: {out['tokens'].shape} tokens (bound (2, 2))")
    assert out["tokens"].shape == (2, 2)
    check_nothing_converted(autograph_conversions, "packed steps, inference and generation")


def test_two_mirrored_replicas(tmp_path):
    """Per-replica dropout masks, reproducible and resumable runs, and one device's update, on 2 logical CPUs."""
    environment = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
    done = subprocess.run([sys.executable, __file__, str(tmp_path)], env=environment, capture_output=True, text=True,
                          timeout=240)
    assert done.returncode == 0, (done.stdout + done.stderr)[-4000:]
    found = json.loads(done.stdout.strip().splitlines()[-1])

    expected = found["expected_equal"]
    print(f"dropout 0.1 on 2 replicas: fraction of equal mask elements {found['equal_fraction']:.4f} (expected "
          f"{expected:.4f} = keep^2 + drop^2 for independent masks; bound [0.78, 0.86], 1.0 = the same masks)")
    assert 0.78 <= found["equal_fraction"] <= 0.86
    print(f"one replica: mask of the unfolded seed equals the layer's mask without a strategy: "
          f"{found['one_replica_same']} (bound True)")
    assert found["one_replica_same"]

    print(f"dropout 0.1, 2 replicas, the same seed: weights and optimizer state after 4 steps straight vs stopped at "
          f"step {found['stopped_at']} (bound 2) and resumed: max |diff| {found['resumed_diff']} (bound 0); seed "
          f"states equal on both replicas {found['seed_copies_equal']} (bound True), advanced by "
          f"{found['seed_advance']} (bound 4)")
    assert found["stopped_at"] == 2 and found["resumed_diff"] == 0
    assert found["seed_copies_equal"] and found["seed_advance"] == 4

    print(f"dropout 0, grad accumulation 2, global batch 8, clipping at 0.05 (grad norms {found['norms']}, one "
          f"device then 2 replicas): losses {found['losses_one']} vs {found['losses_two']}; weights after 2 steps "
          f"max |diff| {found['weights_diff']:.2e} (bound 1e-5); AdamW m and v max |diff| {found['moments_diff']:.2e} "
          f"(bound 1e-7; doubled gradients would differ by {found['moments_scale']:.1e}); the 2 replicas' copies of "
          f"the weights identical: {found['copies_equal']} (bound True)")
    assert found["weights_diff"] <= 1e-5 and found["moments_diff"] <= 1e-7 and found["copies_equal"]
    assert found["moments_scale"] > 1e-3 and min(found["norms"]) > 0.05
    print(f"2 replicas, tracing the host loop: strategy.run calls {found['runs']} (bound 1), strategy.reduce calls "
          f"{found['reduces']} (bound 0), all-reduces carrying gradients {found['gradient_all_reduces']} (bound 2: "
          f"one per replica, none from keras' optimizer)")
    assert found["runs"] == 1 and found["reduces"] == 0 and found["gradient_all_reduces"] == 2

    print(f"float16 ({found['fp16_compute']}), initial loss scale 2^28 (overflows), grown after 2 finite steps; "
          f"(step, scale, skipped) after each call on 2 replicas {found['fp16_log_two']} (one device: "
          f"{found['fp16_log_one']}); skipped on 2 replicas {found['fp16_skipped'][1]} (bound >= 3), steps applied "
          f"{found['fp16_steps']} (bound 6), weights moved from the initial ones by {found['fp16_changed']:.2e} (bound "
          f"> 0); the {found['fp16_copies']} replicas' copies of the scale, its counters and the weights identical: "
          f"{found['fp16_copies_equal']} (bound True)")
    assert found["fp16_compute"] == "float16" and found["fp16_skipped"][1] >= 3 and found["fp16_steps"] == 6
    assert found["fp16_copies"] == 2 and found["fp16_copies_equal"] and found["fp16_changed"] > 0


# -- the subprocess: two logical CPUs ---------------------------------------------------------------------------


def _mask_checks(strategy):
    """Masks of one Dropout layer on the 2 mirrored replicas; with one replica in sync (OneDeviceStrategy), the mask
    of a layer without any strategy."""
    from xlnet_tf.layers.dropout import Dropout

    ones = tf.ones([256, 256])
    one = tf.distribute.OneDeviceStrategy("/cpu:0")
    layers = {}
    for name, where in (("mirrored", strategy), ("one", one)):
        with where.scope():
            layers[name] = Dropout(0.1, seed=7)
    masks = tf.function(lambda: strategy.run(lambda: layers["mirrored"](ones, training=True)))()
    first, second = (t.numpy() != 0 for t in strategy.experimental_local_results(masks))
    under_one = tf.function(lambda: one.run(lambda: layers["one"](ones, training=True)))().numpy() != 0
    plain = Dropout(0.1, seed=7)(ones, training=True).numpy() != 0
    keep = 1 - layers["one"].effective_rate
    return {"equal_fraction": float(np.mean(first == second)), "expected_equal": keep ** 2 + (1 - keep) ** 2,
            "one_replica_same": bool(np.array_equal(under_one, plain))}


def _tiny_classifier(rate, dtype=None):
    """Embedding -> Dropout(rate) -> mean -> Dense: a model whose training call is little more than its masks
    (`dtype`: a Keras dtype policy name, e.g. "mixed_float16"; logits in float32)."""
    import keras

    from xlnet_tf.layers.dropout import Dropout

    ids = keras.Input((SEQ,), dtype="int32", name="input_ids")
    hidden = Dropout(rate, dtype=dtype)(keras.layers.Embedding(64, 16, dtype=dtype)(ids))
    logits = keras.layers.Dense(2, dtype=dtype)(keras.ops.mean(hidden, axis=1))
    model = keras.Model({"input_ids": ids}, {"logits": keras.ops.cast(logits, "float32")})
    if dtype:  # a functional model keeps the global policy: the loop reads the model's own compute dtype
        model.dtype_policy = dtype
    return model


def _tiny_trainer(strategy, directory, rate, dtype=None, **options):
    import keras

    from xlnet_tf.heads import classification_loss
    from xlnet_tf.training.loop import Trainer, TrainingOptions

    rng = np.random.default_rng(5)
    examples = {"input_ids": rng.integers(0, 64, size=(32, SEQ)).astype(np.int32),
                "label_ids": rng.integers(0, 2, size=32).astype(np.int32)}
    keras.utils.set_random_seed(4)
    options = TrainingOptions(batch_size=8, learning_rate=1e-2, save_every=2, steps_per_loop=1, **options)
    return Trainer(strategy, lambda: _tiny_classifier(rate, dtype), classification_loss, stream(examples, 8), options,
                   directory)


def _resume_checks(strategy, root):
    def train(directory, stop_after=None):
        trainer = _tiny_trainer(strategy, directory, 0.1, train_steps=4)
        counts = trainer.inputs.token_counts

        def stop_after_step(first_step, end_step):  # as SIGTERM would: the loop saves and stops
            if stop_after is not None and end_step >= stop_after:
                trainer._on_signal(signal.SIGTERM, None)
            return counts(first_step, end_step)

        trainer.inputs.token_counts = stop_after_step
        trainer.train()
        return trainer

    straight = train(root / "straight")
    stopped = int(train(root / "resumed", stop_after=2).step.numpy())
    resumed = train(root / "resumed")
    diff = largest(straight.model.weights + straight.optimizer.variables,
                   resumed.model.weights + resumed.optimizer.variables)
    seeds = [v for v in straight.model.variables if "seed_generator" in v.path]
    copies = [[c.numpy() for c in v.value.values] for v in seeds]
    return {"resumed_diff": diff, "stopped_at": stopped, "seed_advance": int(copies[0][0][1]),
            "seed_copies_equal": all(np.array_equal(a, b) for a, b in copies)}


def _one_device_update_checks(strategy, root):
    """Dropout 0, 2 micro-batches per step, clipping by a norm below the gradients' (so that it acts)."""
    options = dict(train_steps=2, grad_accum_steps=2, clip_norm=0.05)
    one = _tiny_trainer(tf.distribute.OneDeviceStrategy("/cpu:0"), root / "one", 0.0, **options)
    two = _tiny_trainer(strategy, root / "two", 0.0, **options)
    with pytest.MonkeyPatch.context() as monkeypatch:
        calls = Calls(monkeypatch, strategy)
        records_two = two.train()
    records_one = one.train()

    def moments(trainer):
        return [v for v in trainer.optimizer.variables if v.path.endswith(("momentum", "velocity"))]

    copies = [[c.numpy() for c in v.value.values] for v in two.model.weights]
    return {"losses_one": [round(r["loss"], 6) for r in records_one],
            "losses_two": [round(r["loss"], 6) for r in records_two],
            "norms": [round(r["grad_norm"], 4) for r in records_one + records_two],
            "weights_diff": largest(one.model.weights, two.model.weights),
            "moments_diff": largest(moments(one), moments(two)),
            "moments_scale": max(float(np.max(np.abs(v.numpy()))) for v in moments(one)),
            "copies_equal": all(np.array_equal(a, b) for a, b in copies),
            "gradient_all_reduces": sum(n > 1 for n in calls.all_reduces), "runs": calls.runs,
            "reduces": calls.reduces}


def _float16_checks(strategy, root):
    """float16 with dynamic loss scaling from a scale that overflows (2^28, doubled after 2 finite steps) on 2
    replicas: the steps skipped and the scale after each step, and the replicas' copies of the scale, its counters
    and the weights (a replica that skipped a step the other applied would leave different weights). One device
    for comparison: its batch of 8 rows is 2 x 4 there, so its gradients overflow at other scales (not compared)."""
    options = dict(train_steps=6, initial_loss_scale=2.0 ** 28, loss_scale_growth_steps=2)
    one = _tiny_trainer(tf.distribute.OneDeviceStrategy("/cpu:0"), root / "fp16-one", 0.0, "mixed_float16", **options)
    two = _tiny_trainer(strategy, root / "fp16-two", 0.0, "mixed_float16", **options)
    logs = []
    for trainer in (one, two):
        trainer.train()
        logs.append([(r["step"], r["loss_scale"], r["skipped_steps"])
                     for r in map(json.loads, open(os.path.join(trainer.model_dir, "train_log.jsonl")))])
    copies = [[c.numpy() for c in v.values] for v in (two.loss_scale, two.good_steps, two.skipped_steps)]
    copies += [[c.numpy() for c in v.value.values] for v in two.model.weights]
    return {"fp16_log_one": logs[0], "fp16_log_two": logs[1], "fp16_skipped": [one.skipped(), two.skipped()],
            "fp16_copies": len(copies[0]), "fp16_copies_equal": all(np.array_equal(c[0], c[-1]) for c in copies),
            "fp16_steps": int(two.step.numpy()), "fp16_compute": two.model.compute_dtype,
            "fp16_changed": largest(two.model.weights, _tiny_trainer(tf.distribute.OneDeviceStrategy("/cpu:0"),
                                                                      root / "fp16-init", 0.0, "mixed_float16",
                                                                      **options).model.weights)}


def largest(first, second):
    """Max |a - b| over pairs of variables."""
    assert len(first) == len(second)
    return max(float(np.max(np.abs(np.asarray(a.numpy(), np.float64) - b.numpy()))) for a, b in zip(first, second))


if __name__ == "__main__":
    import pathlib

    from xlnet_tf.training import strategies

    mirrored = strategies.make_strategy("mirrored", cpu_devices=2)
    assert mirrored.num_replicas_in_sync == 2
    folder = pathlib.Path(sys.argv[1])
    print(json.dumps({**_mask_checks(mirrored), **_resume_checks(mirrored, folder),
                      **_one_device_update_checks(mirrored, folder), **_float16_checks(mirrored, folder)}))
