"""Model-level behaviour: invariants of the two streams, padding, memory, XLA, precision, round trips."""

import numpy as np
import pytest
import tensorflow as tf

from conftest import permutation_inputs, tiny_config
from xlnet_tf.config import RunOptions
from xlnet_tf.layers import (PositionwiseFeedForward, TwoStreamRelativeAttention, XLNetBlock, attention_blocked,
                             relative_positional_encoding, segment_different)
from xlnet_tf.model import XLNetModel, XLNetPretrainer

EVAL = RunOptions(dropout=0.0, dropatt=0.0)


def make_pretrainer(seed=0, run_options=EVAL, **config_changes):
    """A tiny pretrainer with every weight random (LayerNorm and biases too) so nothing hides behind zeros."""
    keras_seed = np.random.default_rng(seed)
    model = XLNetPretrainer(tiny_config(**config_changes), run_options)
    for variable in model.weights:
        scale = 0.1 if "layer_norm" in variable.path or "bias" in variable.path else 0.3
        base = 1.0 if variable.path.endswith("gamma") else 0.0
        variable.assign(base + scale * keras_seed.standard_normal(variable.shape).astype(np.float32))
    return model


def max_diff(a, b):
    return float(np.max(np.abs(np.asarray(a) - np.asarray(b))))


@pytest.fixture(scope="module")
def pretrainer():
    return make_pretrainer()


def test_target_token_does_not_reach_its_own_query_output(pretrainer, rng):
    inputs = permutation_inputs(rng)
    reference = pretrainer(inputs)
    base, base_content = reference["query_output"].numpy(), reference["sequence_output"].numpy()
    changed_positions, worst = 0, 0.0
    for b in range(3):
        for p, t in enumerate(np.argmax(inputs["target_mapping"][b], axis=-1)):
            changed = {k: v.copy() for k, v in inputs.items()}
            changed["input_ids"][b, t] = 9 + (changed["input_ids"][b, t] - 8) % 50
            out = pretrainer(changed)
            worst = max(worst, max_diff(out["query_output"][b, p], base[b, p]))
            assert max_diff(out["sequence_output"][b], base_content[b]) > 1e-3  # the change is real
            changed_positions += 1
    print(f"{changed_positions} targets changed; own query output max|diff| = {worst:.1e} (bound 1e-6)")
    assert changed_positions == 12 and worst <= 1e-6


def test_hidden_tokens_do_not_reach_content_output(pretrainer, rng):
    inputs = permutation_inputs(rng, pad_lengths=(0, 2, 4))
    base = pretrainer(inputs)["sequence_output"].numpy()
    worst, checked = 0.0, 0
    for b in range(3):
        hidden_from = inputs["perm_mask"][b]
        for j in np.flatnonzero(hidden_from.any(axis=0)):
            changed = {k: v.copy() for k, v in inputs.items()}
            changed["input_ids"][b, j] = 9 + (changed["input_ids"][b, j] - 8) % 50
            out = pretrainer(changed)["sequence_output"].numpy()[b]
            blind = [i for i in range(12) if hidden_from[i, j] and i != j]
            worst = max(worst, max_diff(out[blind], base[b, blind]))
            seeing = [i for i in range(12) if not hidden_from[i, j] and inputs["padding_mask"][b, i]]
            if seeing:  # the last target in the order is seen by nobody
                assert max_diff(out[seeing], base[b, seeing]) > 1e-3
            checked += len(blind)
    print(f"{checked} (position, hidden token) pairs: max|diff| = {worst:.1e} (bound 1e-6)")
    assert checked > 10 and worst <= 1e-6


