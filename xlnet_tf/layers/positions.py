"""Relative positional encoding as pure functions (Transformer-XL / XLNet sinusoids)."""

import tensorflow as tf


def relative_distances(qlen, klen, attn_type="bi", clamp_len=-1, backward=False):
    """The relative distances that index the encoding, float32 [R].

    "bi": klen, klen - 1, ..., -qlen + 1 (R = klen + qlen); "uni": klen, ..., 0 (R = klen + 1).
    `backward` negates them (the second half of a `bi_data` batch). `clamp_len` >= 0 clamps them to [-clamp_len, clamp_len].
    """
    klen = tf.cast(klen, tf.float32)
    qlen = tf.cast(qlen, tf.float32)
    if attn_type == "bi":
        end = -qlen
    elif attn_type == "uni":
        end = tf.constant(-1.0)
    else:
        raise ValueError(f"attn_type must be 'bi' or 'uni', got {attn_type!r}")
    distances = tf.range(klen, end, -1.0)
    if backward:
        distances = -distances
    if clamp_len >= 0:
        distances = tf.clip_by_value(distances, -float(clamp_len), float(clamp_len))
    return distances


def sinusoid_encoding(distances, d_model):
    """[R] distances -> [R, d_model]: [sin(d * f), cos(d * f)] with f = 1 / 10000^(2k / d_model)."""
    inv_freq = 1.0 / tf.pow(10000.0, tf.range(0, d_model, 2.0) / float(d_model))
    angles = distances[:, None] * inv_freq[None, :]
    return tf.concat([tf.sin(angles), tf.cos(angles)], axis=-1)


def relative_positional_encoding(qlen, klen, d_model, attn_type="bi", bi_data=False, clamp_len=-1):
    """[C, R, d_model] float32 with C = 2 when `bi_data` (forward, backward halves of the batch) else 1."""
    forward = sinusoid_encoding(relative_distances(qlen, klen, attn_type, clamp_len), d_model)
    if not bi_data:
        return forward[None]
    backward = sinusoid_encoding(relative_distances(qlen, klen, attn_type, clamp_len, backward=True), d_model)
    return tf.stack([forward, backward], axis=0)
