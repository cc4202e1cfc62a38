"""Packed rows: several short examples share one row of a fixed width, each attending only to itself.

XLNet makes this exact: attention depends on relative positions (i - j) and on same / different segment only,
and padding has no effect, so an example placed contiguously in a packed row and masked off from its
neighbours (`masks.example_blocked`, from per-token `example_ids`) computes what it computes alone. Each
example keeps its own layout (`A <sep> B <sep> <cls>`), and a head reads each example's `<cls>`
(`cls_positions`, then `example_slots`).

Layouts (where each sequence goes: row, offset, slot: first fit decreasing) and the packed rows are each one
graph function (`first_fit_decreasing`, `pack_rows`) that training's plan and tf.data pipeline, inference and
the exports share.

Training (`packed_plan`): a step's examples are the stratified plan's (`buckets.training_plan`: every step
mirrors the data's length distribution, so its total length varies little), packed per replica micro-batch
into `rows` rows of `width`: the largest number any micro-batch of the run needs (one static shape, one
traced program). The width is the longest training row rounded up (`choose_width`), so every training
example fits; at inference an example longer than the width is run unpacked (its length bucket).
"""

from __future__ import annotations

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


def first_fit_decreasing(lengths, width):
    """Packing layouts as a graph function: `lengths` int [S, n] (S independent groups of n sequences, each of
    1 to `width` tokens) -> `row`, `offset`, `slot` int32 [S, n] and `rows`, `slots` int32 [S].

    Within each group the sequences are placed longest first (ties by index), each into the first row with room
    for it (a new row when none has); the groups are placed side by side, one loop step per sequence rank, so
    a whole training run's layouts take n steps. First fit decreasing uses at most 11/9 of the fewest rows
    possible, plus one."""
    import tensorflow as tf

    lengths = tf.cast(lengths, tf.int32)
    groups, n = tf.shape(lengths)[0], tf.shape(lengths)[1]
    if lengths.shape.rank == 2 and lengths.shape[1] == 0:  # no sequences (a static shape): nothing to place
        none = tf.zeros([groups], tf.int32)
        return {"row": lengths, "offset": lengths, "slot": lengths, "rows": none, "slots": none}
    order = tf.math.top_k(lengths, k=n).indices  # longest first; equal lengths by index
    group = tf.range(groups)
    zeros = tf.zeros([groups, n], tf.int32)

    def place(i, room, count, row, offset, slot):
        sequence = tf.stack([group, order[:, i]], 1)
        length = tf.gather_nd(lengths, sequence)
        first = tf.argmax(tf.cast(room >= length[:, None], tf.int32), axis=1, output_type=tf.int32)
        chosen = tf.stack([group, first], 1)
        room_left, held = tf.gather_nd(room, chosen), tf.gather_nd(count, chosen)
        return (i + 1, tf.tensor_scatter_nd_update(room, chosen, room_left - length),
                tf.tensor_scatter_nd_update(count, chosen, held + 1),
                tf.tensor_scatter_nd_update(row, sequence, first),
                tf.tensor_scatter_nd_update(offset, sequence, width - room_left),
                tf.tensor_scatter_nd_update(slot, sequence, held))

    _, _, count, row, offset, slot = tf.while_loop(
        lambda i, *_: i < n, place, [tf.constant(0), tf.fill([groups, n], tf.cast(width, tf.int32)), zeros, zeros,
                                     zeros, zeros])
    none = tf.zeros([groups], tf.int32)  # groups of no sequences use no rows
    return {"row": row, "offset": offset, "slot": slot, "rows": tf.maximum(tf.reduce_max(row, axis=1) + 1, none),
            "slots": tf.maximum(tf.reduce_max(count, axis=1), none)}


_LAYOUTS = {}


def layouts(lengths, width):
    """`first_fit_decreasing` on numpy lengths [S, n] (a traced function per width) -> numpy dict."""
    import tensorflow as tf

    lengths = np.asarray(lengths, np.int64)
    if lengths.size and (lengths.max() > width or lengths.min() < 1):
        raise ValueError(f"sequences of {lengths.min()} to {lengths.max()} tokens: a packed row of {width} holds "
                         f"sequences of 1 to {width}")
    if width not in _LAYOUTS:  # traced once for any number of groups and sequences
        from xlnet_tf.data.chunked import any_count, one_trace_per_structure

        _LAYOUTS[width] = one_trace_per_structure(
            tf.function(lambda x: first_fit_decreasing(x, width), autograph=False), lambda x: any_count(x, (0, 1)))
    return {k: v.numpy() for k, v in _LAYOUTS[width](tf.constant(lengths, tf.int32)).items()}


def layout(lengths, width):
    """The `Layout` of one group of sequences of `lengths` [n] in rows of `width`."""
    found = layouts(np.asarray(lengths).reshape(1, -1), width)
    return Layout(found["row"][0], found["offset"][0], found["slot"][0], int(found["rows"][0]),
                  int(found["slots"][0]))


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
    shares = lengths[examples].reshape(examples.shape[0], examples.shape[1], -1)  # options in order
    found = layouts(shares.reshape(-1, shares.shape[-1]), width)
    shape = PackedShape(width, int(found["rows"].max()), int(found["slots"].max()))
    return PackedPlan(shape, *(found[k].reshape(shares.shape) for k in ("row", "offset", "slot")))