@pytest.mark.parametrize("left_pad,mem_len", [(True, 0), (False, 5)])
def test_padding_does_not_change_real_tokens(rng, left_pad, mem_len):
    """Each padded row equals the same row run alone without padding (real tokens, both streams, memory)."""
    model = make_pretrainer(run_options=EVAL.replace(mem_len=mem_len))
    pads = (0, 3, 5)
    inputs = permutation_inputs(rng, pad_lengths=pads, left_pad=left_pad)
    mems = None
    if mem_len:
        mems = [rng.standard_normal((3, 4, 32)).astype(np.float32) for _ in range(2)]
    out = model(inputs, mems=mems)
    worst = 0.0
    for b, pad in enumerate(pads):
        real = slice(pad, 12) if left_pad else slice(0, 12 - pad)
        alone = {k: v[b:b + 1] for k, v in inputs.items()}
        alone = {
            "input_ids": alone["input_ids"][:, real], "segment_ids": alone["segment_ids"][:, real],
            "padding_mask": alone["padding_mask"][:, real], "perm_mask": alone["perm_mask"][:, real, real],
            "target_mapping": alone["target_mapping"][:, :, real],
        }
        single = model(alone, mems=None if mems is None else [m[b:b + 1] for m in mems])
        worst = max(worst, max_diff(single["sequence_output"][0], out["sequence_output"][b, real]),
                    max_diff(single["query_output"][0], out["query_output"][b]),
                    max_diff(single["logits"][0], out["logits"][b]))
    print(f"left_pad={left_pad} mem_len={mem_len}: padded vs alone max|diff| = {worst:.1e} (bound 1e-5)")
    assert worst <= 1e-5


def test_memory_flows_into_attention(rng):
    """With mem_len > 0, the next segment's outputs depend on the cached states, and on nothing else."""
    model = make_pretrainer(run_options=EVAL.replace(mem_len=6, reuse_len=4))
    first = permutation_inputs(rng)
    second = permutation_inputs(rng)
    step1 = model(first)
    assert [m.shape for m in step1["new_mems"]] == [(3, 4, 32)] * 2
    # new_mems[i] is layer i's input: layer 0's is the word embedding of the first reuse_len tokens.
    embedded = tf.gather(model.transformer.word_embedding.embeddings, first["input_ids"][:, :4])
    assert max_diff(step1["new_mems"][0], embedded) == 0.0
    with_mems = model(second, mems=step1["new_mems"])
    without = model(second)
    other = model(second, mems=[m + 1.0 for m in step1["new_mems"]])
    effect = max_diff(with_mems["sequence_output"], without["sequence_output"])
    change = max_diff(with_mems["sequence_output"], other["sequence_output"])
    print(f"memory effect on outputs: {effect:.2e}, effect of changing memory: {change:.2e} (bound > 1e-3)")
    assert effect > 1e-3 and change > 1e-3
    assert [m.shape for m in with_mems["new_mems"]] == [(3, 6, 32)] * 2  # concat(4 old, 4 new)[-6:]


@pytest.mark.parametrize("dtype,bound", [("float32", 1e-5), ("bfloat16", 0.05)])
def test_feed_forward_training_and_inference_paths_agree(rng, dtype, bound):
    """Training runs the feed-forward as einsums, inference as flattened MatMul + BiasAdd: without dropout the
    two give the same outputs."""
    layer = PositionwiseFeedForward(32, 48, dtype=dtype)
    layer.build()
    for variable in layer.weights:
        variable.assign(0.3 * rng.standard_normal(variable.shape).astype(np.float32) + 1.0 * variable.path.endswith("gamma"))
    x = tf.cast(rng.standard_normal((3, 5, 32)).astype(np.float32), dtype)
    diff = max_diff(tf.cast(layer(x, training=True), tf.float32), tf.cast(layer(x, training=False), tf.float32))
    print(f"feed-forward {dtype}: training vs inference path max|diff| = {diff:.1e} (bound {bound:.0e})")
    assert diff <= bound and layer(x, training=False).shape == x.shape


