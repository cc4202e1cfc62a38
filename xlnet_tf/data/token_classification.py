"""Token classification (named entities, part-of-speech tags, slot filling): tagged-sentence files -> examples
-> model features; the model's per-position outputs -> one tag per word -> entity spans.

Readers (``read_conll``, ``read_token_jsonl``, ``read_token_examples``) return ``(examples, report)`` like
``xlnet_tf.data.readers``: ``TokenExample``s and a small dict of counts. Bad input raises
``xlnet_tf.errors.UserError`` naming the file and the line; files are read through ``xlnet_tf.files`` (local
paths, ``gs://``, ``ram://``, ...). Tags are taken as they come (BIO, IOB2, BIOES, POS tags: no conversion).

Conventions:

* Label ids: ``token_label_list`` orders the tags ``"O"`` first (when present), then the others by Python's
  string order (``sorted``): ``["O", "B-LOC", "B-PER", "I-LOC", "I-PER"]``. A given ``label_list`` is used
  as given (e.g. a converted checkpoint's ``id2label``).
* ``IGNORE`` (-100, transformers' ``ignore_index``) is the label id of every position that is not scored:
  pieces after a word's first one, words scored in another window, ``<sep>``, ``<cls>``, padding, and every
  position of an unlabeled example. Losses and metrics skip every NEGATIVE label id.
* Words are tokenized one by one with the project's tokenizer (``XLNetTokenizer``): a word's pieces are those
  of the word alone, the first one word-initial (``"▁..."``). A word that SentencePiece splits into a bare
  ``"▁"`` and more pieces (``"("`` -> ``"▁"``, ``"("``: the user-defined symbols ``( ) " -`` ... and
  characters without a word-initial piece do this) keeps them all, as a whole sentence's tokenization has
  them, and its label sits on the bare ``"▁"`` (its first piece, as transformers' ``word_ids()`` labelling
  does). A word without pieces (an empty or whitespace-only JSONL token, a lone combining accent that the
  preprocessing removes) gets one ``<unk>`` piece, so that every word has at least one piece and gets a
  prediction; a word of more than ``max_seq_len - 2`` pieces keeps its first ``max_seq_len - 2`` (both
  counted in the report).
* The label sits on each word's FIRST piece; ``label_all_pieces=True`` puts the word's own tag on all its
  pieces instead (a ``B-X`` word's later pieces get ``B-X`` too, not ``I-X``: the standard choice, and the
  only one that is defined for any tag set). Predictions are read from the first piece either way.
* Rows are XLNet's classification rows: ``pieces <sep> <cls>``, LEFT-padded to ``max_seq_len`` (``<cls>``
  last), segment ids 0 for the pieces and ``<sep>``, 2 for ``<cls>``, 4 for padding, ``<pad>`` (id 5) as
  padding, ``padding_mask`` 1 for real positions (``graph_features.classification_inputs``' layout and ids).
* Windows: a sentence of more than ``S = max_seq_len - 2`` pieces is cut into windows of whole words of at
  most S pieces each. ``doc_stride`` is in PIECES: the next window starts at the first word that starts at
  least ``doc_stride`` pieces after the current window's start, but never after the current window's end
  (no word is skipped) and always at least one word later; default S // 2 (at least 1). Every word is
  scored (``word_index``, ``label_ids``) in exactly one window: the one where it has the most context,
  score ``min(pieces before its first piece, pieces after its last piece) + 0.01 * pieces in the window``
  (the original BERT / XLNet SQuAD rule, ``_check_is_max_context``, as ``graph_features.squad_windows``),
  the earliest window winning ties.
* Entity spans are seqeval's default-mode chunks (``xlnet_tf.metrics.entity_chunks``), so the spans that
  ``predict`` writes are the entities that ``token_classification_metrics`` counts.

Public API: ``IGNORE``, ``TokenExample``, ``read_conll``, ``read_token_jsonl``, ``read_token_examples``,
``token_label_list``, ``token_classification_features``, ``word_values``, ``word_predictions``,
``entity_spans``, ``entity_offsets``.
"""

import dataclasses
import os
import re
from typing import List, Optional

