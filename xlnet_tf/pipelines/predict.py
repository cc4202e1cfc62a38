"""`xlnet-tf predict --export-dir BASE/NAME/VERSION --input GLOB --output PREFIX [--runner ...]`: batch prediction
from an exported SavedModel (raw text in) as an Apache Beam pipeline.

Steps: expand --input with Beam's filesystems -> one element per file, reshuffled so that workers read files
in parallel -> each file read into rows (JSONL, TSV, CSV, TFRecord of tf.train.Examples) -> Beam's
RunInference with ``ExportModelHandler`` (the export's ``serving_default`` on batches of rows) -> predictions
and dead letters written as JSONL shards:

* ``PREFIX-SSSSS-of-NNNNN.jsonl``: one object per predicted row, ``{"id": ..., "source": "FILE:LINE", "line": N,
  <every serving_default output of that row>}`` (arrays as nested lists, strings as str; TFRecord:
  ``"record": N`` instead of ``"line"``), in no particular order (sort by source file and line to follow the input);
* ``PREFIX-dead-letter-SSSSS-of-NNNNN.jsonl``: one object per row that could not be predicted,
  ``{"id", "source": "FILE:LINE", "line" (or "record"), "reason", "row": the raw row, decoded with
  errors="replace"}``.

Both outputs always exist (an empty output is one empty shard); shards an earlier run left under the same
prefix are removed first. Every row gets an ``id``: its own id field (``--id-column``, default ``id``, else
``guid``; a string or integer), else ``FILE:LINE`` (TFRecord: ``FILE:RECORD``, numbered from 1). A line is the
file's line where the row starts, from 1 (a CSV record with a quoted multi-line field: its first line). Counters in the
``xlnet_tf`` namespace: ``rows_in`` (rows read), ``predicted``, ``failed`` (dead letters); rows_in = predicted +
failed. Empty lines (JSONL: blank lines) are not rows, and a TSV / CSV file's first line is its header.

The inputs a row needs are serving_default's inputs, read from the export's ``saved_model.pb``: any of our
exports works (classification ``text`` or ``text_a`` + ``text_b``, SQuAD ``question`` + ``context``, RACE
``article`` + ``question`` + ``options`` [C]).
"""

from __future__ import annotations

import csv
import io
import json
import os
import struct
from typing import NamedTuple

import apache_beam as beam
from apache_beam.metrics import Metrics
from apache_beam.ml.inference.base import ModelHandler, PredictionResult, RunInference

from xlnet_tf.data.readers import id_key
from xlnet_tf.errors import UserError
from xlnet_tf.pipelines.common import COUNTER_NAMESPACE, BeamFiles, counters, run

SIGNATURE = "serving_default"
FORMATS = ("jsonl", "tsv", "csv", "tfrecord")
EXTENSIONS = {".jsonl": "jsonl", ".json": "jsonl", ".ndjson": "jsonl", ".tsv": "tsv", ".csv": "csv",
              ".tfrecord": "tfrecord", ".tfrecords": "tfrecord"}
DEAD = "dead_letters"
COUNTER_NAMES = ("rows_in", "predicted", "failed")
ROW_KEYS = ("id", "source", "line", "record")  # where a prediction's row is, beside serving_default's outputs

_ROWS_IN = Metrics.counter(COUNTER_NAMESPACE, "rows_in")
_PREDICTED = Metrics.counter(COUNTER_NAMESPACE, "predicted")
_FAILED = Metrics.counter(COUNTER_NAMESPACE, "failed")

_KIND = {"string": "string", "bool": "boolean"}  # other dtypes: integers or numbers


class BadRow(Exception):
    """A row that goes to the dead letters; the message is the reason, ``row_id`` the row's own id if known."""

    def __init__(self, reason, row_id=None):
        super().__init__(reason)
        self.row_id = row_id


class InferenceFailure(NamedTuple):
    """RunInference's result for a row that serving_default failed on, alone: the reason."""

    reason: str


# ----------------------------------------------------------------------------------------------------
# The export's serving_default