@pytest.mark.parametrize("name", ["gelu", "gelu_exact"])
@pytest.mark.parametrize("dtype,bound", [("float32", 1e-5), ("bfloat16", 0.02)])
def test_compiled_activations_match_autodiff(rng, name, dtype, bound):
    """Training runs GELU and its hand-written derivative as XLA-compiled loops: values and gradients agree with
    TensorFlow's autodiff of the plain formula, over a wide range of inputs (relative to the largest value)."""
    from xlnet_tf.layers.feedforward import ACTIVATIONS, TRAINING_ACTIVATIONS

    x = tf.constant((3.0 * rng.standard_normal((4, 7, 48))).astype(np.float32))
    upstream = tf.constant(rng.standard_normal((4, 7, 48)).astype(np.float32))
    results = []
    for activation in (ACTIVATIONS[name], TRAINING_ACTIVATIONS[name]):
        inputs = tf.cast(x, dtype)
        with tf.GradientTape() as tape:
            tape.watch(inputs)
            outputs = activation(inputs)
        gradient = tape.gradient(outputs, inputs, output_gradients=tf.cast(upstream, dtype))
        results.append([tf.cast(outputs, tf.float32), tf.cast(gradient, tf.float32)])
    for what, plain, compiled in zip(("value", "gradient"), *results):
        relative = max_diff(plain, compiled) / float(tf.reduce_max(tf.abs(plain)))
        print(f"{name} {dtype} {what}: compiled vs autodiff max|diff| / max = {relative:.1e} (bound {bound:.0e})")
        assert compiled.shape == x.shape and relative <= bound


def reference_content_attention(layer, h, mems, position_encoding, blocked, segment_different, w, r, s, segment):
    """The content stream written plainly, as the original's `rel_attn_core`: biases added to q, every score term
    by einsum, the relative shift by the index rule, the segment term by select, masking by -1e30 * mask."""
    q_len, k_len = h.shape[1], mems.shape[1] + h.shape[1]
    keys = tf.concat([mems, h], axis=1)
    q = tf.einsum("bid,dnh->binh", h, layer.q)
    k, v = tf.einsum("bjd,dnh->bjnh", keys, layer.k), tf.einsum("bjd,dnh->bjnh", keys, layer.v)
    r_head = tf.einsum("rd,dnh->rnh", position_encoding, layer.r)
    content = tf.einsum("binh,bjnh->bnij", q + w, k)
    by_distance = tf.einsum("binh,rnh->bnir", q + r, r_head)
    position = tf.stack([by_distance[:, :, i, q_len - i:q_len - i + k_len] for i in range(q_len)], axis=2)
    by_segment = tf.einsum("binh,snh->bnis", q + s, segment)
    segment_term = tf.where(segment_different[:, None], by_segment[..., 1:], by_segment[..., :1])
    scores = (content + position + segment_term) / layer.d_head**0.5 - 1e30 * tf.cast(blocked, tf.float32)[:, None]
    attended = tf.einsum("bnij,bjnh->binh", tf.nn.softmax(scores, axis=-1), v)
    return layer.layer_norm(tf.einsum("binh,dnh->bid", attended, layer.o) + h)


