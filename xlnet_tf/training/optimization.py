"""AdamW with XLNet's choices: decoupled weight decay except on LayerNorm and biases, epsilon 1e-6, a linear
warm-up then linear decay, and optional layer-wise learning-rate decay applied to learning rates."""

from __future__ import annotations

import re

import keras
import tensorflow as tf

NO_WEIGHT_DECAY = ("layer_norm", "bias")  # matched against variable paths (r_w_bias, lm_bias, ... included)


@keras.saving.register_keras_serializable(package="xlnet_tf")
class WarmupLinearDecay(keras.optimizers.schedules.LearningRateSchedule):
    """lr(step) = peak * step / warmup for step < warmup, then linear decay to `end_ratio * peak` at total_steps."""

    def __init__(self, peak, warmup_steps, total_steps, end_ratio=0.0):
        self.peak = float(peak)
        self.warmup_steps = int(warmup_steps)
        self.total_steps = int(total_steps)
        self.end_ratio = float(end_ratio)

    def __call__(self, step):
        step = tf.cast(step, tf.float32)
        warmup = tf.cast(self.warmup_steps, tf.float32)
        total = tf.cast(max(self.total_steps, self.warmup_steps + 1), tf.float32)
        warm = self.peak * step / tf.maximum(warmup, 1.0)
        progress = tf.clip_by_value((step - warmup) / (total - warmup), 0.0, 1.0)
        decay = self.peak * (1.0 - (1.0 - self.end_ratio) * progress)
        return tf.where(step < warmup, warm, decay)

    def get_config(self):
        return {"peak": self.peak, "warmup_steps": self.warmup_steps, "total_steps": self.total_steps,
                "end_ratio": self.end_ratio}


def layer_of(path, n_layer):
    """Depth of a variable for layer-wise decay: 0 for embeddings (and anything before the blocks), m + 1 for
    block `layer_m`, n_layer + 1 for heads above the encoder."""
    match = re.search(r"(?:^|/)layer_(\d+)/", path)
    if match:
        return int(match.group(1)) + 1
    if "transformer/" in path or path.startswith(("word_embedding", "mask_emb", "r_", "seg_embed")):
        return 0
    return n_layer + 1


def layer_decay_multiplier(path, n_layer, decay):
    """Learning-rate factor for layer-wise decay: block m (1-based, m = n_layer at the top) gets
    decay^(n_layer - m), the embeddings decay^n_layer (the lowest) and the heads above the encoder 1."""
    return float(decay) ** (n_layer - min(layer_of(path, n_layer), n_layer))