import numpy as np

from xlnet_tf.data.labels import IGNORE
from xlnet_tf.data.readers import (InputRow, id_key, id_value, jsonl_records, read_file_bytes, skip_hint, split_lines,
                                   warn_skipped)
from xlnet_tf.errors import Spelling, UserError
from xlnet_tf.metrics import entity_chunks

__all__ = ["IGNORE", "TokenExample", "read_conll", "read_token_jsonl", "read_token_examples", "token_label_list",
           "token_classification_features", "word_values", "word_predictions", "entity_spans", "entity_offsets"]

DOCSTART = "-DOCSTART-"
SKIP_SENTENCES = skip_hint("such sentences")
_FIELDS = re.compile(r"[ \t\r\f\v]+")  # CoNLL columns: runs of ASCII whitespace
_ASCII_SPACE = " \t\r\f\v"


@dataclasses.dataclass
class TokenExample:
    """One tagged sentence: ``words`` (str each), ``tags`` (one str per word, or ``None`` without labels) and
    ``source`` (``"path:line"`` of its first line)."""

    words: List[str]
    tags: Optional[List[str]] = None
    source: str = ""


# ----------------------------------------------------------------------------------------------------
# Readers


class _Collector:
    """Examples and skipped items of one file; ``reject`` raises unless ``skip_bad_rows``; ``rows``: a
    ``readers.InputRow`` per sentence read (``add``) or skipped (``reject``; ``row=False``: the caller adds it),
    with ``row_id``, the id of the sentence being read; ``ids``: the file's id key (None: no ids)."""

    def __init__(self, path, skip_bad_rows):
        self.path, self.skip, self.examples, self.bad, self.rows = path, skip_bad_rows, [], [], []
        self.row_id = self.ids = None

    def reject(self, line, reason, row=True):
        if not self.skip:
            raise UserError(f"{self.path}, line {line}: {reason}", SKIP_SENTENCES, ".")
        self.bad.append((line, reason))
        if row:
            self.rows.append(InputRow(line, self.row_id, reason))

    def add(self, example, line):
        self.examples.append(example)
        self.rows.append(InputRow(line, self.row_id, None))

    def report(self, fmt, labeled, **extra):
        if not self.examples:
            raise UserError(f"{self.path}: no sentences"
                            + (f" left after skipping {len(self.bad)} bad ones." if self.bad else "."))
        warn_skipped(self.path, [b[0] for b in self.bad], "sentences")
        return dict(file=self.path, format=fmt, labeled=bool(labeled), sentences=len(self.examples),
                    words=sum(len(e.words) for e in self.examples), **extra, skipped=len(self.bad),
                    skipped_lines=[b[0] for b in self.bad], skipped_reasons=[b[1] for b in self.bad],
                    rows=self.rows, id_column=self.ids)


def _column(path, line, which, value, n):
    name = Spelling(which, "--" + which.replace("_", "-"), hint=False)  # --tag-column; word_column has no flag
    if isinstance(value, bool) or not isinstance(value, int):
        raise UserError(name, f" must be a column number (0 = first, -1 = last), got {value!r}.")
    if not -n <= value < n:
        raise UserError(f"{path}, line {line}: ", name, f" {value} does not exist (the line has {n} columns).")
    return value % n


