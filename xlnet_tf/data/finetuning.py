"""Fine-tuning examples -> model features, built by the ONE feature builder (``xlnet_tf.data.graph_features``).

``classification_features``, ``squad_features`` and ``race_features`` take the examples of
``xlnet_tf.data.readers`` and return ``(features, report)``: ``features`` a dict of numpy arrays, one row per
model example, padded to ``max_seq_len`` (the training loop and ``evaluate`` / ``predict`` then crop each
batch to its length bucket, ``xlnet_tf.data.buckets``), with ``length`` (real tokens per row); ``report`` a
small dict of counts. The rows come from the graph functions that the exported SavedModels trace, run here
over the whole file in chunks, so a served model sees exactly what the trained model saw. All text goes
through ``XLNetTokenizer``; bad input raises ``xlnet_tf.errors.UserError`` naming the example's source.

Layouts are the original XLNet scripts' (see ``graph_features``). Deliberate differences from them:

* padding uses ``<pad>`` (id 5) where the original wrote 0 (``<unk>``); padded positions have
  ``padding_mask`` 0 and are never attended to, so the model's outputs at real positions do not change;
* masks are 1 for real tokens (the original's ``input_mask`` is 1 for padding);
* RACE: every option is paired with its own copy of the article tokens; the original extended the
  article's token list in place when it was not truncated, so later options also carried the earlier
  ones (zihangdai/xlnet issue #204);
* SQuAD: the token <-> character alignment comes from the tokenizer's offsets instead of the original's
  LCS character matching (which dropped examples it could not align).
"""

import numpy as np
import tensorflow as tf

from xlnet_tf.data import graph_features as gf
from xlnet_tf.data.chunked import as_strings, build_in_chunks, token_ids, tokens_with_char_offsets, traced
from xlnet_tf.data.labels import kind_of
from xlnet_tf.errors import UserError


def _unique(values):
    """Distinct values in first-seen order, and each value's index among them."""
    index = {}
    for v in values:
        index.setdefault(v, len(index))
    return list(index), np.array([index[v] for v in values], np.int64)


def _check_doc_len(max_seq_len, max_doc_len):
    if max_doc_len is not None and max_doc_len < max_seq_len:
        raise UserError(f"max_doc_len ({max_doc_len}) must be at least max_seq_len ({max_seq_len}), the segment "
                        f"length.")


# ----------------------------------------------------------------------------------------------------
# Classification / regression


def classification_features(examples, tokenizer, max_seq_len, label_list=None, max_doc_len=None):
    """Classification / regression features (``graph_features.classification_inputs``).

    Args:
      examples: ``TextExample``s. Labels: all ``str`` (classification), all ``float`` (regression), all
        tuples of ``str`` (multi-label) or all ``None`` (prediction).
      tokenizer: ``XLNetTokenizer``.
      max_seq_len: L, at least 3.
      label_list: classification label strings in id order; default: the labels present, sorted
        (numerically when they are all integers). Ignored for regression.
      max_doc_len: None (one window), or N: long documents read as segments of L with memory (rows of
        ``graph_features.document_width(L, N)`` positions; see ``graph_features.classification_inputs``).
    Returns:
      ``(features, report)``. features: ``input_ids``, ``segment_ids``, ``padding_mask`` int32 [N, L]
      (left-padded; [N, W] for documents), ``cls_index`` int32 [N] (= L - 1, W - 1 for documents), ``length``
      int32 [N] (real tokens), ``label_ids`` [N] int32 (classification; -1 without labels), float32
      (regression) or float32 [N, C] (multi-label: 1 for each of the example's labels). report: ``examples``,
      ``pairs``, ``truncated`` (examples that lost tokens), ``truncated_indices``, ``label_list``, ``task``.
    """
    if max_seq_len < 3:
        raise UserError(f"max_seq_len must be at least 3 (A <sep> B <sep> <cls>), got {max_seq_len}.")
    _check_doc_len(max_seq_len, max_doc_len)
    n = len(examples)
    kind = kind_of([e.label for e in examples])
    label_ids, label_list = kind.encode(examples, label_list)

    ids_a = token_ids(tokenizer, [e.text_a for e in examples])
    ids_b = token_ids(tokenizer, [e.text_b or "" for e in examples])
    build = traced(gf.classification_inputs, max_seq_len=max_seq_len, max_doc_len=max_doc_len)
    features = build_in_chunks(n, lambda lo, hi: build(ids_a[lo:hi], ids_b[lo:hi]))
    truncated = np.nonzero(features.pop("truncated"))[0].tolist()
    pairs = int(features.pop("has_b").sum())
    features["label_ids"] = label_ids
    report = dict(examples=n, pairs=pairs, truncated=len(truncated), truncated_indices=truncated,
                  label_list=label_list, task=kind.name)
    return features, report


