"""XLNetModel (the encoder) and XLNetPretrainer (encoder + tied LM head + permutation-LM loss)."""

from __future__ import annotations

import logging
import os
import shutil
import tempfile

import keras
import tensorflow as tf

from xlnet_tf import decoding, files
from xlnet_tf.config import RECORDED_RUN_OPTIONS, ConfigError, RunOptions, XLNetConfig
from xlnet_tf.layers import masks
from xlnet_tf.layers.block import XLNetBlock
from xlnet_tf.layers.dropout import Dropout
from xlnet_tf.layers.positions import relative_positional_encoding

log = logging.getLogger(__name__)

CONFIG_FILE = "xlnet_config.json"
RUN_OPTIONS_FILE = "run_options.json"  # the recorded run options (RECORDED_RUN_OPTIONS), when any differ from defaults
CHECKPOINT_PREFIX = "model.ckpt"
SPM_FILE = "spiece.model"
MODEL_INPUTS = ("input_ids", "segment_ids", "padding_mask", "perm_mask", "target_mapping", "example_ids")


def cache_memory(hidden, previous, mem_len, reuse_len):
    """The original's `_cache_mem`: [B, T, d] hidden (and [B, M, d] previous memory) -> [B, <=mem_len, d].

    The first `reuse_len` positions (all when 0) are appended to the previous memory and the last `mem_len`
    kept, without gradient.
    """
    current = hidden[:, :reuse_len] if reuse_len > 0 else hidden
    if previous is not None:
        current = tf.concat([tf.cast(previous, current.dtype), current], axis=1)
    return tf.stop_gradient(current[:, -mem_len:])


