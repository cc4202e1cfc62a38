"""Online target sampling: PLM visibility rules, spans, budgets, MLM rates, determinism, tf.data use.

Records are built here in the original layout (reuse prefix, then A <sep> B <sep> <cls>, maybe <pad>s at
the end) from random ids with random word starts; every property is checked over many sampled examples
with numpy re-derivations of the rules, and every checked figure is printed with its bound.
"""

import numpy as np
import pytest
import tensorflow as tf

from conftest import tiny_config
from xlnet_tf.data.sampling import (
    SamplingOptions,
    sample_features,
    sample_mlm_features,
    sample_plm_features,
    word_start_from_pieces,
)

SEQ, REUSE, PREDICT, VOCAB, EXAMPLES = 64, 32, 12, 100, 200
OPTIONS = SamplingOptions(seq_len=SEQ, reuse_len=REUSE, num_predict=PREDICT)
CLS, SEP, PAD, MASK = 3, 4, 5, 6


def make_word_start(seed=7):
    rng = np.random.default_rng(seed)
    table = rng.random(VOCAB) < 0.6
    table[:9] = True
    return table


WORD_START = make_word_start()


def make_records(count=EXAMPLES, seed=11):
    """ids, segments [count, SEQ] and kinds: 'full' (no padding), 'padded' (pads after <cls>), 'short'
    (real content shorter than the prefix, so the layout sits inside the first REUSE positions)."""
    rng = np.random.default_rng(seed)
    ids = np.full((count, SEQ), PAD, np.int32)
    segments = np.full((count, SEQ), 4, np.int32)
    kinds = []
    for e in range(count):
        kind = "full" if e % 10 < 7 else ("padded" if e % 10 < 9 else "short")
        real = SEQ if kind == "full" else int(rng.integers(40, 61) if kind == "padded" else rng.integers(12, 31))
        text = rng.integers(9, VOCAB, size=real)
        specials = rng.random(real)
        text[specials < 0.03] = 7  # <eod>
        text[(specials >= 0.03) & (specials < 0.04)] = 0  # <unk>
        prefix = REUSE if kind != "short" else int(rng.integers(0, real - 4))
        pair = real - prefix - 3
        a_len = int(rng.integers(1, pair))
        b_len = pair - a_len
        row = list(text[:prefix]) + list(text[prefix:prefix + a_len]) + [SEP] + list(text[-b_len:]) + [SEP, CLS]
        seg = [0] * (prefix + a_len + 1) + [1] * (b_len + 1) + [2]
        ids[e, :real], segments[e, :real] = row, seg
        kinds.append(kind)
    return ids, segments, np.array(kinds)


def seeds_for(count, salt):
    return np.stack([np.arange(count), np.full(count, salt)], axis=1).astype(np.int64)


def run_dataset(fn, ids, segments, seeds, batch=50):
    dataset = tf.data.Dataset.from_tensor_slices((ids, segments, seeds)).map(fn).batch(batch)
    out = {}
    for batch_features in dataset:
        for key, value in batch_features.items():
            out.setdefault(key, []).append(value.numpy())
    return {key: np.concatenate(value) for key, value in out.items()}, dataset.unbatch().element_spec


def plm_fn(options):
    return lambda i, s, seed: sample_plm_features(i, s, tf.constant(WORD_START), options, seed)


@pytest.fixture(scope="module")
def records():
    return make_records()


@pytest.fixture(scope="module")
def plm(records):
    ids, segments, _ = records
    features, _ = run_dataset(plm_fn(OPTIONS), ids, segments, seeds_for(EXAMPLES, 1))
    return features


@pytest.fixture(scope="module")
def mlm(records):
    ids, segments, _ = records
    fn = lambda i, s, seed: sample_mlm_features(i, s, OPTIONS, seed, VOCAB)  # noqa: E731
    features, _ = run_dataset(fn, ids, segments, seeds_for(EXAMPLES, 2))
    return features


def targets_of(features, e):
    mapping = features["target_mapping"][e]
    is_target = mapping.sum(axis=0) > 0
    return is_target, mapping


