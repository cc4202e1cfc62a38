"""Fine-tuning heads: converted from transformers (and from the published TF1 head names) they give
transformers' outputs; layer-wise learning-rate decay is what the optimizer applies."""

import json
import os

import numpy as np
import pytest
import tensorflow as tf
from safetensors.numpy import load_file

from test_official_checkpoint import published_variables, write_tf1_checkpoint
from xlnet_tf.cli import main
from xlnet_tf.tasks import load_finetuned, read_finetune_config

FIXTURES = os.path.join(os.path.dirname(__file__), "fixtures", "transformers")
HEADS = {case["name"]: case for case in json.load(open(os.path.join(FIXTURES, "cases.json")))["heads"]}
TOLERANCE = 1e-4
ENCODER = ("input_ids", "segment_ids", "padding_mask")


def check(name, got, want, bound=TOLERANCE):
    diff = float(np.max(np.abs(np.asarray(got, np.float64) - np.asarray(want, np.float64))))
    print(f"{name}: max|diff| = {diff:.2e} (bound {bound:.0e})")
    assert diff <= bound, name


def convert(tmp_path, head):
    out = str(tmp_path / head)
    assert main(["convert", "huggingface", os.path.join(FIXTURES, HEADS[head]["dir"]), out, "--max-seq-len", "128"]) == 0
    return out


def arrays(head):
    return dict(np.load(os.path.join(FIXTURES, HEADS[head]["file"])))


@pytest.mark.parametrize("head", ["classification", "regression", "multiple_choice"])
def test_summary_heads_match_transformers(tmp_path, head):
    directory = convert(tmp_path, head)
    model, finetune = load_finetuned(directory, dropout=0.0, dropatt=0.0)
    expected_task = {"classification": "classification", "regression": "regression", "multiple_choice": "race"}[head]
    assert finetune["task"] == expected_task and finetune["max_seq_len"] == 128
    data = arrays(head)
    outputs = model({k: data[k] for k in ENCODER}, training=False)
    check(f"{head}/logits", outputs["predictions" if head == "regression" else "logits"], data["logits"])
    if head == "classification":
        assert finetune["num_labels"] == 3 and len(finetune["label_names"]) == 3


def test_squad_head_matches_transformers(tmp_path):
    model, finetune = load_finetuned(convert(tmp_path, "qa"), dropout=0.0, dropatt=0.0)
    assert finetune["task"] == "squad" and finetune["start_n_top"] == 5
    data = arrays("qa")
    inputs = {k: data[k] for k in ENCODER + ("p_mask", "cls_index")}
    inference = model(inputs, training=False)
    check("qa/start_logits (masked)", inference["start_logits"], data["start_logits_masked"])
    assert np.array_equal(inference["start_top_index"], data["start_top_index"])
    # transformers returns probabilities (not log-probabilities) and orders the end candidates end-major.
    check("qa/start_top_probs", np.exp(inference["start_top_log_probs"]), data["start_top_log_probs"])
    theirs = lambda a: np.asarray(a).reshape(3, 5, 5).transpose(0, 2, 1).reshape(3, 25)  # noqa: E731
    assert np.array_equal(inference["end_top_index"], theirs(data["end_top_index"]))
    check("qa/end_top_probs", np.exp(inference["end_top_log_probs"]), theirs(data["end_top_log_probs"]))
    check("qa/cls_logits", inference["cls_logits"], data["cls_logits"])
    training = model(dict(inputs, start_positions=data["start_positions"]), training=False)
    check("qa/end_logits (gold start)", training["end_logits"], data["end_logits_masked_gold_start"])
    # The original (and we) feed answerability the start-probability-weighted state in training too.
    check("qa/cls_logits (training path)", training["cls_logits"], data["cls_logits"])