@keras.saving.register_keras_serializable(package="xlnet_tf")
class XLNetModel(keras.Model):
    """The XLNet encoder, batch-major.

    Call with a dict: `input_ids` [B, T] int; optional `segment_ids` [B, T] (no segment term when absent),
    `padding_mask` [B, T] (1 = real token; all real when absent), `perm_mask` [B, T, T] (1 = position i may
    NOT attend to j), `target_mapping` [B, P, T] (one-hot rows, or all-zero rows for padded targets),
    `example_ids` [B, T] (packed rows, `data.packing`: a token attends only to tokens of its own id); and
    `mems=` a list of n_layer [B, M, d_model] tensors, with `mems_valid=` [B, M] (1 = a real memory position;
    all visible when absent; not named `mems_mask`, which Keras fills with the mems' Keras masks).

    `output_positions=` [B, S] int32 (optional) names the positions whose `sequence_output` is read: the last
    layer then computes the content stream only there (a classifier reads one position; pretraining, with
    S = 0, only the query stream). Results at those positions are unchanged.

    Segment by segment (`encode_document`) the memory is carried projected: `memory_heads=` (per layer the
    key / value heads (k, v) [B, N, M, H] of the memory, instead of `mems`), `return_heads=True` (then
    `heads`, per layer the (k, v) of [memory; segment], replaces `new_mems`), `detach_keys=True` (this
    segment's keys and values carry no gradient to its states, only to the projection weights) and, at
    inference, `position_heads=` (per layer the projection of a longer relative encoding).

    Returns a dict: `sequence_output` [B, T, d_model] (content stream; [B, S, d_model] with output_positions),
    `query_output` [B, P, d_model] (query stream, with `target_mapping`), `new_mems` (list of n_layer [B, min(M + reuse, mem_len), d_model],
    when run_options.mem_len > 0) and, with `return_attention=True`, `attention`: per layer the content
    stream's attention probabilities [B, n_head, T, M + T].

    The query stream's mask is `perm_mask` as given: the data pipeline blocks
    i -> i for every target, as the original does, so a target never sees its own token.
    """

    def __init__(self, config: XLNetConfig, run_options: RunOptions | None = None, **kwargs):
        super().__init__(**kwargs)
        self.config = config
        self.run_options = run_options or RunOptions()
        cfg, run = self.config, self.run_options
        sub = {"dtype": self.dtype_policy}
        init_std = run.init_std(cfg.d_model)
        self.initializer = keras.initializers.RandomNormal(stddev=init_std)
        self.word_embedding = keras.layers.Embedding(
            cfg.n_token, cfg.d_model, embeddings_initializer=self.initializer, name="word_embedding", **sub
        )
        self.embedding_dropout = Dropout(run.dropout, name="embedding_dropout", **sub)
        self.position_dropout = Dropout(run.dropout, name="position_dropout", **sub)
        self.output_dropout = Dropout(run.dropout, name="output_dropout", **sub)
        # One attribute per block (layer_0, layer_1, ...): tf.train.Checkpoint does not track Keras 3 lists.
        for i in range(cfg.n_layer):
            block = XLNetBlock(
                cfg.d_model, cfg.n_head, cfg.d_head, cfg.d_inner, ff_activation=cfg.ff_activation,
                dropout=run.dropout, dropatt=run.dropatt, initializer_range=init_std,
                recompute=run.recompute, name=f"layer_{i}", **sub,
            )
            setattr(self, f"layer_{i}", block)
        self.build()

    @property
    def blocks(self):
        """The n_layer XLNetBlocks, bottom first."""
        return [getattr(self, f"layer_{i}") for i in range(self.config.n_layer)]

    def build(self, input_shape=None):
        cfg = self.config
        self.word_embedding.build((None, None))
        for block in self.blocks:
            block.build()
        bias_shape = (cfg.n_layer, cfg.n_head, cfg.d_head) if cfg.untie_r else (cfg.n_head, cfg.d_head)
        self.mask_emb = self.add_weight(name="mask_emb", shape=(cfg.d_model,), initializer=self.initializer)
        self.r_w_bias = self.add_weight(name="r_w_bias", shape=bias_shape, initializer=self.initializer)
        self.r_r_bias = self.add_weight(name="r_r_bias", shape=bias_shape, initializer=self.initializer)
        self.r_s_bias = self.add_weight(name="r_s_bias", shape=bias_shape, initializer=self.initializer)
        self.seg_embed = self.add_weight(
            name="seg_embed", shape=(cfg.n_layer, 2, cfg.n_head, cfg.d_head), initializer=self.initializer
        )
        self.built = True

    def _per_layer(self, weight, stacked=True):
        """Each layer's slice of a weight stacked over the layers (`stacked`), else the shared weight n_layer times:
        one Unpack (and one Pack for its gradient) for every layer, where a slice per layer makes 4 graph nodes
        and its gradient 5."""
        return tf.unstack(weight, num=self.config.n_layer) if stacked else [weight] * self.config.n_layer

    def call(self, inputs, mems=None, training=False, return_attention=False, output_positions=None, mems_valid=None,
             memory_heads=None, position_heads=None, return_heads=False, detach_keys=False):
        unknown = sorted(set(inputs) - set(MODEL_INPUTS))
        if unknown:
            raise ValueError(f"XLNetModel: unknown input(s) {unknown}; allowed: {list(MODEL_INPUTS)}")
        cfg, run = self.config, self.run_options
        input_ids = tf.convert_to_tensor(inputs["input_ids"])
        batch, qlen = tf.shape(input_ids)[0], tf.shape(input_ids)[1]
        padding_mask = inputs.get("padding_mask")
        if padding_mask is None:
            padding_mask = tf.ones([batch, qlen], tf.int32)
        if mems is not None and len(mems) != cfg.n_layer:
            raise ValueError(f"XLNetModel: mems must hold {cfg.n_layer} tensors (one per layer), got {len(mems)}")
        if memory_heads is not None:  # segment-by-segment inference (encode_document): projected memory
            mlen = tf.shape(memory_heads[0][0])[2]
        else:
            mlen = 0 if mems is None else tf.shape(mems[0])[1]
        klen = mlen + qlen

        content_blocked, query_blocked = masks.attention_blocked(
            padding_mask, inputs.get("perm_mask"), mlen, run.attn_type, run.same_length, mems_valid,
            inputs.get("example_ids"),
        )
        segment_ids = inputs.get("segment_ids")
        segment_diff = None if segment_ids is None else masks.segment_different(segment_ids, mlen)
        position_encoding = relative_positional_encoding(
            qlen, klen, cfg.d_model, run.attn_type, run.bi_data, run.clamp_len
        )
        position_encoding = self.position_dropout(
            tf.cast(position_encoding, self.compute_dtype), training=training
        )

        content = self.embedding_dropout(self.word_embedding(input_ids), training=training)
        query = None
        stream_inputs = {"content_blocked": content_blocked, "content_segment_different": segment_diff}
        target_mapping = inputs.get("target_mapping")
        if target_mapping is not None:
            positions, valid = masks.target_positions(target_mapping)
            num_predict = tf.shape(positions)[1]
            query = tf.broadcast_to(tf.cast(self.mask_emb, self.compute_dtype), [batch, num_predict, cfg.d_model])
            query = self.embedding_dropout(query, training=training)
            stream_inputs.update(
                query_blocked=masks.gather_rows(query_blocked, positions),
                query_segment_different=None if segment_diff is None else masks.gather_rows(segment_diff, positions),
                query_positions=positions,
                query_valid=valid,
            )

        content_biases, position_biases, segment_biases = (self._per_layer(bias, cfg.untie_r) for bias in (
            self.r_w_bias, self.r_r_bias, self.r_s_bias))
        segment_embeddings = self._per_layer(self.seg_embed)
        new_mems, attention, heads = [], [], []
        for i, block in enumerate(self.blocks):
            layer_mems = None if mems is None else mems[i]
            is_last = i == cfg.n_layer - 1
            only_rows = {"content_positions": output_positions} if is_last and output_positions is not None else {}
            if memory_heads is not None:
                only_rows["memory_heads"] = memory_heads[i]
            if position_heads is not None:
                only_rows["position_heads"] = position_heads[i]
            if run.mem_len > 0 and not return_heads:
                new_mems.append(cache_memory(content, layer_mems, run.mem_len, run.reuse_len))
            content, query, *probs = block(
                content,
                query,
                layer_mems,
                training=training,
                return_attention=return_attention,
                return_heads=return_heads,
                detach_keys=detach_keys,
                position_encoding=position_encoding,
                content_bias=content_biases[i],
                position_bias=position_biases[i],
                segment_bias=segment_biases[i],
                segment_embedding=segment_embeddings[i],
                **stream_inputs,
                **only_rows,
            )
            if return_heads:
                heads.append(probs.pop())
            attention.extend(probs)

        outputs = {"sequence_output": self.output_dropout(content, training=training)}
        if query is not None:
            outputs["query_output"] = self.output_dropout(query, training=training)
        if return_heads:
            outputs["heads"] = heads
        elif run.mem_len > 0:
            outputs["new_mems"] = new_mems
        if return_attention:
            outputs["attention"] = attention
        return outputs

    def encode_document(self, inputs, segment_len, grad_segments=0, training=False, output_positions=None):
        """Segment recurrence: a document [B, S * segment_len] read as S segments in order, each attending to
        the memory of the ones before it (the last `run_options.mem_len` positions, padding masked).

        inputs: `input_ids`, optional `segment_ids` and `padding_mask` [B, S * segment_len]. Returns the last
        segment's `sequence_output` [B, segment_len, d_model] ([B, P, d_model] at `output_positions` [B, P],
        positions within the last segment). A static width runs the segments unrolled (one segment: exactly
        one plain call); an unknown width runs them in a `tf.while_loop` carrying the memory.

        The memory is carried as each layer's key / value heads, so no segment projects an earlier one's
        states again. Memory gets gradient from the last `grad_segments` segments only (0, the default: from
        every segment, so training learns what one block-causal pass over the document learns): earlier
        segments project their keys and values from their states without gradient (1: only the last segment
        trains, as the original's stop_gradient on memory), while the projection weights keep the gradient of
        every key and value, as when the original projects its memory. Inference also projects the document's
        relative positions once per layer (training projects them per segment, each with its own dropout).
        """
        run = self.run_options
        if run.mem_len <= 0:
            raise ValueError("encode_document needs run_options.mem_len > 0")
        inputs = {k: tf.convert_to_tensor(v) for k, v in inputs.items()}
        ids = inputs["input_ids"]
        if "padding_mask" not in inputs:
            inputs["padding_mask"] = tf.ones_like(ids, tf.int32)
        length, batch = segment_len, tf.shape(ids)[0]
        static_width = ids.shape[1]
        width = tf.shape(ids)[1] if static_width is None else static_width
        shared = {}
        if not training and static_width != length:  # one segment is a plain call: nothing to share
            encoding = tf.cast(relative_positional_encoding(length, width, self.config.d_model, run.attn_type,
                                                            run.bi_data, run.clamp_len), self.compute_dtype)
            shared["position_heads"] = [block.attention.project_positions(encoding) for block in self.blocks]

        def segment(k):
            return {key: value[:, k * length:(k + 1) * length] for key, value in inputs.items()}

        def read(k, memory, mems_valid, detach):
            """Runs segment k (all but the last) -> (the next memory: its heads, and its mask)."""
            part = segment(k)
            nothing = tf.zeros([batch, 0], tf.int32)  # no output rows: only the memory is kept
            out = self(part, training=training, output_positions=nothing, memory_heads=memory, mems_valid=mems_valid,
                       return_heads=True, detach_keys=detach, **shared)
            memory = [(keys[:, :, -run.mem_len:], values[:, :, -run.mem_len:]) for keys, values in out["heads"]]
            return memory, masks.cache_mask(mems_valid, part["padding_mask"], run.mem_len)

        if static_width is not None:
            if static_width % length:
                raise ValueError(f"encode_document: width {static_width} is not a multiple of segment_len {length}")
            count = static_width // length
            memory = mems_valid = None
            trained = count if grad_segments <= 0 else grad_segments
            for k in range(count - 1):
                memory, mems_valid = read(k, memory, mems_valid, detach=k < count - trained)
        else:
            if training and grad_segments > 1:
                raise ValueError("encode_document: grad_segments > 1 needs a static width (the segments unrolled); an "
                                 "unknown width trains through the memory of every segment (0) or of none (1)")
            tf.debugging.assert_equal(width % length, 0, message=f"the width must be a multiple of {length}")
            count = width // length
            cfg = self.config
            empty = tf.zeros([batch, cfg.n_head, 0, cfg.d_head], self.compute_dtype)
            memory = [(empty, empty) for _ in self.blocks]
            shapes = [(tf.TensorShape([None, cfg.n_head, None, cfg.d_head]),) * 2 for _ in self.blocks]
            mems_valid = tf.zeros([batch, 0], inputs["padding_mask"].dtype)
            _, memory, mems_valid = tf.while_loop(
                lambda k, *_: k < count - 1,
                lambda k, memory, valid: (k + 1, *read(k, memory, valid, detach=not training or grad_segments == 1)),
                [tf.constant(0), memory, mems_valid],
                shape_invariants=[tf.TensorShape([]), shapes, tf.TensorShape([None, None])])
        memory_inputs = {} if memory is None else {"memory_heads": memory, "mems_valid": mems_valid, **shared}
        return self(segment(count - 1), training=training, output_positions=output_positions,
                    **memory_inputs)["sequence_output"]

    def get_config(self):
        return model_config(self, super().get_config())

    @classmethod
    def from_config(cls, config):
        return layer_from_config(cls, config)

    # -- directories holding xlnet_config.json + a TF2 checkpoint (+ spiece.model) ---------------------------

    def _checkpoint(self):
        return tf.train.Checkpoint(model=tf.train.Checkpoint(transformer=self))

    def save_pretrained(self, path, extra_files=()):
        """Writes `xlnet_config.json`, the checkpoint and, when any differ from the defaults, the run options
        it computes with (`run_options.json`: RECORDED_RUN_OPTIONS) into `path` (any filesystem; locally a
        temporary directory renamed into place, remotely xlnet_config.json last); `extra_files` (such as a
        `spiece.model`) are copied alongside."""
        write_pretrained(path, self.config, self._checkpoint(), extra_files, self.run_options.recorded())

    @classmethod
    def from_pretrained(cls, path, dtype=None, **run_options):
        """Loads a directory written by `save_pretrained` or `xlnet-tf convert`; keyword arguments are
        `RunOptions` fields (dropout, mem_len, ...) and win over those the directory records (run_options.json,
        see `load_run_options`); `dtype` is a Keras dtype policy such as "mixed_bfloat16"."""
        config = read_model_config(path)
        model = cls(config, load_run_options(path, **run_options), dtype=dtype)
        restore_checkpoint(path, model._checkpoint(), require_lm_head=False)
        return model


