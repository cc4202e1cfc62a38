"""Fine-tuning heads over XLNetModel, as the original: sequence summary, classification / regression, the
SQuAD span head with answerability, multiple choice (RACE), and token classification (transformers'
XLNetForTokenClassification: one tag per position). Each is a keras.Model whose encoder is
`self.transformer`, so encoder weights load from any pretrained directory.

Inputs are the encoder's (`input_ids`, `segment_ids`, `padding_mask`) plus, for SQuAD, `p_mask` [B, T]
(1 = cannot be in an answer) and `cls_index` [B]; multiple choice takes [B, C, T] inputs.

Sequence heads (classification, regression, multi-label, multiple choice) also take packed rows
(`data.packing.pack_rows`): [R, W] encoder inputs with `example_ids`, [R, E] `cls_positions` and
`example_slots` ([B], or [B, C] for multiple choice), and return the same per-example outputs.
"""

from __future__ import annotations

import keras
import tensorflow as tf

import json
import logging
import os
import tempfile

from xlnet_tf.config import HEAD_RUN_OPTIONS, ConfigError, RunOptions, XLNetConfig, head_run_options
from xlnet_tf.layers.dropout import Dropout
from xlnet_tf import files
from xlnet_tf.lazy import lazy_getattr
from xlnet_tf.model import (RUN_OPTIONS_FILE, XLNetModel, layer_from_config, model_config, read_run_options,
                            restore_checkpoint, write_pretrained)

log = logging.getLogger(__name__)

ENCODER_INPUTS = ("input_ids", "segment_ids", "padding_mask", "example_ids")
MASKED = -1e30  # the original's masking constant; logits are float32


@keras.saving.register_keras_serializable(package="xlnet_tf")
class Dense(keras.layers.Layer):
    """x [..., d_in] -> [..., units], kernel [d_in, units] (+ bias), optional tanh; float32 or compute dtype."""

    def __init__(self, d_in, units, use_bias=True, activation=None, initializer_range=0.02, **kwargs):
        super().__init__(**kwargs)
        self.d_in, self.units, self.use_bias, self.activation = d_in, units, use_bias, activation
        self.initializer_range = initializer_range

    def build(self, input_shape=None):
        init = keras.initializers.RandomNormal(stddev=self.initializer_range)
        self.kernel = self.add_weight(name="kernel", shape=(self.d_in, self.units), initializer=init)
        self.bias = self.add_weight(name="bias", shape=(self.units,), initializer="zeros") if self.use_bias else None
        self.built = True

    def call(self, x):
        y = tf.matmul(x, tf.cast(self.kernel, x.dtype))
        if self.bias is not None:
            y += tf.cast(self.bias, x.dtype)
        return tf.tanh(y) if self.activation == "tanh" else y

    def get_config(self):
        config = super().get_config()
        config.update(d_in=self.d_in, units=self.units, use_bias=self.use_bias, activation=self.activation,
                      initializer_range=self.initializer_range)
        return config


@keras.saving.register_keras_serializable(package="xlnet_tf")
class SequenceSummary(keras.layers.Layer):
    """The original "last" summary: [B, T, d] -> [B, d] = dropout(tanh(W h_last + b)); h_last is the <cls>."""

    def __init__(self, d_model, dropout=0.0, initializer_range=0.02, **kwargs):
        super().__init__(**kwargs)
        self.d_model, self.dropout, self.initializer_range = d_model, dropout, initializer_range
        self.summary = Dense(d_model, d_model, activation="tanh", initializer_range=initializer_range,
                             name="summary", dtype=self.dtype_policy)
        self.drop = Dropout(dropout, dtype=self.dtype_policy)

    def build(self, input_shape=None):
        self.summary.build()
        self.built = True

    def call(self, hidden, training=False):
        return self.drop(self.summary(hidden[:, -1]), training=training)

    def get_config(self):
        config = super().get_config()
        config.update(d_model=self.d_model, dropout=self.dropout, initializer_range=self.initializer_range)
        return config


