"""Attention masks and segment matrices as pure functions of tensors.

One polarity everywhere: a boolean `blocked[b, i, j]` is True where query position i may NOT attend to key
position j (the original's `perm_mask` polarity). Keys are `[mems; current segment]`: key j >= mlen is the
current segment's position j - mlen. Memory keys are visible unless a memory mask marks them as padding, and
count as segment 0.
"""

import tensorflow as tf


def causal_blocked(qlen, mlen, same_length=False):
    """Causal ("uni") mask [qlen, mlen + qlen]: query i (at absolute position mlen + i) may not see later keys.

    With `same_length`, keys before position i are hidden as well, so each query sees mlen + 1 keys, as the
    original's `_create_mask` (which also does this when mlen is 0).
    """
    query = tf.range(qlen)[:, None]
    key = tf.range(mlen + qlen)[None, :]
    blocked = key > query + mlen
    if same_length:
        blocked = tf.logical_or(blocked, key < query)
    return blocked


def example_blocked(example_ids):
    """[B, T] int example ids of packed rows -> [B, T, T] bool: True where query i and key j belong to different
    examples (a block-diagonal mask: each example attends only to itself)."""
    example_ids = tf.convert_to_tensor(example_ids)
    return tf.not_equal(example_ids[:, :, None], example_ids[:, None, :])


def attention_blocked(padding_mask, perm_mask=None, mlen=0, attn_type="bi", same_length=False, mems_mask=None,
                      example_ids=None):
    """Masks for both streams, as the original's `attn_mask` and `non_tgt_mask`.

    padding_mask: [B, T], 1 = real token; perm_mask: optional [B, T, T], 1 = i may not attend to j;
    mems_mask: optional [B, mlen], 1 = a real memory position (None: every memory position is visible, as
    the original); example_ids: optional [B, T] (packed rows: a token attends only to its own example's).
    Returns (content_blocked, query_blocked), both bool [B, T, mlen + T]: the query stream's mask is the
    union of padding, permutation and causal masks; the content stream's is the same but every position may
    always attend to itself.
    """
    padding_mask = tf.convert_to_tensor(padding_mask)
    qlen = tf.shape(padding_mask)[1]
    batch = tf.shape(padding_mask)[0]
    data = tf.equal(padding_mask, tf.zeros([], padding_mask.dtype))[:, None, :]  # [B, 1, T]: padding keys
    if perm_mask is not None:
        perm_mask = tf.convert_to_tensor(perm_mask)
        data = tf.logical_or(data, tf.not_equal(perm_mask, tf.zeros([], perm_mask.dtype)))
    if example_ids is not None:
        data = tf.logical_or(data, example_blocked(example_ids))
    data = tf.broadcast_to(data, [batch, qlen, qlen])
    if mems_mask is None:
        memory = tf.zeros([batch, qlen, mlen], tf.bool)
    else:
        mems_mask = tf.convert_to_tensor(mems_mask)
        memory = tf.broadcast_to(tf.equal(mems_mask, tf.zeros([], mems_mask.dtype))[:, None, :], [batch, qlen, mlen])
    data = tf.concat([memory, data], axis=2)
    if attn_type == "uni":
        query_blocked = tf.logical_or(data, causal_blocked(qlen, mlen, same_length)[None])
    elif attn_type == "bi":
        query_blocked = data
    else:
        raise ValueError(f"attn_type must be 'bi' or 'uni', got {attn_type!r}")
    itself = tf.equal(tf.range(mlen + qlen)[None, :], tf.range(qlen)[:, None] + mlen)  # [T, K]
    content_blocked = tf.logical_and(query_blocked, tf.logical_not(itself)[None])
    return content_blocked, query_blocked


def segment_different(segment_ids, mlen=0):
    """[B, T, mlen + T] bool: True where query i and key j lie in different segments (memory = segment 0)."""
    segment_ids = tf.convert_to_tensor(segment_ids)
    batch = tf.shape(segment_ids)[0]
    keys = tf.concat([tf.zeros([batch, mlen], segment_ids.dtype), segment_ids], axis=1)
    return tf.not_equal(segment_ids[:, :, None], keys[:, None, :])


def target_positions(target_mapping):
    """From one-hot `target_mapping` [B, P, T] to (positions [B, P] int32, valid [B, P] float).

    Rows must be one-hot (a target) or all zero (a padded target, valid = 0), as the original data produces.
    """
    target_mapping = tf.convert_to_tensor(target_mapping)
    positions = tf.argmax(target_mapping, axis=-1, output_type=tf.int32)
    valid = tf.reduce_sum(target_mapping, axis=-1)
    return positions, valid


def gather_rows(matrix, positions):
    """matrix [B, T, ...], positions [B, P] -> [B, P, ...]: each target's row of a per-position matrix."""
    return tf.gather(matrix, positions, axis=1, batch_dims=1)


def cache_mask(mems_mask, padding_mask, mem_len):
    """The memory mask that goes with `cache_memory` (reuse_len 0): [B, M] and [B, T] (1 = real) -> the last
    `mem_len` of their concatenation, [B, min(M + T, mem_len)]."""
    padding_mask = tf.convert_to_tensor(padding_mask)
    if mems_mask is not None:
        padding_mask = tf.concat([tf.cast(mems_mask, padding_mask.dtype), padding_mask], axis=1)
    return padding_mask[:, -mem_len:]

