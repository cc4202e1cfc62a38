"""Dropout with 16-bit random numbers: a faster drop-in for `keras.layers.Dropout` in training steps.

Keras' TensorFlow dropout draws one float32 uniform per element (Philox `StatelessRandomUniformV2`), then
compares, multiplies and selects. Here each 32-bit Philox output is split into two 16-bit integers
(`tf.bitcast` uint32 -> uint16), so the generator does half the work and the random tensor is half the
bytes. An element is kept iff its 16-bit number `bits >= threshold`, with `threshold = round(rate * 65536)`;
the keep probability is therefore exactly `(65536 - threshold) / 65536`, and kept values are multiplied by
`scale = 65536 / (65536 - threshold)`, so `E[output] == input` exactly (up to the rounding of `scale` in
the input's dtype). The effective drop rate is `threshold / 65536` (0.100006 for 0.1), within 2**-17 of
the requested rate.

The mask is applied as `x * (cast(keep) * scale)`: in a forward+backward micro-benchmark (float32
[8, 128, 3072], tf.function, 2 CPU cores) it was as fast as a `tf.custom_gradient` version and faster than
`tf.where(keep, x * scale, 0)`, and about 1.5x faster than `keras.layers.Dropout`.
"""

import keras
import numpy as np
import tensorflow as tf

_LEVELS = 65536  # number of distinct 16-bit values


class Dropout(keras.layers.Layer):
    """Drop-in replacement for `keras.layers.Dropout(rate, seed=...)` (no `noise_shape`).

    Takes a tensor of any rank and shape (dimensions may be unknown inside a `tf.function`) and returns one
    of the same shape and dtype: the input itself when not training or when `rate == 0`, otherwise the input
    with each element independently zeroed with probability `threshold / 65536` and the others scaled by
    `scale`. Like keras' layer, it holds a `keras.random.SeedGenerator` whose state is a non-trainable
    variable (in `layer.variables`, not in `layer.weights`) that advances by one on every training call.
    """

    def __init__(self, rate, seed=None, **kwargs):
        super().__init__(**kwargs)
        if not 0 <= rate < 1:
            raise ValueError(f"Dropout rate must be in [0, 1). Received: rate={rate}")
        self.rate = rate
        self.seed = seed
        # A rate within 2**-17 of 1 would round to dropping everything (and an infinite scale): keep 1 level.
        self.threshold = min(int(round(rate * _LEVELS)), _LEVELS - 1)
        self.scale = _LEVELS / (_LEVELS - self.threshold)
        if rate > 0:
            self.seed_generator = keras.random.SeedGenerator(seed)
        self.supports_masking = True

    @property
    def effective_rate(self):
        """The drop probability actually used: `threshold / 65536`."""
        return self.threshold / _LEVELS

    def _stateless_seed(self):
        # What keras' TensorFlow backend does for its stateless ops (`draw_seed` then `_cast_seed` in
        # keras/src/backend/tensorflow/random.py), written with public API only: `SeedGenerator.next()`
        # returns the current int64 state and advances it; the stateless ops want int32 seeds (for XLA).
        seed = self.seed_generator.next()
        return tf.cast(tf.math.floormod(seed, tf.int32.max - 1), tf.int32)

    def _random_bits(self, inputs):
        """uint16 random numbers with the shape of `inputs`, two from each 32-bit Philox output."""
        static = inputs.shape.as_list()
        dynamic = tf.shape(inputs)
        if not static:
            rows, last = 1, 1
        else:
            last = static[-1] if static[-1] is not None else dynamic[-1]
            leading = static[:-1]
            rows = int(np.prod(leading)) if None not in leading else tf.reduce_prod(dynamic[:-1])
        half = (last + 1) // 2
        words = tf.random.stateless_uniform(
            [rows, half], seed=self._stateless_seed(), minval=None, maxval=None, dtype=tf.uint32
        )
        bits = tf.reshape(tf.bitcast(words, tf.uint16), [rows, 2 * half])
        if not (isinstance(last, int) and last % 2 == 0):
            bits = bits[:, :last]
        bits = tf.reshape(bits, static if None not in static else dynamic)
        bits.set_shape(inputs.shape)
        return bits

    def call(self, inputs, training=False):
        if not training or self.threshold == 0:
            return inputs
        keep = self._random_bits(inputs) >= tf.constant(self.threshold, tf.uint16)
        return inputs * (tf.cast(keep, inputs.dtype) * tf.cast(self.scale, inputs.dtype))

    def compute_output_shape(self, input_shape):
        return input_shape

    def get_config(self):
        return {**super().get_config(), "rate": self.rate, "seed": self.seed}