class _HeadModel(keras.Model):
    """Shared plumbing: the encoder, config round trip and pretrained directories."""

    head_kwargs = ()

    def __init__(self, config: XLNetConfig, run_options: RunOptions | None = None, **kwargs):
        head = {k: kwargs.pop(k) for k in self.head_kwargs if k in kwargs}
        super().__init__(**kwargs)
        self.config = config
        self.run_options = run_options or RunOptions()
        self.head_config = head
        encoder_options = self.run_options
        if head.get("segment_len"):
            if not head.get("mem_len", 0) > 0:
                raise ConfigError(f"segment_len {head['segment_len']} (long documents) needs mem_len > 0, "
                                  f"got {head.get('mem_len')!r}")
            encoder_options = encoder_options.replace(mem_len=head["mem_len"], reuse_len=0)
        self.transformer = XLNetModel(config, encoder_options, name="transformer", dtype=self.dtype_policy)
        self._sub = {"dtype": self.dtype_policy, "initializer_range": self.run_options.init_std(config.d_model)}

    def encode(self, inputs, training, output_positions=None):
        """The encoder's sequence_output [B, T, d] ([B, S, d] at `output_positions` [B, S])."""
        encoder_inputs = {k: inputs[k] for k in ENCODER_INPUTS if k in inputs}
        return self.transformer(encoder_inputs, training=training, output_positions=output_positions)[
            "sequence_output"
        ]

    def encode_last(self, inputs, training):
        """The encoder's output at the last position (the <cls>), [B, 1, d]: all the "last" summary reads, so
        the encoder's last layer computes only that row.

        With `segment_len` (long documents), rows of S * segment_len positions are read as S segments with
        Transformer-XL memory (`XLNetModel.encode_document`) and the last segment's <cls> is returned. Packed
        rows (`example_slots` in the inputs) give each sequence's <cls>, [n, 1, d] in `example_slots` order.
        """
        if "example_slots" in inputs:  # packed rows: the last layer computes each slot's <cls> only
            hidden = self.encode(inputs, training, output_positions=tf.cast(inputs["cls_positions"], tf.int32))
            hidden = tf.reshape(hidden, [-1, self.config.d_model])
            return tf.gather(hidden, tf.reshape(tf.cast(inputs["example_slots"], tf.int32), [-1]))[:, None]
        shape = tf.shape(inputs["input_ids"])
        segment_len = self.head_config.get("segment_len", 0)
        if not segment_len:
            return self.encode(inputs, training, output_positions=tf.fill([shape[0], 1], shape[1] - 1))
        encoder_inputs = {k: inputs[k] for k in ENCODER_INPUTS if k in inputs}
        return self.transformer.encode_document(encoder_inputs, segment_len, self.head_config.get("grad_segments", 0),
                                                training, output_positions=tf.fill([shape[0], 1], segment_len - 1))

    def build(self, input_shape=None):
        """Marks the model built: every weight is made in `__init__` (so a loaded model takes its weights at once)."""
        self.built = True

    # The encoder's mask_emb feeds only the pretraining query stream, which no head runs: it is not among the weights
    # Keras' `fit` trains (`trainable_weights`, which would warn that it has no gradient). It stays an encoder weight
    # under its checkpoint path, and in `trainable_variables`: the project's Trainer builds its optimizer from that
    # list, whose order its checkpoints' optimizer slots follow, and skips variables without gradient itself.
    @property
    def trainable_weights(self):
        return [v for v in super().trainable_weights if v is not self.transformer.mask_emb]

    @property
    def non_trainable_weights(self):
        trained = {id(v) for v in self.trainable_weights}
        return [v for v in self.weights if id(v) not in trained]

    def get_config(self):
        return {**model_config(self, super().get_config()), **self.head_config}

    @classmethod
    def from_config(cls, config):
        return layer_from_config(cls, config)

    def _checkpoint(self):
        return tf.train.Checkpoint(model=self)

    def load_encoder(self, path):
        """Initialises the encoder from a pretrained directory (the head keeps its initialisation). The run
        options it records are not read here: build the model with `finetune_run_options(path, ...)`."""
        from xlnet_tf.model import checkpoint_prefix

        status = tf.train.Checkpoint(model=tf.train.Checkpoint(transformer=self.transformer)).read(
            checkpoint_prefix(path)
        )
        status.expect_partial()
        status.assert_existing_objects_matched()