def recovered_ranks(blocked, in_order, part):
    """Order ranks of the in-order tokens (targets and <sep>/<cls>) from perm_mask alone: each one sees the
    in-order tokens of its part that come earlier. Returns {position: rank}; asserts the ranks are 0..n-1."""
    ranks = {}
    for p in (0, 1):
        members = np.flatnonzero(in_order & (part == p))
        for i in members:
            ranks[i] = int(np.sum(~blocked[i, members]) - (0 if blocked[i, i] else 1))
        values = sorted(ranks[i] for i in members)
        assert values == list(range(len(members))), f"perm_mask is not one total order in part {p}: {values}"
    return ranks


def expected_blocked(is_target, functional, padding, ranks, reuse_len):
    """perm_mask from the rules: non-order tokens see non-order tokens of their part; an order member sees
    those plus earlier members (a functional one also itself); prefix never sees rest; rest sees all of the
    prefix; nothing sees padding."""
    seq = len(is_target)
    part = (np.arange(seq) >= reuse_len).astype(int)
    in_order = is_target | functional
    blocked = np.zeros((seq, seq), bool)
    for i in range(seq):
        for j in range(seq):
            if padding[i] or padding[j]:
                blocked[i, j] = True
            elif part[i] != part[j]:
                blocked[i, j] = part[i] < part[j]
            elif not in_order[j]:
                blocked[i, j] = False
            elif i == j:
                blocked[i, j] = is_target[i]
            else:
                blocked[i, j] = not (in_order[i] and ranks[j] < ranks[i])
    return blocked


def test_options_validate_and_split_the_budget():
    assert OPTIONS.perm_size == REUSE
    assert SamplingOptions(seq_len=64, reuse_len=0, num_predict=12).perm_size == 64
    split = (OPTIONS.prefix_budget, OPTIONS.rest_budget)
    paper = SamplingOptions(seq_len=512, reuse_len=256, num_predict=85)
    print(f"budget split prefix/rest: {split} for 12 (expected (6, 6)); "
          f"{(paper.prefix_budget, paper.rest_budget)} for 85 at 512/256 (original: (43, 42))")
    assert split == (6, 6) and (paper.prefix_budget, paper.rest_budget) == (43, 42)
    assert SamplingOptions(seq_len=64, reuse_len=0, num_predict=12).rest_budget == 12
    bad = [
        dict(seq_len=64, reuse_len=24, num_predict=12),  # perm_size 24 does not divide 40
        dict(seq_len=64, reuse_len=32, num_predict=65),
        dict(seq_len=64, reuse_len=64, num_predict=12),
        dict(seq_len=64, reuse_len=32, num_predict=12, objective="clm"),
        dict(seq_len=64, reuse_len=32, num_predict=12, perm_size=0),
        dict(seq_len=64, reuse_len=32, num_predict=12, mlm_probability=1.5),
        dict(seq_len=64, reuse_len=32, num_predict=0),
    ]
    for kwargs in bad:
        with pytest.raises(ValueError, match="SamplingOptions"):
            SamplingOptions(**kwargs)
    with pytest.raises(ValueError, match="vocab_size"):
        sample_features(np.zeros(64, np.int32), np.zeros(64, np.int32), WORD_START,
                        SamplingOptions(seq_len=64, reuse_len=32, num_predict=12, objective="mlm"), [0, 0])


def test_word_start_from_pieces():
    pieces = ["<unk>", "<s>", "</s>", "<cls>", "<sep>", "<pad>", "<mask>", "<eod>", "<eop>",
              "\u2581the", "ing", ",", "\u2581", "s", "."]
    table = word_start_from_pieces(pieces)
    assert table.tolist() == [True] * 9 + [True, False, True, True, False, True]
    assert word_start_from_pieces(pieces, punctuation=False)[[11, 14]].tolist() == [False, False]