def test_attention_gradients_match_a_plain_reference(rng):
    """Outputs and every gradient (input, memory, kernels, biases, segment embedding) of the content stream equal
    those of a plain implementation, with memory, padding, random masks and two segments."""
    batch, q_len, m_len, d_model, heads, d_head = 3, 7, 2, 16, 2, 8
    layer = TwoStreamRelativeAttention(d_model, heads, d_head)
    layer.build()
    for variable in layer.weights:
        base = 1.0 if variable.path.endswith("gamma") else 0.0
        variable.assign(base + 0.3 * rng.standard_normal(variable.shape).astype(np.float32))
    h = tf.constant(rng.standard_normal((batch, q_len, d_model)).astype(np.float32))
    mems = tf.constant(rng.standard_normal((batch, m_len, d_model)).astype(np.float32))
    padding = np.ones((batch, q_len), np.float32)
    padding[1, :2] = 0
    padding[2, :4] = 0
    perm = (rng.random((batch, q_len, q_len)) < 0.3).astype(np.float32)
    blocked, _ = attention_blocked(padding, perm, m_len)
    segments = np.array([[0, 0, 0, 1, 1, 1, 1], [4, 4, 0, 0, 1, 1, 2], [4, 4, 4, 4, 0, 1, 2]], np.int32)
    different = segment_different(segments, m_len)
    encoding = relative_positional_encoding(q_len, m_len + q_len, d_model)
    w, r, s, segment = (tf.constant(0.3 * rng.standard_normal(shape).astype(np.float32))
                        for shape in ((heads, d_head), (heads, d_head), (heads, d_head), (2, heads, d_head)))
    target = tf.constant(rng.standard_normal((batch, q_len, d_model)).astype(np.float32))
    sources = [h, mems, w, r, s, segment, *layer.trainable_variables]
    results = []
    for implementation in ("layer", "reference"):
        with tf.GradientTape() as tape:
            tape.watch(sources[:6])
            if implementation == "layer":
                out, _ = layer(h, None, mems, position_encoding=encoding, content_blocked=blocked,
                               content_segment_different=different, content_bias=w, position_bias=r,
                               segment_bias=s, segment_embedding=segment)
            else:
                out = reference_content_attention(layer, h, mems, encoding[0], blocked, different, w, r, s, segment)
            loss = tf.reduce_sum(out * target)
        results.append((out, tape.gradient(loss, sources)))
    (out, grads), (want, want_grads) = results
    output_diff = max_diff(out, want)
    names = ["input", "mems", "r_w_bias", "r_r_bias", "r_s_bias", "seg_embed"] + [v.path for v in layer.trainable_variables]
    worst, worst_name = max((max_diff(a, b) / (1e-3 + float(np.max(np.abs(b)))), name)
                            for a, b, name in zip(grads, want_grads, names))
    print(f"attention vs plain reference: output max|diff| = {output_diff:.1e} (bound 1e-5); worst gradient "
          f"{worst_name}: max|diff| / max|grad| = {worst:.1e} (bound 1e-5)")
    assert output_diff <= 1e-5 and worst <= 1e-5
    assert all(float(np.max(np.abs(g))) > 0 for g in want_grads[:6])  # every checked gradient is non-trivial


@pytest.mark.parametrize("attn_type,bi_data", [("bi", False), ("uni", False), ("bi", True)])
def test_output_positions_change_nothing_they_keep(rng, attn_type, bi_data):
    """With output_positions the last layer computes the content stream only there: those rows, the query
    stream, the memory, the pretraining loss and every gradient equal the full computation's."""
    run = EVAL.replace(mem_len=5, attn_type=attn_type, bi_data=bi_data)
    model = make_pretrainer(run_options=run)
    inputs = permutation_inputs(rng, batch=4, pad_lengths=(0, 3, 6, 2))
    inputs["target_ids"] = rng.integers(9, 64, size=(4, 4)).astype(np.int32)
    inputs["target_mask"] = np.array([[1, 1, 1, 1], [1, 1, 1, 0], [1, 1, 0, 0], [1, 0, 1, 1]], np.float32)
    mems = [rng.standard_normal((4, 3, 32)).astype(np.float32) for _ in range(2)]
    positions = rng.integers(0, 12, size=(4, 3)).astype(np.int32)  # any rows, repeats allowed
    model_inputs = {k: v for k, v in inputs.items() if k not in ("target_ids", "target_mask")}
    full = model.transformer(model_inputs, mems=mems)
    some = model.transformer(model_inputs, mems=mems, output_positions=positions)
    assert some["sequence_output"].shape == (4, 3, 32)
    worst = max(max_diff(some["sequence_output"], np.take_along_axis(full["sequence_output"].numpy(),
                                                                     positions[..., None], axis=1)),
                max_diff(some["query_output"], full["query_output"]),
                max(max_diff(a, b) for a, b in zip(some["new_mems"], full["new_mems"])))

    variables = model.trainable_variables
    results = []
    for sequence_output in (True, False):
        with tf.GradientTape() as tape:
            out = model(inputs, mems=mems, sequence_output=sequence_output)
        results.append((out, tape.gradient(out["loss"], variables)))
    (full_out, full_grads), (lm_out, lm_grads) = results
    assert "sequence_output" not in lm_out and lm_out["logits"].shape == full_out["logits"].shape
    loss_diff = abs(float(full_out["loss"]) - float(lm_out["loss"]))
    grad_diff = max(max_diff(tf.convert_to_tensor(a), tf.convert_to_tensor(b))
                    for a, b in zip(full_grads, lm_grads) if a is not None)
    print(f"{attn_type} bi_data={bi_data}: rows/query/mems max|diff| = {worst:.1e}, loss diff {loss_diff:.1e}, "
          f"grads max|diff| = {grad_diff:.1e} (bound 1e-5 each)")
    assert worst <= 1e-5 and loss_diff <= 1e-5 and grad_diff <= 1e-5
    assert [a is None for a in full_grads] == [b is None for b in lm_grads]


