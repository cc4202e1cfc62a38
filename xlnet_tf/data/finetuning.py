"""Fine-tuning data: classification / regression files, SQuAD 1.1 / 2.0 and RACE, turned into numpy features.

Readers return ``(examples, report)`` and feature builders return ``(features, report)``; ``features`` is
a dict of numpy arrays and ``report`` a small dict of counts (examples, truncated, skipped rows with their
line numbers). Bad input raises ``xlnet_tf.errors.UserError`` naming the file and the line (or question).
All text goes through ``XLNetTokenizer`` (batched); nothing here re-implements its preprocessing.

Layouts follow the original XLNet scripts (zihangdai/xlnet):

* classification (``classifier_utils.convert_single_example``): ``A <sep> B <sep> <cls>`` or
  ``A <sep> <cls>``, padded on the LEFT, so ``<cls>`` is always the last position; segment ids
  A = 0 (with its ``<sep>``), B = 1 (with its ``<sep>``), ``<cls>`` = 2, padding = 4.
* SQuAD (``run_squad.convert_examples_to_features``): ``paragraph <sep> question <sep> <cls>`` (paragraph
  FIRST), padded on the RIGHT, so ``cls_index`` varies per window; segment ids paragraph = 0 (with its
  ``<sep>``), question = 1 (with its ``<sep>``), ``<cls>`` = 2, padding = 3; ``p_mask`` is 1 for the
  ``<sep>``s, the question and padding, 0 for paragraph tokens and for ``<cls>`` (the no-answer position).
* RACE (``run_race.convert_single_example``): per option ``article <sep> question+option <sep> <cls>``,
  padded on the LEFT, segment ids as for classification.

Deliberate differences from the original:

* padding uses ``<pad>`` (id 5) where the original wrote 0 (``<unk>``); padded positions have
  ``padding_mask`` 0 and are never attended to, so the model's outputs at real positions do not change;
* masks are 1 for real tokens (the original's ``input_mask`` is 1 for padding);
* RACE: every option is paired with its own copy of the article tokens; the original extended the
  article's token list in place when it was not truncated, so later options also carried the earlier
  ones (zihangdai/xlnet issue #204);
* SQuAD: the token <-> character alignment comes from the tokenizer's offsets instead of the original's
  LCS character matching (which dropped examples it could not align).
"""

import collections
import csv
import dataclasses
import json
import math
import os
import re
import weakref
from typing import List, Optional, Tuple, Union

import numpy as np
import tensorflow as tf

from xlnet_tf.data.truncation import truncated_pair_lengths
from xlnet_tf.errors import UserError

SEP_ID, CLS_ID, PAD_ID = 4, 3, 5
# Segment ids of the original scripts (classifier_utils / run_race and run_squad).
SEG_A, SEG_B, SEG_CLS, SEG_PAD = 0, 1, 2, 4
SQUAD_SEG_P, SQUAD_SEG_Q, SQUAD_SEG_CLS, SQUAD_SEG_PAD = 0, 1, 2, 3

_CHUNK = 2048  # texts per tokenizer call
_SURROGATE = re.compile("[\udc80-\udcff]")  # undecodable bytes under errors="surrogateescape"


# ----------------------------------------------------------------------------------------------------
# Examples


@dataclasses.dataclass
class TextExample:
    """One classification / regression example.

    ``label`` is a ``str`` (classification), a ``float`` (regression) or ``None`` (a file without labels);
    ``text_b`` is ``None`` for single-sentence tasks; ``source`` is ``"path:line"``.
    """

    text_a: str
    text_b: Optional[str] = None
    label: Union[str, float, None] = None
    source: str = ""


@dataclasses.dataclass
class SquadExample:
    """One SQuAD question: ``answers`` are ``(text, char_start)`` pairs into ``context`` (Python str indices)."""

    qas_id: str
    question: str
    context: str
    answers: List[Tuple[str, int]] = dataclasses.field(default_factory=list)
    is_impossible: bool = False
    plausible_answers: List[Tuple[str, int]] = dataclasses.field(default_factory=list)
    source: str = ""


@dataclasses.dataclass
class RaceExample:
    """One RACE question: ``label`` is the index of the right option (``'A'`` -> 0) or ``None``."""

    article: str
    question: str
    options: List[str]
    label: Optional[int] = None
    example_id: str = ""
    source: str = ""


# ----------------------------------------------------------------------------------------------------
# GLUE layouts

GlueLayout = collections.namedtuple(
    "GlueLayout", "headers text_a text_b label labels task prefix headerless")
GlueLayout.__doc__ = """How a GLUE task's TSV files look.

``headers``: first rows that identify it (train/dev, then test); ``text_a``/``text_b``/``label``: column
names (``label`` is absent from test files); ``labels``: the label list (``None`` for regression);
``prefix``: headers may carry extra trailing columns (MNLI's label1..label5); ``headerless``: for files
without a header, ``(n_columns, text_a, text_b, label)`` column indices (CoLA train/dev).
"""

_MNLI_HEAD = ("index", "promptID", "pairID", "genre", "sentence1_binary_parse", "sentence2_binary_parse",
              "sentence1_parse", "sentence2_parse", "sentence1", "sentence2")
_STSB_HEAD = ("index", "genre", "filename", "year", "old_index", "source1", "source2", "sentence1",
              "sentence2")
_PAIR_HEAD = ("index", "sentence1", "sentence2")
_BINARY, _ENTAIL = ("0", "1"), ("entailment", "not_entailment")