@keras.saving.register_keras_serializable(package="xlnet_tf")
class XLNetPretrainer(keras.Model):
    """XLNetModel plus the LM head tied to the word embedding (with its own bias) and the permutation-LM loss.

    Inputs: those of XLNetModel plus optional `target_ids` [B, P] and `target_mask` [B, P] (1 = real target);
    other keys of a pretraining batch (`is_next`) are not used.
    Returns XLNetModel's outputs plus `logits` [B, P, n_token] (from the query stream when `target_mapping` is
    given, else [B, T, n_token] from the content stream) and, with `target_ids`, `loss`: the cross-entropy
    averaged over real targets, with its parts `loss_sum` and `target_count` (for averaging across replicas).
    With `target_mapping` and `sequence_output=False` (as pretraining trains), the last layer computes only the
    query stream, which is all the LM head reads, and `sequence_output` is left out.
    """

    def __init__(self, config: XLNetConfig, run_options: RunOptions | None = None, **kwargs):
        super().__init__(**kwargs)
        self.config = config
        self.run_options = run_options or RunOptions()
        self.transformer = XLNetModel(config, self.run_options, name="transformer", dtype=self.dtype_policy)
        self.build()

    def build(self, input_shape=None):
        self.lm_bias = self.add_weight(name="lm_bias", shape=(self.config.n_token,), initializer="zeros")
        self.built = True

    def call(self, inputs, mems=None, training=False, sequence_output=True):
        model_inputs = {k: v for k, v in inputs.items() if k in MODEL_INPUTS}  # data extras (is_next) unused
        skip_content = not sequence_output and model_inputs.get("target_mapping") is not None
        nothing = tf.zeros([tf.shape(model_inputs["input_ids"])[0], 0], tf.int32) if skip_content else None
        outputs = dict(self.transformer(model_inputs, mems=mems, training=training, output_positions=nothing))
        if skip_content:
            del outputs["sequence_output"]
        hidden = outputs["query_output"] if "query_output" in outputs else outputs["sequence_output"]
        logits = outputs["logits"] = self.lm_logits(hidden)
        if inputs.get("target_ids") is not None:
            loss_sum, count = masked_cross_entropy(logits, inputs["target_ids"], inputs.get("target_mask"))
            outputs.update(loss=tf.math.divide_no_nan(loss_sum, count), loss_sum=loss_sum, target_count=count)
        return outputs

    def lm_logits(self, hidden):
        """The LM head: hidden states [B, P, d_model] -> float32 logits [B, P, n_token] (the word embedding, tied,
        plus the head's bias)."""
        embedding = tf.cast(self.transformer.word_embedding.embeddings, hidden.dtype)
        return tf.cast(tf.einsum("bpd,vd->bpv", hidden, embedding), tf.float32) + tf.cast(self.lm_bias, tf.float32)

    def generate(self, prompt_ids, prompt_mask=None, options=None, **overrides):
        """Generates text ids after left-padded prompts (`xlnet_tf.generation`: the prompt as bidirectional
        context, then tokens left to right, each step cached as key / value heads).

        prompt_ids [B, P] int (or a list of id lists, left-padded here), prompt_mask [B, P] (1 = real token;
        default: all real); `options` a `GenerationOptions`, or its fields as keyword arguments (`stop_ids`
        None: no stop ids here; the text-level `generation.generate_text` defaults them from the tokenizer).
        Returns numpy `tokens` [B, N], `log_probs` [B, N], `lengths` [B], `finish_reason` [B] (strings).
        """
        return decoding.generate_ids(self, prompt_ids, prompt_mask, options, **overrides)

    def get_config(self):
        return model_config(self, super().get_config())

    @classmethod
    def from_config(cls, config):
        return layer_from_config(cls, config)

    def _checkpoint(self):
        return tf.train.Checkpoint(model=self)

    def save_pretrained(self, path, extra_files=()):
        """Writes `xlnet_config.json`, the checkpoint (encoder and LM head) and the recorded run options into
        `path`, atomically (as `XLNetModel.save_pretrained`)."""
        write_pretrained(path, self.config, self._checkpoint(), extra_files, self.run_options.recorded())

    @classmethod
    def from_pretrained(cls, path, dtype=None, **run_options):
        """As `XLNetModel.from_pretrained` (keyword arguments win over the directory's run_options.json); a
        directory without an LM head bias is an error."""
        config = read_model_config(path)
        model = cls(config, load_run_options(path, **run_options), dtype=dtype)
        restore_checkpoint(path, model._checkpoint(), require_lm_head=True)
        return model


