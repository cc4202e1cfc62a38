"""Length buckets: fine-tuning, evaluation and prediction pay for the real length of their rows.

XLNet's outputs at real positions do not depend on how much padding a row carries (padded keys are masked
and positions are relative), so rows may be padded to a width near their own length instead of
``max_seq_len`` without changing a result.

Training (``stratify``, ``training_plan``): the rows, ordered by length, are cut into at most four length
strata, each stratum holding a whole number of per-replica-batch shares of the rows (k / batch of them).
Every batch then takes the same number of rows from each stratum (``counts``), and each part is padded to
its stratum's width: a batch mirrors the data's length distribution (a stratified sample, never a batch
of only short or only long rows), every row is read once per epoch, and every step has the same static
shapes (one traced program; one XLA / TPU compilation). Batches made of one bucket's rows (tried first)
pad as little, but each is all short or all long rows, a per-step bias wherever length goes with the label,
and they need one program per bucket.

Evaluation and prediction (``inference_batches``): rows sorted into buckets by length and batched within
a bucket (any grouping gives the same outputs), each batch padded to its bucket's boundary.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from xlnet_tf.errors import UserError

PAD_MULTIPLE = 8  # automatic boundaries (and exported signatures) pad to multiples of this
MAX_AUTO_BUCKETS = 4
FLAG = "--bucket-boundaries"


# What one more model call in every training step (one more length stratum) costs a run once, in multiply-adds
# per layer: tracing the call and its gradient, optimising their graph and running them the first time. Measured
# on 2 CPU cores (Intel Xeon, AVX-512, 2026-12-07) with the tiny model (2 layers, d_model 64): the Quickstart's
# fine-tuning over 4 strata took 6.3 and 6.8 s more (9.5 s more CPU both times) than over one packed call, at 100
# and at 200 steps, about 1.1 s per extra call and layer, while the packed step ran ~10.8 G multiply-adds a second.
PART_ONE_TIME_MADDS = 1.2e10


def position_madds(d_model, d_inner):
    """Multiply-adds one position costs one layer in a training step: the forward's projections (query, key,
    value, relative position, output: 5 d_model^2; the feed-forward's two: 2 d_model d_inner), times 3 for the
    forward and the backward."""
    return 3 * (5 * d_model * d_model + 2 * d_model * d_inner)


def part_positions(d_model, d_inner, micro_batches):
    """The once-per-run cost of one more model call per micro-batch (`PART_ONE_TIME_MADDS`), spread over the
    run's `micro_batches`, in positions of a micro-batch: 250 for the tiny model at 300 steps, under 1 for
    XLNet-base from about 520."""
    return PART_ONE_TIME_MADDS / (position_madds(d_model, d_inner) * max(1, int(micro_batches)))


def parse_boundaries(spec, max_seq_len):
    """``"auto"``, ``"none"`` or ascending lengths ``"L1,L2,..."`` (a list of ints also works) -> ``"auto"`` or a
    tuple of boundaries ending at ``max_seq_len`` (``"none"``: ``(max_seq_len,)``, fixed padding)."""
    if isinstance(spec, str):
        text = spec.strip().lower()
        if text == "auto":
            return "auto"
        if text == "none":
            return (max_seq_len,)
        try:
            values = [int(v) for v in text.split(",") if v.strip()]
        except ValueError:
            raise UserError(f"{FLAG}: expected auto, none or ascending lengths like 32,64; got {spec!r}") from None
    else:
        values = [int(v) for v in spec]
    if not values or any(v < 1 for v in values) or any(b <= a for a, b in zip(values, values[1:])):
        raise UserError(f"{FLAG}: lengths must be positive and ascending, got {spec!r}")
    if values[-1] > max_seq_len:
        raise UserError(f"{FLAG}: {values[-1]} exceeds --max-seq-len {max_seq_len}")
    return tuple(values) if values[-1] == max_seq_len else tuple(values) + (max_seq_len,)


def auto_boundaries(lengths, max_seq_len, min_rows=1, max_buckets=MAX_AUTO_BUCKETS, multiple=PAD_MULTIPLE):
    """Inference buckets for ``lengths``: at most ``max_buckets`` buckets that hold rows (widths multiples of
    ``multiple``, or ``max_seq_len``), chosen to minimise the padded tokens, each holding at least ``min_rows``
    rows where the data allows; fewer when they pad at most 2% more. The last boundary is always
    ``max_seq_len`` (a bucket these rows may leave empty, for longer rows met later)."""
    lengths = np.clip(np.asarray(lengths, np.int64), 1, max_seq_len)
    if not len(lengths):
        return (max_seq_len,)
    widths = np.minimum((lengths + multiple - 1) // multiple * multiple, max_seq_len)
    candidates, counts = np.unique(widths, return_counts=True)
    cuts = _least_padding(np.concatenate([[0], candidates]), np.concatenate([[0], np.cumsum(counts)]), max_buckets,
                          min(int(min_rows), len(lengths)))
    return tuple(sorted({int(candidates[c - 1]) for c in cuts} | {max_seq_len}))


def _least_padding(width, cumulative, max_parts, min_rows=0, part_cost=0.0):
    """Cut points 0 < c_1 < ... < c_K = len(width) - 1 (K <= max_parts) minimising the padded positions
    sum_k (cumulative[c_k] - cumulative[c_{k-1}]) * width[c_k] plus ``part_cost`` for every part after the
    first, each part holding at least ``min_rows`` rows where possible (else one part); fewer parts when they
    cost at most 2% more than the best. ``width[c]`` is the width the rows up to cut c need, ``cumulative[c]``
    how many they are (both non-decreasing)."""
    last = len(width) - 1
    cumulative = np.asarray(cumulative, np.float64)
    best = np.full([max_parts, last + 1], np.inf)
    parent = np.zeros([max_parts, last + 1], np.int64)
    for c in range(1, last + 1):
        if cumulative[c] >= min_rows:
            best[0, c] = cumulative[c] * width[c]
        for k in range(1, max_parts):
            for i in range(k, c):
                rows = cumulative[c] - cumulative[i]
                cost = best[k - 1, i] + rows * width[c]
                if rows >= min_rows and cost < best[k, c]:
                    best[k, c], parent[k, c] = cost, i
    finals = best[:, last] + part_cost * np.arange(max_parts)
    if not np.isfinite(finals).any():
        return [last]
    k = int(next(k for k in range(max_parts) if finals[k] <= finals.min() * 1.02))
    cuts, c = [], last
    while k >= 0:
        cuts.append(c)
        c, k = int(parent[k, c]), k - 1
    return sorted(cuts)


def assign(lengths, boundaries):
    """The bucket of each row: the first boundary >= its length (int64 ``[N]``)."""
    lengths = np.asarray(lengths, np.int64)
    if len(lengths) and lengths.max() > boundaries[-1]:
        raise ValueError(f"a row of {lengths.max()} tokens exceeds the last boundary {boundaries[-1]}")
    return np.searchsorted(np.asarray(boundaries, np.int64), lengths, side="left")


def padding_cost(lengths, boundaries):
    """``(real tokens, padded tokens)`` of ``lengths`` in these buckets."""
    lengths = np.asarray(lengths, np.int64)
    return int(lengths.sum()), int(np.asarray(boundaries, np.int64)[assign(lengths, boundaries)].sum())


@dataclasses.dataclass(frozen=True)
class Strata:
    """Length strata of a training file: ``rows[k]`` (row indices, int64) are padded to ``widths[k]``, and
    every per-replica batch takes ``counts[k]`` rows of stratum k (``sum(counts)`` = the per-replica batch)."""

    widths: tuple
    counts: tuple
    rows: tuple

    @property
    def positions_per_row(self):
        """Padded positions a batch computes per row (its parts' widths weighted by their rows)."""
        return sum(c * w for c, w in zip(self.counts, self.widths)) / sum(self.counts)


def stratify(lengths, batch_size, max_seq_len, spec="auto", max_strata=MAX_AUTO_BUCKETS, multiple=PAD_MULTIPLE,
             part_cost=0.0):
    """The length strata of rows with ``lengths`` for per-replica batches of ``batch_size`` rows.

    Rows sorted by length (ties by index) are cut at multiples of N / batch_size rows; stratum k is padded
    to the width its longest row needs. ``spec``: ``"auto"`` chooses at most ``max_strata`` cuts that
    minimise the padded positions of a batch plus ``part_cost`` (positions: ``part_positions``) for every
    stratum after the first (widths multiples of ``multiple`` or ``max_seq_len``; fewer strata when they
    cost at most 2% more); ``"none"`` (or ``(max_seq_len,)``) is one stratum padded to
    ``max_seq_len``; a tuple of boundaries (``parse_boundaries``) keeps the rows of each boundary's range
    apart, as far as whole batch shares allow (a share cut short moves its longest rows up), and pads each
    stratum to its boundary.
    """
    lengths = np.asarray(lengths, np.int64)
    n, b = len(lengths), int(batch_size)
    if n == 0:
        raise UserError("no training rows")
    if isinstance(spec, str):
        spec = parse_boundaries(spec, max_seq_len)
    order = np.argsort(lengths, kind="stable")
    ranks = np.round(np.arange(b + 1) * n / b).astype(np.int64)  # rows [ranks[c - 1], ranks[c]) are share c
    longest = np.concatenate([[0], lengths[order][np.maximum(ranks[1:] - 1, 0)]])  # longest row of shares <= c
    if spec == "auto":
        width = np.minimum((longest + multiple - 1) // multiple * multiple, max_seq_len)
        cuts = _least_padding(width, np.arange(b + 1), max_strata, part_cost=part_cost)
        widths = [int(width[c]) for c in cuts]
    else:
        counts_le = np.searchsorted(lengths[order], np.asarray(spec), side="right")
        cuts = sorted({int(c) for c in counts_le * b // n if c > 0} | {b})
        widths = [int(spec[np.searchsorted(spec, longest[c])]) for c in cuts]
    strata = []  # [width, shares, rows]; a stratum left without rows (fewer rows than shares) joins a neighbour
    for a, c, w in zip([0] + cuts[:-1], cuts, widths):
        rows = np.sort(order[ranks[a]:ranks[c]])
        if strata and not len(strata[-1][2]):
            strata[-1] = [w, strata[-1][1] + c - a, rows]
        else:
            strata.append([w, c - a, rows])
    if len(strata) > 1 and not len(strata[-1][2]):
        empty = strata.pop()
        strata[-1][1] += empty[1]
    return Strata(*(tuple(part) for part in zip(*strata)))


@dataclasses.dataclass(frozen=True)
class TrainingPlan:
    """The rows of every training micro-batch: ``batches[k]`` int64 ``[steps * accum, counts[k] * replicas]``
    are stratum k's rows of each global micro-batch (micro-batch ``s * accum + a`` of step ``s``; replica r
    takes columns ``[r * counts[k], (r + 1) * counts[k])``)."""

    strata: Strata
    batches: tuple
    accum: int
    replicas: int


def training_plan(strata, steps, accum=1, replicas=1, seed=0):
    """Micro-batches for ``steps`` optimizer steps: each stratum is read as a stream of seeded permutations of
    its rows (epoch e of stratum k: ``default_rng([seed, k, e])``), ``counts[k] * replicas`` rows per global
    micro-batch. Micro-batch m is a pure function of the seed and m, so a resumed run reads the same data."""
    micro = steps * accum
    batches = []
    for k, (rows, count) in enumerate(zip(strata.rows, strata.counts)):
        need = micro * count * replicas
        epochs = -(-need // len(rows))
        stream = np.concatenate([rows[np.random.default_rng([seed, k, e]).permutation(len(rows))]
                                 for e in range(epochs)])
        batches.append(stream[:need].reshape(micro, count * replicas))
    return TrainingPlan(strata, tuple(batches), accum, replicas)


def inference_batches(buckets, batch_size):
    """Evaluation / prediction batches: ``[(bucket, rows)]``, each bucket's rows in input order, cut into
    batches of at most ``batch_size`` (the last of a bucket may be smaller)."""
    buckets = np.asarray(buckets, np.int64)
    out = []
    for k in np.unique(buckets):
        rows = np.nonzero(buckets == k)[0]
        out.extend((int(k), rows[i:i + batch_size]) for i in range(0, len(rows), batch_size))
    return out
