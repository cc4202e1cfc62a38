"""Length buckets: fine-tuning, evaluation and prediction pay for the real length of their rows.

XLNet's outputs at real positions do not depend on how much padding a row carries (padded keys are masked
and positions are relative), so a batch may be padded to the longest row of its length bucket instead of
``max_seq_len`` without changing a result. Buckets are given by ascending boundaries ending at
``max_seq_len``; a row goes to the first bucket whose boundary holds it and is padded (or cropped, since
rows are built at ``max_seq_len``) to that width. Every bucket has one static shape, so XLA and TPUs compile
one program per bucket.

Training order (``training_plan``): a stream of seeded permutations of the rows, one per epoch; each
bucket collects the rows that reach it in stream order and emits a run of steps whenever it holds enough
rows for them. Runs are in the order they filled, so buckets interleave at random, no row is dropped or
repeated within the stream, and step ``s``'s batch is a pure function of the seed and ``s`` (a resumed run
reads the same data).
"""

from __future__ import annotations

import dataclasses
import itertools

import numpy as np

from xlnet_tf.errors import UserError

PAD_MULTIPLE = 8  # automatic boundaries (and exported signatures) pad to multiples of this
MAX_AUTO_BUCKETS = 4
FLAG = "--bucket-boundaries"


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
    """Boundaries for ``lengths``: at most ``max_buckets`` buckets that hold rows (widths multiples of
    ``multiple``, or ``max_seq_len``), chosen to minimise the padded tokens, each holding at least ``min_rows``
    rows where the data allows; fewer are taken when they pad at most 2% more tokens than the best. The last
    boundary is always ``max_seq_len`` (a bucket left empty by these rows, for longer rows met later)."""
    lengths = np.clip(np.asarray(lengths, np.int64), 1, max_seq_len)
    if not len(lengths):
        return (max_seq_len,)
    widths = np.minimum((lengths + multiple - 1) // multiple * multiple, max_seq_len)
    candidates = np.unique(widths)
    counts = np.array([(widths == c).sum() for c in candidates], np.int64)
    cumulative = np.concatenate([[0], np.cumsum(counts)])
    m = len(candidates)
    min_rows = min(int(min_rows), len(lengths))
    inf = float("inf")
    # best[k][j]: least padded tokens covering candidates[:j + 1] with k + 1 buckets, the last ending at j.
    best = np.full([max_buckets, m], inf)
    parent = np.full([max_buckets, m], -1, np.int64)
    for j in range(m):
        if cumulative[j + 1] >= min_rows:
            best[0, j] = candidates[j] * cumulative[j + 1]
    for k in range(1, max_buckets):
        for j in range(m):
            for i in range(j):
                rows = cumulative[j + 1] - cumulative[i + 1]
                if best[k - 1, i] == inf or rows < min_rows:
                    continue
                cost = best[k - 1, i] + candidates[j] * rows
                if cost < best[k, j]:
                    best[k, j], parent[k, j] = cost, i
    finals = best[:, m - 1]
    if not np.isfinite(finals).any():  # fewer rows than min_rows: one bucket
        return tuple(sorted({int(candidates[-1]), max_seq_len}))
    target = finals[np.isfinite(finals)].min() * 1.02
    k = int(next(k for k in range(max_buckets) if finals[k] <= target))
    chosen, j = [], m - 1
    while k >= 0:
        chosen.append(int(candidates[j]))
        j, k = parent[k, j], k - 1
    return tuple(sorted(set(chosen) | {max_seq_len}))


def resolve_boundaries(spec, lengths, max_seq_len, min_rows=1):
    """``parse_boundaries``, with ``"auto"`` chosen from ``lengths`` (``auto_boundaries``)."""
    parsed = parse_boundaries(spec, max_seq_len)
    if parsed == "auto":
        return auto_boundaries(lengths, max_seq_len, min_rows)
    return parsed


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
class TrainingPlan:
    """Which bucket each optimizer step reads and the rows of its micro-batches.

    step_bucket: int64 ``[steps]``; batches: int64 ``[steps * accum, batch_size]`` row indices, micro-batch
    ``s * accum + a`` of step ``s``; widths: the buckets' widths.
    """

    step_bucket: np.ndarray
    batches: np.ndarray
    accum: int
    widths: tuple

    def bucket_batches(self, bucket, start_step=0):
        """Micro-batches ``[n, batch_size]`` of the steps from ``start_step`` on that read ``bucket``, in order."""
        steps = np.nonzero(self.step_bucket[start_step:] == bucket)[0] + start_step
        rows = (steps[:, None] * self.accum + np.arange(self.accum)[None]).reshape(-1)
        return self.batches[rows]

    def run_length(self, step, limit):
        """How many steps from ``step`` on (at most ``limit``) read the same bucket."""
        same = self.step_bucket[step:step + limit] == self.step_bucket[step]
        return int(limit if same.all() else np.argmin(same))


def training_plan(buckets, num_buckets, batch_size, steps, accum=1, run_length=1, seed=0, widths=()):
    """The batches of ``steps`` optimizer steps (see the module docstring).

    Args:
      buckets: the bucket of each row (``assign``), ``[N]``, N >= 1.
      batch_size: rows per micro-batch (global); accum: micro-batches per step.
      run_length: consecutive steps that read one bucket (TPUs: the steps of one host call).
      seed: the permutations' seed (epoch e uses ``default_rng([seed, e])``).
    """
    buckets = np.asarray(buckets, np.int64)
    n = len(buckets)
    if n == 0:
        raise UserError("no training rows")
    unit = batch_size * accum * run_length
    runs_needed = -(-steps // run_length)
    pending = [np.zeros([0], np.int64) for _ in range(num_buckets)]
    runs = []  # (stream position where the run filled, bucket, rows)
    for epoch in itertools.count():
        order = np.random.default_rng([seed, epoch]).permutation(n)
        for k in range(num_buckets):
            positions = np.nonzero(buckets[order] == k)[0]
            queue = np.concatenate([pending[k], order[positions]])
            filled = np.concatenate([np.full([len(pending[k])], -1, np.int64), positions + epoch * n])
            full = len(queue) // unit
            for r in range(full):
                runs.append((filled[(r + 1) * unit - 1], k, queue[r * unit:(r + 1) * unit]))
            pending[k] = queue[full * unit:]
        if len(runs) >= runs_needed:
            break
    runs.sort(key=lambda run: (run[0], run[1]))
    runs = runs[:runs_needed]
    step_bucket = np.repeat([k for _, k, _ in runs], run_length)[:steps]
    batches = np.concatenate([rows for _, _, rows in runs]).reshape(-1, batch_size)[:steps * accum]
    return TrainingPlan(step_bucket.astype(np.int64), batches, accum, tuple(widths))


def inference_batches(buckets, batch_size):
    """Evaluation / prediction batches: ``[(bucket, rows)]``, each bucket's rows in input order, cut into
    batches of at most ``batch_size`` (the last of a bucket may be smaller)."""
    buckets = np.asarray(buckets, np.int64)
    out = []
    for k in np.unique(buckets):
        rows = np.nonzero(buckets == k)[0]
        out.extend((int(k), rows[i:i + batch_size]) for i in range(0, len(rows), batch_size))
    return out
