"""Fine-tuning files -> examples: classification / regression (TSV, CSV, JSON lines, GLUE layouts), SQuAD
1.1 / 2.0 and RACE.

Readers return ``(examples, report)``: plain Python dataclasses (``TextExample``, ``SquadExample``,
``RaceExample``) and a small dict of counts (examples, skipped rows with their line numbers). Bad input
raises ``xlnet_tf.errors.UserError`` naming the file and the line (or question); ``skip_bad_rows=True``
skips and counts such rows instead. Nothing here tokenizes: ``xlnet_tf.data.finetuning`` turns examples
into model features with the graph builders of ``xlnet_tf.data.graph_features``.
"""

import collections
import csv
import dataclasses
import json
import logging
import os
import re
from typing import List, Optional, Tuple, Union

from xlnet_tf import files as files_layer  # `files` is a common local name here
from xlnet_tf.data.labels import label_kind
from xlnet_tf.errors import Spelling, UserError

log = logging.getLogger(__name__)
_SURROGATE = re.compile("[\udc80-\udcff]")  # undecodable bytes under errors="surrogateescape"
# Header names (any case) of a file's one text column when it has no text_a: read as text_a without arguments.
TEXT_COLUMNS = ("text", "sentence", "review", "content", "comment", "document")
COLUMN_HINT = Spelling(
    " Name the columns with text_a=/text_b=/label=, pass glue_task=, or give column numbers (a file without a "
    "header row).",
    " Name the columns with --text-a-column / --text-b-column / --label-column (or give their numbers, for a file "
    "without a header row).")
KEY_HINT = Spelling(" Name the keys with text_a=/text_b=/label=.",
                    " Name the keys with --text-a-column / --text-b-column / --label-column.")


def skip_hint(what):
    """The words that say how to skip bad `what` (rows, questions, sentences) instead of stopping."""
    return Spelling(f" (skip_bad_rows=True skips {what})", f" (--skip-bad-rows skips {what})")


SKIP_ROWS, SKIP_QUESTIONS, SKIP_IT = skip_hint("such rows"), skip_hint("such questions"), skip_hint("it")
ID_COLUMNS = ("id", "guid")  # an input's id column when none is named (predict --id-column)
InputRow = collections.namedtuple("InputRow", "line id error")
InputRow.__doc__ = """One row of an input file, in file order (blank lines and a header are not rows): ``line``
where it starts (from 1; None for RACE questions), ``id`` (its id column's value; None: none or unreadable) and
``error`` (why a skipped row was skipped; None for a row read)."""


def id_key(names, given=None):
    """The id column of a row with these header names or JSON keys: `given`, else the first of ID_COLUMNS
    present, else None."""
    return given if given is not None else next((name for name in ID_COLUMNS if name in names), None)


def id_value(value):
    """A row's id as predict writes it: a string or a number as it is, else None."""
    return value if isinstance(value, (str, int, float)) and not isinstance(value, bool) else None


def warn_skipped(path, bad, what="rows", where="lines "):
    """Logs how many bad `what` (rows, ...) of `path` were skipped, and where (`bad`: their lines or places)."""
    if bad:
        shown = ", ".join(map(str, bad[:10])) + (", ..." if len(bad) > 10 else "")
        log.warning("%s: skipped %d bad %s: %s%s", path, len(bad), what, where, shown)


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


def read_file_bytes(path):
    """File bytes without a UTF-8 BOM; missing and empty (or whitespace-only) files are errors."""
    path = os.fspath(path)
    if not files_layer.isfile(path):
        raise UserError(f"{path}: file not found.")
    raw = files_layer.read_bytes(path)
    if raw.startswith(b"\xef\xbb\xbf"):
        raw = raw[3:]
    if not raw.strip():
        raise UserError(f"{path}: file is empty.")
    return raw


def split_lines(raw):
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
    texts = [line.decode("utf-8", "surrogateescape") + "\n" for line in split_lines(raw)]
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


def jsonl_records(raw):
    """Yield ``(line, object, reason)`` for each non-blank line of a JSON-lines file."""
    for i, line in enumerate(split_lines(raw), 1):
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
    raw = read_file_bytes(path)
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
        raise UserError(f"{path}, line 1: no column named {name!r} (for {what}) in the header {names}.",
                        COLUMN_HINT)
    return None


