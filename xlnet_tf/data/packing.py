"""Packed rows: several short examples share one row of a fixed width, each attending only to itself.

XLNet makes this exact: attention depends on relative positions (i - j) and on same / different segment only,
and padding has no effect, so an example placed contiguously in a packed row and masked off from its
neighbours (`masks.example_blocked`, from per-token `example_ids`) computes what it computes alone. Each
example keeps its own layout (`A <sep> B <sep> <cls>`), and a head reads each example's `<cls>`
(`cls_positions`, then `example_slots`).

Layouts (where each sequence goes: row, offset, slot) are chosen in numpy, best fit decreasing; the rows
themselves are built by one graph function (`pack_rows`) that training's tf.data pipeline and inference share.

Training (`packed_plan`): a step's examples are the stratified plan's (`buckets.training_plan`: every step
mirrors the data's length distribution, so its total length varies little), packed per replica micro-batch
into `rows` rows of `width`: the largest number any micro-batch of the run needs (one static shape, one
traced program). The width is the longest training row rounded up (`choose_width`), so every training
example fits; at inference an example longer than the width is run unpacked (its length bucket).
"""

from __future__ import annotations

import bisect
import dataclasses

import numpy as np

from xlnet_tf.errors import UserError

MODES = ("auto", "none")
FLAG = "--packing"
# The packed batch's model inputs besides the encoder's: [R, W] `example_ids` (0 = padding, else 1 + the
# sequence's index in the batch), [R, E] `cls_positions` (each slot's <cls> position in its row, 0 where a row
# holds fewer examples) and `example_slots` ([n], or [n, C] for multiple choice: each sequence's slot, row * E +
# slot in row).
PACKED_INPUTS = ("example_ids", "cls_positions", "example_slots")
PACKED_TASKS = ("classification", "regression", "multi-label", "race")
WIDTH_MULTIPLE = 8


@dataclasses.dataclass(frozen=True)
class PackedShape:
    """The static shape of packed batches: `rows` rows of `width` positions holding at most `slots` examples
    each (per replica micro-batch)."""

    width: int
    rows: int
    slots: int

    def to_dict(self):
        return dataclasses.asdict(self)


@dataclasses.dataclass(frozen=True)
class Layout:
    """Where each of n sequences goes: `row`, `offset` (its first position) and `slot` (its rank in its row),
    int32 [n]; `rows` rows used, `slots` the most sequences one row holds."""

    row: np.ndarray
    offset: np.ndarray
    slot: np.ndarray
    rows: int
    slots: int


def best_fit_decreasing(lengths, width):
    """Sequences of `lengths` (each at most `width`) placed into rows of `width`: longest first, each into the
    row it fills best (the least room left that holds it), a new row when none does -> `Layout`."""
    lengths = np.asarray(lengths, np.int64).reshape(-1)
    n = len(lengths)
    if n and lengths.max() > width:
        raise ValueError(f"a sequence of {lengths.max()} tokens does not fit a packed row of {width}")
    row = np.zeros(n, np.int32)
    offset = np.zeros(n, np.int32)
    rooms, used = [], []  # rooms: sorted (room left, row) of rows that still have room; used[r]: positions taken
    for i in np.argsort(-lengths, kind="stable"):
        length = int(lengths[i])
        k = bisect.bisect_left(rooms, (length, -1))
        if k == len(rooms):
            r = len(used)
            used.append(0)
        else:
            r = rooms.pop(k)[1]
        row[i], offset[i] = r, used[r]
        used[r] += length
        if used[r] < width:
            bisect.insort(rooms, (width - used[r], r))
    slot = np.zeros(n, np.int32)
    if n:
        order = np.lexsort((offset, row))  # by row, then position in the row
        starts = np.r_[0, np.flatnonzero(np.diff(row[order])) + 1]
        counts = np.diff(np.r_[starts, n])
        slot[order] = np.arange(n) - np.repeat(starts, counts)
        return Layout(row, offset, slot, len(used), int(counts.max()))
    return Layout(row, offset, slot, 0, 0)


