"""The 16-bit dropout: identity outside training, exact keep rate and scale, gradient, shapes, dtypes, seeds."""

import numpy as np
import pytest
import tensorflow as tf

from xlnet_tf.layers.dropout import Dropout


def non_weight_variables(layer):
    weights = {id(w) for w in layer.weights}
    return [v for v in layer.variables if id(v) not in weights]


def reference_keep(state, shape, threshold):
    """The mask recomputed from the seed state, independently of the layer: 32-bit ThreeFry words (XLA's, as
    `tf.random.stateless_uniform(alg="threefry")` draws them under jit_compile), low halves for the first
    ceil(last / 2) elements of each row, high halves for the rest, compared in numpy."""
    seed = tf.constant(np.asarray(state, np.int64) % (2**31 - 2), tf.int32)
    half = (shape[-1] + 1) // 2
    draw = tf.function(lambda s: tf.random.stateless_uniform(
        list(shape[:-1]) + [half], seed=s, minval=None, maxval=None, dtype=tf.uint32, alg="threefry"), jit_compile=True)
    words = draw(seed).numpy()
    bits = np.concatenate([words & 0xFFFF, words >> 16], axis=-1)[..., : shape[-1]]
    return bits >= threshold


def test_identity_when_not_training_or_rate_zero(rng):
    x = tf.constant(rng.normal(size=(4, 6, 10)).astype(np.float32))
    layer = Dropout(0.1, seed=1)
    state = layer.seed_generator.state.numpy().copy()
    for training in (False, None):
        y = layer(x, training=training)
        diff = float(tf.reduce_max(tf.abs(y - x)))
        print(f"training={training}: max |y - x| {diff}, bound == 0")
        assert diff == 0
    assert np.array_equal(layer.seed_generator.state.numpy(), state), "inference must not advance the seed"
    y = Dropout(0.0)(x, training=True)
    diff = float(tf.reduce_max(tf.abs(y - x)))
    print(f"rate=0, training=True: max |y - x| {diff}, bound == 0")
    assert diff == 0


def test_keep_fraction_scale_and_mean():
    layer = Dropout(0.1, seed=42)
    expected_keep = 1 - layer.threshold / 65536
    print(f"threshold {layer.threshold}, effective rate {layer.effective_rate:.6f}, scale {layer.scale:.7f}")
    assert layer.threshold == 6554 and layer.effective_rate == pytest.approx(0.100006, abs=1e-6)
    assert layer.scale == 65536 / (65536 - 6554)
    state = layer.seed_generator.state.numpy().copy()
    y = layer(tf.ones([1000, 1000]), training=True).numpy()
    kept = y != 0
    frac = kept.mean()
    print(f"keep fraction {frac:.5f}, bound |frac - {expected_keep:.5f}| <= 0.002")
    assert abs(frac - expected_keep) <= 0.002
    scale32 = np.float32(layer.scale)
    wrong_kept = int(np.sum(y[kept] != scale32))
    print(f"kept values != float32(scale) {scale32:.7f}: {wrong_kept}, bound == 0")
    assert wrong_kept == 0
    wrong_dropped = int(np.sum(y[~kept] != 0))
    print(f"dropped values != 0: {wrong_dropped}, bound == 0")
    assert wrong_dropped == 0
    mean = y.astype(np.float64).mean()
    print(f"sample mean {mean:.5f}, bound |mean - 1| <= 0.003")
    assert abs(mean - 1) <= 0.003
    # The mask is exactly the documented draw: uint32 Philox outputs bitcast to two uint16 each.
    mismatches = int(np.sum(reference_keep(state, (1000, 1000), layer.threshold) != kept))
    print(f"mask entries differing from the uint32->2x uint16 reference draw: {mismatches}, bound == 0")
    assert mismatches == 0


def test_gradient_is_mask_times_scale(rng):
    x = tf.constant(rng.uniform(0.5, 2.0, size=(16, 24, 40)).astype(np.float32))
    w = tf.constant(rng.normal(size=(16, 24, 40)).astype(np.float32))
    layer = Dropout(0.3, seed=5)
    with tf.GradientTape() as tape:
        tape.watch(x)
        y = layer(x, training=True)
        loss = tf.reduce_sum(y * w)
    grad = tape.gradient(loss, x).numpy()
    expected = (w * y / x).numpy()
    err = np.max(np.abs(grad - expected))
    tol = 1e-5
    print(f"max |grad - w*y/x| {err:.2e}, bound <= {tol}")
    assert err <= tol
    exact = (w.numpy() * np.where(y.numpy() != 0, np.float32(layer.scale), np.float32(0)))
    err = np.max(np.abs(grad - exact))
    print(f"max |grad - w*mask*scale| {err}, bound == 0")
    assert err == 0


def test_odd_last_dimension_matches_reference():
    layer = Dropout(0.5, seed=9)
    state = layer.seed_generator.state.numpy().copy()
    y = layer(tf.ones([3, 5, 7]), training=True).numpy()
    print(f"output shape {y.shape}, expected (3, 5, 7)")
    assert y.shape == (3, 5, 7)
    mismatches = int(np.sum(reference_keep(state, (3, 5, 7), layer.threshold) != (y != 0)))
    print(f"odd last dim: mask entries differing from reference {mismatches}, bound == 0")
    assert mismatches == 0
    values = set(np.unique(y).tolist())
    print(f"distinct values {sorted(values)}, expected subset of {{0, {np.float32(layer.scale)}}}")
    assert values <= {0.0, float(np.float32(layer.scale))}