def serving_signature(export_dir, files=None):
    """(inputs, outputs) of serving_default, read from ``export_dir/saved_model.pb`` (no variables loaded):
    inputs ``{name: (dtype name, shape list with None for unknown dims)}``, outputs a sorted list of names."""
    from tensorflow.core.protobuf import saved_model_pb2
    from tensorflow.python.framework import dtypes

    files = files or BeamFiles()
    path = files.join(export_dir, "saved_model.pb")
    if not files.exists(path):
        versions = sorted((p for p in files.glob(files.join(export_dir, "*")) if os.path.basename(p).isdigit()),
                          key=lambda p: int(os.path.basename(p)))
        hint = f" (did you mean --export-dir {versions[-1]}, its newest version?)" if versions else ""
        raise UserError(f"--export-dir {export_dir}: no saved_model.pb; expected BASE/NAME/VERSION as written by "
                        f"xlnet-tf export{hint}")
    saved = saved_model_pb2.SavedModel()
    with files.open(path, "rb") as f:
        saved.ParseFromString(f.read())
    for meta in saved.meta_graphs:
        if "serve" in meta.meta_info_def.tags and SIGNATURE in meta.signature_def:
            signature = meta.signature_def[SIGNATURE]
            break
    else:
        found = sorted({name for meta in saved.meta_graphs for name in meta.signature_def})
        raise UserError(f"--export-dir {export_dir}: no {SIGNATURE} signature under tag 'serve' (found: {found})")
    inputs = {}
    for name, info in sorted(signature.inputs.items()):
        shape = None if info.tensor_shape.unknown_rank else [d.size if d.size >= 0 else None
                                                             for d in info.tensor_shape.dim]
        if not shape:
            raise UserError(f"--export-dir {export_dir}: {SIGNATURE}'s input {name!r} has no batch dimension "
                            f"(shape {shape}); batch prediction needs [B, ...] inputs")
        inputs[name] = (dtypes.as_dtype(info.dtype).name, shape)
    outputs = sorted(signature.outputs)
    hidden = [name for name in ROW_KEYS if name in outputs]
    if hidden:
        raise UserError(f"--export-dir {export_dir}: {SIGNATURE} has an output named {hidden[0]!r}, which would hide "
                        f"the rows' {hidden[0]} in the predictions")
    return inputs, outputs


class LoadedExport:
    """A loaded export: ``predict(rows)`` runs serving_default on a batch of rows (their ``inputs``) and returns
    one ``{output name: JSON-able value}`` per row. Holds the loaded SavedModel (its variables live as long)."""

    def __init__(self, export_dir):
        import tensorflow as tf
        import tensorflow_text  # noqa: F401 - registers the tokenizer's ops our exports use

        self.tf, self.export_dir = tf, export_dir
        self.module = tf.saved_model.load(export_dir)
        self.function = self.module.signatures[SIGNATURE]
        self.specs = dict(self.function.structured_input_signature[1])

    def predict(self, rows):
        tf = self.tf
        tensors = {name: tf.constant([row["inputs"][name] for row in rows], dtype=spec.dtype)
                   for name, spec in self.specs.items()}
        arrays = {name: value.numpy() for name, value in self.function(**tensors).items()}
        for name, array in arrays.items():
            if array.ndim == 0 or array.shape[0] != len(rows):
                raise RuntimeError(f"{self.export_dir}: {SIGNATURE}'s output {name!r} has shape {array.shape}, "
                                   f"not one value per row of the batch of {len(rows)}")
        return output_rows(arrays, len(rows))


# Outputs padded to the longest row of a request, and the output that gives each row's own length (a token-
# classification export's words and entities, a multi-label export's labels): a row's prediction keeps its own
# values only, whatever the batch.
PADDED_OUTPUTS = {"num_words": ("words", "word_start", "word_end", "tags", "tag_id", "scores"),
                  "num_entities": ("entity_text", "entity_type", "entity_start", "entity_end"),
                  "num_predicted": ("labels",)}  # a multi-label export's labels that apply