def test_multi_label_head_matches_transformers(tmp_path):
    """problem_type multi_label_classification converts to the multi-label task: sigmoid scores and the binary
    cross-entropy equal transformers'."""
    import tensorflow as tf

    from xlnet_tf.heads import multi_label_loss

    model, finetune = load_finetuned(convert(tmp_path, "multi_label"), dropout=0.0, dropatt=0.0)
    assert finetune["task"] == "multi-label" and finetune["num_labels"] == 4 and finetune["thresholds"] == [0.5] * 4
    data = arrays("multi_label")
    logits = model({k: data[k] for k in ENCODER}, training=False)["logits"]
    check("multi_label/sigmoid scores", tf.sigmoid(logits), data["scores"])
    total, count = multi_label_loss({"logits": logits}, {"label_ids": data["labels"]})
    check("multi_label/loss (BCE, mean over examples and labels)", float(total / count), data["loss"], 1e-5)


def test_simple_squad_head_matches_transformers(tmp_path):
    """XLNetForQuestionAnsweringSimple converts to `--squad-head simple`: start / end logits equal transformers'
    at every real position; its candidates are paragraph positions scored by those logits."""
    from xlnet_tf.heads import simple_squad_loss

    model, finetune = load_finetuned(convert(tmp_path, "qa_simple"), dropout=0.0, dropatt=0.0)
    assert finetune["task"] == "squad" and finetune["squad_head"] == "simple" and finetune["start_n_top"] == 20
    data = arrays("qa_simple")
    inputs = {k: data[k] for k in ENCODER + ("p_mask", "cls_index")}
    out = model(inputs, training=False)
    real = data["padding_mask"] > 0
    for name in ("start_logits", "end_logits"):
        check(f"qa_simple/{name} at real positions", np.asarray(out[name])[real], data[name][real])
    paragraph = data["p_mask"] == 0
    index = np.asarray(out["start_top_index"])
    inside = [bool(paragraph[b, i]) for b in range(3) for i in index[b, :int(paragraph[b].sum())]]
    print(f"top starts inside the paragraph or <cls>: {sum(inside)} of {len(inside)} (bound all)")
    assert all(inside)
    check("qa_simple/cls_logits = start + end logit at <cls>", out["cls_logits"],
          data["start_logits"][:, -1] + data["end_logits"][:, -1])
    # the loss over real positions (transformers' softmax also spans the padding: its loss is not the same)
    total, count = simple_squad_loss(model(dict(inputs, start_positions=data["start_positions"]), training=False),
                                     {"start_positions": data["start_positions"], "end_positions": data["end_positions"]})

    def cross_entropy(logits, labels):
        z = np.where(real, logits, -np.inf)
        z = z - z.max(1, keepdims=True)
        return -(z[np.arange(3), labels] - np.log(np.exp(z).sum(1)))

    want = np.mean((cross_entropy(data["start_logits"], data["start_positions"])
                    + cross_entropy(data["end_logits"], data["end_positions"])) / 2)
    check("qa_simple/loss over real positions", float(total / count), want, 1e-5)
    print(f"transformers' loss (its softmax over the padding too): {float(data['loss']):.6f}")


def official_head_names(weight_dir, head):
    """transformers head tensors -> the published run_classifier / run_squad / run_race variable names."""
    t = load_file(os.path.join(weight_dir, "model.safetensors"))

    def linear(theirs, ours, bias=True):
        out = {f"{ours}/kernel": t[f"{theirs}.weight"].T}
        if bias:
            out[f"{ours}/bias"] = t[f"{theirs}.bias"]
        return out

    if head == "qa":
        names = {**linear("start_logits.dense", "start_logits/dense"), **linear("end_logits.dense_0", "end_logits/dense_0"),
                 **linear("end_logits.dense_1", "end_logits/dense_1"),
                 **linear("answer_class.dense_0", "answer_class/dense_0"),
                 **linear("answer_class.dense_1", "answer_class/dense_1", bias=False),
                 "end_logits/LayerNorm/gamma": t["end_logits.LayerNorm.weight"],
                 "end_logits/LayerNorm/beta": t["end_logits.LayerNorm.bias"]}
        return names
    names = linear("sequence_summary.summary", "model/sequnece_summary/summary")
    target = {"classification": "classification_mnli/logit", "regression": "regression_sts-b/logit",
              "multiple_choice": "logits/dense"}[head]
    names.update(linear("logits_proj", target))
    return names


