"""The ONE fine-tuning feature builder, as TensorFlow graph ops: token ids -> model inputs.

Training, ``evaluate`` / ``predict`` (through ``xlnet_tf.data.finetuning``, which runs these functions over a
file's examples) and the exported SavedModels (which trace them) build their rows here, so what is trained,
predicted and served cannot drift. Everything is core TensorFlow ops on ragged / dense tensors (no Python
loops over data, no ``py_function``), so the functions run eagerly, in ``tf.data`` and in a SavedModel.

Layouts follow the original XLNet scripts (zihangdai/xlnet):

* ``classification_inputs`` (``classifier_utils.convert_single_example``): ``A <sep> B <sep> <cls>`` /
  ``A <sep> <cls>``, LEFT-padded (``<cls>`` is always the last position), segment ids A 0 / B 1 / <cls> 2
  / pad 4; pairs truncated as ``_truncate_seq_pair``, a single text keeps its first ``max_seq_len - 2``.
* ``squad_windows`` (``run_squad.convert_examples_to_features``): ``paragraph <sep> question <sep> <cls>``,
  RIGHT-padded, segment ids paragraph 0 / question 1 / <cls> 2 / pad 3, ``p_mask``; windows of
  ``max_seq_len - len(q) - 3`` paragraph tokens stepping ``min(window length, doc_stride)``;
  ``token_is_max_context``. ``squad_answer_positions`` gives their training labels.
* ``race_inputs`` (``run_race.convert_single_example``): per option ``article <sep> qa <sep> <cls>``,
  LEFT-padded, qa keeps its LAST ``max_qa_len`` tokens, the article its first ``max_seq_len - 3 - len(qa)``.

Padding: ``<pad>`` (id 5) where the original wrote 0, and masks are 1 for real tokens. Every builder pads
its rows to ``max_seq_len`` by default, or, with ``pad_to_multiple=m``, to the batch's longest row rounded up
to a multiple of ``m`` (at most ``max_seq_len``): XLNet's outputs at real positions do not depend on the
amount of padding (padded keys are masked, positions are relative), so shorter batches cost less and give
the same results. Each builder also returns ``length`` (real tokens per row).

``squad_best_spans`` is ``xlnet_tf.tasks.squad.squad_predictions``'s answer selection over the
windows of each question, as tensors.

Public API: ``byte_to_char_offsets``, ``keep_first``, ``keep_last``, ``pad_rows``, ``pad_to_longest``,
``batch_width``, ``pair_lengths``, ``document_width``, ``classification_inputs``, ``squad_windows``,
``squad_answer_positions``, ``squad_best_spans``, ``race_qa_text``, ``race_inputs``, ``token_windows``,
``word_outputs``.
"""

import math

import tensorflow as tf

from xlnet_tf.data.labels import IGNORE  # the label id of positions that are not scored
from xlnet_tf.tokenization import element_index, kept, row_ids, search_sorted

SEP_ID, CLS_ID, PAD_ID = 4, 3, 5
# Segment ids of the original scripts (classifier_utils / run_race and run_squad).
SEG_A, SEG_B, SEG_CLS, SEG_PAD = 0, 1, 2, 4
SQUAD_SEG_P, SQUAD_SEG_Q, SQUAD_SEG_CLS, SQUAD_SEG_PAD = 0, 1, 2, 3

# ----------------------------------------------------------------------------------------------------
# Helpers


def _positions(rt, rows=None):
    """Position of every value of ragged ``rt [B, None]`` inside its row, int64 ``[N]`` (``rows``: its `row_ids`,
    when the caller has them)."""
    rows = row_ids(rt) if rows is None else rows
    return element_index(rows) - tf.gather(tf.cast(rt.row_splits, tf.int64), rows)  # a row starts at its split


def _keep(rt, keep, last):
    """The first (``last``: the last) ``keep[b]`` values of each row of ragged ``rt [B, None, ...]``, in memory linear
    in its values (``tf.ragged.boolean_mask`` is not, see ``tokenization.row_ids``)."""
    lengths = rt.row_lengths()
    keep = tf.maximum(tf.minimum(tf.cast(keep, lengths.dtype), lengths), 0)
    rows = row_ids(rt)
    at = _positions(rt, rows)
    mask = at >= tf.gather(lengths - keep, rows) if last else at < tf.gather(keep, rows)
    return tf.RaggedTensor.from_row_lengths(kept(rt.values, mask), keep, validate=False)


def keep_first(rt, keep):
    """The first ``keep[b]`` values of each row of ``rt`` (``keep`` int64 ``[B]``)."""
    return _keep(rt, keep, last=False)


def keep_last(rt, keep):
    """The last ``keep[b]`` values of each row of ``rt``."""
    return _keep(rt, keep, last=True)


def _fill_rows(lengths, value, dtype):
    """Ragged ``[B, None]`` with ``lengths[b]`` copies of ``value`` in row ``b``."""
    lengths = tf.cast(lengths, tf.int64)
    return tf.RaggedTensor.from_row_lengths(
        tf.fill([tf.reduce_sum(lengths)], tf.constant(value, dtype)), lengths, validate=False)


def _constant_rows(nrows, values, dtype):
    """Ragged ``[nrows, len(values)]``: every row is ``values``."""
    flat = tf.tile(tf.constant(values, dtype), tf.reshape(tf.cast(nrows, tf.int32), [1]))
    return tf.RaggedTensor.from_row_lengths(flat, tf.fill(tf.reshape(tf.cast(nrows, tf.int64), [1]),
                                                          tf.constant(len(values), tf.int64)), validate=False)