GLUE_TASKS = {
    "cola": GlueLayout((("index", "sentence"),), "sentence", None, None, _BINARY, "classification",
                       False, (4, 3, None, 1)),
    "sst-2": GlueLayout((("sentence", "label"), ("index", "sentence")), "sentence", None, "label",
                        _BINARY, "classification", False, None),
    "mrpc": GlueLayout((("Quality", "#1 ID", "#2 ID", "#1 String", "#2 String"),
                        ("index", "#1 ID", "#2 ID", "#1 String", "#2 String")),
                       "#1 String", "#2 String", "Quality", _BINARY, "classification", False, None),
    "sts-b": GlueLayout((_STSB_HEAD + ("score",), _STSB_HEAD), "sentence1", "sentence2", "score", None,
                        "regression", False, None),
    "qqp": GlueLayout((("id", "qid1", "qid2", "question1", "question2", "is_duplicate"),
                       ("id", "question1", "question2")),
                      "question1", "question2", "is_duplicate", _BINARY, "classification", False, None),
    "mnli": GlueLayout((_MNLI_HEAD,), "sentence1", "sentence2", "gold_label",
                       ("contradiction", "entailment", "neutral"), "classification", True, None),
    "qnli": GlueLayout((("index", "question", "sentence", "label"), ("index", "question", "sentence")),
                       "question", "sentence", "label", _ENTAIL, "classification", False, None),
    "rte": GlueLayout((_PAIR_HEAD + ("label",), _PAIR_HEAD), "sentence1", "sentence2", "label", _ENTAIL,
                      "classification", False, None),
    "wnli": GlueLayout((_PAIR_HEAD + ("label",), _PAIR_HEAD), "sentence1", "sentence2", "label", _BINARY,
                       "classification", False, None),
}
_GLUE_ALIASES = {"sst2": "sst-2", "stsb": "sts-b", "sts": "sts-b", "mnli-m": "mnli", "mnli-mm": "mnli"}


def _glue_layout(name):
    key = _GLUE_ALIASES.get(name.lower(), name.lower())
    if key not in GLUE_TASKS:
        raise UserError(f"Unknown glue_task {name!r}; known: {', '.join(GLUE_TASKS)}.")
    return key, GLUE_TASKS[key]


def _header_matches(layout, row):
    return any(tuple(row) == h or (layout.prefix and tuple(row[:len(h)]) == h) for h in layout.headers)


# ----------------------------------------------------------------------------------------------------
# Low-level file reading


def _read_bytes(path):
    """File bytes without a UTF-8 BOM; missing and empty (or whitespace-only) files are errors."""
    path = os.fspath(path)
    if not os.path.isfile(path):
        raise UserError(f"{path}: file not found.")
    with open(path, "rb") as f:
        raw = f.read()
    if raw.startswith(b"\xef\xbb\xbf"):
        raw = raw[3:]
    if not raw.strip():
        raise UserError(f"{path}: file is empty.")
    return raw


def _split_lines(raw):
    """Bytes -> lines split on ``\\n`` only (line numbers as editors count them), without the newline."""
    lines = raw.split(b"\n")
    if lines and lines[-1] == b"":
        lines.pop()
    return lines


def _bad_utf8(text):
    """Reason string for a field holding undecodable bytes (read with surrogateescape), else None."""
    m = _SURROGATE.search(text)
    return None if m is None else f"not valid UTF-8 (byte 0x{ord(m.group()) - 0xDC00:02x})"


def _delimited_records(raw, fmt):
    """Yield ``(line, fields, reason)`` for each non-blank record of a TSV / CSV file.

    ``fields`` is ``None`` when the record cannot be read (``reason`` says why). ``line`` is the record's
    first line (a quoted CSV field may span lines). TSV is read without quote processing, as GLUE files
    are (the original's ``_read_tsv``); CSV uses standard double-quote quoting.
    """
    texts = [line.decode("utf-8", "surrogateescape") + "\n" for line in _split_lines(raw)]
    if fmt == "tsv":
        reader = csv.reader(iter(texts), delimiter="\t", quoting=csv.QUOTE_NONE)
    else:
        reader = csv.reader(iter(texts))
    prev = 0
    while True:
        try:
            row = next(reader)
        except StopIteration:
            return
        except csv.Error as err:
            yield prev + 1, None, f"unreadable {fmt.upper()} row ({err})"
            prev = reader.line_num
            continue
        line, prev = prev + 1, reader.line_num
        if not row or all(not f.strip() for f in row):
            continue  # blank line
        reason = next((r for r in map(_bad_utf8, row) if r), None)
        yield line, (None if reason else row), reason


def _jsonl_records(raw):
    """Yield ``(line, object, reason)`` for each non-blank line of a JSON-lines file."""
    for i, line in enumerate(_split_lines(raw), 1):
        if not line.strip():
            continue
        try:
            text = line.decode("utf-8")
        except UnicodeDecodeError as err:
            yield i, None, f"not valid UTF-8 (byte 0x{line[err.start]:02x})"
            continue
        try:
            obj = json.loads(text)
        except json.JSONDecodeError as err:
            hint = " (expected one JSON object per line)" if i == 1 and text.strip() in "[{" else ""
            yield i, None, f"invalid JSON: {err.msg} at column {err.colno}{hint}"
            continue
        if not isinstance(obj, dict):
            yield i, None, f"expected a JSON object, got {type(obj).__name__}"
            continue
        yield i, obj, None


def _load_json(path):
    """Parse a whole JSON file; bad UTF-8 / JSON raise ``UserError`` naming the file and line."""
    raw = _read_bytes(path)
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as err:
        line = raw.count(b"\n", 0, err.start) + 1
        raise UserError(f"{path}, line {line}: not valid UTF-8 (byte 0x{raw[err.start]:02x}).") from None
    try:
        return json.loads(text)
    except json.JSONDecodeError as err:
        raise UserError(f"{path}, line {err.lineno}: invalid JSON: {err.msg} at column {err.colno}.") from None


# ----------------------------------------------------------------------------------------------------
# Classification / regression files

_Columns = collections.namedtuple("_Columns", "text_a text_b label n_columns header layout label_list")


