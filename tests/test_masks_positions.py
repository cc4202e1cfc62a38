"""Masks and positions are pure functions: checked against direct element-by-element definitions."""

import numpy as np
import pytest

from xlnet_tf.layers import masks, positions
from xlnet_tf.layers.attention import relative_shift, shift_at_positions


def reference_blocked(padding, perm, mlen, attn_type, same_length):
    """The original's rules written loop by loop (1 = blocked)."""
    batch, qlen = padding.shape
    klen = mlen + qlen
    query = np.zeros((batch, qlen, klen), bool)
    for b in range(batch):
        for i in range(qlen):
            for j in range(klen):
                blocked = False
                if j >= mlen:
                    t = j - mlen
                    blocked = padding[b, t] == 0 or (perm is not None and perm[b, i, t] == 1)
                if attn_type == "uni":
                    blocked |= j > i + mlen
                    if same_length:
                        blocked |= j < i
                query[b, i, j] = blocked
    content = query.copy()
    for i in range(qlen):
        content[:, i, i + mlen] = False
    return content, query


@pytest.mark.parametrize("attn_type,same_length,mlen", [("bi", False, 0), ("bi", False, 3), ("uni", False, 2),
                                                       ("uni", True, 4), ("uni", True, 0)])
def test_attention_blocked_matches_definition(rng, attn_type, same_length, mlen):
    batch, qlen = 3, 7
    padding = (rng.random((batch, qlen)) > 0.3).astype(np.float32)
    perm = (rng.random((batch, qlen, qlen)) < 0.4).astype(np.float32)
    for perm_mask in (perm, None):
        content, query = masks.attention_blocked(padding, perm_mask, mlen, attn_type, same_length)
        want_content, want_query = reference_blocked(padding, perm_mask, mlen, attn_type, same_length)
        mismatches = int(np.sum(content.numpy() != want_content) + np.sum(query.numpy() != want_query))
        print(f"{attn_type} same_length={same_length} mlen={mlen} perm={perm_mask is not None}: "
              f"mismatches={mismatches} (bound 0)")
        assert mismatches == 0


def test_segment_different_treats_memory_as_segment_zero():
    segment = np.array([[0, 0, 1, 2], [1, 1, 1, 4]], np.int32)
    diff = masks.segment_different(segment, mlen=2).numpy()
    assert diff.shape == (2, 4, 6)
    assert not diff[0, 0, 0] and diff[0, 2, 0] and diff[1, 0, 1]  # memory = segment 0
    assert not diff[0, 2, 4] and diff[0, 3, 4] and diff[1, 3, 2]


def test_target_positions_and_rows():
    mapping = np.zeros((2, 3, 5), np.float32)
    mapping[0, 0, 4] = mapping[0, 1, 1] = mapping[0, 2, 0] = mapping[1, 0, 2] = 1
    pos, valid = masks.target_positions(mapping)
    assert pos.numpy().tolist() == [[4, 1, 0], [2, 0, 0]]
    assert valid.numpy().tolist() == [[1, 1, 1], [1, 0, 0]]
    matrix = np.arange(2 * 5 * 2).reshape(2, 5, 2)
    assert np.array_equal(masks.gather_rows(matrix, pos).numpy()[0], matrix[0, [4, 1, 0]])


@pytest.mark.parametrize("attn_type", ["bi", "uni"])
def test_relative_positions(attn_type):
    qlen, klen = 4, 7
    d = positions.relative_distances(qlen, klen, attn_type).numpy()
    want = np.arange(klen, -qlen, -1) if attn_type == "bi" else np.arange(klen, -1, -1)
    assert np.array_equal(d, want)
    assert np.array_equal(positions.relative_distances(qlen, klen, attn_type, clamp_len=3).numpy(),
                          np.clip(want, -3, 3))
    assert np.array_equal(positions.relative_distances(qlen, klen, attn_type, backward=True).numpy(), -want)
    enc = positions.relative_positional_encoding(qlen, klen, 6, attn_type, bi_data=True).numpy()
    assert enc.shape == (2, len(want), 6)
    inv_freq = 1 / 10000 ** (np.arange(0, 6, 2) / 6)
    angles = want[:, None] * inv_freq[None]
    err = np.abs(enc[0] - np.concatenate([np.sin(angles), np.cos(angles)], -1)).max()
    print(f"sinusoid max|err|={err:.1e} (bound 1e-5)")
    assert err <= 1e-5
    assert np.allclose(enc[1][:, :3], -enc[0][:, :3]) and np.allclose(enc[1][:, 3:], enc[0][:, 3:])


def test_relative_shift_equals_index_rule(rng):
    """out[i, j] = scores[i, qlen - i + j]: query i at absolute position mlen + i, distance mlen + i - j."""
    batch, heads, qlen, mlen = 2, 3, 5, 3
    klen = mlen + qlen
    scores = rng.standard_normal((batch, heads, qlen, klen + qlen)).astype(np.float32)
    out = relative_shift(scores, klen).numpy()
    want = np.stack([scores[:, :, i, qlen - i: qlen - i + klen] for i in range(qlen)], axis=2)
    assert np.array_equal(out, want)
    # The query stream's gather at target positions gives the same rows.
    targets = np.array([[4, 0, 2], [1, 1, 3]], np.int32)
    rows = scores[np.arange(batch)[:, None], :, targets].transpose(0, 2, 1, 3)  # [B, N, P, R]
    gathered = shift_at_positions(rows, targets, qlen, klen).numpy()
    assert np.array_equal(gathered, want[np.arange(batch)[:, None], :, targets].transpose(0, 2, 1, 3))