def concat_rows(parts):
    """Ragged ``[B, None]`` tensors of one dtype joined row by row (row ``b`` is ``parts[0][b]``, then
    ``parts[1][b]``, ...): ``tf.concat(parts, 1)`` by index arithmetic, a few ops a part where TensorFlow's ragged
    concat builds over a hundred (every export traces these per signature)."""
    lengths = [tf.cast(part.row_lengths(), tf.int64) for part in parts]
    total = sum(lengths[1:], lengths[0])
    offset = tf.cumsum(total, exclusive=True)  # where the part's values start in each output row
    positions = []
    for part, length in zip(parts, lengths):
        start_in_output = offset - tf.cast(part.row_starts(), tf.int64)
        positions.append(element_index(part.values) + tf.gather(start_in_output, row_ids(part)))
        offset += length
    values = tf.scatter_nd(tf.concat(positions, 0)[:, None], tf.concat([part.values for part in parts], 0),
                           tf.reshape(tf.reduce_sum(total), [1]))
    return tf.RaggedTensor.from_row_lengths(values, total, validate=False)


def pad_rows(rt, width, pad_value, left=False):
    """Ragged ``[B, None]`` (rows of at most ``width`` values) -> dense ``[B, width]``.

    Rows are placed at the start (``left=False``: right padding) or at the end (``left=True``: left
    padding) of their dense row; the rest is ``pad_value``. ``width`` is a Python int (a static shape) or
    an int scalar tensor (see ``batch_width``).
    """
    rows = row_ids(rt)
    pos = _positions(rt, rows)
    width64 = tf.cast(width, tf.int64)
    if left:
        pos += width64 - tf.gather(rt.row_lengths(), rows)
    nrows = rt.nrows()
    dense = tf.fill(tf.stack([nrows, width64]), tf.constant(pad_value, rt.dtype))
    dense = tf.tensor_scatter_nd_update(dense, tf.stack([rows, pos], 1), rt.values)
    return tf.ensure_shape(dense, [None, width if isinstance(width, int) else None])


def pad_to_longest(rt, pad_value):
    """Ragged ``[B, None]`` -> dense ``[B, its longest row]`` padded at the end with ``pad_value`` (core ops only:
    ``RaggedTensor.to_tensor``'s op is not one TensorFlow Serving is sure to have)."""
    return pad_rows(rt, tf.reduce_max(tf.concat([rt.row_lengths(), tf.zeros([1], tf.int64)], 0)), pad_value)


def batch_width(lengths, max_seq_len, pad_to_multiple=None):
    """The width a batch is padded to: ``max_seq_len`` when ``pad_to_multiple`` is None, else the longest
    of ``lengths`` rounded up to a multiple of ``pad_to_multiple``, at most ``max_seq_len`` (an empty batch
    gets ``min(pad_to_multiple, max_seq_len)``). Python int or int64 scalar tensor."""
    if pad_to_multiple is None:
        return max_seq_len
    if pad_to_multiple < 1:
        raise ValueError(f"pad_to_multiple must be >= 1, got {pad_to_multiple}")
    longest = tf.reduce_max(tf.concat([tf.cast(lengths, tf.int64), tf.ones([1], tf.int64)], 0))
    rounded = (longest + pad_to_multiple - 1) // pad_to_multiple * pad_to_multiple
    return tf.minimum(rounded, max_seq_len)


def byte_to_char_offsets(strings, offsets):
    """UTF-8 byte offsets into ``strings [B]`` -> Unicode code point offsets (int64, same ragged shape).

    ``offsets`` is ragged ``[B, None]`` (int) with each value a byte position in its row's string (a
    character boundary, or the string's length). A code point's index is the number of characters that
    start before it, so an end offset (exclusive) maps to the end of its character. Characters are those
    ``tf.strings.unicode_decode`` sees (an invalid byte counts as one U+FFFD), so for valid UTF-8 the
    result indexes the caller's Python ``str``.
    """
    _, starts = tf.strings.unicode_decode_with_offsets(strings, "UTF-8", errors="replace")
    byte_len = tf.cast(tf.strings.length(strings), tf.int64)
    base = tf.cumsum(byte_len, exclusive=True)
    global_starts = starts.values + tf.gather(base, row_ids(starts))
    rows = row_ids(offsets)
    query = tf.cast(offsets.values, tf.int64) + tf.gather(base, rows)
    index = search_sorted(global_starts, query)
    return offsets.with_flat_values(index - tf.gather(starts.row_starts(), rows))


# ----------------------------------------------------------------------------------------------------
# Classification / regression