def _format_of(path):
    ext = os.path.splitext(os.fspath(path))[1].lower()
    if ext == ".tsv":
        return "tsv"
    if ext == ".csv":
        return "csv"
    if ext in (".jsonl", ".json", ".ndjson"):
        return "jsonl"
    raise UserError(f"{path}: unknown file type {ext!r}; expected .tsv, .csv, .jsonl or .json (JSON lines).")


def _find(path, header, name, what, required):
    names = [h.strip() for h in header]
    if name in names:
        return names.index(name)
    if required:
        raise UserError(f"{path}, line 1: no column named {name!r} (for {what}) in the header {names}. "
                        f"Name the columns with text_a=/text_b=/label=, pass glue_task=, or give column "
                        f"numbers (a file without a header row).")
    return None


def _resolve_columns(path, first, glue_task, text_a, text_b, label, has_header):
    """Decide which columns hold text_a / text_b / label, from ``glue_task``, the arguments or the header."""
    first = [f.strip() for f in first]
    if glue_task is not None:
        name, layout = _glue_layout(glue_task)
        if layout.headerless and not _header_matches(layout, first):  # CoLA train/dev: no header
            n, a, b, lab = layout.headerless
            return _Columns(a, b, lab, n, False, f"glue:{name}", layout.labels)
        if not _header_matches(layout, first):
            raise UserError(f"{path}, line 1: header {first} is not a GLUE {name} header "
                            f"(expected one of {[list(h) for h in layout.headers]}).")
        return _Columns(first.index(layout.text_a),
                        None if layout.text_b is None else first.index(layout.text_b),
                        _find(path, first, layout.label, "label", False) if layout.label else None,
                        len(first), True, f"glue:{name}", layout.labels)
    specs = (text_a, text_b, label)
    if any(isinstance(s, int) and not isinstance(s, bool) for s in specs):
        if not all(s is None or s is False or (isinstance(s, int) and not isinstance(s, bool)) for s in specs):
            raise UserError("Give columns all by name or all by number (text_a=, text_b=, label=).")
        if text_a is None:
            raise UserError("text_a= is required when columns are given by number.")
        n = len(first)
        for s in specs:
            if isinstance(s, int) and not isinstance(s, bool) and not -n <= s < n:
                raise UserError(f"{path}, line 1: column {s} does not exist (the row has {n} columns).")
        idx = [None if s is None or s is False else s % n for s in specs]
        return _Columns(*idx, n, bool(has_header), "columns", None)
    if has_header is False:
        raise UserError(f"{path}: columns named {[s for s in specs if s]} need a header row; "
                        f"give column numbers for a file without one.")
    if text_a is None and text_b is None and label is None:
        matches = [n for n, lay in GLUE_TASKS.items() if _header_matches(lay, first)]
        if matches:
            lay = GLUE_TASKS[matches[0]]
            labels = {GLUE_TASKS[m].labels for m in matches}
            return _Columns(first.index(lay.text_a), None if lay.text_b is None else first.index(lay.text_b),
                            _find(path, first, lay.label, "label", False) if lay.label else None,
                            len(first), True, "glue:" + "/".join(matches),
                            labels.pop() if len(labels) == 1 else None)
    a = _find(path, first, text_a or "text_a", "text_a", True)
    b = None if text_b is False else _find(path, first, text_b or "text_b", "text_b", text_b is not None)
    lab = None if label is False else _find(path, first, label or "label", "label", label is not None)
    return _Columns(a, b, lab, len(first), True, "columns", None)


def _parse_label(value, task):
    """-> (label, reason): ``str`` for classification, finite ``float`` for regression."""
    if task == "regression":
        if isinstance(value, bool) or not isinstance(value, (int, float, str)):
            return None, f"regression label {value!r} is not a number"
        try:
            number = float(value.strip() if isinstance(value, str) else value)
        except ValueError:
            return None, f"regression label {value!r} is not a number"
        if not math.isfinite(number):
            return None, f"regression label {value!r} is not finite"
        return number, None
    if isinstance(value, bool) or not isinstance(value, (int, str)):
        return None, f"label {value!r} is not a string or an integer"
    value = str(value).strip()
    return (value, None) if value else (None, "empty label")