class XLNetAdamW(keras.optimizers.AdamW):
    """keras AdamW whose weight decay skips LayerNorm and biases (by variable path) and whose learning rate,
    the decoupled weight-decay step included, is multiplied per variable by `lr_multiplier(path)`.

    Under a tf.distribute strategy, `apply` takes gradients already summed over the replicas: the training step
    all-reduces once, before clipping by the global norm. (Keras 3's TensorFlow optimizer, called in a replica
    context, would sum them again: `_backend_update_step` -> `_all_reduce_sum_gradients`, a
    `ReplicaContext.all_reduce`; here that is the identity. It then updates every replica's copy of the
    variables, `extended.update`, as before.)"""

    def __init__(self, *args, lr_multiplier=None, **kwargs):
        super().__init__(*args, **kwargs)
        self.lr_multiplier = lr_multiplier
        self._factors = {}
        self._decayed = {}
        self._shared = {}  # per-step scalars of one `apply` call (see `_step_scalars`)

    def build(self, variables):
        super().build(variables)
        for variable in variables:
            key = self._var_key(variable)
            self._factors[key] = 1.0 if self.lr_multiplier is None else float(self.lr_multiplier(variable.path))
            self._decayed[key] = not any(name in variable.path for name in NO_WEIGHT_DECAY)

    def factor(self, variable):
        """The learning-rate multiplier this optimizer applies to `variable`."""
        return self._factors.get(self._var_key(variable), 1.0)

    def apply(self, grads, trainable_variables=None):
        try:
            return super().apply(grads, trainable_variables)
        finally:
            self._shared = {}  # `_step_scalars`' tensors belong to this call's graphs only

    def _step_scalars(self, learning_rate, variable):
        """(learning rate, weight decay, Adam's two bias corrections, beta_1, beta_2, epsilon) in `variable`'s
        dtype: the same for every variable of a step, so built once per `apply` for each graph, device and dtype
        (a tiny model's optimizer made about 18 of its 25 ops per variable here, in every trace and every step).
        Eagerly, where nothing is traced, built afresh for each variable."""
        dtype = variable.dtype
        key = None if tf.executing_eagerly() else (id(tf.compat.v1.get_default_graph()), variable.device, dtype,
                                                   id(learning_rate))
        if key in self._shared:
            return self._shared[key]
        step = tf.cast(self.iterations + 1, dtype)
        beta_1, beta_2 = tf.cast(self.beta_1, dtype), tf.cast(self.beta_2, dtype)
        scalars = (tf.cast(learning_rate, dtype), tf.cast(self.weight_decay or 0.0, dtype),
                   tf.sqrt(1 - tf.pow(beta_2, step)), 1 - tf.pow(beta_1, step), beta_1, beta_2,
                   tf.cast(self.epsilon, dtype))
        if key is not None:
            self._shared[key] = scalars
        return scalars

    def update_step(self, gradient, variable, learning_rate):
        dtype = variable.dtype
        rate, weight_decay, correction_2, correction_1, beta_1, beta_2, epsilon = self._step_scalars(
            learning_rate, variable)
        learning_rate = rate * self.factor(variable)
        decayed = self.weight_decay is not None and self._decayed.get(self._var_key(variable), False)
        decay_rate = learning_rate * weight_decay if decayed else tf.constant(0.0, dtype)
        if self.amsgrad or isinstance(gradient, tf.IndexedSlices) or not hasattr(variable, "handle"):
            if decayed:
                variable.assign_sub(variable * decay_rate)
            return super().update_step(gradient, variable, learning_rate)
        # keras AdamW's arithmetic (decay first; bias correction; epsilon outside the square root) as one
        # XLA-compiled pass over variable, m, v and the gradient instead of about five.
        alpha = learning_rate * correction_2 / correction_1
        index = self._get_variable_index(variable)
        adamw_update(_handle(variable), _handle(self._momentums[index]), _handle(self._velocities[index]),
                     tf.cast(gradient, dtype), alpha, decay_rate, beta_1, beta_2, epsilon)

    def _all_reduce_sum_gradients(self, grads_and_vars):
        return list(grads_and_vars)

    def _apply_weight_decay(self, variables):
        """Nothing here: `update_step` applies the decay in the same pass as the Adam update."""


@tf.function(jit_compile=True, autograph=False)
def adamw_update(variable, m, v, gradient, alpha, decay_rate, beta_1, beta_2, epsilon):
    """In place: variable -= decay_rate * variable, then Adam's step with m, v and the bias-corrected rate `alpha`,
    in the order of keras' AdamW and TensorFlow's ApplyAdam kernel. variable, m, v: resource handles of
    variables shaped like `gradient` (handles, so that a strategy's local copies are the ones updated)."""
    def read(handle):
        return tf.raw_ops.ReadVariableOp(resource=handle, dtype=gradient.dtype)

    value, m_old, v_old = read(variable), read(m), read(v)
    value = value - value * decay_rate
    m_new = m_old + (gradient - m_old) * (1 - beta_1)
    v_new = v_old + (gradient * gradient - v_old) * (1 - beta_2)
    tf.raw_ops.AssignVariableOp(resource=m, value=m_new)
    tf.raw_ops.AssignVariableOp(resource=v, value=v_new)
    tf.raw_ops.AssignVariableOp(resource=variable, value=value - m_new * alpha / (tf.sqrt(v_new) + epsilon))


def _handle(variable):
    """The resource handle of a keras or tf.Variable (the local copy inside a strategy's update)."""
    return (variable.value if isinstance(variable, keras.Variable) else variable).handle