# Long documents (sequence heads): `segment_len` L > 0 reads rows of S * L positions as S segments, each attending
# to the memory of the ones before (`mem_len` positions per layer), memory keeping its gradient for the last
# `grad_segments` segments (0: all of them). The memory lives inside one document: run_options.mem_len (memory
# carried from batch to batch, as pretraining does) stays as given.
DOCUMENT_KWARGS = ("segment_len", "mem_len", "grad_segments")


@keras.saving.register_keras_serializable(package="xlnet_tf")
class XLNetForSequenceClassification(_HeadModel):
    """Classification (num_labels classes) or regression (num_labels = 1): `logits` [B, num_labels], or
    `predictions` [B] for regression. With `segment_len`, long documents are read with memory (`encode_last`)."""

    head_kwargs = ("num_labels", "regression") + DOCUMENT_KWARGS

    def __init__(self, config, run_options=None, num_labels=2, regression=False, **kwargs):
        super().__init__(config, run_options, num_labels=num_labels, regression=regression, **kwargs)
        self.num_labels = 1 if regression else num_labels
        self.regression = regression
        self.sequence_summary = SequenceSummary(config.d_model, self.run_options.dropout, name="sequence_summary",
                                                **self._sub)
        self.logits_proj = Dense(config.d_model, self.num_labels, name="logits_proj", **self._sub)
        self.sequence_summary.build()
        self.logits_proj.build()
        self.build()

    def call(self, inputs, training=False):
        summary = self.sequence_summary(self.encode_last(inputs, training), training=training)
        logits = tf.cast(self.logits_proj(summary), tf.float32)
        if self.regression:
            return {"predictions": logits[:, 0]}
        return {"logits": logits}


@keras.saving.register_keras_serializable(package="xlnet_tf")
class XLNetForMultipleChoice(_HeadModel):
    """Every option scored by one shared head: inputs [B, C, T] -> `logits` [B, C] (softmax over options).
    With `segment_len`, long articles are read with memory (`encode_last`)."""

    head_kwargs = DOCUMENT_KWARGS

    def __init__(self, config, run_options=None, **kwargs):
        super().__init__(config, run_options, **kwargs)
        self.sequence_summary = SequenceSummary(config.d_model, self.run_options.dropout, name="sequence_summary",
                                                **self._sub)
        self.logits_proj = Dense(config.d_model, 1, name="logits_proj", **self._sub)
        self.sequence_summary.build()
        self.logits_proj.build()
        self.build()

    def call(self, inputs, training=False):
        if "example_slots" in inputs:  # packed rows: every option is a sequence of its own
            flat, shape = inputs, tf.shape(inputs["example_slots"])
        else:
            shape = tf.shape(inputs["input_ids"])
            flat = {k: tf.reshape(inputs[k], [-1, shape[2]]) for k in ENCODER_INPUTS if k in inputs}
        summary = self.sequence_summary(self.encode_last(flat, training), training=training)
        logits = tf.cast(self.logits_proj(summary), tf.float32)
        return {"logits": tf.reshape(logits, [shape[0], shape[1]])}


@keras.saving.register_keras_serializable(package="xlnet_tf")
class XLNetForTokenClassification(_HeadModel):
    """A tag for every position (named entities, part-of-speech, slots): `logits` [B, T, num_labels] float32
    from one dense layer over the encoder's last layer (transformers' XLNetForTokenClassification `classifier`,
    no dropout after the encoder's own). Rows are `data.token_classification`'s: pieces, <sep>, <cls>."""

    head_kwargs = ("num_labels",)

    def __init__(self, config, run_options=None, num_labels=2, **kwargs):
        super().__init__(config, run_options, num_labels=num_labels, **kwargs)
        self.num_labels = num_labels
        self.classifier = Dense(config.d_model, num_labels, name="classifier", **self._sub)
        self.classifier.build()
        self.build()

    def call(self, inputs, training=False):
        return {"logits": tf.cast(self.classifier(self.encode(inputs, training)), tf.float32)}