def read_examples(path, task="classification", text_a=None, text_b=None, label=None, *, glue_task=None,
                  has_header=None, skip_bad_rows=False):
    """Read a classification or regression file into ``TextExample``s.

    Format by extension: ``.tsv`` (no quote processing, like GLUE), ``.csv`` (double-quote quoting),
    ``.jsonl`` / ``.json`` / ``.ndjson`` (one JSON object per line). Which fields are used:

    * ``glue_task=`` (``cola``, ``sst-2``, ``mrpc``, ``sts-b``, ``qqp``, ``mnli``, ``qnli``, ``rte``,
      ``wnli``): that task's layout (``GLUE_TASKS``); CoLA's train/dev files have no header.
    * ``text_a=`` / ``text_b=`` / ``label=``: column names (file with a header row, or JSON keys) or column
      numbers (TSV/CSV without a header row unless ``has_header=True``); ``False`` means "no such column".
    * nothing: a header that is a known GLUE header selects that layout, else columns ``text_a``,
      optional ``text_b``, optional ``label``.

    A file without the label column (GLUE test sets) gives ``label=None`` for prediction. Blank lines are
    skipped. Empty texts are kept: an empty ``text_a`` gives no A tokens, an empty ``text_b`` makes the
    example single-sentence (as the original's ``if example.text_b``).

    Args:
      path: the file.
      task: ``"classification"`` (labels kept as stripped strings) or ``"regression"`` (finite floats).
      skip_bad_rows: skip malformed rows (wrong column count, bad JSON, bad label, non-UTF-8 bytes)
        instead of raising; they are counted in the report with their line numbers.
    Returns:
      ``(examples, report)``; report keys: ``file``, ``format``, ``layout``, ``header``, ``labeled``,
      ``label_list`` (GLUE's, else ``None``), ``examples``, ``skipped``, ``skipped_lines``, ``skipped_reasons``.
    Raises:
      UserError naming the file (and line) for a missing or empty file, a bad header, or a bad row.
    """
    if task not in ("classification", "regression"):
        raise UserError(f"task must be 'classification' or 'regression', got {task!r}.")
    path = os.fspath(path)
    fmt = _format_of(path)
    raw = _read_bytes(path)
    examples, bad = [], []

    def reject(line, reason):
        if not skip_bad_rows:
            raise UserError(f"{path}, line {line}: {reason} (skip_bad_rows=True skips such rows).")
        bad.append((line, reason))

    if fmt == "jsonl":
        if glue_task is not None or any(isinstance(s, int) and not isinstance(s, bool)
                                        for s in (text_a, text_b, label)):
            raise UserError(f"{path}: JSON lines files are read by key names (text_a=, text_b=, label=).")
        key_a = text_a or "text_a"
        key_b = None if text_b is False else (text_b or "text_b")
        key_label = None if label is False else (label or "label")
        labeled = None if label is None else key_label is not None  # decided by the first object if auto
        for line, obj, reason in _jsonl_records(raw):
            if reason:
                reject(line, reason)
                continue
            if labeled is None:
                labeled = key_label in obj
            a, b = obj.get(key_a), obj.get(key_b) if key_b else None
            if not isinstance(a, str):
                reject(line, f"missing text field {key_a!r}" if a is None else f"{key_a!r} is not a string")
                continue
            if b is not None and not isinstance(b, str):
                reject(line, f"{key_b!r} is not a string")
                continue
            value = None
            if labeled:
                if key_label not in obj:
                    reject(line, f"missing label field {key_label!r}")
                    continue
                value, reason = _parse_label(obj[key_label], task)
                if reason:
                    reject(line, reason)
                    continue
            examples.append(TextExample(a, b, value, f"{path}:{line}"))
        layout, header, label_list = "jsonl", False, None
    else:
        records = _delimited_records(raw, fmt)
        cols = None
        for line, row, reason in records:
            if cols is None:
                if row is None:  # the first record decides the layout: it must be readable
                    raise UserError(f"{path}, line {line}: {reason}.")
                cols = _resolve_columns(path, row, glue_task, text_a, text_b, label, has_header)
                if cols.header:
                    continue
            if reason:
                reject(line, reason)
                continue
            if len(row) != cols.n_columns:
                reject(line, f"expected {cols.n_columns} columns, found {len(row)}")
                continue
            value = None
            if cols.label is not None:
                value, reason = _parse_label(row[cols.label], task)
                if reason:
                    reject(line, reason)
                    continue
            b = None if cols.text_b is None else row[cols.text_b]
            examples.append(TextExample(row[cols.text_a], b, value, f"{path}:{line}"))
        if cols is None:
            raise UserError(f"{path}: file is empty.")
        layout, header, label_list = cols.layout, cols.header, cols.label_list
        labeled = cols.label is not None
        if cols.layout.startswith("glue:") and GLUE_TASKS[cols.layout[5:].split("/")[0]].task != task:
            raise UserError(f"{path}: GLUE {cols.layout[5:]} is a "
                            f"{GLUE_TASKS[cols.layout[5:].split('/')[0]].task} task; pass task= accordingly.")
    if not examples:
        raise UserError(f"{path}: no examples" + (f" left after skipping {len(bad)} bad rows." if bad else "."))
    report = dict(file=path, format=fmt, layout=layout, header=header, labeled=bool(labeled),
                  label_list=None if label_list is None else list(label_list), examples=len(examples),
                  skipped=len(bad), skipped_lines=[b[0] for b in bad], skipped_reasons=[b[1] for b in bad])
    return examples, report


# ----------------------------------------------------------------------------------------------------
# Tokenizer helpers


def _encode(tokenizer, texts):
    """``list[str]`` -> ``list[list[int]]`` through ``tokenizer.encode``, in chunks."""
    out = []
    for i in range(0, len(texts), _CHUNK):
        out.extend(tokenizer.encode(list(texts[i:i + _CHUNK])))
    return out


_OFFSET_FNS = weakref.WeakKeyDictionary()


def _encode_with_char_offsets(tokenizer, texts, chunk=256):
    """``list[str]`` -> list of ``(ids, char_start, char_end)`` int arrays per text.

    ``text[char_start[k]:char_end[k]]`` is token ``k``'s source text (Python str indices, end exclusive),
    converted from the tokenizer's UTF-8 byte offsets.
    """
    fn = _OFFSET_FNS.get(tokenizer)
    if fn is None:
        ref = weakref.ref(tokenizer)  # the cached function must not keep its tokenizer alive
        fn = tf.function(lambda strings: ref().tokenize_with_offsets(strings), autograph=False,
                         input_signature=[tf.TensorSpec([None], tf.string)])
        _OFFSET_FNS[tokenizer] = fn
    out = []
    for i in range(0, len(texts), chunk):
        encoded = [t.encode("utf-8", "surrogatepass") for t in texts[i:i + chunk]]
        ids, starts, ends = fn(tf.constant(encoded, tf.string))
        ids, starts, ends = ids.to_list(), starts.to_list(), ends.to_list()
        for b, tid, s, e in zip(encoded, ids, starts, ends):
            is_start = (np.frombuffer(b, np.uint8) & 0xC0) != 0x80  # first byte of a character
            chars_before = np.concatenate([[0], np.cumsum(is_start)])
            out.append((np.asarray(tid, np.int64), chars_before[np.asarray(s, np.int64)],
                        chars_before[np.asarray(e, np.int64)]))
    return out


# ----------------------------------------------------------------------------------------------------
# Classification features