@pytest.mark.parametrize("head", ["classification", "qa"])
def test_published_fine_tuned_heads_convert(tmp_path, head):
    weight_dir = os.path.join(FIXTURES, HEADS[head]["dir"])
    variables, official_config = published_variables(weight_dir)
    assert "model/lm_loss/bias" not in variables  # fine-tuned checkpoints have no LM head
    variables.update(official_head_names(weight_dir, head))
    prefix = str(tmp_path / "ckpt" / "model.ckpt")
    write_tf1_checkpoint(variables, prefix)
    (tmp_path / "xlnet_config.json").write_text(json.dumps(official_config))
    out = str(tmp_path / "converted")
    assert main(["convert", "official", prefix, out, "--config", str(tmp_path / "xlnet_config.json")]) == 0
    model, finetune = load_finetuned(out, dropout=0.0, dropatt=0.0)
    data = arrays(head)
    if head == "qa":
        outputs = model({k: data[k] for k in ENCODER + ("p_mask", "cls_index")})
        check("official qa/cls_logits", outputs["cls_logits"], data["cls_logits"])
        check("official qa/start_logits", outputs["start_logits"], data["start_logits_masked"])
    else:
        assert read_finetune_config(out)["num_labels"] == 3
        check("official classification/logits", model({k: data[k] for k in ENCODER})["logits"], data["logits"])


def test_layer_decay_is_applied_to_learning_rates():
    """Inspect the optimizer: every variable's effective rate is lr * decay^(n_layer - m)."""
    from conftest import tiny_config
    from xlnet_tf.config import RunOptions
    from xlnet_tf.heads import XLNetForSequenceClassification
    from xlnet_tf.training.optimization import XLNetAdamW, layer_decay_multiplier

    model = XLNetForSequenceClassification(tiny_config(n_layer=3), RunOptions(dropout=0.0, dropatt=0.0), num_labels=2)
    decay, lr = 0.5, 0.1
    optimizer = XLNetAdamW(learning_rate=lr, weight_decay=0.0, lr_multiplier=lambda p: layer_decay_multiplier(p, 3, decay))
    optimizer.build(model.trainable_variables)
    expected = {"transformer/word_embedding": decay ** 3, "transformer/layer_0/": decay ** 2,
                "transformer/layer_1/": decay ** 1, "transformer/layer_2/": 1.0, "transformer/seg_embed": decay ** 3,
                "logits_proj/": 1.0, "sequence_summary/": 1.0}
    seen = {}
    for variable in model.trainable_variables:
        for prefix, factor in expected.items():
            if variable.path.startswith(prefix):
                assert optimizer.factor(variable) == factor, variable.path
                seen[prefix] = factor
    print(f"layer-decay factors checked for {sorted(seen)} (expected {expected})")
    assert seen == expected
    # And it is the learning rate, not the gradient, that is scaled: with SGD-like first steps of Adam
    # (update = lr * m / (sqrt(v) + eps) = lr * sign(g) for the first step) each group moves by lr * factor.
    before = {v.path: v.numpy().copy() for v in model.trainable_variables}
    optimizer.apply([tf.ones_like(v) for v in model.trainable_variables], model.trainable_variables)
    for variable in model.trainable_variables:
        step = float(np.max(np.abs(before[variable.path] - variable.numpy())))
        want = lr * optimizer.factor(variable)
        assert abs(step - want) <= 1e-3 * want, (variable.path, step, want)
    print("first Adam step moved every variable by lr * factor (bound: relative error 1e-3)")