def output_rows(arrays, count):
    """A batch's outputs ({name: array [count, ...]}) -> one dict of plain Python values per row, outputs padded
    to the batch's longest row (``PADDED_OUTPUTS``) cut to the row's own length."""
    rows = [{name: arrays[name][i] for name in sorted(arrays)} for i in range(count)]
    for length, names in PADDED_OUTPUTS.items():
        if length in arrays:
            for row in rows:
                for name in names:
                    if name in row:
                        row[name] = row[name][:int(row[length])]
    return [{name: _jsonable(value) for name, value in row.items()} for row in rows]


def _jsonable(value):
    """A numpy value -> plain Python for JSON: arrays as nested lists, bytes as str (UTF-8, errors replaced)."""
    import numpy as np

    if isinstance(value, np.ndarray):
        return [_jsonable(v) for v in value] if value.dtype == object else value.tolist()
    if isinstance(value, bytes):
        return value.decode("utf-8", errors="replace")
    if isinstance(value, np.generic):
        return value.item()
    return value


def _error_reason(error):
    """A model error as a dead letter's reason: its type and first line (TensorFlow's node context dropped)."""
    message = getattr(error, "message", None) or str(error)
    message = message.split("\n\t [[")[0].strip()
    return f"prediction failed: {type(error).__name__}: {message[:1000]}"


class ExportModelHandler(ModelHandler):
    """RunInference's model handler for our exports: rows (dicts with ``inputs`` by serving_default's input
    names) in, ``PredictionResult(row, {output: value})`` out, or ``PredictionResult(row, InferenceFailure)``.

    One model per worker process: ``share_model_across_processes()`` is False, so RunInference loads the model
    once per process through Beam's ``shared.Shared`` handle and every thread (DoFn instance) of that process
    uses the same loaded model. (The alternative, one model served to all processes of a machine through
    ``multi_process_shared``, saves memory for models too large to hold once per process, but pickles every
    batch to the serving process; XLNet-Large is about 1.4 GB.) Batches hold 1 to ``batch_size`` rows
    (``beam.BatchElements`` picks sizes within those bounds from measured batch times).

    A batch that fails (e.g. InvalidArgumentError, or rows whose list inputs differ in length) is retried row by
    row, so that only the rows that fail alone become failures, with the error as the reason; no row is dropped.
    """

    def __init__(self, export_dir, batch_size=32):
        super().__init__()
        self.export_dir, self.batch_size = export_dir, int(batch_size)

    def load_model(self):
        return LoadedExport(self.export_dir)

    def batch_elements_kwargs(self):
        return {"min_batch_size": 1, "max_batch_size": self.batch_size}

    def share_model_across_processes(self):
        return False

    def run_inference(self, batch, model, inference_args=None):
        import tensorflow as tf

        batch = list(batch)
        try:
            return [PredictionResult(row, out) for row, out in zip(batch, model.predict(batch))]
        except (tf.errors.OpError, ValueError, TypeError, UnicodeError) as error:
            if len(batch) == 1:
                return [PredictionResult(batch[0], InferenceFailure(_error_reason(error)))]
        return [result for row in batch for result in self.run_inference([row], model)]

    def get_num_bytes(self, batch):
        return sum(len(row["row"]) for row in batch)


# ----------------------------------------------------------------------------------------------------
# Reading rows


def _describe(dtype, dims, plural=False):
    """What a row's value of this dtype and per-row shape must be, in words ("a list of 4 strings")."""
    if not dims:
        kind = _KIND.get(dtype, "integer" if "int" in dtype else "number")
        return kind + "s" if plural else ("an " if kind[0] in "aeiou" else "a ") + kind
    count = "" if dims[0] is None else f"{dims[0]} "
    return ("lists" if plural else "a list") + f" of {count}{_describe(dtype, dims[1:], plural=True)}"


def _json_type(value):
    return {dict: "an object", list: "an array", str: "a string", bool: "a boolean", type(None): "null"}.get(
        type(value), "a number")