# ----------------------------------------------------------------------------------------------------
# SQuAD


def _squad_rows(question_ids, context_ids, starts, ends, answer_start, answer_end, is_impossible, *, max_seq_len,
                doc_stride, max_query_len):
    """``graph_features.squad_windows`` and their ``squad_answer_positions`` in one dict."""
    windows = gf.squad_windows(question_ids, context_ids, starts, ends, max_seq_len, doc_stride, max_query_len)
    return {**windows, **gf.squad_answer_positions(windows, starts, ends, answer_start, answer_end, is_impossible)}


def squad_features(examples, tokenizer, max_seq_len=512, doc_stride=128, max_query_len=64, is_training=False):
    """SQuAD features, one row per paragraph window (``graph_features.squad_windows`` and
    ``squad_answer_positions``).

    ``paragraph <sep> question <sep> <cls>`` padded on the RIGHT; the question keeps its first
    ``max_query_len`` tokens; long paragraphs are cut into windows of ``max_seq_len - len(question) - 3``
    tokens, each starting ``min(window length, doc_stride)`` tokens after the previous one (an empty
    paragraph gives one window without paragraph tokens). Labels come from the first gold answer.

    Args:
      is_training: every question must be impossible or have an answer; questions whose answer covers no
        token (only whitespace) are dropped, like the original's unalignable ones.
    Returns:
      ``(features, report)``. features, N windows and L = max_seq_len: ``input_ids``, ``segment_ids``
      (paragraph 0, question 1, <cls> 2, padding 3), ``padding_mask`` (1 = real), ``p_mask`` (1 = cannot
      be in an answer: <sep>, question, padding; 0 for paragraph and <cls>), ``token_char_start`` /
      ``token_char_end`` (character span ``context[start:end]`` of paragraph tokens, -1 elsewhere),
      ``token_is_max_context`` (1 where this window gives the paragraph token its most context), all
      int32 [N, L]; ``cls_index``, ``paragraph_len``, ``length``, ``start_position``, ``end_position``,
      ``is_impossible``, ``example_index``, ``window_index``, all int32 [N]. report: ``examples``,
      ``windows``, ``multi_window_examples``, ``questions_truncated``, ``impossible_examples``,
      ``answer_outside_windows`` (windows), ``dropped_examples`` (unalignable answers, training only).
    """
    if max_query_len < 1 or doc_stride < 1:
        raise UserError("max_query_len and doc_stride must be positive.")
    if max_seq_len < max_query_len + 4:
        raise UserError(f"max_seq_len ({max_seq_len}) must exceed max_query_len ({max_query_len}) + 3 so that "
                        f"every window holds paragraph tokens.")
    answer_start = np.full([len(examples)], -1, np.int64)
    answer_end = np.full([len(examples)], -1, np.int64)
    for i, e in enumerate(examples):
        if e.answers and not e.is_impossible:
            text, start = e.answers[0]
            answer_start[i], answer_end[i] = start, start + len(text)
        elif is_training and not e.is_impossible:
            raise UserError(f"{e.source or e.qas_id}: a training question needs an answer or is_impossible.")
    impossible = np.array([e.is_impossible for e in examples], bool)
    contexts, context_of = _unique([e.context for e in examples])
    c_ids, c_start, c_end = tokens_with_char_offsets(tokenizer, contexts)
    q_ids = token_ids(tokenizer, [e.question for e in examples])

    windows_and_labels = traced(_squad_rows, max_seq_len=max_seq_len, doc_stride=doc_stride,
                                 max_query_len=max_query_len)

    def build(lo, hi):
        rows = context_of[lo:hi]
        out = windows_and_labels(q_ids[lo:hi], *(tf.gather(t, rows) for t in (c_ids, c_start, c_end)),
                                 answer_start[lo:hi], answer_end[lo:hi], impossible[lo:hi])
        return {**out, "example_index": out["example_index"] + lo}

    out = build_in_chunks(len(examples), build)
    found = out["answer_found"]
    dropped = ~found & ~impossible & (answer_start >= 0) if is_training else np.zeros_like(impossible)
    keep = ~dropped[out["example_index"]]
    keys = {"input_ids": "input_ids", "segment_ids": "segment_ids", "padding_mask": "padding_mask",
            "p_mask": "p_mask", "token_start": "token_char_start", "token_end": "token_char_end",
            "token_is_max_context": "token_is_max_context", "cls_index": "cls_index",
            "paragraph_len": "paragraph_len", "length": "length", "start_position": "start_position",
            "end_position": "end_position", "is_impossible": "is_impossible", "example_index": "example_index",
            "window_index": "window_index"}
    features = {name: out[key][keep].astype(np.int32) for key, name in keys.items()}
    report = dict(examples=len(examples), windows=int(keep.sum()),
                  multi_window_examples=int((out["num_windows"] > 1)[~dropped].sum()),
                  questions_truncated=int(out["question_truncated"][~dropped].sum()),
                  impossible_examples=int(impossible.sum()),
                  answer_outside_windows=int(out["answer_outside"][keep].sum()),
                  dropped_examples=int(dropped.sum()))
    return features, report