def test_dynamic_shape_inside_tf_function():
    layer = Dropout(0.25, seed=11)
    fn = tf.function(lambda x: layer(x, training=True), input_signature=[tf.TensorSpec([None, None, 9])])
    static = fn.get_concrete_function().structured_outputs.shape.as_list()
    print(f"traced output shape {static}, expected [None, None, 9]")
    assert static == [None, None, 9]
    for shape in [(2, 3, 9), (5, 1, 9), (1, 7, 9)]:
        state = layer.seed_generator.state.numpy().copy()
        y = fn(tf.ones(shape)).numpy()
        mismatches = int(np.sum(reference_keep(state, shape, layer.threshold) != (y != 0)))
        print(f"dynamic {shape}: output shape {y.shape}, mask mismatches vs reference {mismatches}, bound == 0")
        assert y.shape == shape and mismatches == 0
        assert set(np.unique(y).tolist()) <= {0.0, float(np.float32(layer.scale))}


def test_bfloat16_keeps_dtype():
    x = tf.ones([64, 128], tf.bfloat16)
    layer = Dropout(0.1, seed=3, dtype="bfloat16")
    y = layer(x, training=True)
    print(f"bfloat16 policy: output dtype {y.dtype.name}, expected bfloat16")
    assert y.dtype == tf.bfloat16
    y32 = tf.cast(y, tf.float32).numpy()
    scale_bf16 = float(tf.cast(tf.cast(layer.scale, tf.bfloat16), tf.float32))
    values = set(np.unique(y32).tolist())
    print(f"bfloat16 distinct values {sorted(values)}, expected subset of {{0, {scale_bf16}}}")
    assert values <= {0.0, scale_bf16} and 0.0 in values
    y = Dropout(0.1, seed=3, dtype="mixed_bfloat16")(tf.ones([8, 8]), training=True)
    print(f"mixed_bfloat16 policy, float32 input: output dtype {y.dtype.name}, expected bfloat16")
    assert y.dtype == tf.bfloat16
    y = Dropout(0.1, seed=3).call(x, training=True)
    print(f"call() on a bfloat16 tensor directly: output dtype {y.dtype.name}, expected bfloat16")
    assert y.dtype == tf.bfloat16


def test_seeds_and_state():
    x = tf.ones([32, 64])
    a, b = Dropout(0.2, seed=123), Dropout(0.2, seed=123)
    mask_a, mask_b = a(x, training=True).numpy() != 0, b(x, training=True).numpy() != 0
    differing = int(np.sum(mask_a != mask_b))
    print(f"same seed, two layers: differing mask entries {differing}, bound == 0")
    assert differing == 0

    state_vars = non_weight_variables(a)
    print(f"non-weight variables {[v.path for v in state_vars]}, weights {len(a.weights)}, expected >= 1 and 0")
    assert state_vars and not a.weights and not a.trainable_weights
    before = [v.numpy().copy() for v in state_vars]
    mask_next = a(x, training=True).numpy() != 0
    differing = int(np.sum(mask_next != mask_a))
    print(f"successive calls: differing mask entries {differing} of {mask_a.size}, bound > 0")
    assert differing > 0
    changed = any(not np.array_equal(v.numpy(), old) for v, old in zip(state_vars, before))
    print(f"state {before[0].tolist()} -> {state_vars[0].numpy().tolist()}, expected changed")
    assert changed

    # Inside a tf.function (the training step), the state advances on every call too.
    step = tf.function(lambda t: a(t, training=True))
    start = a.seed_generator.state.numpy().copy()
    m1, m2 = step(x).numpy() != 0, step(x).numpy() != 0
    end = a.seed_generator.state.numpy()
    differing = int(np.sum(m1 != m2))
    print(f"tf.function: state {start.tolist()} -> {end.tolist()} after 2 calls (bound +2), differing masks {differing} > 0")
    assert end[1] - start[1] == 2 and differing > 0


@pytest.mark.parametrize("rate", [1.0, -0.1, 1.5])
def test_invalid_rate_raises(rate):
    with pytest.raises(ValueError, match=str(rate)):
        Dropout(rate)
    print(f"rate={rate}: ValueError raised")


def test_config_round_trip():
    layer = Dropout(0.15, seed=77, name="my_dropout")
    config = layer.get_config()
    print(f"config rate {config['rate']}, seed {config['seed']}, name {config['name']}")
    assert config["rate"] == 0.15 and config["seed"] == 77 and config["name"] == "my_dropout"
    clone = Dropout.from_config(config)
    assert (clone.rate, clone.seed, clone.name, clone.threshold) == (0.15, 77, "my_dropout", layer.threshold)
    x = tf.ones([16, 16])
    differing = int(np.sum((clone(x, training=True).numpy() != 0) != (layer(x, training=True).numpy() != 0)))
    print(f"clone vs original first mask: differing entries {differing}, bound == 0")
    assert differing == 0