def _text_column(names, given, what="column"):
    """(name, None): the header name or JSON key of text_a (`given`, else 'text_a', else the one name of
    TEXT_COLUMNS, any case, among `names`); (None, reason) when there is none or several."""
    if given is not None or "text_a" in names:
        return given or "text_a", None
    found = [name for name in names if name.strip().lower() in TEXT_COLUMNS]
    if len(found) == 1:
        return found[0], None
    if found:
        return None, f"several text {what}s {found}; name the one to read"
    return None, f"no {what} named 'text_a' nor one text {what} ({', '.join(TEXT_COLUMNS)}) in {list(names)}"


class _Fix(Spelling):
    """Words that name a fix for one file (its own column names): `argument` for Python callers, `flag` for a command
    with the flags it names, else `otherwise` (a command without them: evaluate reads the columns finetune recorded).
    Not kept for re-spelling other messages (`errors._HINTS`): the words are this file's."""

    def __init__(self, argument, flag, otherwise=""):
        super().__init__(argument, flag, hint=False)
        self.hint, self.otherwise = True, otherwise

    def render(self, flags=None):
        return super().render(flags) or ("" if flags is None else self.otherwise)


_ID_NAMES = ("id", "idx", "index", "guid", "uid")  # columns never suggested as the label's


def _no_labels(path, line, names, used, what="column"):
    """The UserError of a file whose rows carry no label where labels are needed (training, evaluation): `names`
    are its header's columns (None: a file without a header row) or its first JSON object's keys (`what` "key"),
    `used` the ones read as texts. Names the flag (--label-column) and, when one is left, the column to give it."""
    if names is None:
        return UserError(f"{path}, line {line}: no label column in a file without a header row (labels are needed "
                         "here)", _Fix("; give its number with label=N.", "; give its number with --label-column N.",
                                       "; add a header row naming it 'label'."))
    names = [name.strip() for name in names]
    left = [name for name in names if name not in used and name.lower() not in _ID_NAMES]
    field = "column" if what == "column" else "key"
    where = "header's columns" if what == "column" else "first object's keys"
    if not left:
        return UserError(f"{path}, line {line}: no label {field}: the {where} {names} hold no labels; add a "
                         f"{field} with each row's label, named 'label'",
                         _Fix(" (or any name, given as label=).", " (or any name, given with --label-column).",
                              "."))
    text = f"{path}, line {line}: no label {field}: none of the {where} {names} is named 'label'"
    if len(left) == 1:
        return UserError(text, _Fix(f"; name yours with label={left[0]!r}.", f"; name yours with --label-column "
                                    f"(here: --label-column {left[0]}).", f"; the labels must be in a {field} named "
                                    "'label'."))
    return UserError(text, _Fix(f"; name yours with label= (one of {left}).", f"; name yours with --label-column "
                                f"(one of {left}).", f"; the labels must be in a {field} named 'label'."))


def _head_bytes(path, limit=1 << 20):
    """The first whole lines of `path` (up to `limit` bytes, without a UTF-8 BOM), or None when it cannot be read
    or its first line is longer (`read_examples` then reads and judges the whole file)."""
    try:
        if not files_layer.isfile(path):
            return None
        with files_layer.open(path, "rb") as f:
            raw = f.read(limit + 1)
    except OSError:
        return None
    if len(raw) > limit:
        raw = raw[:raw.rfind(b"\n") + 1]
    raw = raw[3:] if raw.startswith(b"\xef\xbb\xbf") else raw
    return raw if raw.strip() else None


def check_labels(path, text_a=None, text_b=None, label=None, *, glue_task=None, has_header=None):
    """Refuses, from its first line (header row or JSON object) only, a classification / regression / multi-label
    file whose rows have no label (UserError naming the file, its columns and the option that names the label
    column); called before any training so that a training or evaluation file is refused before the work starts.
    Arguments as `read_examples`'. What the first line cannot tell (bad rows, labels) `read_examples` judges."""
    path = os.fspath(path)
    fmt = _format_of(path)
    raw = _head_bytes(path)
    if raw is None:
        return
    if fmt == "jsonl":
        line, obj, _ = next(jsonl_records(raw), (None, None, None))
        if label is not None or obj is None or "label" in obj:
            return
        key_a, no_text = _text_column(list(obj), text_a, "field")
        if no_text is None and key_a in obj:  # (a missing text is read_examples' to name, with its hints)
            raise _no_labels(path, line, list(obj), {key_a, text_b or "text_b"}, "key")
        return
    line, row, _ = next(_delimited_records(raw, fmt), (None, None, None))
    if row is not None:
        cols = _resolve_columns(path, row, glue_task, text_a, text_b, label, has_header)
        if cols.label is None:
            raise _no_labels(path, line, row if cols.header else None, _used_names(row, cols))