def read_conll(path, tag_column=-1, *, word_column=0, skip_bad_rows=False):
    """Read a CoNLL-style file: one ``word ... tag`` line per word, sentences separated by blank lines.

    Columns are separated by runs of spaces / tabs; every word line must have as many columns as the file's
    first one. ``-DOCSTART-`` lines (document starts, CoNLL-2003) are skipped and end the sentence before
    them; blank lines at the start or the end, ``\\r\\n`` line ends and a UTF-8 BOM are fine.

    Args:
      tag_column: the tag's column number (negative counts from the end; default -1, the last column), or
        ``None`` for a file without tags (prediction input; one column is then enough).
      word_column: the word's column number (default 0).
      skip_bad_rows: skip sentences with a bad line (counted in the report) instead of raising.
    Returns:
      ``(examples, report)``; report: ``file``, ``format`` ("conll"), ``labeled``, ``sentences``, ``words``,
      ``columns``, ``docstarts``, ``skipped``, ``skipped_lines``, ``skipped_reasons``, ``rows`` (a
      ``readers.InputRow`` per sentence from its first line; a skipped one with its first bad line's reason),
      ``id_column`` (None).
    Raises:
      UserError naming the file and line: not UTF-8, a line with another number of columns, a missing column.
    """
    path = os.fspath(path)
    out = _Collector(path, skip_bad_rows)
    n_columns = first_line = w_col = t_col = None
    words, tags, start, broken = [], [], None, False
    docstarts = 0

    def finish():
        nonlocal words, tags, start, broken
        if start is not None and broken:
            out.rows.append(InputRow(start, None, broken))
        elif start is not None:
            out.add(TokenExample(words, tags if tag_column is not None else None, f"{path}:{start}"), start)
        words, tags, start, broken = [], [], None, False

    def reject(i, reason):  # a bad line spoils its sentence: one row, with the first bad line's reason
        nonlocal start, broken
        out.reject(i, reason, row=False)
        start = i if start is None else start
        broken = broken or (reason if i == start else f"{reason} (line {i})")

    for i, raw_line in enumerate(split_lines(read_file_bytes(path)), 1):
        try:
            text = raw_line.decode("utf-8").strip(_ASCII_SPACE)
        except UnicodeDecodeError as err:
            reject(i, f"not valid UTF-8 (byte 0x{raw_line[err.start]:02x})")
            continue
        if not text:
            finish()
            continue
        fields = _FIELDS.split(text)
        if fields[0] == DOCSTART:
            finish()
            docstarts += 1
            continue
        if n_columns is None:  # the first word line decides the layout
            n = len(fields)
            if tag_column is not None and n < 2:
                raise UserError(f"{path}, line {i}: one column, but lines need a word and a tag (`word ... tag`)",
                                Spelling("; pass tag_column=None to read words without tags"), ".")
            w_col = _column(path, i, "word_column", word_column, n)
            t_col = None if tag_column is None else _column(path, i, "tag_column", tag_column, n)
            if t_col == w_col:
                raise UserError(f"{path}, line {i}: the word and the tag are both column {w_col}.")
            n_columns, first_line = n, i
        if start is None:
            start = i
        if len(fields) != n_columns:
            reject(i, f"expected {n_columns} columns (as on line {first_line}), found {len(fields)}")
            continue
        words.append(fields[w_col])
        if t_col is not None:
            tags.append(fields[t_col])
    finish()
    return out.examples, out.report("conll", tag_column is not None, columns=n_columns, docstarts=docstarts)


def _string_list(value, nonempty):
    return isinstance(value, list) and all(isinstance(v, str) and (v or not nonempty) for v in value)


def read_token_jsonl(path, tokens_key="tokens", tags_key="tags", *, skip_bad_rows=False, id_column=None):
    """Read a JSON-lines file of ``{"tokens": [...], "tags": [...]}`` objects, one sentence a line.

    Either every line has tags or none does (prediction input); the first good line decides. Tokens are
    strings (an empty one gets one ``<unk>`` piece), tags non-empty strings, as many as the tokens; other
    keys are ignored (``id_column``, default ``id`` or ``guid``: the sentence's id); blank lines are skipped.

    Returns:
      ``(examples, report)``; report: ``file``, ``format`` ("jsonl"), ``labeled``, ``sentences``, ``words``,
      ``skipped``, ``skipped_lines``, ``skipped_reasons``, ``rows`` (``readers.InputRow``s), ``id_column``.
    Raises:
      UserError naming the file and line: not UTF-8, not a JSON object, a missing key, tokens and tags of
      different lengths.
    """
    path = os.fspath(path)
    out = _Collector(path, skip_bad_rows)
    out.ids = id_column
    labeled = first = None
    for line, obj, reason in jsonl_records(read_file_bytes(path)):
        out.row_id = None
        if reason:
            out.reject(line, reason)
            continue
        key_id = id_key(obj, id_column)
        out.ids = out.ids if out.ids is not None or key_id not in obj else key_id
        out.row_id = id_value(obj.get(key_id))
        tokens = obj.get(tokens_key)
        if tokens_key not in obj:
            out.reject(line, f"missing key {tokens_key!r}")
            continue
        if not _string_list(tokens, False):
            out.reject(line, f"{tokens_key!r} must be a list of strings")
            continue
        if labeled is None:
            labeled, first = tags_key in obj, line
        tags = obj.get(tags_key)
        if labeled and tags_key not in obj:
            out.reject(line, f"missing key {tags_key!r} (line {first} has tags: all lines or none)")
            continue
        if not labeled and tags_key in obj:
            out.reject(line, f"has {tags_key!r} but line {first} has none (all lines or none)")
            continue
        if labeled:
            if not _string_list(tags, True):
                out.reject(line, f"{tags_key!r} must be a list of tag names (non-empty strings such as 'B-PER')")
                continue
            if len(tags) != len(tokens):
                out.reject(line, f"{len(tokens)} {tokens_key} but {len(tags)} {tags_key}")
                continue
        out.add(TokenExample(list(tokens), list(tags) if labeled else None, f"{path}:{line}"), line)
    return out.examples, out.report("jsonl", labeled)


