"""keras-hub's runner: `keras_hub.models.XLNetBackbone` (Keras 3 on TensorFlow), tasks "inference" and "finetune".

The backbone's inputs are token_ids, segment_ids and padding_mask with 1 = real token, as ours
(`XLNetAttentionMaskLayer` turns it into XLNet's 1 = padding). It runs the content stream only (no perm_mask or
target_mapping input, no LM head), hence no "pretrain"; its head size is hidden_dim // num_heads, its r biases are
per layer (`XLNetEncoder`), and it has no memory and no attention-probability dropout.
"""

from __future__ import annotations

from xlnet_tf.benchmarks.common import (
    Case, ReferenceMissing, Unsupported, keras_dtype, require_split_heads, synthetic_batch, time_case,
)

TASKS = ("inference", "finetune")
SEED = 0
TRAINING_DROPOUT = 0.1
NUM_CLASSES = 2


def run(case: Case) -> dict:
    """Times `case` on keras-hub's XLNet -> {"seconds", "note"} (+ "loss_first", "loss_last" for finetune)."""
    try:
        import keras_hub  # noqa: F401
    except ImportError as error:
        raise ReferenceMissing(f"keras-hub is not installed: {error}") from error
    _check(case)
    import keras
    import tensorflow as tf

    keras.utils.set_random_seed(SEED)
    features = synthetic_batch(case)
    inputs = {
        "token_ids": tf.constant(features["input_ids"]),
        "segment_ids": tf.constant(features["segment_ids"]),
        "padding_mask": tf.constant(features["padding_mask"]),
    }
    note = f"tf.function{', XLA' if case.xla else ''}"
    return time_case(
        case, lambda: _inference_step(case, inputs),
        lambda losses: _finetune_step(case, inputs, tf.constant(features["label_ids"]), losses),
        f"{note}, backbone(training=False)", f"{note}, GradientTape + Keras AdamW (global_clipnorm 1.0)")


def _check(case):
    """Raises Unsupported for what keras-hub's XLNet cannot run."""
    if case.task not in TASKS:
        raise Unsupported(f"keras-hub runs {TASKS} only: XLNetBackbone has no two-stream (perm_mask / "
                         f"target_mapping) input and no LM head, so no {case.task!r}")
    if case.precision not in ("float32", "bfloat16"):
        raise Unsupported(f"keras-hub runner supports float32 and bfloat16, not {case.precision!r}")
    require_split_heads(case, "keras-hub's XLNetBackbone")


def _backbone(case, dropout):
    """A randomly initialized XLNetBackbone with `case`'s architecture (GELU, bi-directional, no memory)."""
    import keras_hub

    dims = case.dims
    return keras_hub.models.XLNetBackbone(
        vocabulary_size=dims["n_token"], num_layers=dims["n_layer"], num_heads=dims["n_head"],
        hidden_dim=dims["d_model"], intermediate_dim=dims["d_inner"], dropout=dropout, activation="gelu",
        dtype=keras_dtype(case))


def _inference_step(case, inputs):
    """The encoder forward; the step blocks by fetching the last hidden states."""
    import tensorflow as tf

    backbone = _backbone(case, dropout=0.0)
    forward = tf.function(lambda batch: backbone(batch, training=False), jit_compile=case.xla)
    return lambda: forward(inputs).numpy()


def _classifier(case):
    """Backbone + XLNet's sequence summary of the last token (dense tanh, dropout) + dense to NUM_CLASSES."""
    import keras

    backbone = _backbone(case, dropout=TRAINING_DROPOUT)
    dtype = keras_dtype(case)
    last = backbone.output[:, -1, :]
    summary = keras.layers.Dense(case.dims["d_model"], activation="tanh", dtype=dtype, name="summary")(last)
    summary = keras.layers.Dropout(TRAINING_DROPOUT, dtype=dtype)(summary)
    logits = keras.layers.Dense(NUM_CLASSES, dtype=dtype, name="logits")(summary)
    return keras.Model(backbone.input, logits)


def _finetune_step(case, inputs, labels, losses):
    """One classification step (cross-entropy, gradients, AdamW with global-norm clipping at 1.0); the step
    blocks by fetching the loss, which it appends to `losses`."""
    import keras
    import tensorflow as tf

    model = _classifier(case)
    optimizer = keras.optimizers.AdamW(learning_rate=2e-5, weight_decay=0.01, epsilon=1e-6, global_clipnorm=1.0)
    optimizer.build(model.trainable_variables)

    @tf.function(jit_compile=case.xla)
    def train_step(batch, targets):
        with tf.GradientTape() as tape:
            logits = tf.cast(model(batch, training=True), tf.float32)
            loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(targets, logits))
        gradients = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(gradients, model.trainable_variables))
        return loss

    return lambda: losses.append(float(train_step(inputs, labels)))