def inference_layouts(lengths, batch_size, width, group_batches=32):
    """Inference calls of packed rows -> (`PackedShape` common to every call, [(example indices, Layout)]).

    Single sequences (`lengths` [N], each at most `width`): `group_batches` x batch_size examples at a time
    (in input order) are packed together, and their rows cut into calls of as many rows as `batch_size`
    examples of the data's mean length fill, so a call holds about `batch_size` examples and nearly no
    padding. Multiple choice (`lengths` [N, C]): `batch_size` examples a call, their options packed together
    (an example's options stay in one call)."""
    lengths = np.asarray(lengths, np.int64)
    choices = lengths.ndim == 2
    group = batch_size if choices else batch_size * group_batches
    per_call = None if choices else max(1, -(-int(round(batch_size * lengths.mean())) // width))
    calls = []
    for start in range(0, len(lengths), group):
        examples = np.arange(start, min(start + group, len(lengths)))
        found = layout(lengths[examples].reshape(-1), width)
        if choices:
            calls.append((examples, found))
            continue
        for first in range(0, found.rows, per_call):
            inside = (found.row >= first) & (found.row < first + per_call)
            calls.append((examples[inside], Layout(found.row[inside] - first, found.offset[inside], found.slot[inside],
                                                   min(per_call, found.rows - first), found.slots)))
    shape = PackedShape(width, per_call or max(c.rows for _, c in calls), max(c.slots for _, c in calls))
    return shape, calls


def pays(packed_shape, strata_positions, parts=1, positions_per_part=0.0):
    """Whether packing pays against length strata (`--packing auto`): a packed micro-batch (one model call)
    computes at most `strata_positions`, the positions of the strata's `parts` (one model call each), plus
    `positions_per_part` (`buckets.part_positions`) for each of their calls after the first."""
    return packed_shape.rows * packed_shape.width <= strata_positions + (parts - 1) * positions_per_part


def parse_mode(value):
    mode = str(value).strip().lower()
    if mode not in MODES:
        raise UserError(f"{FLAG} must be one of {', '.join(MODES)}, got {value!r}")
    return mode


def pack_merged(batch):
    """One merged batch of rows padded to a common width W (an export's requests: `input_ids`, `segment_ids`,
    `padding_mask` [B, W], or [B, C, W] for multiple choice) packed in the graph into rows of W, as many as
    first fit decreasing needs (`pack_rows`' outputs). A batch of one sequence keeps its row as it is (no
    layout loop, no scatter)."""
    import tensorflow as tf

    mask = tf.convert_to_tensor(batch["padding_mask"])
    width = tf.shape(mask)[-1]
    lengths = tf.reshape(tf.reduce_sum(tf.cast(mask, tf.int32), -1), [-1])
    keys = ("input_ids", "segment_ids", "padding_mask") + PACKED_INPUTS

    def packed():
        found = first_fit_decreasing(lengths[None], width)
        shape = PackedShape(width, found["rows"][0], found["slots"][0])
        out = pack_rows(batch, found["row"][0], found["offset"][0], found["slot"][0], shape)
        return {k: out[k] for k in keys}

    def alone():  # every sequence its own row, as unpacked: its example is its real tokens, read at the last
        rows = {k: tf.reshape(tf.cast(batch[k], tf.int32), [-1, width]) for k in keys[:3]}
        last = tf.reduce_max(tf.where(rows["padding_mask"] > 0, tf.range(width)[None], 0), axis=1)
        return {**rows, "example_ids": rows["padding_mask"], "cls_positions": last[:, None],
                "example_slots": tf.reshape(tf.range(tf.size(lengths)), tf.shape(mask)[:-1])}

    out = tf.cond(tf.size(lengths) > 1, packed, alone)
    return {**{k: v for k, v in batch.items() if k not in keys}, **out}


def unpack_tokens(states, example_ids, padding_mask):
    """Per-token outputs of packed rows back in the rows they were packed from (a graph function).

    `states` [R, W, ...] computed on rows made by `pack_rows` / `pack_merged` (whose `example_ids` [R, W] say
    which sequence each position holds: 1 + its index, 0 padding); `padding_mask` [n, L] the original rows'
    real tokens. Returns [n, L, ...]: each sequence's states at its real positions, in order, and zeros at
    padding. A sequence's tokens are contiguous and in order within one packed row, so ordering the packed
    real positions by sequence (a stable sort keeps each row's order) lines them up with the original real
    positions in row-major order."""
    import tensorflow as tf

    example_ids = tf.cast(example_ids, tf.int32)
    packed = tf.where(example_ids > 0)  # [tokens, 2]: (row, column), row-major
    order = tf.argsort(tf.gather_nd(example_ids, packed), stable=True)
    source = tf.gather(packed, order)
    target = tf.where(tf.cast(padding_mask, tf.int32) > 0)  # [tokens, 2]: (sequence, position), row-major
    shape = tf.concat([tf.shape(padding_mask, out_type=tf.int64), tf.shape(states, out_type=tf.int64)[2:]], 0)
    return tf.scatter_nd(target, tf.gather_nd(states, source), shape)


def pack_rows(batch, row, offset, slot, shape):
    """A batch of n padded rows (left- or right-padded: `input_ids`, `segment_ids`, `padding_mask` [n, L], or
    [n, C, L] for multiple choice) packed by a layout (`row`, `offset`, `slot` [n] or [n * C]) into
    `shape.rows` rows of `shape.width` (a graph function; tensors or numpy in; the shape's fields may be
    scalar tensors).

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