def _mask_logits(logits, p_mask):
    return tf.where(tf.cast(p_mask, tf.bool), tf.constant(MASKED, logits.dtype), logits)


@keras.saving.register_keras_serializable(package="xlnet_tf")
class XLNetForQuestionAnswering(_HeadModel):
    """The original SQuAD head.

    start logits masked by `p_mask`; end logits from [h_j; h_start] (dense, tanh, LayerNorm, dense), with the
    gold start when `start_positions` is given (training) and for the top `start_n_top` starts otherwise;
    answerability `cls_logits` from [start-probability-weighted state; <cls> state] in both cases.
    Outputs: `start_logits` [B, T] (masked), `cls_logits` [B], and either `end_logits` [B, T] (masked, gold
    start) or `start_top_log_probs`/`start_top_index` [B, k1], `end_top_log_probs`/`end_top_index` [B, k1*k2]
    (for start i, ends i*k2 ... i*k2 + k2 - 1).
    """

    head_kwargs = ("start_n_top", "end_n_top")

    def __init__(self, config, run_options=None, start_n_top=5, end_n_top=5, **kwargs):
        super().__init__(config, run_options, start_n_top=start_n_top, end_n_top=end_n_top, **kwargs)
        self.start_n_top, self.end_n_top = start_n_top, end_n_top
        d = config.d_model
        self.start_dense = Dense(d, 1, name="start_dense", **self._sub)
        self.end_dense_0 = Dense(2 * d, d, activation="tanh", name="end_dense_0", **self._sub)
        self.end_layer_norm = keras.layers.LayerNormalization(epsilon=1e-12, name="end_layer_norm",
                                                              dtype=self.dtype_policy)
        self.end_dense_1 = Dense(d, 1, name="end_dense_1", **self._sub)
        self.answer_dense_0 = Dense(2 * d, d, activation="tanh", name="answer_dense_0", **self._sub)
        self.answer_dropout = Dropout(self.run_options.dropout, dtype=self.dtype_policy)
        self.answer_dense_1 = Dense(d, 1, use_bias=False, name="answer_dense_1", **self._sub)
        for layer in (self.start_dense, self.end_dense_0, self.end_dense_1, self.answer_dense_0, self.answer_dense_1):
            layer.build()
        self.end_layer_norm.build((None, None, d))
        self.build()

    def _end_logits(self, hidden, start_states):
        """hidden [B, T, d], start_states [B, ..., d] broadcast over T -> [B, T, ...] logits."""
        return self.end_dense_1(self.end_layer_norm(self.end_dense_0(tf.concat([hidden, start_states], -1))))[..., 0]

    def call(self, inputs, training=False):
        hidden = self.encode(inputs, training)
        length = tf.shape(hidden)[1]
        p_mask = tf.cast(inputs["p_mask"], tf.float32)
        start_logits = _mask_logits(tf.cast(self.start_dense(hidden)[..., 0], tf.float32), p_mask)
        start_probs = tf.nn.softmax(start_logits, axis=-1)
        outputs = {"start_logits": start_logits}

        if inputs.get("start_positions") is not None:
            start_states = tf.gather(hidden, inputs["start_positions"], axis=1, batch_dims=1)  # [B, d]
            start_states = tf.broadcast_to(start_states[:, None], tf.shape(hidden))
            outputs["end_logits"] = _mask_logits(tf.cast(self._end_logits(hidden, start_states), tf.float32), p_mask)
        else:
            top_log_probs, top_index = tf.math.top_k(tf.nn.log_softmax(start_logits, -1), k=self.start_n_top)
            start_states = tf.gather(hidden, top_index, axis=1, batch_dims=1)  # [B, k1, d]
            tiled_hidden = tf.broadcast_to(hidden[:, :, None], [tf.shape(hidden)[0], length, self.start_n_top,
                                                                 tf.shape(hidden)[2]])
            tiled_starts = tf.broadcast_to(start_states[:, None], tf.shape(tiled_hidden))
            end_logits = tf.cast(self._end_logits(tiled_hidden, tiled_starts), tf.float32)  # [B, T, k1]
            end_logits = _mask_logits(tf.transpose(end_logits, [0, 2, 1]), p_mask[:, None])  # [B, k1, T]
            end_top_log_probs, end_top_index = tf.math.top_k(tf.nn.log_softmax(end_logits, -1), k=self.end_n_top)
            outputs.update(
                start_top_log_probs=top_log_probs, start_top_index=top_index,
                end_top_log_probs=tf.reshape(end_top_log_probs, [-1, self.start_n_top * self.end_n_top]),
                end_top_index=tf.reshape(end_top_index, [-1, self.start_n_top * self.end_n_top]),
            )

        cls_state = tf.gather(hidden, tf.cast(inputs["cls_index"], tf.int32), axis=1, batch_dims=1)
        start_feature = tf.einsum("btd,bt->bd", hidden, tf.cast(start_probs, hidden.dtype))
        answer = self.answer_dense_0(tf.concat([start_feature, cls_state], -1))
        answer = self.answer_dropout(answer, training=training)
        outputs["cls_logits"] = tf.cast(self.answer_dense_1(answer)[..., 0], tf.float32)
        return outputs


