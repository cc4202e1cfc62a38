"""TensorFlow Model Garden's runner: `official.nlp.modeling.networks.XLNetBase` and `models.XLNetPretrainer`
(tf_keras), tasks "inference" and "pretrain".

Model Garden's masks mean 1 = may attend (`_compute_attention_mask` combines them with "and", and the
`MaskedSoftmax` adds -1e9 where the mask is 0; the pretraining data's `_get_factorization` builds
permutation_mask that way): input_mask is our padding_mask as is, and permutation_mask is 1 - our perm_mask.
`XLNetPretrainer.call` passes input_mask=None, so the padding is folded into permutation_mask. Its LM head
(`XLNetMaskedLM`) adds a dense + LayerNorm transform before the tied embedding and returns logits only; the loss
is computed here.
"""

from __future__ import annotations

from xlnet_tf.benchmarks.common import Case, ReferenceMissing, Unsupported, synthetic_batch, time_case

TASKS = ("inference", "pretrain")
SEED = 0
TRAINING_DROPOUT = 0.1


def run(case: Case) -> dict:
    """Times `case` on Model Garden's XLNet -> {"seconds", "note"} (+ "loss_first", "loss_last" for pretrain)."""
    try:
        from official.nlp.modeling import models  # noqa: F401
    except ImportError as error:
        raise ReferenceMissing(f"tf-models-official is not installed: {error}") from error
    _check(case)
    import tensorflow as tf

    tf.random.set_seed(SEED)
    features = {name: tf.constant(value) for name, value in synthetic_batch(case).items()}
    note = f"tf.function{', XLA' if case.xla else ''}"
    return time_case(
        case, lambda: _inference_step(case, features), lambda losses: _pretrain_step(case, features, losses),
        f"{note}, XLNetBase(training=False)", f"{note}, XLNetPretrainer + tf_keras AdamW (global_clipnorm 1.0)")


def _check(case):
    """Raises Unsupported for what this runner does not measure."""
    if case.task not in TASKS:
        raise Unsupported(f"the Model Garden runner measures {TASKS} only, not {case.task!r}")
    if case.precision != "float32":
        raise Unsupported(f"the Model Garden runner supports float32 only, not {case.precision!r}: under "
                         "tf_keras' mixed_bfloat16 policy XLNetBase's RelativePositionEncoding fails "
                         "(float32 positions into a bfloat16 einsum)")


def _encoder(case, dropout, two_stream):
    """A randomly initialized XLNetBase with `case`'s architecture: GELU, bi-directional attention, untied
    r biases, no memory."""
    import tf_keras
    from official.nlp.modeling import networks

    dims = case.dims
    return networks.XLNetBase(
        vocab_size=dims["n_token"], num_layers=dims["n_layer"], hidden_size=dims["d_model"],
        num_attention_heads=dims["n_head"], head_size=dims["d_head"], inner_size=dims["d_inner"],
        dropout_rate=dropout, attention_dropout_rate=dropout, attention_type="bi", bi_data=False,
        initializer=tf_keras.initializers.RandomNormal(stddev=0.02, seed=SEED), two_stream=two_stream,
        tie_attention_biases=False, memory_length=None, inner_activation="gelu")


def _inference_step(case, features):
    """The encoder forward (content stream); the step blocks by fetching the last hidden states."""
    import tensorflow as tf

    encoder = _encoder(case, dropout=0.0, two_stream=False)

    @tf.function(jit_compile=case.xla)
    def forward(input_ids, segment_ids, input_mask):
        output, _ = encoder(input_ids=input_ids, segment_ids=segment_ids, input_mask=input_mask, training=False)
        return output

    input_mask = tf.cast(features["padding_mask"], tf.float32)
    return lambda: forward(features["input_ids"], features["segment_ids"], input_mask).numpy()


def _pretrainer_inputs(features):
    """XLNetPretrainer's input dict from our features (see the module docstring for the mask polarity)."""
    import tensorflow as tf

    padding = tf.cast(features["padding_mask"], tf.float32)
    return {
        "input_word_ids": features["input_ids"],
        "input_type_ids": features["segment_ids"],
        "permutation_mask": (1.0 - features["perm_mask"]) * padding[:, None, :],
        "target_mapping": features["target_mapping"],
        # Only needed to be present: with target_mapping the query stream starts from mask_emb.
        "masked_tokens": tf.reduce_sum(features["target_mapping"], axis=1),
    }


def _pretrain_step(case, features, losses):
    """One permutation-LM step (cross-entropy on the targets, gradients, AdamW with global-norm clipping at 1.0);
    the step blocks by fetching the loss, which it appends to `losses`."""
    import tensorflow as tf
    import tf_keras
    from official.nlp.modeling import models

    model = models.XLNetPretrainer(network=_encoder(case, dropout=TRAINING_DROPOUT, two_stream=True))
    inputs = _pretrainer_inputs(features)
    model(inputs, training=False)  # creates the variables (some are added on the first call) outside the step
    # tf_keras optimizers update tf_keras variables; the optimizer's own jit_compile follows the case's.
    optimizer = tf_keras.optimizers.AdamW(learning_rate=2e-5, weight_decay=0.01, epsilon=1e-6,
                                          global_clipnorm=1.0, jit_compile=case.xla)
    targets, weights = features["target_ids"], features["target_mask"]

    @tf.function(jit_compile=case.xla)
    def train_step(batch):
        with tf.GradientTape() as tape:
            logits, _ = model(batch, training=True)
            per_target = tf.nn.sparse_softmax_cross_entropy_with_logits(targets, tf.cast(logits, tf.float32))
            loss = tf.reduce_sum(per_target * weights) / tf.reduce_sum(weights)
        gradients = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(gradients, model.trainable_variables))
        return loss

    return lambda: losses.append(float(train_step(inputs)))