def masked_cross_entropy(logits, target_ids, target_mask=None):
    """(sum of cross-entropies over real targets, number of real targets) for logits [B, P, V] float32,
    target_ids [B, P] and target_mask [B, P] (1 = real target; all real when None)."""
    losses = tf.nn.sparse_softmax_cross_entropy_with_logits(labels=tf.cast(target_ids, tf.int32), logits=logits)
    weights = tf.ones_like(losses) if target_mask is None else tf.cast(target_mask, losses.dtype)
    return tf.reduce_sum(losses * weights), tf.reduce_sum(weights)


def model_config(model, base):
    """get_config() of a model built from (XLNetConfig, RunOptions): Keras' `base` config (name, trainable, dtype
    policy) plus both as plain dicts; `layer_from_config` rebuilds the model from it."""
    return {**base, "config": model.config.to_dict(), "run_options": model.run_options.to_dict()}


def layer_from_config(cls, config):
    """A model layer `cls` from its get_config() dict (its XLNetConfig and RunOptions as nested dicts)."""
    config = dict(config)
    return cls(XLNetConfig.from_dict(config.pop("config")), RunOptions.from_dict(config.pop("run_options")), **config)


def read_model_config(path):
    """The XLNetConfig of model directory `path` (any filesystem); ConfigError when it is not one."""
    path = os.fspath(path)
    if not files.isdir(path):
        raise ConfigError(f"{path}: not a directory holding {CONFIG_FILE} and a checkpoint")
    return XLNetConfig.from_json(files.join(path, CONFIG_FILE))