@keras.saving.register_keras_serializable(package="xlnet_tf")
class XLNetForQuestionAnsweringSimple(_HeadModel):
    """The simple span head (transformers' XLNetForQuestionAnsweringSimple, `--squad-head simple`): start and
    end logits from one dense layer `qa_outputs` [d, 2] at every position, padding masked.

    Outputs: `start_logits`, `end_logits` [B, T] (masked at padding; training: given `start_positions`), and at
    inference the candidates `squad_predictions` / `graph_features.squad_best_spans` read, in the beam head's
    layout but scored by raw logits as transformers scores spans (start logit + end logit): the top
    `start_n_top` starts and `end_n_top` ends (positions outside the paragraph, `p_mask`, left out) as
    `start_top_log_probs` / `start_top_index` [B, k1] and `end_top_log_probs` / `end_top_index` [B, k1 * k2]
    (the same ends for every start), and `cls_logits` [B] = the start + end logits at `cls_index` (the null
    answer's score)."""

    head_kwargs = ("start_n_top", "end_n_top", "squad_head")

    def __init__(self, config, run_options=None, start_n_top=20, end_n_top=20, squad_head="simple", **kwargs):
        super().__init__(config, run_options, start_n_top=start_n_top, end_n_top=end_n_top, squad_head=squad_head,
                         **kwargs)
        self.start_n_top, self.end_n_top = start_n_top, end_n_top
        self.qa_outputs = Dense(config.d_model, 2, name="qa_outputs", **self._sub)
        self.qa_outputs.build()
        self.build()

    def call(self, inputs, training=False):
        hidden = self.encode(inputs, training)
        logits = tf.cast(self.qa_outputs(hidden), tf.float32)
        padding = 1.0 - tf.cast(inputs["padding_mask"], tf.float32)
        start_logits, end_logits = (_mask_logits(logits[..., i], padding) for i in (0, 1))
        outputs = {"start_logits": start_logits, "end_logits": end_logits}
        if inputs.get("start_positions") is not None:
            return outputs
        cls_index = tf.cast(inputs["cls_index"], tf.int32)
        outputs["cls_logits"] = (tf.gather(start_logits, cls_index, axis=1, batch_dims=1)
                                 + tf.gather(end_logits, cls_index, axis=1, batch_dims=1))
        p_mask = tf.cast(inputs["p_mask"], tf.float32)
        length = tf.shape(start_logits)[1]

        def top(logits, k):  # k candidates (a static shape) even for rows narrower than k
            extra = tf.fill([tf.shape(logits)[0], tf.maximum(k - length, 0)], tf.constant(MASKED, logits.dtype))
            padded = tf.concat([_mask_logits(logits, p_mask), extra], 1)
            values, index = tf.math.top_k(padded, k=k)
            return values, tf.minimum(index, length - 1)  # a padded candidate: the last position, never valid

        start_top, start_index = top(start_logits, self.start_n_top)
        end_top, end_index = top(end_logits, self.end_n_top)
        k1 = self.start_n_top
        outputs.update(start_top_log_probs=start_top, start_top_index=start_index,
                       end_top_log_probs=tf.tile(end_top, [1, k1]), end_top_index=tf.tile(end_index, [1, k1]))
        return outputs