def _used_names(row, cols):
    """The header names of `cols`' text columns."""
    return {row[i].strip() for i in (cols.text_a, cols.text_b) if i is not None}


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
            raise UserError("Give columns all by name or all by number",
                            Spelling(" (text_a=, text_b=, label=)", " (--text-a-column, --text-b-column, "
                                     "--label-column)"), ".")
        if text_a is None:
            raise UserError("The text column is required when columns are given by number",
                            Spelling(" (text_a=)", " (--text-a-column)"), ".")
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
    if text_a is None:
        name, reason = _text_column(first, None)
        if reason:
            raise UserError(f"{path}, line 1: {reason}.", COLUMN_HINT)
        a = first.index(name)
    else:
        a = _find(path, first, text_a, "text_a", True)
    b = None if text_b is False else _find(path, first, text_b or "text_b", "text_b", text_b is not None)
    lab = None if label is False else _find(path, first, label or "label", "label", label is not None)
    return _Columns(a, b, lab, len(first), True, "columns", None)


def read_examples(path, task="classification", text_a=None, text_b=None, label=None, *, glue_task=None,
                  has_header=None, skip_bad_rows=False, label_separator=",", require_labels=False, id_column=None):
    """Read a classification or regression file into ``TextExample``s.

    Format by extension: ``.tsv`` (no quote processing, like GLUE), ``.csv`` (double-quote quoting),
    ``.jsonl`` / ``.json`` / ``.ndjson`` (one JSON object per line). Which fields are used:

    * ``glue_task=`` (``cola``, ``sst-2``, ``mrpc``, ``sts-b``, ``qqp``, ``mnli``, ``qnli``, ``rte``,
      ``wnli``): that task's layout (``GLUE_TASKS``); CoLA's train/dev files have no header.
    * ``text_a=`` / ``text_b=`` / ``label=``: column names (file with a header row, or JSON keys) or column
      numbers (TSV/CSV without a header row unless ``has_header=True``); ``False`` means "no such column".
    * nothing: a header that is a known GLUE header selects that layout, else columns ``text_a``,
      optional ``text_b``, optional ``label``. A file without ``text_a`` whose header (or JSON object) names one
      of ``TEXT_COLUMNS`` (text, sentence, review, content, comment, document; any case) reads it as
      ``text_a``.

    A file without the label column (GLUE test sets) gives ``label=None`` for prediction. Blank lines are
    skipped. Empty texts are kept: an empty ``text_a`` gives no A tokens, an empty ``text_b`` makes the
    example single-sentence (as the original's ``if example.text_b``).

    Args:
      path: the file.
      task: ``"classification"`` (labels kept as stripped strings), ``"regression"`` (finite floats) or
        ``"multi-label"`` (a tuple of label strings per example: a JSON list, or in TSV / CSV / a JSON string
        the labels separated by ``label_separator``; an empty field: no label).
      skip_bad_rows: skip malformed rows (wrong column count, bad JSON, bad label, non-UTF-8 bytes)
        instead of raising; they are counted in the report with their line numbers.
      require_labels: a file without a label column (or key) is refused at its first line (training and
        evaluation files), naming its columns; else it is read without labels (prediction input).
      id_column: the rows' id column (a header name or JSON key; a column number for a file without a header
        row); default: a column named ``id`` or ``guid`` (``ID_COLUMNS``) when the file has one.
    Returns:
      ``(examples, report)``; report keys: ``file``, ``format``, ``layout``, ``header``, ``labeled``,
      ``label_list`` (GLUE's, else ``None``), ``examples``, ``skipped``, ``skipped_lines``, ``skipped_reasons``,
      ``rows`` (an ``InputRow`` per row, read or skipped, in file order), ``id_column`` (None: no ids).
    Raises:
      UserError naming the file (and line) for a missing or empty file, a bad header, or a bad row.
    """
    kind = label_kind(task)
    path = os.fspath(path)
    fmt = _format_of(path)
    raw = read_file_bytes(path)
    examples, bad, rows = [], [], []
    row_id, ids = None, id_column  # the id of the row being read; the id column (JSONL: the first found)

    def reject(line, reason, *more):
        if not skip_bad_rows:
            raise UserError(f"{path}, line {line}: {reason}", SKIP_ROWS, ".", *more)
        bad.append((line, reason))
        rows.append(InputRow(line, row_id, reason))

    if fmt == "jsonl":
        if glue_task is not None or any(isinstance(s, int) and not isinstance(s, bool)
                                        for s in (text_a, text_b, label, id_column)):
            raise UserError(f"{path}: JSON lines files are read by key names",
                            Spelling(" (text_a=, text_b=, label=)", " (--text-a-column, --text-b-column, "
                                     "--label-column)"), ".")
        key_b = None if text_b is False else (text_b or "text_b")
        key_label = None if label is False else (label or "label")
        labeled = None if label is None else key_label is not None  # decided by the first object if auto
        for line, obj, reason in jsonl_records(raw):
            row_id = None
            if reason:
                reject(line, reason)
                continue
            key_id = id_key(obj, id_column)
            ids = ids if ids is not None or key_id not in obj else key_id
            row_id = id_value(obj.get(key_id))
            key_a, reason = _text_column(list(obj), text_a, "field")
            if reason:
                reject(line, reason, KEY_HINT)
                continue
            if labeled is None:  # the first object with a text decides
                labeled = key_label in obj
                if require_labels and not labeled:
                    raise _no_labels(path, line, list(obj), {key_a, key_b}, "key")
            a, b = obj.get(key_a), obj.get(key_b) if key_b else None
            if not isinstance(a, str):
                reject(line, f"missing text field {key_a!r}" if a is None else f"{key_a!r} is not a string",
                       *(() if a is not None else (KEY_HINT,)))
                continue
            if b is not None and not isinstance(b, str):
                reject(line, f"{key_b!r} is not a string")
                continue
            value = None
            if labeled:
                if key_label not in obj:
                    reject(line, f"missing label field {key_label!r}")
                    continue
                value, reason = kind.parse(obj[key_label], label_separator)
                if reason:
                    reject(line, reason)
                    continue
            examples.append(TextExample(a, b, value, f"{path}:{line}"))
            rows.append(InputRow(line, row_id, None))
        layout, header, label_list = "jsonl", False, None
    else:
        records = _delimited_records(raw, fmt)
        cols = None
        for line, row, reason in records:
            if cols is None:
                if row is None:  # the first record decides the layout: it must be readable
                    raise UserError(f"{path}, line {line}: {reason}.")
                cols = _resolve_columns(path, row, glue_task, text_a, text_b, label, has_header)
                if require_labels and cols.label is None:
                    raise _no_labels(path, line, row if cols.header else None, _used_names(row, cols))
                id_index = _id_index(path, row if cols.header else None, len(row), id_column)
                ids = None if id_index is None else (row[id_index].strip() if cols.header else id_index)
                if cols.header:
                    continue
            row_id = row[id_index] if id_index is not None and row is not None and id_index < len(row) else None
            if reason:
                reject(line, reason)
                continue
            if len(row) != cols.n_columns:
                reject(line, f"expected {cols.n_columns} columns, found {len(row)}")
                continue
            value = None
            if cols.label is not None:
                value, reason = kind.parse(row[cols.label], label_separator)
                if reason:
                    reject(line, reason)
                    continue
            b = None if cols.text_b is None else row[cols.text_b]
            examples.append(TextExample(row[cols.text_a], b, value, f"{path}:{line}"))
            rows.append(InputRow(line, row_id, None))
        if cols is None:
            raise UserError(f"{path}: file is empty.")
        layout, header, label_list = cols.layout, cols.header, cols.label_list
        labeled = cols.label is not None
        glue_kind = GLUE_TASKS[cols.layout[5:].split("/")[0]].task if cols.layout.startswith("glue:") else task
        if glue_kind != task:
            raise UserError(f"{path}: GLUE {cols.layout[5:]} is a {glue_kind} task",
                            Spelling("; pass task= accordingly", f"; give --task {glue_kind}"), ".")
    if not examples:
        raise UserError(f"{path}: no examples" + (f" left after skipping {len(bad)} bad rows." if bad else "."))
    warn_skipped(path, [b[0] for b in bad])
    report = dict(file=path, format=fmt, layout=layout, header=header, labeled=bool(labeled),
                  label_list=None if label_list is None else list(label_list), examples=len(examples),
                  skipped=len(bad), skipped_lines=[b[0] for b in bad], skipped_reasons=[b[1] for b in bad],
                  rows=rows, id_column=ids)
    return examples, report