# ----------------------------------------------------------------------------------------------------
# RACE


def race_features(examples, tokenizer, max_seq_len=512, max_qa_len=128, max_doc_len=None):
    """RACE multiple-choice features, one row per question with C option rows (``graph_features.race_inputs``).

    ``article <sep> qa <sep> <cls>`` per option, ``qa = race_qa_text(question, option)``, padded on the LEFT;
    qa keeps its LAST ``max_qa_len`` tokens, the article its FIRST ``max_seq_len - 3 - len(qa)``
    (``max_doc_len - 3 - len(qa)`` for long articles read with memory, rows of whole segments of L).

    Returns:
      ``(features, report)``. features, C choices: ``input_ids``, ``segment_ids``, ``padding_mask``
      (1 = real) int32 [N, C, L]; ``label_ids`` int32 [N] (-1 without answers); ``cls_index`` int32 [N]
      (= L - 1); ``length`` int32 [N] (real tokens of the longest option row). report: ``examples``,
      ``choices``, ``articles_truncated`` / ``qa_truncated`` (counted per option row).
    """
    if max_qa_len < 1 or max_qa_len > max_seq_len - 3:
        raise UserError(f"max_qa_len ({max_qa_len}) must be between 1 and max_seq_len - 3 ({max_seq_len - 3}).")
    _check_doc_len(max_seq_len, max_doc_len)
    width = gf.document_width(max_seq_len, max_doc_len)
    n = len(examples)
    choices = {len(e.options) for e in examples}
    if len(choices) > 1:
        raise UserError(f"RACE examples have different numbers of options: {sorted(choices)}.")
    c = choices.pop() if choices else 4
    articles, article_of = _unique([e.article for e in examples])
    article_ids = token_ids(tokenizer, articles)
    questions = as_strings([e.question for e in examples])
    options = tf.reshape(as_strings([o for e in examples for o in e.options]), [n, c])
    qa_ids = token_ids(tokenizer, tf.reshape(gf.race_qa_text(questions, options), [-1]))

    rows = traced(gf.race_inputs, num_choices=c, max_seq_len=max_seq_len, max_qa_len=max_qa_len,
                   max_doc_len=max_doc_len)

    def build(lo, hi):
        out = rows(tf.gather(article_ids, article_of[lo:hi]), qa_ids[lo * c:hi * c])
        return {k: tf.reshape(v, [hi - lo, c, width]) if k in ("input_ids", "segment_ids", "padding_mask")
                else tf.reshape(v, [hi - lo, c]) for k, v in out.items()}

    out = build_in_chunks(n, build)
    features = {k: out[k].reshape([n, c, width]) for k in ("input_ids", "segment_ids", "padding_mask")}
    features.update(
        label_ids=np.array([-1 if e.label is None else e.label for e in examples], np.int32).reshape([n]),
        cls_index=np.full([n], width - 1, np.int32),
        length=out["length"].reshape([n, c]).max(-1, initial=0).astype(np.int32))
    report = dict(examples=n, choices=c, articles_truncated=int(out["article_truncated"].sum()),
                  qa_truncated=int(out["qa_truncated"].sum()))
    return features, report