# -- losses: (sum over examples, number of examples) per replica, for the training loop ------------------


def classification_loss(outputs, batch):
    losses = tf.nn.sparse_softmax_cross_entropy_with_logits(labels=tf.cast(batch["label_ids"], tf.int32),
                                                            logits=outputs["logits"])
    return tf.reduce_sum(losses), tf.cast(tf.size(losses), tf.float32)


def multi_label_loss(outputs, batch):
    """Binary cross-entropy of every label's sigmoid, averaged over the labels, per example (transformers'
    BCEWithLogitsLoss for problem_type multi_label_classification: the mean over examples and labels)."""
    losses = tf.reduce_mean(tf.nn.sigmoid_cross_entropy_with_logits(
        labels=tf.cast(batch["label_ids"], tf.float32), logits=outputs["logits"]), -1)
    return tf.reduce_sum(losses), tf.cast(tf.size(losses), tf.float32)


def regression_loss(outputs, batch):
    errors = tf.square(outputs["predictions"] - tf.cast(batch["label_ids"], tf.float32))
    return tf.reduce_sum(errors), tf.cast(tf.size(errors), tf.float32)


def _span_losses(outputs, batch):
    """(start + end cross-entropy) / 2 per example."""
    start = tf.nn.sparse_softmax_cross_entropy_with_logits(labels=tf.cast(batch["start_positions"], tf.int32),
                                                           logits=outputs["start_logits"])
    end = tf.nn.sparse_softmax_cross_entropy_with_logits(labels=tf.cast(batch["end_positions"], tf.int32),
                                                         logits=outputs["end_logits"])
    return (start + end) * 0.5


def squad_loss(outputs, batch):
    """(start + end cross-entropy) / 2 + 0.5 * binary cross-entropy of answerability, per example."""
    answerable = tf.nn.sigmoid_cross_entropy_with_logits(labels=tf.cast(batch["is_impossible"], tf.float32),
                                                         logits=outputs["cls_logits"])
    losses = _span_losses(outputs, batch) + 0.5 * answerable
    return tf.reduce_sum(losses), tf.cast(tf.size(losses), tf.float32)


multiple_choice_loss = classification_loss


def simple_squad_loss(outputs, batch):
    """(start + end cross-entropy) / 2 per example, as transformers' XLNetForQuestionAnsweringSimple (over the
    row's real positions: padding is masked, so the loss does not depend on it)."""
    losses = _span_losses(outputs, batch)
    return tf.reduce_sum(losses), tf.cast(tf.size(losses), tf.float32)


def token_classification_loss(outputs, batch):
    """Cross-entropy summed over the scored positions (label id >= 0; `data.labels.IGNORE`
    elsewhere), divided by their number: transformers' mean over positions that are not ignore_index."""
    labels = tf.cast(batch["label_ids"], tf.int32)
    scored = labels >= 0
    losses = tf.nn.sparse_softmax_cross_entropy_with_logits(labels=tf.where(scored, labels, 0),
                                                            logits=outputs["logits"])
    return tf.reduce_sum(tf.where(scored, losses, 0.0)), tf.reduce_sum(tf.cast(scored, tf.float32))


# -- fine-tuned directories: the checkpoint plus finetune_config.json (task, labels, max_seq_len, head) --------