def _sort_labels(labels):
    try:
        return sorted(labels, key=int)
    except ValueError:
        return sorted(labels)


def classification_features(examples, tokenizer, max_seq_len, label_list=None):
    """Classification / regression features in the original XLNet layout.

    Layout (``classifier_utils.convert_single_example``): ``A <sep> B <sep> <cls>`` (single sentence:
    ``A <sep> <cls>``; B counts only when it has at least one token), padded on the LEFT with ``<pad>``,
    so ``<cls>`` is at ``max_seq_len - 1``. Segment ids: A and its ``<sep>`` 0, B and its ``<sep>`` 1,
    ``<cls>`` 2, padding 4.

    Truncation (as the original): pairs use ``_truncate_seq_pair`` -- drop the LAST token of the longer
    of A / B (B on a tie) until ``len(A) + len(B) <= max_seq_len - 3``; a single sentence keeps its first
    ``max_seq_len - 2`` tokens.

    Args:
      examples: ``TextExample``s. Labels: all ``str`` (classification), all ``float`` (regression) or all
        ``None`` (prediction).
      tokenizer: ``XLNetTokenizer``.
      max_seq_len: L, at least 3.
      label_list: classification label strings in id order; default: the labels present, sorted
        (numerically when they are all integers). Ignored for regression.
    Returns:
      ``(features, report)``. features: ``input_ids`` int32 [N, L], ``segment_ids`` int32 [N, L],
      ``padding_mask`` int32 [N, L] (1 = real token), ``cls_index`` int32 [N] (= L - 1), ``label_ids``
      [N] int32 (classification; -1 without labels) or float32 (regression). report: ``examples``,
      ``pairs``, ``truncated`` (examples that lost tokens), ``truncated_indices``, ``label_list``,
      ``task``.
    """
    if max_seq_len < 3:
        raise UserError(f"max_seq_len must be at least 3 (A <sep> B <sep> <cls>), got {max_seq_len}.")
    n, length = len(examples), max_seq_len
    labels = [e.label for e in examples]
    if all(lab is None for lab in labels):
        task = "unlabeled"
    elif all(isinstance(lab, float) for lab in labels):
        task = "regression"
    elif all(isinstance(lab, str) for lab in labels):
        task = "classification"
    else:
        raise UserError("Examples mix labels of different kinds (text / number / missing).")
    if task == "classification":
        label_list = list(label_list) if label_list is not None else _sort_labels(set(labels))
        label_map = {lab: i for i, lab in enumerate(label_list)}
        for e in examples:
            if e.label not in label_map:
                raise UserError(f"{e.source or 'example'}: label {e.label!r} is not in the label list "
                                f"{label_list}.")
        label_ids = np.array([label_map[lab] for lab in labels], np.int32)
    elif task == "regression":
        label_list = None
        label_ids = np.array(labels, np.float32)
    else:
        label_list = None if label_list is None else list(label_list)
        label_ids = np.full([n], -1, np.int32)

    ids_a = _encode(tokenizer, [e.text_a for e in examples])
    with_b = [i for i, e in enumerate(examples) if e.text_b]
    ids_b = dict(zip(with_b, _encode(tokenizer, [examples[i].text_b for i in with_b])))

    input_ids = np.full([n, length], PAD_ID, np.int32)
    segment_ids = np.full([n, length], SEG_PAD, np.int32)
    padding_mask = np.zeros([n, length], np.int32)
    truncated, pairs = [], 0
    for i in range(n):
        a, b = ids_a[i], ids_b.get(i) or []
        if b:
            pairs += 1
            keep_a, keep_b = truncated_pair_lengths(len(a), len(b), length - 3)
        else:
            keep_a, keep_b = min(len(a), length - 2), 0
        if keep_a < len(a) or keep_b < len(b):
            truncated.append(i)
        tokens = a[:keep_a] + [SEP_ID] + (b[:keep_b] + [SEP_ID] if b else []) + [CLS_ID]
        segs = [SEG_A] * (keep_a + 1) + ([SEG_B] * (keep_b + 1) if b else []) + [SEG_CLS]
        input_ids[i, length - len(tokens):] = tokens
        segment_ids[i, length - len(tokens):] = segs
        padding_mask[i, length - len(tokens):] = 1
    features = dict(input_ids=input_ids, segment_ids=segment_ids, padding_mask=padding_mask,
                    cls_index=np.full([n], length - 1, np.int32), label_ids=label_ids)
    report = dict(examples=n, pairs=pairs, truncated=len(truncated), truncated_indices=truncated,
                  label_list=label_list, task=task)
    return features, report


# ----------------------------------------------------------------------------------------------------
# SQuAD


def _answer_list(value, where):
    if value is None:
        return []
    if not isinstance(value, list):
        raise ValueError(f"{where} must be a list")
    out = []
    for k, ans in enumerate(value):
        if not (isinstance(ans, dict) and isinstance(ans.get("text"), str)
                and isinstance(ans.get("answer_start"), int) and not isinstance(ans.get("answer_start"), bool)):
            raise ValueError(f"{where}[{k}] needs a string 'text' and an integer 'answer_start'")
        out.append((ans["text"], ans["answer_start"]))
    return out