def read_run_options(path):
    """The run options directory `path` records (`run_options.json`: some of RECORDED_RUN_OPTIONS, as a dict);
    {} when it has none (a directory written before they were recorded, or whose options are the defaults)."""
    target = files.join(os.fspath(path), RUN_OPTIONS_FILE)
    if not files.exists(target):
        return {}
    recorded = files.read_json(target)
    if not isinstance(recorded, dict):
        raise ConfigError(f"{target}: expected a JSON object")
    unknown = sorted(set(recorded) - set(RECORDED_RUN_OPTIONS))
    if unknown:
        raise ConfigError(f"{target}: unknown key(s) {unknown}; allowed: {list(RECORDED_RUN_OPTIONS)}")
    for name in ("bi_data", "same_length"):
        if name in recorded and not isinstance(recorded[name], bool):
            raise ConfigError(f"{target}: {name} must be true or false, got {recorded[name]!r}")
    RunOptions.from_dict(recorded, source=target)  # the values are checked where they are read
    return recorded


def load_run_options(path, **run_options):
    """RunOptions for a model loaded from directory `path`: the run options it records (`read_run_options`),
    then the keyword arguments (RunOptions fields), which win."""
    recorded = read_run_options(path)
    overridden = sorted(k for k in recorded if k in run_options and run_options[k] != recorded[k])
    if recorded:
        log.info("%s: run options recorded in %s: %s%s", path, RUN_OPTIONS_FILE, recorded,
                 f" ({', '.join(overridden)} overridden by the caller)" if overridden else "")
    return RunOptions.from_dict({**recorded, **run_options}, source="run options")