def read_token_examples(path, file_format=None, *, tag_column=-1, word_column=0, tokens_key="tokens",
                        tags_key="tags", skip_bad_rows=False, id_column=None):
    """``read_token_jsonl`` for ``.jsonl`` / ``.json`` / ``.ndjson`` files (or ``file_format="jsonl"``),
    ``read_conll`` for any other (or ``file_format="conll"``; no ids: ``id_column`` is refused), with their
    arguments."""
    if file_format is None:
        ext = os.path.splitext(os.fspath(path))[1].lower()
        file_format = "jsonl" if ext in (".jsonl", ".json", ".ndjson") else "conll"
    if file_format == "jsonl" and isinstance(id_column, int):
        raise UserError(f"{path}: JSON lines files are read by key names (--id-column {id_column} is a number).")
    if file_format == "jsonl":
        return read_token_jsonl(path, tokens_key, tags_key, skip_bad_rows=skip_bad_rows, id_column=id_column)
    if file_format == "conll" and id_column is not None:
        raise UserError(f"{path}: a CoNLL file has no id column (--id-column {id_column} is for JSONL files).")
    if file_format == "conll":
        return read_conll(path, tag_column, word_column=word_column, skip_bad_rows=skip_bad_rows)
    raise UserError(f"Unknown token-classification file format {file_format!r}; expected 'conll' or 'jsonl'.")


def token_label_list(examples):
    """The tag set of labelled ``examples``: ``"O"`` first (when present), then the others sorted."""
    tags = {t for e in examples if e.tags is not None for t in e.tags}
    if not tags:
        raise UserError("No tags to build a label list from (the examples have no labels).")
    return (["O"] if "O" in tags else []) + sorted(tags - {"O"})


# ----------------------------------------------------------------------------------------------------
# Features


def _label_ids(examples, label_list):
    """-> (per-example int arrays of tag ids or None, label_list, labeled)."""
    labeled = [e.tags is not None for e in examples]
    if any(labeled) and not all(labeled):
        k = labeled.index(False)
        raise UserError(f"{examples[k].source or f'example {k}'}: no tags, but other examples have tags.")
    if not any(labeled):
        return [None] * len(examples), (None if label_list is None else list(label_list)), False
    label_list = token_label_list(examples) if label_list is None else list(label_list)
    index = {t: i for i, t in enumerate(label_list)}
    out = []
    for k, e in enumerate(examples):
        where = e.source or f"example {k}"
        if len(e.tags) != len(e.words):
            raise UserError(f"{where}: {len(e.words)} words but {len(e.tags)} tags.")
        missing = next((t for t in e.tags if t not in index), None)
        if missing is not None:
            raise UserError(f"{where}: tag {missing!r} is not in the label list {label_list}.")
        out.append(np.array([index[t] for t in e.tags], np.int64))
    return out, label_list, True