def read_squad(path, skip_bad_rows=False):
    """Read an official SQuAD 1.1 / 2.0 JSON file into ``SquadExample``s.

    Structure: ``data[].paragraphs[].{context, qas[].{id, question, answers[{text, answer_start}],
    is_impossible (2.0, default False), plausible_answers (2.0)}}``. Every answer must be the exact
    substring ``context[answer_start:answer_start + len(text)]``.

    Args:
      skip_bad_rows: skip questions with a malformed entry or a misplaced answer (counted in the report)
        instead of raising.
    Returns:
      ``(examples, report)``; report: ``file``, ``examples``, ``impossible``, ``unanswered`` (possible
      questions without answers, e.g. a test file), ``skipped``, ``skipped_questions`` (their locations).
    Raises:
      UserError naming the file and line (bad UTF-8 / JSON) or the question's location and id.
    """
    path = os.fspath(path)
    data = _load_json(path)
    if not isinstance(data, dict) or not isinstance(data.get("data"), list):
        raise UserError(f"{path}: not a SQuAD file (expected a JSON object with a 'data' list).")
    examples, bad = [], []

    def reject(where, reason):
        if not skip_bad_rows:
            raise UserError(f"{path}: {where}: {reason} (skip_bad_rows=True skips such questions).")
        bad.append(f"{where}: {reason}")

    for i, entry in enumerate(data["data"]):
        paragraphs = entry.get("paragraphs") if isinstance(entry, dict) else None
        if not isinstance(paragraphs, list):
            reject(f"data[{i}]", "needs a 'paragraphs' list")
            continue
        for j, para in enumerate(paragraphs):
            where_p = f"data[{i}].paragraphs[{j}]"
            if not (isinstance(para, dict) and isinstance(para.get("context"), str)
                    and isinstance(para.get("qas"), list)):
                reject(where_p, "needs a string 'context' and a 'qas' list")
                continue
            context = para["context"]
            for k, qa in enumerate(para["qas"]):
                where = f"{where_p}.qas[{k}]"
                try:
                    if not (isinstance(qa, dict) and isinstance(qa.get("question"), str)
                            and isinstance(qa.get("id"), (str, int))):
                        raise ValueError("needs a string 'question' and an 'id'")
                    where = f"{where} (id {qa['id']!r})"
                    impossible = qa.get("is_impossible", False)
                    if not isinstance(impossible, bool):
                        raise ValueError("'is_impossible' must be true or false")
                    answers = _answer_list(qa.get("answers"), "answers")
                    plausible = _answer_list(qa.get("plausible_answers"), "plausible_answers")
                    for text, start in answers + plausible:
                        if not 0 <= start <= len(context) - len(text) or \
                                context[start:start + len(text)] != text:
                            raise ValueError(f"answer {text!r} is not at character {start} of the context")
                    if impossible and answers:
                        raise ValueError("is_impossible is true but answers are given")
                except ValueError as err:
                    reject(where, str(err))
                    continue
                examples.append(SquadExample(str(qa["id"]), qa["question"], context, answers, impossible,
                                             plausible, f"{path}: {where}"))
    if not examples:
        raise UserError(f"{path}: no questions" + (f" left after skipping {len(bad)}." if bad else "."))
    report = dict(file=path, examples=len(examples), impossible=sum(e.is_impossible for e in examples),
                  unanswered=sum(not e.is_impossible and not e.answers for e in examples),
                  skipped=len(bad), skipped_questions=bad)
    return examples, report


# Per-window features: the first 7 are [L] per window, the rest scalars.
_SQUAD_KEYS = ("input_ids", "segment_ids", "padding_mask", "p_mask", "token_char_start", "token_char_end",
               "token_is_max_context", "cls_index", "paragraph_len", "start_position", "end_position",
               "is_impossible", "example_index", "window_index")


def _doc_windows(n_tokens, max_tokens, stride):
    """The original's sliding windows ``[(start, length)]``: step ``min(length, stride)`` until the end."""
    spans, start = [], 0
    while start < n_tokens:
        length = min(n_tokens - start, max_tokens)
        spans.append((start, length))
        if start + length == n_tokens:
            break
        start += min(length, stride)
    return spans or [(0, 0)]


def _max_context_window(spans, n_tokens):
    """For each paragraph token, the window where it has the most context (the original's
    ``_check_is_max_context``: score ``min(left, right) + 0.01 * length``, first window wins ties)."""
    best = np.full([n_tokens], -1, np.int64)
    best_score = np.full([n_tokens], -np.inf)
    for w, (start, length) in enumerate(spans):
        pos = np.arange(start, start + length)
        score = np.minimum(pos - start, start + length - 1 - pos) + 0.01 * length
        better = score > best_score[pos]
        best[pos[better]], best_score[pos[better]] = w, score[better]
    return best


