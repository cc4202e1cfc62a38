"""Two-stream relative multi-head attention (XLNet), batch-major.

score(i, j) = ((q_i + r_w_bias) . k_j + shift((q_i + r_r_bias) . r)_{ij} + (q_i + r_s_bias) . seg_embed[s_ij])
              / sqrt(d_head)
over keys [mems; h]. The content stream (h) attends with every position allowed to see itself; the query
stream (g) shares all weights, is computed only at the target positions and uses the mask as given.
"""

import keras
import tensorflow as tf

from xlnet_tf.layers.dropout import Dropout
from xlnet_tf.layers.masks import gather_rows
from xlnet_tf.layers.recompute import recomputed


def relative_shift(scores, klen):
    """[B, N, Q, R] scores against relative distances -> [B, N, Q, klen] scores against keys.

    Row i is shifted left by Q - i (query i at absolute position klen - Q + i), done with a reshape and
    slices (no gather), as the original's `rel_shift`. `tf.slice`, not `[...]` indexing: the gradient of a
    strided slice is about ten times slower on CPU than the Pad that a Slice's gradient is.
    """
    batch, heads, qlen, rlen = _shape(scores)
    shifted = tf.slice(tf.reshape(scores, [batch, heads, rlen, qlen]), [0, 0, 1, 0], [-1, -1, -1, -1])
    shifted = tf.reshape(shifted, [batch, heads, qlen, rlen - 1])
    return tf.slice(shifted, [0, 0, 0, 0], [-1, -1, -1, klen])


def shift_at_positions(scores, positions, qlen, klen):
    """Like `relative_shift`, for queries at arbitrary positions of the current segment.

    scores: [B, N, P, R] for P targets; positions: [B, P] int32 in [0, qlen). Returns [B, N, P, klen] with
    out[.., p, j] = scores[.., p, qlen - positions[p] + j], the entry the content stream's row would hold.
    """
    rlen = _shape(scores)[3]
    index = (qlen - positions)[:, :, None] + tf.range(klen)[None, None, :]  # [B, P, K]
    # With "uni" attention the indices past the last distance belong to future keys, which are masked.
    index = tf.minimum(index, rlen - 1)
    by_target = tf.transpose(scores, [0, 2, 3, 1])  # [B, P, R, N]
    gathered = tf.gather(by_target, index, axis=2, batch_dims=2)  # [B, P, K, N]
    return tf.transpose(gathered, [0, 3, 1, 2])


def split_streams(stacked, qlen, axis):
    """Undoes the concatenation of the content stream's `qlen` rows and the query stream's rows along `axis`."""
    total = _shape(stacked)[axis]
    static = isinstance(qlen, int) and isinstance(total, int)
    sizes = [qlen, total - qlen] if static else tf.stack([qlen, total - qlen])
    content, query = tf.split(stacked, sizes, axis=axis, num=2)
    return content, query


def project_heads(inputs, kernel):
    """inputs [B, T, d] times kernel [d, N, H] -> heads [B, N, T, H] (einsum "btd,dnh->bnth").

    One MatMul over the rows flattened to [B * T, d], then a transpose: on an AVX-512 Xeon (2 cores, float32)
    the q, k, v and output projections' forward and backward at [4, 80] took 22 ms this way against 25 ms as
    einsums."""
    batch, length, _ = _shape(inputs)
    d_model, heads, size = _shape(kernel)
    flat = tf.matmul(tf.reshape(inputs, [-1, d_model]), tf.reshape(kernel, [d_model, heads * size]))
    return tf.transpose(tf.reshape(flat, [batch, length, heads, size]), [0, 2, 1, 3])


def merge_heads(heads, kernel):
    """heads [B, N, T, H] times kernel [d, N, H], summed over heads -> [B, T, d] (einsum "bnth,dnh->btd"),
    as one MatMul over the rows of [B * T, N * H] (see `project_heads`)."""
    batch, count, length, size = _shape(heads)
    rows = tf.reshape(tf.transpose(heads, [0, 2, 1, 3]), [-1, count * size])
    flat = tf.matmul(rows, tf.reshape(kernel, [-1, count * size]), transpose_b=True)
    return tf.reshape(flat, [batch, length, _shape(kernel)[0]])