def test_target_sees_exactly_non_targets_and_earlier_targets(records, plm):
    ids, _, _ = records
    rows = shuffled = members_total = 0
    for e in range(EXAMPLES):
        is_target, _ = targets_of(plm, e)
        blocked = plm["perm_mask"][e] > 0
        padding = plm["padding_mask"][e] == 0
        functional = np.isin(ids[e], [SEP, CLS]) & ~padding
        part = (np.arange(SEQ) >= REUSE).astype(int)
        ranks = recovered_ranks(blocked, is_target | functional, part)
        expected = expected_blocked(is_target, functional, padding, ranks, REUSE)
        assert np.array_equal(blocked, expected), f"example {e}: perm_mask breaks the visibility rules"
        rows += int(is_target.sum())
        members = np.flatnonzero(is_target | functional)
        members_total += len(members)
        order = [ranks[i] for i in members if part[i] == 1]
        shuffled += int(order != sorted(order))
    print(f"visibility rules exact on {EXAMPLES}/{EXAMPLES} examples ({rows} target rows, {members_total} order "
          f"members); rest order not position order in {shuffled}/{EXAMPLES} (bound >= {EXAMPLES // 2})")
    assert shuffled >= EXAMPLES // 2


def test_query_never_sees_itself_content_can(plm):
    target_self = other_self = 0
    for e in range(EXAMPLES):
        is_target, _ = targets_of(plm, e)
        diagonal = np.diag(plm["perm_mask"][e])
        real = plm["padding_mask"][e] > 0
        assert np.all(diagonal[is_target] == 1), f"example {e}: a target may attend to itself"
        assert np.all(diagonal[real & ~is_target] == 0), f"example {e}: a real non-target is hidden from itself"
        target_self += int(is_target.sum())
        other_self += int((real & ~is_target).sum())
    print(f"perm_mask[t,t]=1 for {target_self}/{target_self} targets; perm_mask[i,i]=0 for "
          f"{other_self}/{other_self} real non-targets (bound: all)")


def test_spans_are_whole_words_of_one_to_five(records, plm):
    ids, _, _ = records
    lengths, truncated = [], 0
    for e in range(EXAMPLES):
        is_target, _ = targets_of(plm, e)
        padding = plm["padding_mask"][e] == 0
        starts = WORD_START[ids[e]] | (ids[e] < 9) | padding
        for lo, hi, budget in ((0, REUSE, OPTIONS.prefix_budget), (REUSE, SEQ, OPTIONS.rest_budget)):
            part = is_target[lo:hi]
            edges = np.flatnonzero(np.diff(np.concatenate([[0], part.astype(int), [0]])))
            runs = list(zip(edges[::2] + lo, edges[1::2] + lo))
            for k, (b, end) in enumerate(runs):
                assert starts[b], f"example {e}: span at {b} does not begin a word"
                words = int(starts[b:end].sum())
                complete = end == SEQ or starts[end]
                if not complete:
                    assert k == len(runs) - 1 and part.sum() == budget, f"example {e}: span {b}:{end} cuts a word"
                    truncated += 1
                lengths.append(words)
    lengths = np.array(lengths)
    histogram = np.bincount(lengths, minlength=6)[1:]
    print(f"span lengths in [{lengths.min()},{lengths.max()}] words (bound [1,{OPTIONS.max_span}]) over "
          f"{len(lengths)} spans, histogram 1..5 = {histogram.tolist()} (bound: count(1) > count(5)); "
          f"{truncated} cut mid-word at the budget")
    assert lengths.min() >= 1 and lengths.max() <= OPTIONS.max_span
    assert histogram[0] > histogram[4]


def test_specials_and_padding_never_targets(records, plm):
    ids, _, _ = records
    special_hits = pad_hits = pad_seen = 0
    for e in range(EXAMPLES):
        is_target, mapping = targets_of(plm, e)
        padding = plm["padding_mask"][e] == 0
        assert np.array_equal(padding, ids[e] == PAD)
        special_hits += int((is_target & (ids[e] < 9)).sum())
        pad_hits += int((is_target & padding).sum())
        blocked = plm["perm_mask"][e]
        assert np.all(blocked[:, padding] == 1), f"example {e}: a position may attend to padding"
        pad_seen += int(padding.sum())
        rows = mapping.sum(axis=1)
        assert set(np.unique(rows)) <= {0.0, 1.0} and np.array_equal(rows, plm["target_mask"][e])
        positions = mapping.argmax(axis=1)[rows > 0]
        assert np.all(np.diff(positions) > 0) and np.all(rows[: len(positions)] == 1)
        assert np.array_equal(plm["target_ids"][e][: len(positions)], ids[e][positions])
        assert np.all(plm["target_ids"][e][len(positions):] == 0)
    print(f"targets on special ids: {special_hits}, on padding: {pad_hits} (bound 0); "
          f"{pad_seen} padding columns fully blocked")
    assert special_hits == 0 and pad_hits == 0