def checkpoint_prefix(path):
    """The checkpoint a pretrained directory holds: `model.ckpt`, else the latest training checkpoint in
    `checkpoints/` (a model directory written by `xlnet-tf pretrain` or `finetune`)."""
    path = os.fspath(path)
    prefix = os.path.join(path, CHECKPOINT_PREFIX)
    if tf.io.gfile.exists(prefix + ".index"):
        return prefix
    latest = tf.train.latest_checkpoint(os.path.join(path, "checkpoints"))
    if latest is None:
        raise ConfigError(f"{path}: no checkpoint ({CHECKPOINT_PREFIX}.index or checkpoints/)")
    return latest


def restore_checkpoint(path, checkpoint, require_lm_head):
    """Reads model directory `path`'s checkpoint into `checkpoint` (a tf.train.Checkpoint of the model); every
    object of the model must be found, extra ones (optimizer slots) are fine."""
    prefix = checkpoint_prefix(path)
    if require_lm_head:
        names = set(files.checkpoint_reader(prefix).get_variable_to_shape_map())
        if not any(name.startswith("model/lm_bias") for name in names):
            raise ConfigError(f"{path}: the checkpoint has no LM head (model/lm_bias); load it with XLNetModel")
    status = checkpoint.read(prefix)
    status.assert_existing_objects_matched()
    status.expect_partial()


