"""JSON as TensorFlow Serving reads and prints it with rapidjson (json_tensor.cc), for the REST API's messages:
`load_json` (a body -> its value, or rapidjson's parse error and byte offset) and `debug_string` (a value as
rapidjson's PrettyWriter writes it in error messages, cut at 256 bytes). python-rapidjson does the parsing and
the writing; what is left here is where TensorFlow Serving calls rapidjson otherwise."""

from __future__ import annotations

import decimal
import math
import re

import rapidjson

from . import errors

MAX_JSON_DEPTH = 100  # arrays/objects nested in a body: a tensor has at most 64 dimensions
DEBUG_STRING_BYTES = 256  # kMaxJsonDebugStringBytes

_PARSE_ERROR = re.compile(r"Parse error at offset (\d+): (.*)", re.DOTALL)
_NOT_SINGULAR = "The document root must not be followed by other values."
# A token of the writer's output: a string, a number or literal, a bracket (what lies between is layout).
_TOKEN = re.compile(r'"(?:[^"\\]|\\.)*"|[^\s,:\[\]{}"]+|[\[\]{}]', re.DOTALL)


def load_json(body):
    """A request body -> its JSON value, as TensorFlow Serving's ParseJson reads it with rapidjson: INVALID_ARGUMENT
    "JSON Parse error: The document is empty" for an empty body, "JSON Parse error: <rapidjson's message> at
    offset: <byte>" for the rest (what follows a complete value is ignored: kParseStopWhenDoneFlag). Bytes that
    are not UTF-8 inside a string (rapidjson keeps them) are refused as "Invalid encoding in string."; arrays and
    objects nested more than MAX_JSON_DEPTH deep too (never a RecursionError)."""
    if not body:
        raise errors.invalid_argument("JSON Parse error: The document is empty")
    too_deep = f"JSON Parse error: arrays and objects nested more than {MAX_JSON_DEPTH} deep"
    data, start = bytes(body), 0
    for mark in (b"\xef", b"\xbb", b"\xbf"):  # EncodedInputStream<UTF8> skips each byte of a byte-order mark
        if data[start:start + 1] == mark:
            start += 1
    end, not_utf8 = len(data), None
    while True:
        try:
            value = rapidjson.loads(data[start:end], number_mode=rapidjson.NM_NATIVE | rapidjson.NM_NAN)
            break
        except RecursionError:
            raise errors.invalid_argument(too_deep) from None
        except UnicodeDecodeError as error:  # rapidjson reads such bytes as any other: read what precedes them
            end = not_utf8 = start + error.start
        except rapidjson.JSONDecodeError as error:
            offset, message = _PARSE_ERROR.match(str(error)).groups()
            offset = start + int(offset)
            if message == _NOT_SINGULAR:
                end = offset
                continue
            message = _as_tensorflow_serving(message, data, start, offset, not_utf8)
            raise errors.invalid_argument(f"JSON Parse error: {message} at offset: {offset}") from None
    if data.count(b"[") + data.count(b"{") > MAX_JSON_DEPTH:  # only then can it nest that deep
        stack = [(value, 1)]
        while stack:
            node, depth = stack.pop()
            if depth > MAX_JSON_DEPTH:
                raise errors.invalid_argument(too_deep)
            for child in node.values() if type(node) is dict else node:
                if type(child) is list or type(child) is dict:
                    stack.append((child, depth + 1))
    return value


def _as_tensorflow_serving(message, data, start, offset, not_utf8):
    """python-rapidjson's parse error -> TensorFlow Serving's, where they differ: it bundles a later rapidjson than
    1.1.0 and parses recursively where json_tensor.cc asks for the iterative parser."""
    if offset == not_utf8:  # the input was cut where bytes that are not UTF-8 begin: in a string, or a value's start
        if message == "Missing a closing quotation mark in string.":
            return "Invalid encoding in string."
        return "Invalid value." if message == "The document is empty." else message
    if message == "Invalid encoding in string.":  # a control character: 1.1.0 names it an escape
        return "Invalid escape character in string."
    if (message == "Invalid value." and data[offset:offset + 1] in (b"]", b"}", b",", b":")
            and not data[start:offset].strip(b" \t\n\r")):  # the iterative parser's first token: no document
        return "The document is empty."
    return message


def json_type(value):
    """rapidjson's name of a value's type (JsonTypeString)."""
    if value is None or isinstance(value, bool):
        return {None: "Null", False: "False", True: "True"}[value]
    return {dict: "Object", list: "Array", str: "String"}.get(type(value), "Number")


def _double(value):
    """A finite double as rapidjson's Writer prints it (shortest digits, its Prettify layout). python-rapidjson
    writes Python's repr() instead (1e-05 where rapidjson writes 0.00001, 1e+16 for 10000000000000000.0)."""
    if value == 0:
        return "-0.0" if math.copysign(1.0, value) < 0 else "0.0"
    _, digits, k = decimal.Decimal(repr(abs(value))).normalize().as_tuple()
    text, kk = "".join(map(str, digits)), len(digits) + k
    if 0 <= k and kk <= 21:
        body = text + "0" * k + ".0"
    elif 0 < kk <= 21:
        body = text[:kk] + "." + text[kk:]
    elif -6 < kk <= 0:
        body = "0." + "0" * -kk + text
    else:
        body = text[0] + ("." + text[1:] if len(text) > 1 else "") + f"e{kk - 1}"
    return ("-" if value < 0 else "") + body


def _head(value, room):
    """(a copy of the values, keys and brackets a writer meets first in `value`, until they take `room` bytes at
    least, the room left): what debug_string can print, without writing out all of a large body."""
    if type(value) is list:
        head, room = [], room - 1
        for item in value:
            if room <= 0:
                break
            item, room = _head(item, room)
            head.append(item)
        return head, room
    if type(value) is dict:
        head, room = {}, room - 1
        for key, item in value.items():
            if room <= 0:
                break
            head[key], room = _head(item, room - len(key) - 2)
        return head, room
    return value, room - (len(value) + 2 if type(value) is str else 1)


def debug_string(value):
    """JsonValueToDebugString: the value as rapidjson's PrettyWriter writes it (4-space indents, arrays on one
    line), stopped once DEBUG_STRING_BYTES are written (after the value that crosses them), and before a NaN or
    infinity, which rapidjson's Writer refuses (after what precedes it on the line)."""
    text = rapidjson.dumps(_head(value, DEBUG_STRING_BYTES)[0], ensure_ascii=False, indent=4,
                           write_mode=rapidjson.WM_SINGLE_LINE_ARRAY, number_mode=rapidjson.NM_NAN)
    out, size, at = [], 0, 0
    for token in _TOKEN.finditer(text):
        layout, piece = text[at:token.start()], token.group()
        out.append(layout)
        if piece in ("NaN", "Infinity", "-Infinity"):
            break
        if piece[0] in "-0123456789" and any(c in piece for c in ".eE"):  # a float, as repr() writes it
            piece = _double(float(piece))
        out.append(piece)
        size, at = size + len(layout.encode("utf-8")) + len(piece.encode("utf-8")), token.end()
        if size >= DEBUG_STRING_BYTES:
            break
    return "".join(out)