def test_prefix_never_sees_rest(plm):
    corner = plm["perm_mask"][:, :REUSE, REUSE:]
    print(f"perm_mask[i<{REUSE}, j>={REUSE}] minimum {corner.min()} (bound 1) over {EXAMPLES} examples")
    assert corner.min() == 1


def test_target_count_within_bounds(records, plm):
    _, _, kinds = records
    counts = plm["target_mask"].sum(axis=1)
    prefix = plm["target_mapping"][:, :, :REUSE].sum(axis=(1, 2))
    rest = counts - prefix
    full = counts[kinds == "full"]
    print(f"targets per sequence: max {counts.max():.0f} (bound <= {PREDICT}); prefix max {prefix.max():.0f} "
          f"(bound <= {OPTIONS.prefix_budget}), rest max {rest.max():.0f} (bound <= {OPTIONS.rest_budget}); "
          f"full-length records min {full.min():.0f} (bound >= {PREDICT // 4}), mean {full.mean():.2f} "
          f"(bound >= {0.6 * PREDICT:.1f})")
    assert counts.max() <= PREDICT and prefix.max() <= OPTIONS.prefix_budget and rest.max() <= OPTIONS.rest_budget
    assert full.min() >= PREDICT // 4 and full.mean() >= 0.6 * PREDICT


def test_block_order_with_smaller_perm_size(records):
    ids, segments, _ = records
    options = SamplingOptions(seq_len=SEQ, reuse_len=REUSE, num_predict=PREDICT, perm_size=16)
    features, _ = run_dataset(plm_fn(options), ids[:60], segments[:60], seeds_for(60, 3))
    inversions = 0
    for e in range(60):
        is_target, _ = targets_of(features, e)
        blocked = features["perm_mask"][e] > 0
        padding = features["padding_mask"][e] == 0
        functional = np.isin(ids[e], [SEP, CLS]) & ~padding
        part = (np.arange(SEQ) >= REUSE).astype(int)
        ranks = recovered_ranks(blocked, is_target | functional, part)
        assert np.array_equal(blocked, expected_blocked(is_target, functional, padding, ranks, REUSE))
        members = sorted(ranks)
        for i in members:
            for j in members:
                if part[i] == part[j] and i // 16 < j // 16:
                    assert ranks[i] < ranks[j], f"example {e}: block of {j} comes before block of {i}"
                if part[i] == part[j] and i // 16 == j // 16 and i < j and ranks[i] > ranks[j]:
                    inversions += 1
    print(f"perm_size 16: earlier blocks always first on 60/60 examples; {inversions} in-block inversions "
          f"(bound > 0)")
    assert inversions > 0


def test_same_seed_same_features_other_seed_differs(records, plm):
    ids, segments, _ = records
    count = 20
    again, _ = run_dataset(plm_fn(OPTIONS), ids[:count], segments[:count], seeds_for(count, 1))
    other, _ = run_dataset(plm_fn(OPTIONS), ids[:count], segments[:count], seeds_for(count, 99))
    same = sum(all(np.array_equal(again[k][e], plm[k][e]) for k in plm) for e in range(count))
    differ = sum(
        not (np.array_equal(other["perm_mask"][e], plm["perm_mask"][e])
             and np.array_equal(other["target_mapping"][e], plm["target_mapping"][e]))
        for e in range(count)
    )
    print(f"same seed identical: {same}/{count} (bound {count}); other seed different: {differ}/{count} "
          f"(bound {count})")
    assert same == count and differ == count