@tf.custom_gradient
def add_head_bias(heads, bias):
    """heads [B, N, T, H] + bias [N, 1, H], broadcast over batch and positions.

    The bias gradient sums over the batch, then the positions: two contiguous reductions, where the generic
    broadcast gradient does one strided reduction over both axes (about twice as slow on CPU).
    """
    def gradient(upstream):
        return upstream, tf.reduce_sum(tf.reduce_sum(upstream, axis=0), axis=1, keepdims=True)

    return heads + bias, gradient


def _shape(tensor):
    """Static dimensions where known, dynamic ones otherwise (a `Shape` op only when some are unknown: in a traced
    training step most shapes are static, and every op costs tracing and graph optimisation time; the dynamic ones
    come from one `Unpack` of it, not a slice of 4 ops each)."""
    tensor = tf.convert_to_tensor(tensor)
    static = tensor.shape.as_list()
    if None not in static:
        return static
    dynamic = tf.unstack(tf.shape(tensor), num=len(static))
    return [dim if dim is not None else dynamic[i] for i, dim in enumerate(static)]


# Scores are masked and normalised in float32 whatever the compute dtype, so this cannot overflow.
MASKED_SCORE = -1e30


@keras.saving.register_keras_serializable(package="xlnet_tf")
class TwoStreamRelativeAttention(keras.layers.Layer):
    """Relative attention for the content stream and, optionally, the query stream, with the post-attention
    projection, dropout, residual and LayerNorm (epsilon 1e-12).

    Weights: q, k, v, r, o kernels [d_model, n_head, d_head] without biases. The relative-attention biases and
    the segment embedding are passed in, since the original shares them across layers when `untie_r` is off.

    With `recompute_scores`, training keeps no [B, N, Q, K] tensor (scores, probabilities, their dropout) for
    the backward pass: each stream's attention is recomputed from its query, key, value and position heads.
    """

    def __init__(self, d_model, n_head, d_head, dropout=0.0, dropatt=0.0, initializer_range=0.02,
                 recompute_scores=False, **kwargs):
        super().__init__(**kwargs)
        self.recompute_scores = recompute_scores
        self.d_model = d_model
        self.n_head = n_head
        self.d_head = d_head
        self.dropout = dropout
        self.dropatt = dropatt
        self.initializer_range = initializer_range
        self.attention_dropout = Dropout(dropatt, name="attention_dropout", dtype=self.dtype_policy)
        self.output_dropout = Dropout(dropout, name="output_dropout", dtype=self.dtype_policy)
        self.layer_norm = keras.layers.LayerNormalization(epsilon=1e-12, name="layer_norm", dtype=self.dtype_policy)

    def build(self, input_shape=None):
        initializer = keras.initializers.RandomNormal(stddev=self.initializer_range)
        shape = (self.d_model, self.n_head, self.d_head)
        for name in ("q", "k", "v", "r", "o"):
            setattr(self, name, self.add_weight(name=name, shape=shape, initializer=initializer))
        self.layer_norm.build((None, None, self.d_model))
        self.built = True

    def call(
        self,
        content,
        query=None,
        mems=None,
        *,
        position_encoding,
        content_blocked,
        query_blocked=None,
        content_segment_different=None,
        query_segment_different=None,
        query_positions=None,
        query_valid=None,
        content_positions=None,
        content_bias,
        position_bias,
        segment_bias=None,
        segment_embedding=None,
        training=False,
        return_attention=False,
        memory_heads=None,
        position_heads=None,
        return_heads=False,
        detach_keys=False,
        dropout_seeds=None,
    ):
        """content [B, T, d]; query [B, P, d] or None; mems [B, M, d] or None; position_encoding [C, R, d]
        (C = 2 with bi_data); *_blocked bool [B, T or P, M + T]; *_segment_different bool, same shapes, or
        None for no segment term; query_positions [B, P] int32 and query_valid [B, P] from `target_mapping`;
        biases [n_head, d_head]; segment_embedding [2, n_head, d_head]. content_positions [B, S] int32 or None:
        compute the content stream only at these positions (keys and values still come from every position), as
        a last layer does when only some of its outputs are read; its output is then [B, S, d].
        Inference over consecutive segments may skip recomputing projections: `memory_heads` (k, v) [B, N, M, H],
        the key / value heads of the memory kept from earlier calls (instead of `mems`), and `position_heads`
        [C, N, R', H], the projection of a longer relative encoding whose last R entries are this call's.
        Returns (content, query) outputs, with `return_attention` also the content stream's attention
        probabilities [B, n_head, T (or S), M + T], and with `return_heads` the key and value heads of
        [memory; content] ((k, v), [B, N, M + T, H]). `detach_keys` projects keys and values from the inputs
        without their gradient (the projection weights keep theirs): a segment whose states become memory
        without gradient, as the original's stop_gradient on memory. `dropout_seeds`: from `draw_dropout_seeds`
        (drawn here when None).
        """
        dtype = self.compute_dtype
        seeds = (dropout_seeds or self.draw_dropout_seeds(query is not None)) if training else {}
        # Heads are kept head-major ([B, N, T, H]) so that every attention product is a plain batched matmul.
        keys_input = content if memory_heads is not None or mems is None else tf.concat(
            [tf.cast(mems, content.dtype), content], axis=1)
        if detach_keys:
            keys_input = tf.stop_gradient(keys_input)
        k_head = project_heads(keys_input, tf.cast(self.k, dtype))
        v_head = project_heads(keys_input, tf.cast(self.v, dtype))
        if memory_heads is not None:  # the memory's heads were kept from earlier segments: prepend them
            k_head, v_head = (tf.concat([tf.cast(kept, dtype), heads], 2) for kept, heads in zip(memory_heads,
                                                                                                (k_head, v_head)))
        if position_heads is None:
            r_head = self.project_positions(position_encoding)
        else:
            r_head = tf.cast(position_heads, dtype)[:, :, -_shape(position_encoding)[1]:]
        klen = _shape(k_head)[2]
        qlen = _shape(content)[1]
        # [N, 1, H]: broadcast over B and T. (ExpandDims rather than `[:, None]` here and below: 2 graph nodes, and
        # a Reshape for a gradient, where a strided slice makes 4 and a StridedSliceGrad of 5.)
        biases = [tf.expand_dims(tf.cast(b, dtype), 1) if b is not None else None
                  for b in (content_bias, position_bias, segment_bias)]
        # Only the difference of the two segment embeddings matters: the same-segment score is a constant along
        # each query's row, which the softmax ignores.
        if segment_embedding is None:
            segment_change = None
        else:
            same, different = tf.unstack(segment_embedding, num=2)
            segment_change = tf.cast(different - same, dtype)  # [N, H]

        def attend(q_head, shift, blocked, segment_different, seed, keep_probs=False):
            def scores_to_vectors(operands):
                q, k, v, r, (content_bias, position_bias, segment_bias), change, seed = operands
                position_scores = shift(self._position_scores(add_head_bias(q, position_bias), r))
                return self._attend(q, k, v, position_scores, blocked, segment_different, content_bias,
                                    segment_bias, change, training, seed, keep_probs)

            operands = (q_head, k_head, v_head, r_head, biases, segment_change, seed)
            return recomputed(scores_to_vectors, operands) if training and self.recompute_scores else \
                scores_to_vectors(operands)

        if content_positions is None:
            rows, content_shift = content, lambda s: relative_shift(s, klen)
        else:
            rows = gather_rows(content, content_positions)
            content_blocked = gather_rows(content_blocked, content_positions)
            if content_segment_different is not None:
                content_segment_different = gather_rows(content_segment_different, content_positions)
            content_shift = lambda s: shift_at_positions(s, content_positions, qlen, klen)  # noqa: E731
        num_rows = _shape(rows)[1]
        # A last layer whose outputs nobody reads (content_positions of size 0: a pretraining step's content stream,
        # a long document's earlier segments) computes no content row: the query stream alone, or nothing.
        content_read = return_attention or not (isinstance(num_rows, int) and num_rows == 0)
        if query is None and not content_read:
            return (rows, None) + (((k_head, v_head),) if return_heads else ())
        # Both streams share the query and output projections: one matmul over [content; query] rows each.
        query = None if query is None else tf.cast(query, content.dtype)
        if query is None:
            streams = rows
        else:
            streams = tf.concat([rows, query], axis=1) if content_read else query
        heads = project_heads(streams, tf.cast(self.q, dtype))
        if query is None:
            q_head, g_head = heads, None
        else:
            q_head, g_head = split_streams(heads, num_rows, axis=2) if content_read else (None, heads)
        content_vec, content_probs = (None, None) if not content_read else attend(
            q_head, content_shift, content_blocked, content_segment_different, seeds.get("content"),
            keep_probs=return_attention)
        extra = ((content_probs,) if return_attention else ()) + (((k_head, v_head),) if return_heads else ())
        if query is None:
            return (self._post_attention(content_vec, rows, training, seeds.get("output")), None) + extra

        query_vec, _ = attend(
            g_head,
            lambda s: shift_at_positions(s, query_positions, qlen, klen),
            query_blocked,
            query_segment_different,
            seeds.get("query"),
        )
        # As the original maps the query stream back through `target_mapping`: all-zero rows give zeros.
        query_vec = query_vec * tf.cast(query_valid, dtype)[:, None, :, None]
        if not content_read:
            return (rows, self._post_attention(query_vec, streams, training, seeds.get("output"))) + extra
        out = self._post_attention(tf.concat([content_vec, query_vec], axis=2), streams, training,
                                   seeds.get("output"))
        return split_streams(out, num_rows, axis=1) + extra

    def draw_dropout_seeds(self, two_streams):
        """The seeds of one training call's dropout masks (see `Dropout.draw_seed`): a dict."""
        seeds = {"content": self.attention_dropout.draw_seed()}
        if two_streams:
            seeds["query"] = self.attention_dropout.draw_seed()
        seeds["output"] = self.output_dropout.draw_seed()
        return seeds

    def project_positions(self, position_encoding):
        """[C, R, d] relative encoding -> the position heads [C, N, R, H] (compute dtype)."""
        dtype = self.compute_dtype
        return project_heads(tf.cast(position_encoding, dtype), tf.cast(self.r, dtype))

    def _position_scores(self, q_head, r_head):
        """q_head [B, N, Q, H], r_head [C, N, R, H] -> [B, N, Q, R] (batch halves use their own encoding)."""
        copies = r_head.shape[0]
        if copies == 1:
            return tf.matmul(q_head, r_head, transpose_b=True)  # r broadcast over the batch
        batch, heads, qlen, size = _shape(q_head)
        halves = tf.reshape(q_head, [copies, -1, heads, qlen, size])
        scores = tf.matmul(halves, r_head[:, None], transpose_b=True)
        return tf.reshape(scores, [batch, heads, qlen, _shape(r_head)[2]])

    def _attend(self, q_head, k_head, v_head, position_scores, blocked, segment_different, content_bias,
                segment_bias, segment_change, training, seed=None, return_probs=True):
        scores = tf.matmul(add_head_bias(q_head, content_bias), k_head, transpose_b=True) + position_scores
        if segment_change is not None and segment_different is not None:
            # [B, N, Q, H] x [N, H, 1]: a batched matrix-vector product (faster than the einsum "bnqh,nh->bnq").
            change = tf.matmul(add_head_bias(q_head, segment_bias), tf.expand_dims(segment_change, 2))
            scores += change * tf.expand_dims(tf.cast(segment_different, scores.dtype), 1)
        # Softmax in float32 so that masking and normalisation are exact in bfloat16 / float16 as well.
        scores = tf.cast(scores, tf.float32) * (1.0 / self.d_head**0.5)
        # Added, as the original does, rather than selected: -1e30 absorbs any score (the same result), and
        # the backward pass needs no select over [B, N, Q, K].
        scores += tf.expand_dims(tf.where(blocked, MASKED_SCORE, 0.0), 1)
        probs = tf.cast(tf.nn.softmax(scores, axis=-1), q_head.dtype)
        dropped = self.attention_dropout(probs, training=training, seed=seed)
        return tf.matmul(dropped, v_head), probs if return_probs else None

    def _post_attention(self, attended, residual, training, seed=None):
        out = merge_heads(attended, tf.cast(self.o, attended.dtype))
        out = self.output_dropout(out, training=training, seed=seed)
        return self.layer_norm(out + residual)

    def get_config(self):
        config = super().get_config()
        config.update(
            d_model=self.d_model,
            n_head=self.n_head,
            d_head=self.d_head,
            dropout=self.dropout,
            dropatt=self.dropatt,
            initializer_range=self.initializer_range,
            recompute_scores=self.recompute_scores,
        )
        return config