def choose_width(lengths, max_seq_len, multiple=WIDTH_MULTIPLE):
    """The packed width for rows of `lengths`: the longest rounded up to `multiple` (at most max_seq_len), so
    every row fits."""
    longest = int(np.max(lengths)) if len(lengths) else 1
    return min(-(-longest // multiple) * multiple, max_seq_len)


def sequence_lengths(features):
    """Real tokens of every sequence of left- or right-padded rows: [N] (or [N, C] for multiple choice) from
    `padding_mask`."""
    return np.asarray(features["padding_mask"]).sum(-1).astype(np.int64)


@dataclasses.dataclass(frozen=True)
class PackedPlan:
    """The packed layouts of a `buckets.TrainingPlan`'s micro-batches: `row`, `offset`, `slot` int32
    [micro-batches, replicas, n] for the n sequences of each replica's share (the strata's parts concatenated,
    each example's C options in order for multiple choice), and the run's `shape`."""

    shape: PackedShape
    row: np.ndarray
    offset: np.ndarray
    slot: np.ndarray

    def positions_per_step(self, accum, replicas):
        return self.shape.rows * self.shape.width * accum * replicas


def plan_examples(plan):
    """The example indices of every replica's share of every micro-batch of a `buckets.TrainingPlan`: int64
    [micro-batches, replicas, per-replica batch] (the strata's parts, in order)."""
    return np.concatenate([batches.reshape(len(batches), plan.replicas, count)
                           for batches, count in zip(plan.batches, plan.strata.counts)], axis=2)


def packed_plan(plan, lengths, width):
    """`PackedPlan` for `plan` (a `buckets.TrainingPlan`) over sequences of `lengths` ([N], or [N, C]:
    multiple choice) in rows of `width`: rows and slots are the most any micro-batch needs."""
    lengths = np.asarray(lengths, np.int64)
    examples = plan_examples(plan)
    micro, replicas, _ = examples.shape
    shares = lengths[examples].reshape(micro, replicas, -1)  # each share's sequences, options in order
    row, offset, slot = (np.zeros(shares.shape, np.int32) for _ in range(3))
    rows = slots = 1
    for m in range(micro):
        for r in range(replicas):
            layout = best_fit_decreasing(shares[m, r], width)
            row[m, r], offset[m, r], slot[m, r] = layout.row, layout.offset, layout.slot
            rows, slots = max(rows, layout.rows), max(slots, layout.slots)
    return PackedPlan(PackedShape(width, rows, slots), row, offset, slot)


def inference_layouts(lengths, batch_size, width):
    """Inference batches of packed rows: examples (sequences of `lengths` [N] or [N, C], each at most `width`)
    taken `batch_size` at a time in input order (a batch mirrors the data's length mix, as a training step)
    and packed -> (`PackedShape` common to every batch, [(example indices, Layout)])."""
    lengths = np.asarray(lengths, np.int64)
    batches = []
    rows = slots = 1
    for start in range(0, len(lengths), batch_size):
        layout = best_fit_decreasing(lengths[start:start + batch_size].reshape(-1), width)
        batches.append((np.arange(start, min(start + batch_size, len(lengths))), layout))
        rows, slots = max(rows, layout.rows), max(slots, layout.slots)
    return PackedShape(width, rows, slots), batches


def pays(packed_shape, strata_positions):
    """Whether packing pays against length strata (`--packing auto`): a packed micro-batch computes at most
    `strata_positions`, the positions of the strata's parts (which also cost one model call each)."""
    return packed_shape.rows * packed_shape.width <= strata_positions


def parse_mode(value):
    mode = str(value).strip().lower()
    if mode not in MODES:
        raise UserError(f"{FLAG} must be one of {', '.join(MODES)}, got {value!r}")
    return mode


def pack_rows(batch, row, offset, slot, shape):
    """A batch of n padded rows (left- or right-padded: `input_ids`, `segment_ids`, `padding_mask` [n, L], or
    [n, C, L] for multiple choice) packed by a layout (`row`, `offset`, `slot` [n] or [n * C]) into
    `shape.rows` rows of `shape.width` (a graph function; tensors or numpy in).

    Returns the packed `input_ids`, `segment_ids`, `padding_mask` and `example_ids` int32 [R, W] (padding: 0),
    `cls_positions` int32 [R, E] (each sequence's last real position) and `example_slots` int32 [n] ([n, C]);
    other keys of `batch` (labels) unchanged.
    """
    import tensorflow as tf

    mask = tf.convert_to_tensor(batch["padding_mask"])
    per_row = tf.shape(mask)[:-1]  # [n] or [n, C]
    mask = tf.reshape(tf.cast(mask, tf.int32), [-1, tf.shape(mask)[-1]])  # [n * C, L]
    row, offset, slot = (tf.cast(tf.reshape(x, [-1]), tf.int32) for x in (row, offset, slot))
    real = tf.where(mask > 0)  # [tokens, 2]: (sequence, position), real tokens in order
    sequence = tf.cast(real[:, 0], tf.int32)
    column = tf.gather(offset, sequence) + tf.gather_nd(tf.cumsum(mask, axis=1) - 1, real)
    target = tf.stack([tf.gather(row, sequence), column], axis=1)
    size = [shape.rows, shape.width]

    def scatter(values):
        return tf.scatter_nd(target, tf.cast(values, tf.int32), size)

    out = {k: v for k, v in batch.items() if k not in ("input_ids", "segment_ids", "padding_mask")}
    for key in ("input_ids", "segment_ids", "padding_mask"):
        flat = tf.reshape(tf.convert_to_tensor(batch[key]), [-1, tf.shape(mask)[-1]])
        out[key] = scatter(tf.gather_nd(flat, real))
    out["example_ids"] = scatter(sequence + 1)
    last = offset + tf.reduce_sum(mask, axis=1) - 1
    out["cls_positions"] = tf.scatter_nd(tf.stack([row, slot], axis=1), last, [shape.rows, shape.slots])
    out["example_slots"] = tf.reshape(row * shape.slots + slot, per_row)
    return out