FINETUNE_FILE = "finetune_config.json"


def head_arguments(finetune_config):
    """`Task.build_model`'s head arguments recorded in a finetune_config (long documents: segment_len)."""
    keys = ("num_labels", "start_n_top", "end_n_top", "squad_head")
    head = {k: finetune_config[k] for k in keys if k in finetune_config}
    if finetune_config.get("long_doc") == "memory":
        head.update(segment_len=finetune_config["max_seq_len"], mem_len=finetune_config["mem_len"])
    return head


def finetune_run_options(init_checkpoint, **run_options):
    """RunOptions of a head model fine-tuned from the pretrained directory `init_checkpoint`: the HEAD_RUN_OPTIONS
    it records (run_options.json), then `run_options` (RunOptions fields: dropout, ...), which win. The other
    recorded ones are logged and not applied: fine-tuning carries no memory between batches (mem_len, reuse_len)
    and reads every row forward (bi_data)."""
    kept, left = head_run_options(read_run_options(init_checkpoint))
    left = {k: v for k, v in left.items() if k not in run_options}
    if left:
        log.info("%s: %s records %s; fine-tuning does not apply them (it carries no memory between batches and "
                 "reads every row forward, as the original's run_classifier / run_squad / run_race)",
                 init_checkpoint, RUN_OPTIONS_FILE, left)
    options = RunOptions.from_dict({**kept, **run_options}, source="run options")
    applied = {k: getattr(options, k) for k in kept}
    if applied:
        log.info("%s: fine-tuning with the run options it records (%s): %s", init_checkpoint, RUN_OPTIONS_FILE,
                 applied)
    return options


def recorded_head_run_options(run_options, path):
    """What a fine-tuned directory `path` records of a head model's RunOptions: its HEAD_RUN_OPTIONS that differ
    from the defaults (others are logged: a head model does not compute with them)."""
    recorded, left = head_run_options(run_options.recorded())
    if left:
        log.info("%s: run options %s are not recorded (a fine-tuned model computes with %s only)", path, left,
                 ", ".join(HEAD_RUN_OPTIONS))
    return recorded


def write_head_run_options(path, run_options):
    """Records a head model's run options (`recorded_head_run_options`) as `path`/run_options.json, removing a
    stale one when there are none: for a fine-tuned directory written file by file (`xlnet-tf finetune`)."""
    target = files.join(os.fspath(path), RUN_OPTIONS_FILE)
    recorded = recorded_head_run_options(run_options, path)
    if recorded:
        files.write_json(target, recorded)
    elif files.exists(target):
        files.remove(target)


def save_finetuned(model, path, finetune_config, extra_files=()):
    """Writes the model, `finetune_config.json` (task, label_names, max_seq_len, ...) and, when any differ from
    the defaults, the HEAD_RUN_OPTIONS it computes with (run_options.json), atomically."""
    recorded = recorded_head_run_options(model.run_options, path)
    with tempfile.TemporaryDirectory() as scratch:
        meta = os.path.join(scratch, FINETUNE_FILE)
        with open(meta, "w", encoding="utf-8") as f:
            json.dump(finetune_config, f, indent=2, sort_keys=True)
        write_pretrained(path, model.config, model._checkpoint(), [meta, *extra_files], recorded)


def restore_head(model, path):
    """Restores a head model's weights from the fine-tuned directory `path` (`xlnet_tf.tasks.load_finetuned`)."""
    restore_checkpoint(path, model._checkpoint(), require_lm_head=False)


# Moved to `xlnet_tf.tasks` (each task object builds its head model), and still importable from here for the
# scripts that import them from this module. The lookup is by name on first use (this module's load imports
# nothing above it); tests/test_tasks.py checks that each resolves to the one in `xlnet_tf.tasks`.
MOVED_TO_TASKS = ("build_head_model", "read_finetune_config", "load_finetuned")
__getattr__ = lazy_getattr(__name__, dict.fromkeys(MOVED_TO_TASKS, "xlnet_tf.tasks"))