def test_static_shapes_in_dataset_map_and_tf_function(records):
    ids, segments, _ = records
    _, spec = run_dataset(plm_fn(OPTIONS), ids[:4], segments[:4], seeds_for(4, 5), batch=4)
    mlm_fn = lambda i, s, seed: sample_mlm_features(i, s, OPTIONS, seed, VOCAB)  # noqa: E731
    _, mlm_spec = run_dataset(mlm_fn, ids[:4], segments[:4], seeds_for(4, 5), batch=4)
    shapes = {k: v.shape.as_list() for k, v in spec.items()}
    print(f"dataset element shapes: {shapes}; mlm: { {k: v.shape.as_list() for k, v in mlm_spec.items()} }")
    assert all(v.shape.is_fully_defined() for v in list(spec.values()) + list(mlm_spec.values()))
    assert shapes["perm_mask"] == [SEQ, SEQ] and shapes["target_mapping"] == [PREDICT, SEQ]

    word_start = tf.constant(WORD_START)
    graph = tf.function(lambda i, s, seed: sample_plm_features(i, s, word_start, OPTIONS, seed), jit_compile=False)
    for e in range(3):
        seed = tf.constant([e, 5], tf.int64)
        eager = sample_plm_features(ids[e], segments[e], word_start, OPTIONS, seed)
        traced = graph(tf.constant(ids[e]), tf.constant(segments[e]), seed)
        assert all(np.array_equal(eager[k].numpy(), traced[k].numpy()) for k in eager)
    traces = graph.experimental_get_tracing_count()
    print(f"tf.function: equal to eager on 3 examples, traced {traces} time(s) (bound 1)")
    assert traces == 1


def test_mlm_rates_and_specials(records, mlm):
    ids, _, _ = records
    chosen = mlm["target_mask"] > 0
    eligible = (ids >= 9) & (ids != PAD)
    assert not np.any(chosen & ~eligible)
    assert np.array_equal(mlm["target_ids"], ids) and np.array_equal(mlm["padding_mask"], (ids != PAD) * 1.0)
    fraction = chosen.sum() / eligible.sum()
    corrupted = mlm["input_ids"][chosen]
    original = ids[chosen]
    masked = np.mean(corrupted == MASK)
    kept = np.mean(corrupted == original)
    randomized = np.mean((corrupted != MASK) & (corrupted != original))
    assert np.all(mlm["input_ids"][~chosen] == ids[~chosen])
    assert np.all((corrupted == MASK) | ((corrupted >= 9) & (corrupted < VOCAB)))
    print(f"MLM: chosen {fraction:.4f} of {eligible.sum()} eligible (bound 0.15 +- 0.01); of {chosen.sum()} chosen: "
          f"<mask> {masked:.3f} (bound 0.80 +- 0.04), random {randomized:.3f} (bound 0.10 +- 0.03), "
          f"kept {kept:.3f} (bound 0.10 +- 0.03); specials/padding chosen: {int(np.sum(chosen & ~eligible))} (bound 0)")
    assert abs(fraction - 0.15) <= 0.01
    assert abs(masked - 0.8) <= 0.04 and abs(randomized - 0.1) <= 0.03 and abs(kept - 0.1) <= 0.03


def test_features_feed_the_pretrainer(plm, mlm):
    from xlnet_tf.config import RunOptions
    from xlnet_tf.model import XLNetPretrainer

    model = XLNetPretrainer(tiny_config(n_token=VOCAB), RunOptions(dropout=0.0, dropatt=0.0))
    plm_out = model({k: v[:4] for k, v in plm.items()})
    mlm_out = model({k: v[:4] for k, v in mlm.items()})
    plm_loss, mlm_loss = float(plm_out["loss"]), float(mlm_out["loss"])
    print(f"pretrainer: plm logits {plm_out['logits'].shape} loss {plm_loss:.3f}, mlm logits "
          f"{mlm_out['logits'].shape} loss {mlm_loss:.3f} (bound: finite)")
    assert plm_out["logits"].shape == (4, PREDICT, VOCAB) and mlm_out["logits"].shape == (4, SEQ, VOCAB)
    assert np.isfinite(plm_loss) and np.isfinite(mlm_loss)