def squad_features(examples, tokenizer, max_seq_len=512, doc_stride=128, max_query_len=64, is_training=False):
    """SQuAD features in the original XLNet layout, one row per paragraph window.

    Layout (``run_squad.convert_examples_to_features``): ``paragraph <sep> question <sep> <cls>`` padded
    on the RIGHT with ``<pad>``; ``cls_index = paragraph_len + len(question) + 2``. The question keeps its
    first ``max_query_len`` tokens. Long paragraphs are cut into windows of
    ``max_seq_len - len(question) - 3`` tokens, each starting ``min(window length, doc_stride)`` tokens
    after the previous one, until a window reaches the paragraph's end (an empty paragraph gives one
    window without paragraph tokens).

    Answer positions: the answer's tokens are those whose character span overlaps the answer's (the first
    gold answer). In a window holding all of them, ``start_position`` / ``end_position`` are their first /
    last window positions and ``is_impossible`` is 0; in other windows, and for impossible questions,
    both are ``cls_index`` and ``is_impossible`` is 1. Questions without gold answers that are not marked
    impossible (prediction files) get -1 and ``is_impossible`` 0.

    Args:
      is_training: every question must be impossible or have an answer; questions whose answer covers no
        token (only whitespace) are dropped, like the original's unalignable ones.
    Returns:
      ``(features, report)``. features, N windows and L = max_seq_len: ``input_ids``, ``segment_ids``
      (paragraph 0, question 1, <cls> 2, padding 3), ``padding_mask`` (1 = real), ``p_mask`` (1 = cannot
      be in an answer: <sep>, question, padding; 0 for paragraph and <cls>), ``token_char_start`` /
      ``token_char_end`` (character span ``context[start:end]`` of paragraph tokens, -1 elsewhere),
      ``token_is_max_context`` (1 where this window gives the paragraph token its most context), all
      int32 [N, L]; ``cls_index``, ``paragraph_len``, ``start_position``, ``end_position``,
      ``is_impossible``, ``example_index``, ``window_index``, all int32 [N]. report: ``examples``,
      ``windows``, ``multi_window_examples``, ``questions_truncated``, ``impossible_examples``,
      ``answer_outside_windows``, ``dropped_examples`` (unalignable answers, training only).
    """
    if max_query_len < 1 or doc_stride < 1:
        raise UserError("max_query_len and doc_stride must be positive.")
    if max_seq_len < max_query_len + 4:
        raise UserError(f"max_seq_len ({max_seq_len}) must exceed max_query_len ({max_query_len}) + 3 so that "
                        f"every window holds paragraph tokens.")
    length = max_seq_len
    contexts = {}
    for e in examples:
        contexts.setdefault(e.context, len(contexts))
    encoded = _encode_with_char_offsets(tokenizer, list(contexts))
    questions = _encode(tokenizer, [e.question for e in examples])
    rows = collections.defaultdict(list)
    counts = collections.Counter()
    for ex_index, (e, q) in enumerate(zip(examples, questions)):
        if len(q) > max_query_len:
            counts["questions_truncated"] += 1
            q = q[:max_query_len]
        doc, char_start, char_end = encoded[contexts[e.context]]
        answer_tokens = None
        if e.answers and not e.is_impossible:
            text, a_start = e.answers[0]
            overlap = np.maximum(char_start, a_start) < np.minimum(char_end, a_start + len(text))
            hits = np.nonzero(overlap)[0]
            if len(hits):
                answer_tokens = (int(hits[0]), int(hits[-1]))
            elif is_training:
                counts["dropped_examples"] += 1
                continue
        elif is_training and not e.is_impossible:
            raise UserError(f"{e.source or e.qas_id}: a training question needs an answer or is_impossible.")
        counts["impossible_examples"] += e.is_impossible
        spans = _doc_windows(len(doc), length - len(q) - 3, doc_stride)
        counts["multi_window_examples"] += len(spans) > 1
        best = _max_context_window(spans, len(doc))
        for w, (start, plen) in enumerate(spans):
            n_real = plen + len(q) + 3
            cls_index = n_real - 1
            ids = np.full([length], PAD_ID, np.int32)
            ids[:n_real] = np.concatenate([doc[start:start + plen], [SEP_ID], q, [SEP_ID, CLS_ID]])
            seg = np.full([length], SQUAD_SEG_PAD, np.int32)
            seg[:plen + 1], seg[plen + 1:cls_index], seg[cls_index] = SQUAD_SEG_P, SQUAD_SEG_Q, SQUAD_SEG_CLS
            p_mask = np.ones([length], np.int32)
            p_mask[:plen] = p_mask[cls_index] = 0
            c_start = np.full([length], -1, np.int32)
            c_end = np.full([length], -1, np.int32)
            c_start[:plen], c_end[:plen] = char_start[start:start + plen], char_end[start:start + plen]
            max_ctx = np.zeros([length], np.int32)
            max_ctx[:plen] = best[start:start + plen] == w
            if e.is_impossible:
                s_pos = e_pos = cls_index
                impossible = 1
            elif answer_tokens is None:
                s_pos = e_pos = -1
                impossible = 0
            elif start <= answer_tokens[0] and answer_tokens[1] < start + plen:
                s_pos, e_pos = answer_tokens[0] - start, answer_tokens[1] - start
                impossible = 0
            else:
                s_pos = e_pos = cls_index
                impossible = 1
                counts["answer_outside_windows"] += 1
            padding = (np.arange(length) < n_real).astype(np.int32)
            values = (ids, seg, padding, p_mask, c_start, c_end, max_ctx,
                      cls_index, plen, s_pos, e_pos, impossible, ex_index, w)
            for key, value in zip(_SQUAD_KEYS, values):
                rows[key].append(value)
    features = {}
    for k in _SQUAD_KEYS:
        shape = [0, length] if k in _SQUAD_KEYS[:7] else [0]
        features[k] = np.array(rows[k], np.int32) if rows[k] else np.zeros(shape, np.int32)
    report = dict(examples=len(examples), windows=len(features["cls_index"]),
                  **{k: counts[k] for k in ("multi_window_examples", "questions_truncated",
                                            "impossible_examples", "answer_outside_windows",
                                            "dropped_examples")})
    return features, report


# ----------------------------------------------------------------------------------------------------
# RACE


def _race_files(path):
    if os.path.isfile(path):
        return [path]
    if not os.path.isdir(path):
        raise UserError(f"{path}: no such file or directory.")
    files = []
    for root, dirs, names in os.walk(path):
        dirs.sort()
        files.extend(os.path.join(root, n) for n in sorted(names)
                     if n.lower().endswith((".txt", ".json")) and not n.startswith("."))
    if not files:
        raise UserError(f"{path}: no RACE files (.txt / .json) found.")
    return files


