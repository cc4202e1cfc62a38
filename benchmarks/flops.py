"""Matmul FLOPs of one benchmark step, counted from the architecture (the same count for every implementation,
so GFLOP/s compares them on the useful work: the query stream and the LM head only at the targets).

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


def encoder_flops(batch, seq_len, dims, targets=0):
    """Forward FLOPs of the encoder on [batch, seq_len], with `targets` query-stream rows per sequence."""
    d_model, n_head, d_head = dims["d_model"], dims["n_head"], dims["d_head"]
    inner = n_head * d_head
    keys_values = 2 * batch * seq_len * d_model * inner * 2
    positions = 2 * (2 * seq_len) * d_model * inner  # the relative encoding's projection, once per batch
    content = layer_forward_flops(batch * seq_len, seq_len, seq_len, d_model, n_head, d_head, dims["d_inner"])
    query = layer_forward_flops(batch * targets, seq_len, seq_len, d_model, n_head, d_head, dims["d_inner"])
    return dims["n_layer"] * (keys_values + positions + content + query)


def step_flops(case: Case):
    """Matmul FLOPs of one step of `case`."""
    dims = case.dims
    if case.task == "inference":
        return encoder_flops(case.batch_size, case.seq_len, dims)
    if case.task == "finetune":
        head = 2 * case.batch_size * dims["d_model"] * (dims["d_model"] + 2)
        return 3 * (encoder_flops(case.batch_size, case.seq_len, dims) + head)
    if case.task == "pretrain":
        targets = case.num_predict
        lm_head = 2 * case.batch_size * targets * dims["d_model"] * dims["n_token"]
        return 3 * (encoder_flops(case.batch_size, case.seq_len, dims, targets) + lm_head)
    raise ValueError(f"unknown task {case.task!r}")