@pytest.mark.slow
def test_xla_forward_and_training_step(rng):
    model = make_pretrainer(run_options=RunOptions(dropout=0.1, dropatt=0.1, mem_len=4))
    inputs = permutation_inputs(rng)
    inputs["target_ids"] = rng.integers(9, 64, size=(3, 4)).astype(np.int32)
    inputs["target_mask"] = np.array([[1, 1, 1, 1], [1, 1, 1, 0], [1, 1, 0, 0]], np.float32)
    mems = [tf.constant(rng.standard_normal((3, 4, 32)).astype(np.float32)) for _ in range(2)]
    variables = model.trainable_variables

    def step(batch, mems, training):
        with tf.GradientTape() as tape:
            out = model(batch, mems=mems, training=training)
        grads = tape.gradient(out["loss"], variables)
        return out["loss"], grads, out["new_mems"]

    jit_step = tf.function(step, jit_compile=True)
    batch = {k: tf.constant(v) for k, v in inputs.items()}
    loss_xla, grads_xla, new_mems = jit_step(batch, mems, False)
    loss_eager, grads_eager, _ = step(batch, mems, False)
    grad_diff = max(max_diff(a, b) for a, b in zip(grads_xla, grads_eager))
    print(f"XLA vs eager: loss {float(loss_xla):.6f} vs {float(loss_eager):.6f}, grads max|diff| = {grad_diff:.1e} "
          f"(bound 1e-4)")
    assert abs(float(loss_xla) - float(loss_eager)) <= 1e-4 and grad_diff <= 1e-4
    assert all(g is not None for g in grads_xla) and len(new_mems) == 2
    # A training step (dropout on) compiles and updates the weights.
    loss_train, grads_train, _ = jit_step(batch, mems, True)
    assert np.isfinite(float(loss_train)) and all(np.all(np.isfinite(g)) for g in grads_train)