def check_value(name, value, dtype, dims):
    """A row's value for serving_default's input ``name`` (dtype name, per-row shape ``dims``; None: any),
    checked: the value, or BadRow saying what was expected."""

    def fail(got):
        raise BadRow(f"wrong type: field {name!r} must be {_describe(dtype, dims)}, got {got}")

    def check(v, rest):
        if rest:
            if not isinstance(v, list):
                fail(_json_type(v))
            if rest[0] is not None and len(v) != rest[0]:
                fail(f"a list of {len(v)}")
            for item in v:
                check(item, rest[1:])
        elif dtype == "string":
            if not isinstance(v, str):
                fail(_json_type(v))
            try:
                v.encode("utf-8")
            except UnicodeEncodeError as error:
                raise BadRow(f"not UTF-8: field {name!r} holds a lone surrogate {v[error.start]!r} at character "
                             f"{error.start}") from None
        elif dtype == "bool":
            if not isinstance(v, bool):
                fail(_json_type(v))
        elif isinstance(v, bool) or not isinstance(v, (int, float)) or ("int" in dtype and not isinstance(v, int)):
            fail(_json_type(v))

    if dims is not None:
        check(value, dims)
    return value


def _usable_id(fields, id_column=None):
    """The row's own id (its ``id_column`` field, default ``readers.id_key``'s: id, else guid) when it is a string or
    an integer, else None."""
    value = fields.get(id_key(fields, id_column))
    return value if isinstance(value, (str, int)) and not isinstance(value, bool) else None


def _check_id(value, name="id"):
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (str, int)):
        raise BadRow(f"wrong type: field {name!r} must be a string or an integer, got {_json_type(value)}")
    return value


def make_row(source, fields, raw, spec, columns_are_text=False, id_column=None):
    """A row for RunInference: ``{"id", "source", "inputs": {name: value}, "row": raw text}`` from a record's
    ``fields`` (name -> value; the id from ``id_column``, see ``_usable_id``); TSV / CSV columns
    (``columns_are_text``) hold non-string or list values as JSON. Raises BadRow (missing field, wrong type)."""
    key = id_key(fields, id_column)
    row_id = _check_id(fields.get(key), key)
    inputs = {}
    for name, (dtype, shape) in spec.items():
        if name not in fields:
            present = ", ".join(sorted(fields)) or "none"
            raise BadRow(f"missing field {name!r} (the row has: {present})")
        value = fields[name]
        dims = None if shape is None else shape[1:]
        if columns_are_text and not (dtype == "string" and dims == []):
            try:
                value = json.loads(value)
            except json.JSONDecodeError as error:
                raise BadRow(f"wrong type: column {name!r} must hold {_describe(dtype, dims or [])} as JSON "
                             f"(malformed JSON at column {error.colno}: {error.msg.removesuffix(' at')})") from None
        inputs[name] = check_value(name, value, dtype, dims)
    return {"id": source if row_id is None else row_id, "source": source, "inputs": inputs, "row": raw}


def _lines(handle):
    """(line number from 1, byte offset in the file, line bytes without its line end) of a binary file."""
    offset = 0
    for number, line in enumerate(iter(handle.readline, b""), 1):
        size = len(line)
        if line.endswith(b"\n"):
            line = line[:-1]
            if line.endswith(b"\r"):
                line = line[:-1]
        yield number, offset, line
        offset += size


def _decode(line, number, offset):
    """UTF-8 text of a line (a BOM on line 1 dropped), or BadRow naming the first bad byte and its offset."""
    try:
        text = line.decode("utf-8")
    except UnicodeDecodeError as error:
        raise BadRow(f"not UTF-8: byte 0x{line[error.start]:02x} at byte {error.start} of the line (byte "
                     f"{offset + error.start} of the file)") from None
    return text[1:] if number == 1 and text.startswith("\ufeff") else text


def _raw_text(raw):
    return raw.decode("utf-8", errors="replace") if isinstance(raw, bytes) else raw


