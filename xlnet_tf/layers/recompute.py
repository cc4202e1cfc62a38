"""Rematerialisation: run a function whose activations the backward pass recomputes instead of keeping."""

import tensorflow as tf


def recomputed(fn, inputs):
    """`fn(inputs)`, keeping for the backward pass only `inputs` (TensorFlow's `tf.recompute_grad`).

    `inputs` is any nested structure. Its floating-point tensors are the arguments gradients flow to. Its integer
    tensors (dropout seeds, positions) travel as float64 arguments, exact below 2**53, and are cast back inside:
    `tf.recompute_grad` makes its arguments wait for the backward pass, so what the recomputation derives from
    them (a dropout mask of a static shape, from its seed) is computed then, not early or shared with the forward
    pass's and kept alive in between. Every other leaf (bool masks, None, Python values) is held fixed. `fn` must
    give the same result when run again on the same inputs: random seeds are drawn outside it and passed in.
    Returns `fn`'s result (a nested structure of tensors, None allowed).
    """
    flat = tf.nest.flatten(inputs)
    slots = [i for i, leaf in enumerate(flat) if tf.is_tensor(leaf) and (leaf.dtype.is_floating or leaf.dtype.is_integer)]
    output_structure = []

    def run(*arguments):
        leaves = list(flat)
        for slot, value in zip(slots, arguments):
            leaves[slot] = value if flat[slot].dtype.is_floating else tf.cast(value, flat[slot].dtype)
        result = fn(tf.nest.pack_sequence_as(inputs, leaves))
        output_structure[:] = [result]
        return [leaf for leaf in tf.nest.flatten(result) if leaf is not None]

    arguments = [flat[slot] if flat[slot].dtype.is_floating else tf.cast(flat[slot], tf.float64) for slot in slots]
    tensors = iter(tf.recompute_grad(run)(*arguments))
    leaves = [None if leaf is None else next(tensors) for leaf in tf.nest.flatten(output_structure[0])]
    return tf.nest.pack_sequence_as(output_structure[0], leaves)