def _id_index(path, header, n_columns, id_column):
    """The id column's number in a TSV / CSV file (`header`: its header row's names, None without one), or None."""
    if isinstance(id_column, int) and not isinstance(id_column, bool):
        if not -n_columns <= id_column < n_columns:
            raise UserError(f"{path}, line 1: id column {id_column} does not exist (the row has {n_columns} columns).")
        return id_column % n_columns
    if header is None:
        if id_column is not None:
            raise UserError(f"{path}: the id column {id_column!r} is named, but the file has no header row; give its "
                            "number.")
        return None
    names = [name.strip() for name in header]
    name = id_key(names, id_column)
    if name is not None and name not in names:
        raise UserError(f"{path}, line 1: no column named {name!r} (for the ids) in the header {names}.")
    return None if name is None else names.index(name)


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
            raise UserError(f"{path}: {where}: {reason}", SKIP_QUESTIONS, ".")
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
    warn_skipped(path, bad, "questions", "")
    report = dict(file=path, examples=len(examples), impossible=sum(e.is_impossible for e in examples),
                  unanswered=sum(not e.is_impossible and not e.answers for e in examples),
                  skipped=len(bad), skipped_questions=bad)
    return examples, report


# ----------------------------------------------------------------------------------------------------
# RACE


def _race_files(path):
    if files_layer.isfile(path):
        return [path]
    if not files_layer.isdir(path):
        raise UserError(f"{path}: no such file or directory.")
    files = []
    for root, dirs, names in files_layer.walk(path):
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
      ``skipped``, ``skipped_items``, ``rows`` (an ``InputRow`` per question read or skipped, and per file
      skipped whole, in order), ``id_column`` ("id": every row has one, FILEID-N, but a file skipped whole).
    Raises:
      UserError naming the file (and line for bad JSON, question number for a bad question).
    """
    path_or_dir = os.fspath(path_or_dir)
    examples, bad, rows = [], [], []
    files = _race_files(path_or_dir)

    def reject(where, reason, row_id=None):
        if not skip_bad_rows:
            raise UserError(f"{where}: {reason}", SKIP_IT, ".")
        bad.append(f"{where}: {reason}")
        rows.append(InputRow(None, row_id, bad[-1]))

    for path in files:
        try:
            data = _load_json(path)
        except UserError as err:
            if not skip_bad_rows:
                raise
            bad.append(str(err))
            rows.append(InputRow(None, None, bad[-1]))
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
                reject(where, "the question is not a string", f"{file_id}-{i}")
                continue
            if not (isinstance(options, list) and len(options) == num_choices
                    and all(isinstance(o, str) for o in options)):
                reject(where, f"needs {num_choices} string options", f"{file_id}-{i}")
                continue
            label = None
            if answers is not None:
                ans = answers[i]
                if not (isinstance(ans, str) and len(ans) == 1 and 0 <= ord(ans) - ord("A") < num_choices):
                    reject(where, f"answer {ans!r} is not one of A..{chr(ord('A') + num_choices - 1)}",
                           f"{file_id}-{i}")
                    continue
                label = ord(ans) - ord("A")
            examples.append(RaceExample(data["article"], question, list(options), label,
                                        f"{file_id}-{i}", where))
            rows.append(InputRow(None, f"{file_id}-{i}", None))
    if not examples:
        raise UserError(f"{path_or_dir}: no RACE questions" + (f" left after skipping {len(bad)}." if bad else "."))
    warn_skipped(path_or_dir, bad, "questions", "")
    report = dict(files=len(files), examples=len(examples), cloze=sum("_" in e.question for e in examples),
                  skipped=len(bad), skipped_items=bad, rows=rows, id_column="id")
    return examples, report