def _jsonl_records(handle, spec):
    """(number, raw, row fields or BadRow) per non-blank line of a JSONL file."""
    for number, offset, line in _lines(handle):
        if not line.strip():
            continue
        try:
            value = json.loads(_decode(line, number, offset))
        except json.JSONDecodeError as error:
            yield number, line, BadRow(f"malformed JSON at column {error.colno}: {error.msg.removesuffix(' at')}")
            continue
        except BadRow as bad:
            yield number, line, bad
            continue
        if not isinstance(value, dict):
            yield number, line, BadRow(f"wrong type: each line must be a JSON object, got {_json_type(value)}")
            continue
        yield number, line, value


def _tsv_lines(handle):
    """(line number, raw bytes, text or BadRow) per non-empty line of a TSV file."""
    for number, offset, line in _lines(handle):
        if line:
            try:
                yield number, line, _decode(line, number, offset)
            except BadRow as bad:
                yield number, line, bad


def _csv_lines(handle):
    """(first line number, raw bytes, record text or BadRow) per CSV record: a quoted field may span lines, so
    a record ends where its double quotes balance."""
    start, raw, text = None, [], None  # text is None between records
    for number, offset, line in _lines(handle):
        if text is None and not line:
            continue
        if text is None:
            start, raw = number, []
        raw.append(line)
        try:
            decoded = _decode(line, number, offset)
        except BadRow as bad:
            reason = bad if number == start else BadRow(f"{bad}, on line {number} inside this record")
            yield start, b"\n".join(raw), reason
            text = None
            continue
        text = decoded if text is None else text + "\n" + decoded
        if text.count('"') % 2 == 0:
            yield start, b"\n".join(raw), text
            text = None
    if text is not None:
        yield start, b"\n".join(raw), BadRow("malformed CSV: a quoted field is not closed by the end of the file")


def _split(text, delimiter):
    """A TSV line (no quoting) or CSV record (double-quote quoting) -> its fields, or BadRow."""
    if delimiter == "\t":
        return text.split("\t")
    try:
        rows = list(csv.reader(io.StringIO(text), delimiter=delimiter, strict=True))
    except csv.Error as error:
        raise BadRow(f"malformed CSV: {error}") from None
    if len(rows) != 1:
        raise BadRow(f"malformed CSV: {len(rows)} records where one was expected")
    return rows[0]


def _table_records(handle, spec, delimiter):
    """(number, raw, row fields or BadRow) per row of a TSV (no quoting, one line a row) or CSV (double-quote
    quoting) file whose first line names the columns. A header that lacks an input column (or is not UTF-8)
    sends every row of the file to the dead letters with that reason."""
    records = _tsv_lines(handle) if delimiter == "\t" else _csv_lines(handle)
    columns, header_problem = None, None
    for number, raw, text in records:
        if columns is None and header_problem is None:  # the header
            header_line = number
            try:
                if isinstance(text, BadRow):
                    raise text
                columns = [name.strip() for name in _split(text, delimiter)]
            except BadRow as bad:
                header_problem = f"the header (line {number}) is {bad}"
                continue
            duplicates = sorted({c for c in columns if columns.count(c) > 1})
            missing = [name for name in spec if name not in columns]
            if duplicates:
                header_problem = f"the header (line {number}) names columns more than once: {duplicates}"
            elif missing:
                header_problem = (f"missing field {missing[0]!r}: the header (line {number}) has no column "
                                  f"{missing[0]!r} (columns: {', '.join(columns)})")
            continue
        try:
            if header_problem:
                raise BadRow(header_problem)
            if isinstance(text, BadRow):
                raise text
            values = _split(text, delimiter)
            if len(values) != len(columns):
                raise BadRow(f"wrong column count: {len(values)} columns, the header (line {header_line}) "
                             f"names {len(columns)}")
            yield number, raw, dict(zip(columns, values))
        except BadRow as bad:
            yield number, raw, bad