def token_classification_features(examples, tokenizer, max_seq_len, label_list=None, *, doc_stride=None,
                                  label_all_pieces=False):
    """Token-classification features: one row per window of each sentence (see the module's conventions).

    Args:
      examples: ``TokenExample``s, all with tags (training / evaluation) or all without (prediction).
      tokenizer: ``XLNetTokenizer``.
      max_seq_len: L, at least 3 (one piece, ``<sep>``, ``<cls>``).
      label_list: tag strings in id order; default ``token_label_list(examples)``.
      doc_stride: pieces between the starts of a long sentence's windows (see the conventions); default
        ``max((L - 2) // 2, 1)``.
      label_all_pieces: label every piece of a scored word, not only its first.
    Returns:
      ``(features, report)``. features, N windows: int32 ``[N, L]`` ``input_ids``, ``segment_ids``,
      ``padding_mask`` (1 = real), ``label_ids`` (tag id where scored, ``IGNORE`` elsewhere), ``word_index``
      (the word scored at this position: its first piece in its best window; -1 elsewhere),
      ``piece_word_index`` (the word of every piece, in every window; -1 at ``<sep>``, ``<cls>``, padding);
      int32 ``[N]`` ``example_index``, ``window_index`` (k-th window of its sentence), ``window_start`` /
      ``window_end`` (its words ``[start, end)``), ``cls_index`` (= L - 1), ``length`` (real positions).
      report: ``examples``, ``windows``, ``multi_window_examples``, ``words``, ``pieces``, ``empty_words``
      (given one ``<unk>`` piece), ``truncated_words`` (more than L - 2 pieces), ``label_list``, ``labeled``,
      ``doc_stride``, ``label_all_pieces``.
    """
    import tensorflow as tf

    from xlnet_tf.data import graph_features as gf
    from xlnet_tf.data.chunked import build_in_chunks, token_ids, traced

    if max_seq_len < 3:
        raise UserError(f"max_seq_len must be at least 3 (a piece, <sep>, <cls>), got {max_seq_len}.")
    span = max_seq_len - 2
    stride = max(span // 2, 1) if doc_stride is None else doc_stride
    if isinstance(stride, bool) or not isinstance(stride, (int, np.integer)) or stride < 1:
        raise UserError(f"doc_stride must be a positive number of pieces, got {doc_stride!r}.")
    tag_ids, label_list, labeled = _label_ids(examples, label_list)
    words = [w for e in examples for w in e.words]
    ids = token_ids(tokenizer, words)
    raw_counts = np.diff(ids.row_splits.numpy())
    lengths = [len(e.words) for e in examples]
    word_ids = tf.RaggedTensor.from_row_lengths(ids, tf.constant(lengths, tf.int64))
    word_labels = None
    if labeled:
        word_labels = tf.RaggedTensor.from_row_lengths(
            tf.constant(np.concatenate(tag_ids + [np.zeros([0], np.int64)]), tf.int64), tf.constant(lengths, tf.int64))
    build = traced(gf.token_windows, max_seq_len=max_seq_len, doc_stride=int(stride), unk_id=tokenizer.unk_id,
                    label_all_pieces=bool(label_all_pieces))

    def chunk(lo, hi):
        out = dict(build(word_ids[lo:hi], word_labels=None if word_labels is None else word_labels[lo:hi]))
        out["example_index"] += lo
        return out

    features = build_in_chunks(len(examples), chunk)
    windows_per_example = np.bincount(features["example_index"], minlength=len(examples))
    report = dict(examples=len(examples), windows=len(features["input_ids"]),
                  multi_window_examples=int((windows_per_example > 1).sum()), words=len(words),
                  pieces=int(np.clip(raw_counts, 1, span).sum()), empty_words=int((raw_counts == 0).sum()),
                  truncated_words=int((raw_counts > span).sum()), label_list=label_list, labeled=labeled,
                  doc_stride=int(stride), label_all_pieces=bool(label_all_pieces))
    return features, report


# ----------------------------------------------------------------------------------------------------
# Predictions back to words


def word_values(features, values):
    """Per sentence, ``values`` at the position that scores each of its words.

    Args:
      features: ``token_classification_features``' dict (``word_index``, ``piece_word_index``,
        ``example_index``, all rows of one call).
      values: ``[N, W, ...]`` per position (logits ``[N, W, C]``, tag ids ``[N, W]``, ...). ``W <= L``: a
        narrower array is read as the LAST W positions (left-padded rows cropped to their length bucket).
    Returns:
      list, one array ``[words, ...]`` per sentence (in example order), word k's value at row k.
    Raises:
      ValueError if the features do not score every word of every sentence exactly once (rows missing).
    """
    word_index = np.asarray(features["word_index"])
    example_index = np.asarray(features["example_index"]).astype(np.int64)
    values = np.asarray(values)
    n, width = word_index.shape
    if values.ndim < 2 or values.shape[0] != n or values.shape[1] > width:
        raise ValueError(f"values of shape {values.shape} do not fit features of {n} rows of {width} positions.")
    rows, cols = np.nonzero(word_index >= 0)
    shift = width - values.shape[1]
    if (cols < shift).any():
        raise ValueError(f"values cover the last {values.shape[1]} positions, but words are scored earlier.")
    n_examples = int(example_index.max()) + 1 if n else 0
    n_words = np.zeros([n_examples], np.int64)
    np.maximum.at(n_words, example_index, np.asarray(features["piece_word_index"]).max(1, initial=-1) + 1)
    ex, w = example_index[rows], word_index[rows, cols]
    order = np.lexsort((w, ex))
    ex, w, rows, cols = ex[order], w[order], rows[order], cols[order]
    bounds = np.concatenate([[0], np.cumsum(n_words)])
    if not (np.array_equal(np.bincount(ex, minlength=n_examples), n_words)
            and np.array_equal(w, np.arange(len(w)) - bounds[ex])):
        raise ValueError("the features do not score every word exactly once (are rows missing or repeated?).")
    picked = values[rows, cols - shift]
    return [picked[bounds[i]:bounds[i + 1]] for i in range(n_examples)]


def word_predictions(features, logits_or_label_ids):
    """One predicted tag id per word, per sentence: ``list[list[int]]``.

    ``logits_or_label_ids``: ``[N, W, C]`` scores (the argmax is taken) or ``[N, W]`` tag ids (the features'
    own ``label_ids`` give back the gold tag ids); see ``word_values`` for W.
    """
    values = np.asarray(logits_or_label_ids)
    if values.ndim not in (2, 3):
        raise ValueError(f"expected [N, W] tag ids or [N, W, C] logits, got shape {values.shape}.")
    per_sentence = word_values(features, values)
    if values.ndim == 3:
        per_sentence = [v.argmax(-1) for v in per_sentence]
    return [v.astype(np.int64).tolist() for v in per_sentence]


def entity_spans(words, tags):
    """Entities of one tagged sentence: ``[(type, start_word, end_word_exclusive)]`` (seqeval's default
    chunks, ``xlnet_tf.metrics.entity_chunks``)."""
    if len(words) != len(tags):
        raise UserError(f"{len(words)} words but {len(tags)} tags.")
    return entity_chunks(tags)


def entity_offsets(words, tags, offsets=None, unit="chars"):
    """Entities with text offsets: ``[(type, start, end)]``, ``text[start:end]`` being the entity.

    ``offsets``: each word's ``(start, end)`` in some text (any unit, e.g. the tokenizer's byte offsets);
    default: the words' spans in ``" ".join(words)``, in characters (``unit="chars"``) or UTF-8 bytes
    (``unit="bytes"``).
    """
    if offsets is None:
        if unit not in ("chars", "bytes"):
            raise ValueError(f"unit must be 'chars' or 'bytes', got {unit!r}")
        size = len if unit == "chars" else (lambda s: len(s.encode("utf-8", "surrogatepass")))
        offsets, at = [], 0
        for word in words:
            offsets.append((at, at + size(word)))
            at += size(word) + 1
    if len(offsets) != len(words):
        raise UserError(f"{len(words)} words but {len(offsets)} offsets.")
    return [(type_, offsets[s][0], offsets[e - 1][1]) for type_, s, e in entity_spans(words, tags)]