@pytest.mark.parametrize("policy,bound", [("mixed_bfloat16", 0.15), ("mixed_float16", 0.03)])
def test_reduced_precision_masks_stay_exact(rng, policy, bound):
    reference = make_pretrainer()
    model = XLNetPretrainer(reference.config, EVAL, dtype=policy)
    for target, source in zip(model.weights, reference.weights):
        target.assign(source)
    compute = {layer.compute_dtype for layer in model._flatten_layers()}
    print(f"{policy}: compute dtypes of all layers {compute}")
    assert compute == {policy.split("_")[1]}  # every sublayer really computes in reduced precision
    inputs = permutation_inputs(rng)
    out = model(inputs)
    ref = reference(inputs)
    assert out["sequence_output"].dtype == policy.split("_")[1]
    diff = max_diff(tf.cast(out["query_output"], tf.float32), ref["query_output"])
    print(f"{policy}: query_output max|diff| vs float32 = {diff:.3f} (bound {bound})")
    assert diff <= bound and np.all(np.isfinite(out["logits"]))
    # A padded key with a large embedding (its scores far beyond any real one, yet finite in float16) must have
    # no effect at all: the mask, not luck, removes it, and nothing overflows on the way.
    b, t = 1, 0  # row 1 is left-padded by 3
    assert inputs["padding_mask"][b, t] == 0
    big = model.transformer.word_embedding.embeddings
    original = big.numpy()
    poisoned = original.copy()
    poisoned[inputs["input_ids"][b, t]] = 50.0
    big.assign(poisoned)
    changed = model(inputs)
    big.assign(original)
    real = inputs["padding_mask"][b] > 0
    leak = max_diff(tf.cast(changed["sequence_output"][b][real], tf.float32),
                    tf.cast(out["sequence_output"][b][real], tf.float32))
    print(f"{policy}: effect of a padded key of magnitude 50 on real tokens = {leak} (bound 0)")
    assert leak == 0.0


def test_config_round_trip_gives_identical_outputs(rng, pretrainer):
    clone = XLNetPretrainer.from_config(pretrainer.get_config())
    clone.set_weights(pretrainer.get_weights())
    inputs = permutation_inputs(rng)
    assert max_diff(clone(inputs)["logits"], pretrainer(inputs)["logits"]) == 0.0
    for layer in (TwoStreamRelativeAttention(32, 4, 8, dropout=0.1, dropatt=0.2, name="a"),
                  PositionwiseFeedForward(32, 48, activation="gelu_exact", name="f"),
                  XLNetBlock(32, 4, 8, 48, ff_activation="relu", dropout=0.1, name="b")):
        config = layer.get_config()
        assert type(layer).from_config(config).get_config() == config


def test_save_and_load_pretrained_give_identical_outputs(tmp_path, rng, pretrainer):
    inputs = permutation_inputs(rng)
    pretrainer.save_pretrained(tmp_path / "m")
    pretrainer.save_pretrained(tmp_path / "m")  # overwriting an existing directory works (atomic swap)
    loaded = XLNetPretrainer.from_pretrained(tmp_path / "m", dropout=0.0, dropatt=0.0)
    assert max_diff(loaded(inputs)["logits"], pretrainer(inputs)["logits"]) == 0.0
    encoder = XLNetModel.from_pretrained(tmp_path / "m", dropout=0.0, dropatt=0.0)
    assert max_diff(encoder(inputs)["sequence_output"], pretrainer(inputs)["sequence_output"]) == 0.0
    encoder.save_pretrained(tmp_path / "enc")
    with pytest.raises(ValueError, match="no LM head"):
        XLNetPretrainer.from_pretrained(tmp_path / "enc")
    with pytest.raises(ValueError, match="unknown key"):
        XLNetModel.from_pretrained(tmp_path / "enc", mem_lenn=3)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["enc", "m"]  # no temporary directories left


def test_loss_averages_over_real_targets(rng, pretrainer):
    inputs = permutation_inputs(rng)
    inputs["target_ids"] = rng.integers(9, 64, size=(3, 4)).astype(np.int32)
    inputs["target_mask"] = np.array([[1, 1, 1, 1], [1, 1, 0, 0], [1, 0, 0, 0]], np.float32)
    out = pretrainer(inputs)
    logits = out["logits"].numpy().astype(np.float64)
    logp = logits - np.log(np.exp(logits - logits.max(-1, keepdims=True)).sum(-1, keepdims=True)) - logits.max(-1, keepdims=True)
    nll = -np.take_along_axis(logp, inputs["target_ids"][..., None], -1)[..., 0]
    want = (nll * inputs["target_mask"]).sum() / inputs["target_mask"].sum()
    print(f"loss {float(out['loss']):.6f} vs numpy {want:.6f} (bound 1e-5)")
    assert abs(float(out["loss"]) - want) <= 1e-5
