"""Matmul FLOPs of one benchmark step, counted from the architecture (the same count for every implementation,
so GFLOP/s compares them on the useful work: the query stream and the LM head only at the targets, and the
last layer's content stream only where the task reads it: every position for inference, the <cls> for
classification, nowhere for pretraining, whose loss reads only the query stream).

A training step counts three times its forward (the backward computes two products per forward product).
Embedding lookups, softmax, LayerNorm and the optimizer are not counted.
"""

from xlnet_tf.benchmarks.common import Case


def layer_forward_flops(rows, qlen, klen, d_model, n_head, d_head, d_inner):
    """FLOPs of one XLNet layer for `rows` query rows (over all sequences) of sequences with `qlen` queries
    and `klen` keys: q and output projections, attention against content keys and R = klen + qlen relative
    positions, and the feed-forward. Keys, values and positions are counted separately (see encoder_flops)."""
    inner = n_head * d_head
    projections = 2 * rows * d_model * inner * 2  # q and o
    attention = 2 * rows * inner * (klen + (klen + qlen) + klen)  # q.k, q.r, probs.v
    feed_forward = 2 * rows * d_model * d_inner * 2
    return projections + attention + feed_forward


def encoder_flops(batch, seq_len, dims, targets=0, read_rows=None):
    """Forward FLOPs of the encoder on [batch, seq_len], with `targets` query-stream rows per sequence and
    `read_rows` content rows per sequence read from the last layer (None: all of them)."""
    d_model, n_head, d_head = dims["d_model"], dims["n_head"], dims["d_head"]
    inner = n_head * d_head
    keys_values = 2 * batch * seq_len * d_model * inner * 2
    positions = 2 * (2 * seq_len) * d_model * inner  # the relative encoding's projection, once per batch

    def rows(count):
        return layer_forward_flops(batch * count, seq_len, seq_len, d_model, n_head, d_head, dims["d_inner"])

    last_layer_content = rows(seq_len if read_rows is None else read_rows)
    return (dims["n_layer"] * (keys_values + positions + rows(targets)) + (dims["n_layer"] - 1) * rows(seq_len)
            + last_layer_content)


def example_flops(dims, length, training, every_position=False):
    """The useful matmul FLOPs of one classification example of `length` tokens alone: its encoder reading
    the <cls> and the head, three times for a training step; `every_position`: the encoder reading every
    position and a two-logit dense layer on each (SQuAD's start / end cost)."""
    if every_position:
        forward = encoder_flops(1, length, dims) + 2 * length * dims["d_model"] * 2
    else:
        forward = encoder_flops(1, length, dims, read_rows=1) + 2 * dims["d_model"] * (dims["d_model"] + 2)
    return 3 * forward if training else forward


def step_flops(case: Case):
    """Matmul FLOPs of one step of `case`."""
    dims = case.dims
    if case.step_task == "inference":
        return encoder_flops(case.batch_size, case.seq_len, dims)
    if case.step_task == "finetune":
        head = 2 * case.batch_size * dims["d_model"] * (dims["d_model"] + 2)
        return 3 * (encoder_flops(case.batch_size, case.seq_len, dims, read_rows=1) + head)
    if case.step_task == "pretrain":
        targets = case.num_predict
        lm_head = 2 * case.batch_size * targets * dims["d_model"] * dims["n_token"]
        return 3 * (encoder_flops(case.batch_size, case.seq_len, dims, targets, read_rows=0) + lm_head)
    raise ValueError(f"unknown task {case.task!r}")