def write_pretrained(path, config, checkpoint, extra_files=(), run_options=None):
    """Writes config + checkpoint (+ extra files, from any filesystem) as directory `path`, keeping files of
    an existing `path` that it does not write (spiece.model, notes). `run_options` (a dict: RunOptions fields)
    is written as run_options.json when not empty; an existing directory's run_options.json never outlives it.

    Local: everything goes to a temporary sibling directory, which is then swapped in (a reader sees the old
    directory or the new one). Remote stores have no directory rename: the files are written in place, the
    checkpoint, extra files and run options first and xlnet_config.json last."""
    path = files.absolute(path)
    if files.is_remote(path):
        files.makedirs(path)
        stale = files.join(path, RUN_OPTIONS_FILE)
        if not run_options and files.exists(stale):
            files.remove(stale)
        for source in extra_files:
            files.copy(source, files.join(path, files.basename(source)))
        checkpoint.write(files.join(path, CHECKPOINT_PREFIX))
        if run_options:
            files.write_json(files.join(path, RUN_OPTIONS_FILE), run_options)
        config.to_json(files.join(path, CONFIG_FILE))
        return
    parent = os.path.dirname(path)
    os.makedirs(parent, exist_ok=True)
    staging = tempfile.mkdtemp(prefix=f".{os.path.basename(path)}.tmp-", dir=parent)
    try:
        config.to_json(os.path.join(staging, CONFIG_FILE))
        checkpoint.write(os.path.join(staging, CHECKPOINT_PREFIX))
        if run_options:
            files.write_json(os.path.join(staging, RUN_OPTIONS_FILE), run_options)
        if os.path.isdir(path):
            for name in os.listdir(path):  # keep files we do not write (spiece.model, notes)
                target = os.path.join(staging, name)
                if name != RUN_OPTIONS_FILE and not os.path.exists(target):
                    shutil.copy2(os.path.join(path, name), target)
        for source in extra_files:
            files.copy(source, os.path.join(staging, files.basename(source)))
        backup = None
        if os.path.exists(path):
            backup = staging + ".old"
            os.rename(path, backup)
        os.rename(staging, path)
        if backup:
            shutil.rmtree(backup)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