def read_race(path_or_dir, num_choices=4, skip_bad_rows=False):
    """Read RACE JSON files (one article per file: ``article``, ``questions``, ``options``, ``answers``,
    ``id``) into one ``RaceExample`` per question.

    A directory is searched recursively for ``.txt`` / ``.json`` files (RACE ships ``train/high/1.txt``
    ...), in sorted order. ``answers`` may be missing (prediction): labels are then ``None``.

    Args:
      num_choices: options each question must have (RACE: 4).
      skip_bad_rows: skip malformed files / questions (counted in the report) instead of raising.
    Returns:
      ``(examples, report)``; report: ``files``, ``examples``, ``cloze`` (questions with ``_``),
      ``skipped``, ``skipped_items``.
    Raises:
      UserError naming the file (and line for bad JSON, question number for a bad question).
    """
    path_or_dir = os.fspath(path_or_dir)
    examples, bad = [], []
    files = _race_files(path_or_dir)

    def reject(where, reason):
        if not skip_bad_rows:
            raise UserError(f"{where}: {reason} (skip_bad_rows=True skips it).")
        bad.append(f"{where}: {reason}")

    for path in files:
        try:
            data = _load_json(path)
        except UserError as err:
            if not skip_bad_rows:
                raise
            bad.append(str(err))
            continue
        keys = ("article", "questions", "options")
        if not (isinstance(data, dict) and isinstance(data.get("article"), str)
                and all(isinstance(data.get(k), list) for k in keys[1:])):
            reject(path, "not a RACE file (needs a string 'article' and 'questions' / 'options' lists)")
            continue
        answers = data.get("answers")
        n = len(data["questions"])
        if len(data["options"]) != n or (answers is not None and (
                not isinstance(answers, list) or len(answers) != n)):
            reject(path, f"'questions', 'options' and 'answers' must have the same length ({n})")
            continue
        file_id = str(data.get("id", os.path.basename(path)))
        for i in range(n):
            where = f"{path}: question {i + 1}"
            question, options = data["questions"][i], data["options"][i]
            if not isinstance(question, str):
                reject(where, "the question is not a string")
                continue
            if not (isinstance(options, list) and len(options) == num_choices
                    and all(isinstance(o, str) for o in options)):
                reject(where, f"needs {num_choices} string options")
                continue
            label = None
            if answers is not None:
                ans = answers[i]
                if not (isinstance(ans, str) and len(ans) == 1 and 0 <= ord(ans) - ord("A") < num_choices):
                    reject(where, f"answer {ans!r} is not one of A..{chr(ord('A') + num_choices - 1)}")
                    continue
                label = ord(ans) - ord("A")
            examples.append(RaceExample(data["article"], question, list(options), label,
                                        f"{file_id}-{i}", where))
    if not examples:
        raise UserError(f"{path_or_dir}: no RACE questions" + (f" left after skipping {len(bad)}." if bad else "."))
    report = dict(files=len(files), examples=len(examples), cloze=sum("_" in e.question for e in examples),
                  skipped=len(bad), skipped_items=bad)
    return examples, report


def race_qa_text(question, option):
    """The original's question + option text: a cloze question (one with ``_``) gets the option in place of
    every ``_``; any other question is followed by a space and the option."""
    return question.replace("_", option) if "_" in question else question + " " + option


def race_features(examples, tokenizer, max_seq_len=512, max_qa_len=128):
    """RACE multiple-choice features in the original XLNet layout, one row per option.

    Layout (``run_race.convert_single_example``): ``article <sep> qa <sep> <cls>`` with ``qa =
    race_qa_text(question, option)``, padded on the LEFT with ``<pad>`` (``<cls>`` last). Truncation as the
    original: ``qa`` keeps its LAST ``max_qa_len`` tokens; the article keeps its FIRST
    ``max_seq_len - 3 - len(qa)`` tokens. Segment ids: article and its ``<sep>`` 0, qa and its ``<sep>`` 1,
    ``<cls>`` 2, padding 4.

    Returns:
      ``(features, report)``. features, C choices: ``input_ids``, ``segment_ids``, ``padding_mask``
      (1 = real) int32 [N, C, L]; ``label_ids`` int32 [N] (-1 without answers); ``cls_index`` int32 [N]
      (= L - 1). report: ``examples``, ``choices``, ``articles_truncated`` / ``qa_truncated`` (counted
      per option row).
    """
    if max_qa_len < 1 or max_qa_len > max_seq_len - 3:
        raise UserError(f"max_qa_len ({max_qa_len}) must be between 1 and max_seq_len - 3 ({max_seq_len - 3}).")
    n = len(examples)
    choices = {len(e.options) for e in examples}
    if len(choices) > 1:
        raise UserError(f"RACE examples have different numbers of options: {sorted(choices)}.")
    c, length = (choices.pop() if choices else 4), max_seq_len
    articles = {}
    for e in examples:
        articles.setdefault(e.article, len(articles))
    article_ids = _encode(tokenizer, list(articles))
    qa_ids = _encode(tokenizer, [race_qa_text(e.question, o) for e in examples for o in e.options])
    input_ids = np.full([n, c, length], PAD_ID, np.int32)
    segment_ids = np.full([n, c, length], SEG_PAD, np.int32)
    padding_mask = np.zeros([n, c, length], np.int32)
    counts = collections.Counter()
    for i, e in enumerate(examples):
        art = article_ids[articles[e.article]]
        for j in range(c):
            qa = qa_ids[i * c + j]
            if len(qa) > max_qa_len:
                counts["qa_truncated"] += 1
                qa = qa[len(qa) - max_qa_len:]
            keep = min(len(art), length - 3 - len(qa))
            counts["articles_truncated"] += keep < len(art)
            tokens = art[:keep] + [SEP_ID] + qa + [SEP_ID, CLS_ID]
            segs = [SEG_A] * (keep + 1) + [SEG_B] * (len(qa) + 1) + [SEG_CLS]
            input_ids[i, j, length - len(tokens):] = tokens
            segment_ids[i, j, length - len(tokens):] = segs
            padding_mask[i, j, length - len(tokens):] = 1
    labels = np.array([-1 if e.label is None else e.label for e in examples], np.int32).reshape([n])
    features = dict(input_ids=input_ids, segment_ids=segment_ids, padding_mask=padding_mask,
                    label_ids=labels, cls_index=np.full([n], length - 1, np.int32))
    report = dict(examples=n, choices=c, articles_truncated=counts["articles_truncated"],
                  qa_truncated=counts["qa_truncated"])
    return features, report