def test_fused_adamw_equals_keras_adamw():
    """XLNetAdamW's compiled update takes the same steps as keras' AdamW arithmetic (decoupled weight decay first,
    skipped for biases and LayerNorm; bias correction, epsilon outside the square root; layer factors)."""
    import keras

    from xlnet_tf.training.optimization import XLNetAdamW

    rng = np.random.default_rng(7)
    shapes = {"dense/kernel": (20, 12), "dense/bias": (12,), "layer_norm/gamma": (12,)}
    initial = {name: rng.normal(size=shape).astype(np.float32) for name, shape in shapes.items()}
    gradients = [[rng.normal(size=shape).astype(np.float32) for shape in shapes.values()] for _ in range(4)]

    def train(fused):
        variables = [keras.Variable(initial[name], name=name.replace("/", "_")) for name in shapes]
        optimizer = XLNetAdamW(learning_rate=0.05, weight_decay=0.1, epsilon=1e-6,
                               lr_multiplier=lambda path: 0.5 if "kernel" in path else 1.0)
        optimizer.build(variables)
        if not fused:  # the decay written out, then keras' own Adam step, with the same learning-rate factor
            def reference_step(gradient, variable, learning_rate):
                learning_rate = learning_rate * optimizer.factor(variable)
                if "bias" not in variable.name and "layer_norm" not in variable.name:
                    variable.assign_sub(variable * (learning_rate * 0.1))
                keras.optimizers.AdamW.update_step(optimizer, gradient, variable, learning_rate)

            optimizer.update_step = reference_step
        step = tf.function(lambda grads: optimizer.apply(grads, variables))
        for grads in gradients:
            step([tf.constant(g) for g in grads])
        return [v.numpy() for v in variables]

    fused, reference = train(True), train(False)
    diff = max(float(np.max(np.abs(a - b))) for a, b in zip(fused, reference))
    moved = min(float(np.max(np.abs(a - initial[name]))) for a, name in zip(fused, shapes))
    print(f"fused vs keras AdamW after 4 steps: max |diff| {diff:.1e} (bound 1e-5); smallest move {moved:.3f} (bound > 0.05)")
    assert diff <= 1e-5
    assert moved > 0.05


def test_adamw_builds_its_step_scalars_once_per_step():
    """The learning rate, Adam's bias corrections, betas and epsilon are the same for every variable of a step: a
    traced `apply` builds them once (two `Pow` ops, whatever the number of variables), not once per variable, and
    the updates are those of eager steps, which build them per variable."""
    import keras

    from xlnet_tf.training.optimization import XLNetAdamW

    rng = np.random.default_rng(3)
    shapes = [(6, 4), (4,), (3, 5), (5,), (2, 2, 3)]
    initial = [rng.normal(size=shape).astype(np.float32) for shape in shapes]
    gradients = [[rng.normal(size=shape).astype(np.float32) for shape in shapes] for _ in range(3)]

    def train(traced):
        variables = [keras.Variable(value, name=f"kernel_{i}") for i, value in enumerate(initial)]
        optimizer = XLNetAdamW(learning_rate=0.05, weight_decay=0.1, lr_multiplier=lambda path: 0.5)
        optimizer.build(variables)
        step = tf.function(lambda grads: optimizer.apply(grads, variables)) if traced else (
            lambda grads: optimizer.apply(grads, variables))
        for grads in gradients:
            step([tf.constant(g) for g in grads])
        pows = sum(op.type == "Pow" for op in step.get_concrete_function(
            [tf.TensorSpec(s, tf.float32) for s in shapes]).graph.get_operations()) if traced else None
        return [v.numpy() for v in variables], pows

    (traced, pows), (eager, _) = train(True), train(False)
    diff = max(float(np.max(np.abs(a - b))) for a, b in zip(traced, eager))
    print(f"Pow ops in a traced step over {len(shapes)} variables: {pows} (bound 2); traced vs eager updates after "
          f"3 steps: max |diff| {diff:.1e} (bound 0)")
    assert pows == 2 and diff == 0.0


def test_names_moved_to_tasks_still_import_from_their_old_modules():
    """build_head_model / read_finetune_config / load_finetuned moved to xlnet_tf.tasks, the task's decoders and
    TaskData to their task modules: the old imports give the same objects."""
    from xlnet_tf import heads, tasks
    from xlnet_tf.tasks import base, multi_label, squad, token_classification
    from xlnet_tf.training import finetune

    moved = [(heads, name, tasks) for name in heads.MOVED_TO_TASKS] + [
        (finetune, "TaskData", base), (finetune, "squad_predictions", squad),
        (finetune, "token_predictions", token_classification), (finetune, "multi_label_decisions", multi_label)]
    for old, name, new in moved:
        same = getattr(old, name) is getattr(new, name)
        print(f"{old.__name__}.{name} is {new.__name__}.{name}: {same} (bound True)")
        assert same
    with pytest.raises(AttributeError, match="no attribute 'not_a_name'"):
        heads.not_a_name  # noqa: B018
