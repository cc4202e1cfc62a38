"""One XLNet layer: two-stream relative attention, then the feed-forward applied to each stream."""

import keras
import tensorflow as tf

from xlnet_tf.config import RECOMPUTE_MODES
from xlnet_tf.layers.attention import TwoStreamRelativeAttention, split_streams
from xlnet_tf.layers.feedforward import PositionwiseFeedForward
from xlnet_tf.layers.recompute import recomputed


@keras.saving.register_keras_serializable(package="xlnet_tf")
class XLNetBlock(keras.layers.Layer):
    """content [B, T, d], query [B, P, d] or None -> (content, query). Both streams share every weight.

    With `content_positions` [B, S] the content stream is computed only at those positions: content [B, S, d].

    `recompute` (training only): "blocks" keeps only the block's inputs for the backward pass and recomputes
    everything else; "attention" recomputes only the attention scores and probabilities ([B, N, Q, K]);
    "none" keeps every activation. Dropout masks are drawn once, so the recomputation applies the same ones."""

    def __init__(self, d_model, n_head, d_head, d_inner, ff_activation="gelu", dropout=0.0, dropatt=0.0,
                 initializer_range=0.02, recompute="none", **kwargs):
        super().__init__(**kwargs)
        if recompute not in RECOMPUTE_MODES:
            raise ValueError(f"recompute must be one of {RECOMPUTE_MODES}, got {recompute!r}")
        self.recompute = recompute
        self.d_model = d_model
        self.n_head = n_head
        self.d_head = d_head
        self.d_inner = d_inner
        self.ff_activation = ff_activation
        self.dropout = dropout
        self.dropatt = dropatt
        self.initializer_range = initializer_range
        self.attention = TwoStreamRelativeAttention(
            d_model, n_head, d_head, dropout=dropout, dropatt=dropatt, initializer_range=initializer_range,
            recompute_scores=recompute == "attention", name="rel_attn", dtype=self.dtype_policy,
        )
        self.feed_forward = PositionwiseFeedForward(
            d_model, d_inner, activation=ff_activation, dropout=dropout, initializer_range=initializer_range,
            name="ff", dtype=self.dtype_policy,
        )

    def build(self, input_shape=None):
        self.attention.build()
        self.feed_forward.build()
        self.built = True

    def call(self, content, query=None, mems=None, training=False, return_attention=False, return_heads=False,
             detach_keys=False, **attention_inputs):
        """`attention_inputs` are `TwoStreamRelativeAttention.call`'s keyword arguments; with
        `return_attention` an extra output holds the content stream's attention probabilities, with
        `return_heads` a last one the attention's key / value heads."""
        seeds = {}
        if training:
            seeds = {"attention": self.attention.draw_dropout_seeds(query is not None),
                     "feed_forward": self.feed_forward.draw_dropout_seeds()}

        def layer(block_inputs):
            content, query, mems, attention_inputs, seeds = block_inputs
            content, query, *probs = self.attention(
                content, query, mems, training=training, return_attention=return_attention,
                return_heads=return_heads, detach_keys=detach_keys, dropout_seeds=seeds.get("attention"),
                **attention_inputs,
            )
            ff_seeds = seeds.get("feed_forward")
            if content.shape[1] == 0:  # no content row was computed (see the attention's `content_positions`)
                return (content, None if query is None else self.feed_forward(
                    query, training=training, dropout_seeds=ff_seeds), *probs)
            if query is None:
                return (self.feed_forward(content, training=training, dropout_seeds=ff_seeds), None, *probs)
            # One feed-forward over both streams' rows: bigger matmuls, one weight gradient.
            both = self.feed_forward(tf.concat([content, query], axis=1), training=training, dropout_seeds=ff_seeds)
            rows = content.shape[1] if content.shape[1] is not None else tf.shape(content)[1]
            return (*split_streams(both, rows, axis=1), *probs)

        block_inputs = (content, query, mems, attention_inputs, seeds)
        if training and self.recompute == "blocks":
            return tuple(recomputed(layer, block_inputs))
        return layer(block_inputs)

    def get_config(self):
        config = super().get_config()
        config.update(
            d_model=self.d_model,
            n_head=self.n_head,
            d_head=self.d_head,
            d_inner=self.d_inner,
            ff_activation=self.ff_activation,
            dropout=self.dropout,
            dropatt=self.dropatt,
            initializer_range=self.initializer_range,
            recompute=self.recompute,
        )
        return config