# TFRecord framing: uint64 length, masked CRC32C of the length, data, masked CRC32C of the data (little-endian).
def masked_crc32c(data):
    """TFRecord's masked CRC32C of ``data``."""
    import google_crc32c  # the `beam` extra installs it (Google's C implementation)

    crc = google_crc32c.value(bytes(data))
    return (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def _tfrecord_frames(handle):
    """(record number from 1, byte offset, data or BadRow) per record of a TFRecord file. A corrupt length ends
    the file (one BadRow says from which byte on nothing was read); a bad data checksum spoils one record."""
    number, offset = 0, 0
    while True:
        header = handle.read(12)
        if not header:
            return
        number += 1
        rest = f"record {number} at byte {offset} and the rest of the file not read"
        if len(header) < 12:
            yield number, offset, BadRow(f"corrupt TFRecord file: truncated length field ({rest})")
            return
        length, length_crc = struct.unpack("<QI", header)
        if masked_crc32c(header[:8]) != length_crc:
            yield number, offset, BadRow(f"corrupt TFRecord file: length checksum mismatch ({rest})")
            return
        data, data_crc = handle.read(length), handle.read(4)
        if len(data) < length or len(data_crc) < 4:
            yield number, offset, BadRow(f"corrupt TFRecord file: truncated record ({rest})")
            return
        if masked_crc32c(data) != struct.unpack("<I", data_crc)[0]:
            yield number, offset, BadRow(f"corrupt TFRecord record: data checksum mismatch (byte {offset})")
        else:
            yield number, offset, data
        offset += 12 + length + 4


def _feature_values(name, feature, dtype, dims):
    """A tf.train.Feature -> the row's value for input ``name``: bytes (UTF-8 text) for string inputs, int64 /
    float for numbers; one value for a scalar input, a list of values for a one-dimensional one."""
    kind = feature.WhichOneof("kind")
    wanted = "bytes_list" if dtype == "string" else "int64_list" if "int" in dtype or dtype == "bool" else None
    if (wanted and kind != wanted) or (not wanted and kind not in ("float_list", "int64_list")):
        got = {"int64_list": "an int64_list", None: "a feature with no values"}.get(kind, f"a {kind}")
        raise BadRow(f"wrong type: feature {name!r} must be a {wanted or 'float_list'} holding "
                     f"{_describe(dtype, dims)}, got {got}")
    values = list(getattr(feature, kind).value)
    if dtype == "string":
        for i, value in enumerate(values):
            try:
                values[i] = value.decode("utf-8")
            except UnicodeDecodeError as error:
                raise BadRow(f"not UTF-8: feature {name!r} value {i}, byte 0x{value[error.start]:02x} at byte "
                             f"{error.start}") from None
    elif dtype == "bool":
        values = [bool(v) for v in values]
    if not dims:
        if len(values) != 1:
            raise BadRow(f"wrong type: feature {name!r} must hold one value, got {len(values)}")
        return values[0]
    return values


def _example_text(data):
    """A record for a dead letter: its tf.train.Example in text format, or the bytes decoded."""
    from google.protobuf import text_format
    from tensorflow.core.example import example_pb2

    try:
        return text_format.MessageToString(example_pb2.Example.FromString(data), as_utf8=True)
    except Exception:  # not an Example: the bytes as they are
        return _raw_text(data)


def _tfrecord_records(handle, spec, id_column=None):
    """(number, raw, row fields or BadRow) per record of a TFRecord file of tf.train.Examples (the id: the
    ``id_column`` feature, default ``readers.id_key``'s)."""
    from google.protobuf.message import DecodeError
    from tensorflow.core.example import example_pb2

    for number, _, data in _tfrecord_frames(handle):
        if isinstance(data, BadRow):
            yield number, b"", data
            continue
        try:
            try:
                example = example_pb2.Example.FromString(data)
            except DecodeError as error:
                raise BadRow(f"not a tf.train.Example: {error}") from None
            features = example.features.feature
            fields = {name: None for name in features}  # the names, for a missing field's reason
            key = id_key(features, id_column)
            if key is not None and key in features:  # (a protobuf map refuses None as a key)
                kind = features[key].WhichOneof("kind")
                if kind not in ("bytes_list", "int64_list") or len(getattr(features[key], kind).value) != 1:
                    raise BadRow(f"wrong type: feature {key!r} must hold one bytes or int64 value")
                fields[key] = _feature_values(key, features[key], "string" if kind == "bytes_list" else "int64", [])
            for name, (dtype, shape) in spec.items():
                if name in features:
                    try:
                        fields[name] = _feature_values(name, features[name], dtype, shape[1:])
                    except BadRow as bad:
                        raise BadRow(str(bad), fields.get(key)) from None
            yield number, data, fields
        except BadRow as bad:
            yield number, data, bad


def read_file(path, file_format, spec, files=None, id_column=None):
    """Rows of one input file: yields ``("row", row)`` (see ``make_row``; ``row["position"]``: ``{"line": N}``, TFRecord
    ``{"record": N}``, from 1) or ``("dead", dead letter line)``.

    Args:
      path: the file (any filesystem Beam reads).
      file_format: ``jsonl``, ``tsv``, ``csv`` or ``tfrecord``.
      spec: serving_default's inputs, ``{name: (dtype name, shape)}`` (``serving_signature``).
      id_column: the rows' id field (default: id, else guid).
    """
    files = files or BeamFiles()
    if file_format == "tfrecord":
        def records(handle, spec):
            return _tfrecord_records(handle, spec, id_column)

        as_text = _example_text
    elif file_format == "jsonl":
        records, as_text = _jsonl_records, _raw_text
    else:
        delimiter = "\t" if file_format == "tsv" else ","

        def records(handle, spec):
            return _table_records(handle, spec, delimiter)

        as_text = _raw_text
    with files.open(path, "rb") as handle:
        for number, raw, fields in records(handle, spec):
            source = f"{path}:{number}"
            position = {"record" if file_format == "tfrecord" else "line": number}
            row_id = source
            try:
                if isinstance(fields, BadRow):
                    row_id = source if fields.row_id is None else fields.row_id
                    raise fields
                row_id = _usable_id(fields, id_column)
                row_id = source if row_id is None else row_id
                row = make_row(source, fields, as_text(raw), spec, columns_are_text=file_format in ("tsv", "csv"),
                               id_column=id_column)
                yield "row", {**row, "position": position}
            except BadRow as bad:
                yield "dead", dead_letter(row_id, source, str(bad), as_text(raw), position)


def dead_letter(row_id, source, reason, row, position=None):
    """A dead letter's JSON line (``position``: ``{"line": N}`` or ``{"record": N}``)."""
    return json.dumps({"id": row_id, "source": source, **(position or {}), "reason": reason, "row": row},
                      ensure_ascii=False)


class _ReadRows(beam.DoFn):
    """(path, format) -> rows; dead letters on the DEAD output. Counts rows_in and failed."""

    def __init__(self, spec, id_column=None):
        self.spec, self.id_column = spec, id_column

    def process(self, element):
        path, file_format = element
        for kind, value in read_file(path, file_format, self.spec, id_column=self.id_column):
            _ROWS_IN.inc()
            if kind == "row":
                yield value
            else:
                _FAILED.inc()
                yield beam.pvalue.TaggedOutput(DEAD, value)


class _SplitResults(beam.DoFn):
    """PredictionResult -> a prediction's JSON line, or a dead letter on the DEAD output. Counts predicted and
    failed."""

    def process(self, result):
        row = result.example
        if isinstance(result.inference, InferenceFailure):
            _FAILED.inc()
            yield beam.pvalue.TaggedOutput(DEAD, dead_letter(row["id"], row["source"], result.inference.reason,
                                                             row["row"], row.get("position")))
        else:
            _PREDICTED.inc()
            yield json.dumps({"id": row["id"], "source": row["source"], **row.get("position", {}), **result.inference},
                             ensure_ascii=False)


# ----------------------------------------------------------------------------------------------------
# The pipeline


def input_files(input_pattern, input_format=None, files=None):
    """[(path, format)] of the files ``input_pattern`` (a path or glob) matches; the format from each file's
    extension unless ``input_format`` is given."""
    files = files or BeamFiles()
    if input_format is not None and input_format not in FORMATS:
        raise UserError(f"--input-format {input_format!r}: use one of {', '.join(FORMATS)}")
    paths = files.glob(input_pattern)
    if not paths:
        raise UserError(f"--input {input_pattern}: matches no file")
    out = []
    for path in paths:
        file_format = input_format or EXTENSIONS.get(os.path.splitext(path)[1].lower())
        if file_format is None:
            raise UserError(f"--input: {path}: unknown format (extensions: {', '.join(EXTENSIONS)}); "
                            f"say which with --input-format {'|'.join(FORMATS)}")
        out.append((path, file_format))
    return out


def predict_beam(export_dir, input_pattern, output_prefix, options, batch_size=32, input_format=None, id_column=None):
    """Batch prediction from an export as a Beam pipeline; returns the counters ``{rows_in, predicted, failed}``.

    Args:
      export_dir: ``BASE/NAME/VERSION``, as written by ``xlnet-tf export``.
      input_pattern: a file or glob of JSONL / TSV / CSV / TFRecord files (see the module's docstring).
      output_prefix: writes ``PREFIX-SSSSS-of-NNNNN.jsonl`` and ``PREFIX-dead-letter-SSSSS-of-NNNNN.jsonl``.
      options: Beam PipelineOptions (``xlnet_tf.pipelines.common.pipeline_options``).
      batch_size: the most rows per serving_default call.
      input_format: ``jsonl`` / ``tsv`` / ``csv`` / ``tfrecord`` for every file, else from each extension.
      id_column: the rows' id field (default: id, else guid; without one a row's id is FILE:LINE).
    Raises:
      UserError: no saved_model.pb, no file matched, an unknown format, a bad batch size.
    """
    if batch_size < 1:
        raise UserError(f"--batch-size must be at least 1, got {batch_size}")
    files = BeamFiles()
    spec, _ = serving_signature(export_dir, files)
    paths = input_files(input_pattern, input_format, files)
    if any(fmt == "tfrecord" for _, fmt in paths):
        deep = [name for name, (_, shape) in spec.items() if shape is None or len(shape) > 2]
        if deep:
            raise UserError(f"--input: TFRecord Examples hold inputs of at most one dimension per row; "
                            f"{SIGNATURE}'s {deep[0]!r} has shape {spec[deep[0]][1]} (use JSONL)")
    dead_prefix = output_prefix + "-dead-letter"
    stale = [path for prefix in (output_prefix, dead_prefix)
             for path in files.glob(f"{prefix}-[0-9][0-9][0-9][0-9][0-9]-of-[0-9][0-9][0-9][0-9][0-9].jsonl")]
    if stale:  # an earlier run's shards (perhaps more of them) must not mix with this run's
        print(f"predict: removing {len(stale)} output shard(s) of an earlier run under {output_prefix}")
        for path in stale:
            files.remove(path)

    pipeline = beam.Pipeline(options=options)
    rows = (pipeline
            | "Input files" >> beam.Create(paths)
            | "Spread files" >> beam.Reshuffle()
            | "Read rows" >> beam.ParDo(_ReadRows(spec, id_column)).with_outputs(DEAD, main="rows"))
    results = (rows.rows
               | "Predict" >> RunInference(ExportModelHandler(export_dir, batch_size))
               | "Split" >> beam.ParDo(_SplitResults()).with_outputs(DEAD, main="predictions"))
    _ = results.predictions | "Write predictions" >> beam.io.WriteToText(output_prefix, ".jsonl")
    _ = ((rows[DEAD], results[DEAD])
         | "Dead letters" >> beam.Flatten()
         | "Write dead letters" >> beam.io.WriteToText(dead_prefix, ".jsonl"))
    values = counters(run(pipeline))
    values = {name: values.get(name, 0) for name in COUNTER_NAMES}
    print(f"predict: {values['rows_in']} rows in, {values['predicted']} predicted -> "
          f"{output_prefix}-SSSSS-of-NNNNN.jsonl, {values['failed']} failed -> "
          f"{dead_prefix}-SSSSS-of-NNNNN.jsonl")
    return values