def pair_lengths(len_a, len_b, max_len):
    """``_truncate_seq_pair``'s kept lengths, vectorised (see ``truncation.truncated_pair_lengths``)."""
    excess = len_a + len_b - max_len
    shrink_a = len_a > len_b
    one_sided = excess <= tf.abs(len_a - len_b)
    keep_a = tf.where(excess <= 0, len_a,
                      tf.where(one_sided, tf.where(shrink_a, len_a - excess, len_a), (max_len + 1) // 2))
    keep_b = tf.where(excess <= 0, len_b,
                      tf.where(one_sided, tf.where(shrink_a, len_b, len_b - excess), max_len // 2))
    return keep_a, keep_b


def document_width(max_seq_len, max_doc_len=None):
    """Positions per row: ``max_seq_len`` (one window, ``max_doc_len`` None), or for long documents
    ``max_doc_len`` rounded up to whole segments of ``max_seq_len``."""
    return max_seq_len if max_doc_len is None else -(-max_doc_len // max_seq_len) * max_seq_len


def _row_width(length, max_seq_len, pad_to_multiple, max_doc_len):
    """``batch_width`` for one window, or for documents (whole segments of ``max_seq_len``)."""
    if max_doc_len is None:
        return batch_width(length, max_seq_len, pad_to_multiple)
    return batch_width(length, document_width(max_seq_len, max_doc_len), pad_to_multiple and max_seq_len)


def classification_inputs(ids_a, ids_b, max_seq_len, pad_to_multiple=None, max_doc_len=None):
    """Encoder inputs for classification / regression.

    Args:
      ids_a: ragged int ``[B, None]`` token ids of text A (no special tokens).
      ids_b: ragged int ``[B, None]`` ids of text B, or ``None`` (single-sentence model). A row of B
        without tokens makes that example single-sentence (the original's ``if example.text_b``).
      max_seq_len: L (Python int, at least 3).
      pad_to_multiple: None (pad to L) or m (pad to the longest row rounded up to m; see ``batch_width``).
      max_doc_len: None (one window of L), or N >= L: a long document of at most N tokens, read as
        segments of L with memory. B keeps at most L - 3 tokens (``B <sep> <cls>`` lies in the last
        segment), then the pair is truncated to N - 3 as the original truncates to L - 3 (with N = L this
        is exactly the one-window rule); a single text keeps its first N - 2 tokens. Rows are left-padded
        to whole segments: ``document_width`` (or, with ``pad_to_multiple``, the longest row rounded up
        to a multiple of L), so the last segment always ends with the ``<cls>``.
    Returns:
      dict: int32 ``[B, W]`` ``input_ids``, ``segment_ids``, ``padding_mask`` (1 = real token), W = L or
      the batch's width; int32 ``[B]`` ``cls_index`` (= W - 1, the ``<cls>`` position) and ``length`` (real
      tokens); bool ``[B]`` ``has_b`` (a pair) and ``truncated`` (tokens were dropped).
    """
    budget = max_seq_len if max_doc_len is None else max_doc_len
    ids_a = tf.cast(ids_a, tf.int32)
    len_a = ids_a.row_lengths()
    nrows = ids_a.nrows()
    if ids_b is None:
        ids_b = tf.RaggedTensor.from_row_lengths(tf.zeros([0], tf.int32), tf.zeros_like(len_a))
    ids_b = tf.cast(ids_b, tf.int32)
    len_b = ids_b.row_lengths()
    has_b = len_b > 0
    pair_a, pair_b = pair_lengths(len_a, tf.minimum(len_b, max_seq_len - 3), budget - 3)
    keep_a = tf.where(has_b, pair_a, tf.minimum(len_a, budget - 2))
    keep_b = tf.where(has_b, pair_b, tf.zeros_like(len_b))
    a, b = keep_first(ids_a, keep_a), keep_first(ids_b, keep_b)
    one = tf.ones_like(len_a)
    b_sep = tf.cast(has_b, tf.int64)
    tokens = concat_rows([a, _fill_rows(one, SEP_ID, tf.int32), b, _fill_rows(b_sep, SEP_ID, tf.int32),
                          _fill_rows(one, CLS_ID, tf.int32)])
    segments = concat_rows([_fill_rows(keep_a + 1, SEG_A, tf.int32), _fill_rows(keep_b + b_sep, SEG_B, tf.int32),
                            _fill_rows(one, SEG_CLS, tf.int32)])
    length = tokens.row_lengths()
    width = _row_width(length, max_seq_len, pad_to_multiple, max_doc_len)
    return {
        "input_ids": pad_rows(tokens, width, PAD_ID, left=True),
        "segment_ids": pad_rows(segments, width, SEG_PAD, left=True),
        "padding_mask": pad_rows(tf.ones_like(tokens), width, 0, left=True),
        "cls_index": tf.fill(tf.reshape(tf.cast(nrows, tf.int32), [1]), tf.cast(width, tf.int32) - 1),
        "length": tf.cast(length, tf.int32),
        "has_b": has_b,
        "truncated": (keep_a < len_a) | (keep_b < len_b),
    }


# ----------------------------------------------------------------------------------------------------
# SQuAD


def squad_windows(question_ids, context_ids, context_starts, context_ends, max_seq_len, doc_stride=128,
                  max_query_len=64, pad_to_multiple=None):
    """SQuAD windows for a batch of (question, context).

    Args:
      question_ids: ragged int ``[B, None]`` question ids (the first ``max_query_len`` are kept).
      context_ids: ragged int ``[B, None]`` paragraph ids.
      context_starts / context_ends: ragged int ``[B, None]`` span of each paragraph token in its context
        (any unit: byte or character offsets are copied to the windows as given).
      max_seq_len, doc_stride, max_query_len: Python ints; ``max_seq_len >= max_query_len + 4``. Windows
        are always cut for ``max_seq_len``; only their padding follows ``pad_to_multiple``.
      pad_to_multiple: None (pad to L) or m (pad to the longest window rounded up to m).
    Returns:
      dict; W windows in example order (each example's windows consecutive, in order), padded to L or
      the batch's width: ``input_ids``, ``segment_ids``, ``padding_mask``, ``p_mask``,
      ``token_is_max_context`` int32 ``[W, width]``; ``token_start`` / ``token_end`` int64 ``[W, width]``
      (the paragraph tokens' spans, -1 elsewhere); ``cls_index``, ``paragraph_len``, ``length`` int32
      ``[W]``; ``example_index``, ``window_index`` (k-th window of its example), ``window_start`` (first
      paragraph token) int64 ``[W]``; per example: ``num_windows`` int64 ``[B]`` and
      ``question_truncated`` bool ``[B]``.
    """
    if max_seq_len < max_query_len + 4:
        raise ValueError(f"max_seq_len ({max_seq_len}) must exceed max_query_len ({max_query_len}) + 3")
    length = max_seq_len
    q = tf.cast(question_ids, tf.int32)
    question_truncated = q.row_lengths() > max_query_len
    q = keep_first(q, tf.minimum(q.row_lengths(), max_query_len))
    c = tf.cast(context_ids, tf.int32)
    n_q, n_c = q.row_lengths(), c.row_lengths()
    span = length - n_q - 3  # paragraph tokens per window
    step = tf.minimum(span, doc_stride)
    n_windows = 1 + tf.maximum((n_c - span + step - 1) // step, 0)
    windows = tf.ragged.range(n_windows)  # [B, K]
    example = windows.value_rowids()
    k = windows.values
    start = k * tf.gather(step, example)
    plen = tf.maximum(tf.minimum(tf.gather(n_c, example) - start, tf.gather(span, example)), 0)

    # Paragraph tokens of each window: [W, None].
    offsets = tf.ragged.range(plen)
    tok_window = offsets.value_rowids()
    tok_pos = offsets.values + tf.gather(start, tok_window)  # position in the paragraph
    tok_example = tf.gather(example, tok_window)
    flat = tf.gather(c.row_starts(), tok_example) + tok_pos
    para = offsets.with_flat_values(tf.gather(c.values, flat))
    para_start = offsets.with_flat_values(tf.gather(tf.cast(context_starts.values, tf.int64), flat))
    para_end = offsets.with_flat_values(tf.gather(tf.cast(context_ends.values, tf.int64), flat))

    # token_is_max_context: the window where the token has the most context, score
    # min(left, right) + 0.01 * window length, the first window winning ties (_check_is_max_context).
    radius = max(1, math.ceil((length - 3) / doc_stride))
    d = tf.range(-radius, radius + 1, dtype=tf.int64)[None]  # [1, 2R+1]
    tok_k = tf.gather(k, tok_window)[:, None]
    tok_step = tf.gather(tf.gather(step, example), tok_window)[:, None]
    tok_span = tf.gather(tf.gather(span, example), tok_window)[:, None]
    tok_n = tf.gather(n_c, tok_example)[:, None]
    tok_count = tf.gather(n_windows, tok_example)[:, None]
    other = tok_k + d
    o_start = other * tok_step
    o_len = tf.minimum(tok_n - o_start, tok_span)
    p = tok_pos[:, None]
    contains = (other >= 0) & (other < tok_count) & (o_start <= p) & (p < o_start + o_len)

    def score(s, n):
        return tf.cast(tf.minimum(p - s, s + n - 1 - p), tf.float64) + 0.01 * tf.cast(n, tf.float64)

    own = score(tf.gather(start, tok_window)[:, None], tf.gather(plen, tok_window)[:, None])
    theirs = score(o_start, o_len)
    beaten = contains & (((d < 0) & (theirs >= own)) | ((d > 0) & (theirs > own)))
    max_context = offsets.with_flat_values(tf.cast(~tf.reduce_any(beaten, 1), tf.int32))

    n_windows_total = tf.size(k, out_type=tf.int64)
    q_rows = tf.gather(q, example)
    nq_w = tf.gather(n_q, example)
    ones = tf.ones_like(plen)
    tokens = concat_rows([para, _fill_rows(ones, SEP_ID, tf.int32), q_rows,
                          _constant_rows(n_windows_total, [SEP_ID, CLS_ID], tf.int32)])
    segments = concat_rows([_fill_rows(plen + 1, SQUAD_SEG_P, tf.int32), _fill_rows(nq_w + 1, SQUAD_SEG_Q, tf.int32),
                            _fill_rows(ones, SQUAD_SEG_CLS, tf.int32)])
    p_mask = concat_rows([_fill_rows(plen, 0, tf.int32), _fill_rows(nq_w + 2, 1, tf.int32),
                          _fill_rows(ones, 0, tf.int32)])
    real = plen + nq_w + 3
    width = batch_width(real, length, pad_to_multiple)
    return {
        "input_ids": pad_rows(tokens, width, PAD_ID),
        "segment_ids": pad_rows(segments, width, SQUAD_SEG_PAD),
        "padding_mask": pad_rows(tf.ones_like(tokens), width, 0),
        "p_mask": pad_rows(p_mask, width, 1),
        "token_is_max_context": pad_rows(max_context, width, 0),
        "token_start": pad_rows(para_start, width, -1),
        "token_end": pad_rows(para_end, width, -1),
        "cls_index": tf.cast(plen + nq_w + 2, tf.int32),
        "paragraph_len": tf.cast(plen, tf.int32),
        "length": tf.cast(real, tf.int32),
        "example_index": example,
        "window_index": k,
        "window_start": start,
        "num_windows": n_windows,
        "question_truncated": question_truncated,
    }


def squad_answer_positions(windows, context_starts, context_ends, answer_start, answer_end, is_impossible):
    """Training labels of SQuAD windows, as the original (``run_squad.convert_examples_to_features``).

    An answer's tokens are the paragraph tokens whose span overlaps the answer's ``[start, end)``. In a
    window that holds all of them, ``start_position`` / ``end_position`` are their first / last window
    positions and ``is_impossible`` 0; in other windows, and for impossible questions, both are the
    window's ``cls_index`` and ``is_impossible`` 1. A question that is not impossible and whose answer covers
    no token (none given: a prediction file; or only whitespace) gets -1 / -1 and ``is_impossible`` 0.

    Args:
      windows: ``squad_windows``' dict.
      context_starts / context_ends: the ragged ``[B, None]`` token spans given to ``squad_windows``.
      answer_start / answer_end: int ``[B]``, the (first gold) answer's span in the same unit; -1 / -1
        when there is none.
      is_impossible: bool ``[B]``.
    Returns:
      dict: ``start_position``, ``end_position``, ``is_impossible`` int32 ``[W]``; ``answer_found`` bool
      ``[B]`` (some token overlaps the answer); ``answer_outside`` bool ``[W]`` (the question has an
      answer, but not inside this window).
    """
    starts = tf.cast(context_starts, tf.int64)
    ends = tf.cast(context_ends, tf.int64)
    rows = starts.value_rowids()
    n = tf.shape(answer_start, out_type=tf.int64)[0]
    a_start = tf.gather(tf.cast(answer_start, tf.int64), rows)
    a_end = tf.gather(tf.cast(answer_end, tf.int64), rows)
    overlap = tf.maximum(starts.values, a_start) < tf.minimum(ends.values, a_end)
    pos = _positions(starts)
    first = tf.math.unsorted_segment_min(tf.where(overlap, pos, tf.constant(tf.int64.max, tf.int64)), rows, n)
    last = tf.math.unsorted_segment_max(tf.where(overlap, pos, tf.constant(-1, tf.int64)), rows, n)
    found = last >= 0

    example = windows["example_index"]
    w_start = windows["window_start"]
    w_end = w_start + tf.cast(windows["paragraph_len"], tf.int64)
    cls = windows["cls_index"]
    impossible = tf.gather(tf.cast(is_impossible, tf.bool), example)
    has_answer = tf.gather(found, example)
    w_first, w_last = tf.gather(first, example), tf.gather(last, example)
    inside = has_answer & (w_first >= w_start) & (w_last < w_end)
    unknown = ~impossible & ~has_answer
    none = tf.fill(tf.shape(cls), -1)

    def position(token):
        in_window = tf.cast(token - w_start, tf.int32)
        return tf.where(impossible, cls, tf.where(unknown, none, tf.where(inside, in_window, cls)))

    return {
        "start_position": position(w_first),
        "end_position": position(w_last),
        "is_impossible": tf.cast(impossible | (has_answer & ~inside), tf.int32),
        "answer_found": found,
        "answer_outside": ~impossible & has_answer & ~inside,
    }


def squad_best_spans(outputs, windows, n_examples, max_answer_length=64):
    """The best answer span of each question over all its windows, as ``squad_predictions``.

    Candidates: for each window, the head's top ``k1`` starts x top ``k2`` ends (per start); a candidate
    counts when start and end are paragraph tokens of the window, ``end >= start``, it is at most
    ``max_answer_length`` tokens long and the window gives the start token its maximal context. Score:
    ``start_log_prob + end_log_prob``. The highest score wins; ties go to the first candidate in (window,
    start rank, end rank) order, as the Python loop. The null score is the minimum ``cls_logits`` over the
    question's windows.

    Args:
      outputs: the head's inference outputs on the windows (``start_top_log_probs``, ``start_top_index``
        ``[W, k1]``, ``end_top_log_probs``, ``end_top_index`` ``[W, k1 * k2]`` start-major,
        ``cls_logits`` ``[W]``).
      windows: ``squad_windows``' dict for the same windows.
      n_examples: number of questions (B), int scalar.
    Returns:
      dict over B: ``found`` bool (a candidate exists), ``score`` float32 (0 when none), ``window`` int64
      (index into W), ``start_token`` / ``end_token`` int64 (window positions), ``start`` / ``end`` int64
      (``token_start`` of the start token, ``max(token_end of the end token, start)``; -1 when none),
      ``null_score`` float32.
    """
    start_lp = outputs["start_top_log_probs"]
    start_ix = tf.cast(outputs["start_top_index"], tf.int64)
    end_lp = outputs["end_top_log_probs"]
    end_ix = tf.cast(outputs["end_top_index"], tf.int64)
    k1 = start_ix.shape[1]
    width = end_ix.shape[1]
    k2 = width // k1
    start_ix = tf.repeat(start_ix, k2, axis=1)  # [W, k1 * k2], start-major like the ends
    start_lp = tf.repeat(start_lp, k2, axis=1)
    plen = tf.cast(windows["paragraph_len"], tf.int64)[:, None]
    max_context = tf.gather(windows["token_is_max_context"], start_ix, batch_dims=1) > 0
    valid = ((start_ix < plen) & (end_ix < plen) & (end_ix >= start_ix)
             & (end_ix - start_ix + 1 <= max_answer_length) & max_context)
    score = tf.where(valid, start_lp + end_lp, tf.constant(-math.inf, start_lp.dtype))

    example = tf.cast(windows["example_index"], tf.int64)
    n_windows = tf.shape(score, out_type=tf.int64)[0]
    flat_score = tf.reshape(score, [-1])
    flat_valid = tf.reshape(valid, [-1])
    flat_example = tf.repeat(example, width)
    flat_index = tf.range(n_windows * width)
    n_examples = tf.cast(n_examples, tf.int64)
    best = tf.math.unsorted_segment_max(flat_score, flat_example, n_examples)
    is_best = flat_valid & (flat_score == tf.gather(best, flat_example))
    big = n_windows * width
    first = tf.math.unsorted_segment_min(tf.where(is_best, flat_index, big), flat_example, n_examples)
    found = first < big
    first = tf.where(found, first, 0)
    window = first // width
    safe = tf.minimum(window, tf.maximum(n_windows - 1, 0))
    start_token = tf.gather(tf.reshape(start_ix, [-1]), tf.minimum(first, tf.maximum(big - 1, 0)))
    end_token = tf.gather(tf.reshape(end_ix, [-1]), tf.minimum(first, tf.maximum(big - 1, 0)))
    token_start = tf.gather_nd(windows["token_start"], tf.stack([safe, start_token], 1))
    token_end = tf.gather_nd(windows["token_end"], tf.stack([safe, end_token], 1))
    token_end = tf.maximum(token_end, token_start)
    none = tf.constant(-1, tf.int64)
    null_score = tf.math.unsorted_segment_min(outputs["cls_logits"], example, n_examples)
    return {
        "found": found,
        "score": tf.where(found, tf.gather(flat_score, first), tf.zeros_like(best)),
        "window": tf.where(found, window, none),
        "start_token": tf.where(found, start_token, none),
        "end_token": tf.where(found, end_token, none),
        "start": tf.where(found, token_start, none),
        "end": tf.where(found, token_end, none),
        "null_score": null_score,
    }


# ----------------------------------------------------------------------------------------------------
# RACE


def _cloze_tails(pieces, rows, last, options, last_bytes):
    """The parts ``piece + option`` of cloze texts (no option after a text's last piece), each cut to what lies in
    its text's last ``last_bytes`` bytes: string ``[N]``, from the pieces ``[N]``, their text's row ``rows`` and
    ``last`` (bool ``[N]``), and the options ``[R]``. An option is copied only where it is kept."""
    piece_len = tf.cast(tf.strings.length(pieces), tf.int64)
    option_len = tf.cast(tf.strings.length(options), tf.int64)
    glue_len = tf.where(last, tf.zeros_like(piece_len), tf.gather(option_len, rows))
    through = tf.cumsum(piece_len + glue_len)  # bytes of the batch's texts up to the end of each part
    room = tf.maximum(last_bytes - (tf.gather(kept(through, last), rows) - through), 0)
    glue_keep = tf.minimum(glue_len, room)
    piece_keep = tf.minimum(piece_len, tf.maximum(room - glue_len, 0))
    heads = tf.strings.substr(pieces, piece_len - piece_keep, piece_keep)
    at = tf.where(glue_keep > 0)
    glue_rows, keep = tf.gather(rows, at[:, 0]), tf.gather(glue_keep, at[:, 0])
    tails = tf.strings.substr(tf.gather(options, glue_rows), tf.gather(option_len, glue_rows) - keep, keep)
    return tf.strings.join([heads, tf.tensor_scatter_nd_update(tf.fill(tf.shape(pieces), ""), at, tails)])


def race_qa_text(questions, options, last_bytes=None):
    """The original's question + option text: questions string ``[B]``, options string ``[B, C]`` -> ``[B, C]``.

    A question holding ``_`` (a cloze) gets the option in place of every ``_`` (literal, no regex); any
    other question is followed by a space and the option. With ``last_bytes`` (a Python int), a cloze text is
    only its last ``last_bytes`` bytes (they may begin inside a character), built without writing the rest, so a
    question of many ``_`` with long options costs about their bytes, not their product.
    """
    n_choices = tf.shape(options)[1]
    q = tf.repeat(questions, n_choices)  # [B * C], option-minor
    opt = tf.reshape(options, [-1])
    pieces = tf.strings.split(q, sep="_")  # ragged [B * C, None]; one piece when there is no "_"
    rows = row_ids(pieces)
    last = _positions(pieces, rows) + 1 == tf.gather(pieces.row_lengths(), rows)
    if last_bytes is None:
        parts = tf.strings.join([pieces.values, tf.where(last, "", tf.gather(opt, rows))])
    else:
        parts = _cloze_tails(pieces.values, rows, last, opt, last_bytes)
    cloze = tf.strings.reduce_join(pieces.with_flat_values(parts), axis=1)
    plain = tf.strings.join([q, opt], separator=" ")
    text = tf.where(pieces.row_lengths() > 1, cloze, plain)
    return tf.reshape(text, tf.shape(options))


def race_inputs(article_ids, qa_ids, num_choices, max_seq_len, max_qa_len=128, pad_to_multiple=None,
                max_doc_len=None):
    """Multiple-choice encoder inputs.

    Args:
      article_ids: ragged int ``[B, None]``.
      qa_ids: ragged int ``[B * C, None]``, the ids of ``race_qa_text`` row-major (example, option).
      num_choices: C (Python int).
      max_seq_len, max_qa_len: Python ints, ``1 <= max_qa_len <= max_seq_len - 3``.
      pad_to_multiple: None (pad to L) or m (pad to the batch's longest option row rounded up to m).
      max_doc_len: None, or N >= L: long articles read with memory; the article keeps its first
        N - 3 - len(qa) tokens (qa, ``<sep> <cls>`` lie in the last segment) and rows are left-padded to
        whole segments of L, as ``classification_inputs``.
    Returns:
      dict: int32 ``[B * C, W]`` ``input_ids``, ``segment_ids``, ``padding_mask`` (reshape to ``[B, C, W]``
      for the head); per option row int32 ``length`` and bool ``article_truncated`` / ``qa_truncated``
      ``[B * C]``.
    """
    if not 1 <= max_qa_len <= max_seq_len - 3:
        raise ValueError(f"max_qa_len ({max_qa_len}) must be between 1 and max_seq_len - 3 ({max_seq_len - 3})")
    qa = tf.cast(qa_ids, tf.int32)
    qa_truncated = qa.row_lengths() > max_qa_len
    qa = keep_last(qa, tf.minimum(qa.row_lengths(), max_qa_len))
    art = tf.gather(tf.cast(article_ids, tf.int32), tf.range(qa.nrows()) // num_choices)
    n_qa = qa.row_lengths()
    keep = tf.minimum(art.row_lengths(), (max_doc_len or max_seq_len) - 3 - n_qa)
    article_truncated = keep < art.row_lengths()
    art = keep_first(art, keep)
    one = tf.ones_like(n_qa)
    tokens = concat_rows([art, _fill_rows(one, SEP_ID, tf.int32), qa,
                          _constant_rows(qa.nrows(), [SEP_ID, CLS_ID], tf.int32)])
    segments = concat_rows([_fill_rows(keep + 1, SEG_A, tf.int32), _fill_rows(n_qa + 1, SEG_B, tf.int32),
                            _fill_rows(one, SEG_CLS, tf.int32)])
    length = tokens.row_lengths()
    width = _row_width(length, max_seq_len, pad_to_multiple, max_doc_len)
    return {
        "input_ids": pad_rows(tokens, width, PAD_ID, left=True),
        "segment_ids": pad_rows(segments, width, SEG_PAD, left=True),
        "padding_mask": pad_rows(tf.ones_like(tokens), width, 0, left=True),
        "length": tf.cast(length, tf.int32),
        "article_truncated": article_truncated,
        "qa_truncated": qa_truncated,
    }


# ----------------------------------------------------------------------------------------------------
# Token classification



def _word_pieces(word_ids, span, unk_id):
    """Each word's pieces as rows are built from them: an empty word gets one ``unk_id`` piece, a longer one
    keeps its first ``span``. ``word_ids`` ragged ``[B, None, None]`` -> ragged int32 ``[N, None]`` (N words)."""
    pieces = tf.cast(word_ids.values, tf.int32)
    empty = tf.cast(pieces.row_lengths() == 0, tf.int64)
    pieces = concat_rows([pieces, _fill_rows(empty, unk_id, tf.int32)])
    return keep_first(pieces, tf.minimum(pieces.row_lengths(), span))


def _word_windows(starts, ends, first_word, end_word, span, stride):
    """Windows of whole words per sentence: int64 ``[K]`` ``sentence``, ``window`` (k-th of its sentence),
    ``start`` / ``end`` (global word indices, end exclusive), sentences in order and each one's windows
    consecutive and in order. ``starts`` / ``ends`` ``[N]``: each word's pieces ``[starts, ends)`` counted
    over all sentences; ``first_word`` / ``end_word`` ``[B]``: each sentence's words. A sentence without words
    has one empty window."""
    n_words = tf.size(starts, out_type=tf.int64)
    last = tf.maximum(n_words - 1, 0)
    first_piece = lambda words: tf.gather(tf.concat([starts, [0]], 0), tf.minimum(words, last))  # noqa: E731

    def body(k, a, done, out):
        active = ~done
        s_a = first_piece(a)
        b = search_sorted(ends, s_a + span, side="right")
        b = tf.minimum(tf.maximum(b, a + 1), end_word)
        out = [tf.concat([o, kept(v, active)], 0)
               for o, v in zip(out, (element_index(a), tf.fill(tf.shape(a), k), a, b))]
        following = search_sorted(starts, s_a + stride)
        following = tf.minimum(tf.maximum(following, a + 1), b)
        done = done | (b >= end_word)
        return k + 1, tf.where(done, a, following), done, out

    empty = tf.zeros([0], tf.int64)
    no_words = first_word >= end_word
    _, _, _, (sentence, window, start, end) = tf.while_loop(
        lambda k, a, done, out: tf.reduce_any(~done), body,
        (tf.constant(0, tf.int64), first_word, no_words, [empty] * 4),
        shape_invariants=(tf.TensorShape([]), first_word.shape, no_words.shape, [tf.TensorShape([None])] * 4))
    # sentences without words: one empty window each
    alone = tf.cast(tf.where(no_words)[:, 0], tf.int64)
    sentence = tf.concat([sentence, alone], 0)
    window = tf.concat([window, tf.zeros_like(alone)], 0)
    start = tf.concat([start, tf.gather(first_word, alone)], 0)
    end = tf.concat([end, tf.gather(first_word, alone)], 0)
    # put in (sentence, window) order: each window's place is its sentence's first place + its index
    count = tf.size(sentence, out_type=tf.int64)
    per_sentence = tf.math.unsorted_segment_sum(tf.ones_like(sentence), sentence, tf.size(first_word))
    place = tf.gather(tf.cumsum(per_sentence, exclusive=True), sentence) + window
    ordered = [tf.math.unsorted_segment_sum(v, place, count) for v in (sentence, window, start, end)]
    return dict(zip(("sentence", "window", "start", "end"), ordered))


def token_windows(word_ids, max_seq_len, doc_stride=None, pad_to_multiple=None, unk_id=0, word_labels=None,
                  label_all_pieces=False):
    """Token-classification rows: the pieces of each sentence's words, in windows of whole words.

    Args:
      word_ids: ragged int ``[B, None, None]``: sentences -> words -> the word's piece ids (each word
        tokenized alone). An empty word gets one ``unk_id`` piece; a word of more than ``S = max_seq_len - 2``
        pieces keeps its first S.
      max_seq_len: L (Python int, at least 3); rows are ``pieces <sep> <cls>``, LEFT-padded (``<cls>`` last),
        segment ids 0 for the pieces and ``<sep>``, 2 for ``<cls>``, 4 for padding.
      doc_stride: pieces between the starts of a long sentence's windows (Python int >= 1; default S // 2):
        the next window starts at the first word that starts at least ``doc_stride`` pieces after the current
        window's start, but never after the current window's end and always at least one word later. Each
        window holds as many whole words as fit in S pieces (at least one).
      pad_to_multiple: None (pad to L) or m (pad to the longest row rounded up to m).
      word_labels: None, or ragged int ``[B, None]``: a tag id per word (training / evaluation).
      label_all_pieces: with ``word_labels``, every piece of a scored word carries its tag (default: its
        first piece only).
    Every word is scored in exactly one window: the one where it has the most context, score
    ``min(pieces before its first piece, pieces after its last piece) + 0.01 * pieces in the window``, the
    earliest window winning ties (the original SQuAD rule, as ``squad_windows``).
    Returns:
      dict; R windows in sentence order (each sentence's windows consecutive, in order): int32 ``[R, W]``
      ``input_ids``, ``segment_ids``, ``padding_mask``, ``label_ids`` (the tag id where scored, ``IGNORE``
      elsewhere and without ``word_labels``), ``word_index`` (the word of its sentence scored at this
      position, its first piece in its best window; -1 elsewhere), ``piece_word_index`` (the word of every
      piece; -1 at ``<sep>``, ``<cls>``, padding); int32 ``[R]`` ``example_index`` (the sentence),
      ``window_index``, ``window_start`` / ``window_end`` (its words, end exclusive), ``cls_index`` (W - 1),
      ``length`` (real positions).
    """
    if max_seq_len < 3:
        raise ValueError(f"max_seq_len must be at least 3 (a piece, <sep>, <cls>), got {max_seq_len}")
    span = max_seq_len - 2
    stride = max(span // 2, 1) if doc_stride is None else doc_stride
    if stride < 1:
        raise ValueError(f"doc_stride must be at least 1, got {doc_stride}")
    pieces = _word_pieces(word_ids, span, unk_id)
    counts = pieces.row_lengths()
    ends = tf.cumsum(counts)
    starts = ends - counts
    sentence_of_word = row_ids(word_ids)
    first_word = word_ids.row_starts()
    w = _word_windows(starts, ends, first_word, word_ids.row_limits(), span, stride)
    n_windows = tf.size(w["sentence"], out_type=tf.int64)
    n_words = tf.size(counts, out_type=tf.int64)

    # the best window of every word
    in_window = tf.ragged.range(w["start"], w["end"])  # [R, None] global word indices
    row = in_window.value_rowids()
    word = in_window.values
    window_first = tf.gather(starts, tf.gather(w["start"], row))
    window_end = tf.gather(tf.concat([ends, [0]], 0), tf.gather(w["end"], row) - 1)
    score = (tf.cast(tf.minimum(tf.gather(starts, word) - window_first, window_end - tf.gather(ends, word)),
                     tf.float64) + 0.01 * tf.cast(window_end - window_first, tf.float64))
    best_score = tf.math.unsorted_segment_max(score, word, n_words)
    best = tf.math.unsorted_segment_min(tf.where(score >= tf.gather(best_score, word), row, n_windows), word,
                                        n_words)

    # the rows: each window's pieces, <sep>, <cls>
    w_first = tf.gather(tf.concat([starts, [0]], 0), w["start"])
    nonempty = w["end"] > w["start"]
    w_last_end = tf.gather(tf.concat([ends, [0]], 0), tf.where(nonempty, w["end"] - 1, n_words))
    w_pieces = tf.where(nonempty, w_last_end - w_first, 0)
    piece = tf.ragged.range(w_first, w_first + w_pieces)  # [R, None] global piece indices
    piece_row = piece.value_rowids()
    piece_word = search_sorted(ends, piece.values, side="right")
    local_word = piece_word - tf.gather(first_word, tf.gather(sentence_of_word, piece_word))
    first_piece = piece.values == tf.gather(starts, piece_word)
    scored = tf.gather(best, piece_word) == piece_row
    ones = tf.ones_like(w_pieces)
    two = _constant_rows(n_windows, [SEP_ID, CLS_ID], tf.int32)
    tokens = concat_rows([piece.with_flat_values(tf.gather(pieces.values, piece.values)), two])
    segments = concat_rows([_fill_rows(w_pieces + 1, SEG_A, tf.int32), _fill_rows(ones, SEG_CLS, tf.int32)])
    minus_two = _constant_rows(n_windows, [-1, -1], tf.int32)
    at_word = lambda values: concat_rows([piece.with_flat_values(tf.cast(values, tf.int32)), minus_two])  # noqa
    word_index = at_word(tf.where(first_piece & scored, local_word, -1))
    if word_labels is None:
        labels = tf.fill(tf.shape(piece.values), tf.constant(IGNORE, tf.int64))
    else:
        labeled = scored & (first_piece | label_all_pieces)
        labels = tf.where(labeled, tf.gather(tf.cast(word_labels.flat_values, tf.int64), piece_word), IGNORE)
    label_ids = concat_rows([piece.with_flat_values(tf.cast(labels, tf.int32)),
                             _constant_rows(n_windows, [IGNORE, IGNORE], tf.int32)])
    length = w_pieces + 2
    width = batch_width(length, max_seq_len, pad_to_multiple)
    local = lambda v: tf.cast(v - tf.gather(first_word, w["sentence"]), tf.int32)  # noqa: E731
    return {
        "input_ids": pad_rows(tokens, width, PAD_ID, left=True),
        "segment_ids": pad_rows(segments, width, SEG_PAD, left=True),
        "padding_mask": pad_rows(tf.ones_like(tokens), width, 0, left=True),
        "label_ids": pad_rows(label_ids, width, IGNORE, left=True),
        "word_index": pad_rows(word_index, width, -1, left=True),
        "piece_word_index": pad_rows(at_word(local_word), width, -1, left=True),
        "example_index": tf.cast(w["sentence"], tf.int32),
        "window_index": tf.cast(w["window"], tf.int32),
        "window_start": local(w["start"]),
        "window_end": local(w["end"]),
        "cls_index": tf.fill(tf.reshape(tf.cast(n_windows, tf.int32), [1]), tf.cast(width, tf.int32) - 1),
        "length": tf.cast(length, tf.int32),
    }


def word_outputs(values, windows, words_per_sentence):
    """Per-position outputs of ``token_windows`` rows -> one per word: ``values`` ``[R, W, ...]`` (logits of
    the rows, W <= the rows' width: a narrower array is their LAST W positions), ``windows`` its dict,
    ``words_per_sentence`` int ``[B]`` -> ragged ``[B, None, ...]``, word k of sentence b at ``[b, k]`` (the
    value at the position that scores it)."""
    word_index = windows["word_index"]
    shift = tf.shape(word_index, out_type=tf.int64)[1] - tf.shape(values, out_type=tf.int64)[1]
    at = tf.where(word_index >= 0)  # [K, 2] (row, position)
    words_per_sentence = tf.cast(words_per_sentence, tf.int64)
    first = tf.cumsum(words_per_sentence, exclusive=True)
    word = (tf.gather(first, tf.cast(tf.gather(windows["example_index"], at[:, 0]), tf.int64))
            + tf.cast(tf.gather_nd(word_index, at), tf.int64))
    picked = tf.gather_nd(values, at - tf.stack([tf.zeros_like(shift), shift])[None])
    flat = tf.math.unsorted_segment_sum(picked, word, tf.reduce_sum(words_per_sentence))
    return tf.RaggedTensor.from_row_lengths(flat, words_per_sentence, validate=False)
