"""JSON as TensorFlow Serving reads and prints it with rapidjson 1.1.0 (json_tensor.cc), for the REST API's
messages: `load_json` (a body -> its value, or rapidjson's parse error and byte offset) and `debug_string` (a
value as rapidjson's PrettyWriter writes it in error messages, cut at 256 bytes)."""

from __future__ import annotations

import decimal
import json
import math
import re

from . import errors

MAX_JSON_DEPTH = 100  # arrays/objects nested in a body: a tensor has at most 64 dimensions


# -- parsing: rapidjson 1.1.0's iterative parser, as json_tensor.cc calls it -----------------------------------

_ERRORS = {  # rapidjson's GetParseError_En
    "empty": "The document is empty.", "value": "Invalid value.", "name": "Missing a name for object member.",
    "colon": "Missing a colon after a name of object member.",
    "curly": "Missing a comma or '}' after an object member.",
    "square": "Missing a comma or ']' after an array element.",
    "hex": "Incorrect hex digit after \\u escape in string.", "surrogate": "The surrogate pair in string is invalid.",
    "escape": "Invalid escape character in string.", "quote": "Missing a closing quotation mark in string.",
    "encoding": "Invalid encoding in string.", "big": "Number too big to be stored in double.",
    "fraction": "Miss fraction part in number.", "exponent": "Miss exponent in number.",
}
# What json.loads reads otherwise than rapidjson: surrogate escapes (rapidjson refuses unpaired ones), integers
# beyond 64 bits (doubles there) and numbers beyond a double (refused there).
_SURROGATE = re.compile(rb"\\u[dD][89a-fA-F]")
_BIG_NUMBER = re.compile(rb"[0-9]{19}|[eE][-+]?[0-9]{3}")
_RAW = re.compile(rb'[^"\\\x00-\x1f]*')
_ESCAPES = {ord('"'): b'"', ord("\\"): b"\\", ord("/"): b"/", ord("b"): b"\b", ord("f"): b"\f", ord("n"): b"\n",
            ord("r"): b"\r", ord("t"): b"\t"}
_HEX = frozenset(b"0123456789abcdefABCDEF")
_DIGITS = frozenset(b"0123456789")
_WS = b" \t\n\r"
_UINT64, _INT64 = (1 << 64) - 1, 1 << 63
_MAX_TENTH = 1.7976931348623157e307  # DBL_MAX / 10


class _ParseFailure(Exception):
    def __init__(self, kind, offset):
        super().__init__(kind)
        self.kind, self.offset = kind, offset


class _Reader:
    """The byte stream: peek() is 0 at the end (and on a NUL byte), as rapidjson's MemoryStream."""

    def __init__(self, data):
        self.data, self.pos = data, 0
        for bom in (0xEF, 0xBB, 0xBF):  # EncodedInputStream<UTF8> skips a byte-order mark
            if self.peek() == bom:
                self.pos += 1

    def peek(self):
        return self.data[self.pos] if self.pos < len(self.data) else 0

    def skip_ws(self):
        while self.peek() in _WS and self.peek():
            self.pos += 1

    def consume(self, text):
        """Takes the bytes of `text` while they match; whether all did."""
        for byte in text:
            if self.peek() != byte:
                return False
            self.pos += 1
        return True


def _hex4(reader, escape):
    digits = reader.data[reader.pos:reader.pos + 4]
    if len(digits) < 4 or any(d not in _HEX for d in digits):
        raise _ParseFailure("hex", escape)
    reader.pos += 4
    return int(digits, 16)


def _parse_string(reader):
    reader.pos += 1
    out = bytearray()
    while True:
        run = _RAW.match(reader.data, reader.pos).group()
        try:
            run.decode("utf-8")
        except UnicodeDecodeError as error:  # rapidjson keeps such bytes; we cannot: see load_json
            raise _ParseFailure("encoding", reader.pos + error.start) from None
        out += run
        reader.pos += len(run)
        c = reader.peek()
        if c == ord('"'):
            reader.pos += 1
            return out.decode("utf-8", "surrogatepass")
        if c == ord("\\"):
            escape = reader.pos
            reader.pos += 1
            e = reader.peek()
            if e in _ESCAPES and e:
                out += _ESCAPES[e]
                reader.pos += 1
            elif e == ord("u"):
                reader.pos += 1
                code = _hex4(reader, escape)
                if 0xD800 <= code <= 0xDBFF:
                    if not reader.consume(b"\\u"):
                        raise _ParseFailure("surrogate", escape)
                    low = _hex4(reader, escape)
                    if not 0xDC00 <= low <= 0xDFFF:
                        raise _ParseFailure("surrogate", escape)
                    code = ((code - 0xD800) << 10 | (low - 0xDC00)) + 0x10000
                out += chr(code).encode("utf-8", "surrogatepass")
            else:
                raise _ParseFailure("escape", escape)
        else:  # a control character, or the end
            raise _ParseFailure("quote" if c == 0 else "escape", reader.pos)


def _digits(reader):
    start = reader.pos
    while reader.peek() in _DIGITS and reader.peek():
        reader.pos += 1
    return reader.data[start:reader.pos]


def _parse_number(reader):
    """ParseNumber with kParseNanAndInfFlag: the value, and its errors where rapidjson finds them."""
    start = reader.pos
    minus = reader.consume(b"-")
    c, special = reader.peek(), None
    if c in _DIGITS and c:
        whole = b"0" if c == ord("0") else None
        if whole:
            reader.pos += 1
        else:
            whole = _digits(reader)
    elif c in (ord("I"), ord("N")):
        if reader.consume(b"NaN"):
            special = math.nan
        elif reader.consume(b"Inf"):
            special = -math.inf if minus else math.inf
            if reader.peek() == ord("i") and not reader.consume(b"inity"):
                raise _ParseFailure("value", reader.pos)
        else:
            raise _ParseFailure("value", reader.pos)
        whole = b"0"
    else:
        raise _ParseFailure("value", reader.pos)
    value, limit = int(whole[:20]), _INT64 if minus else _UINT64
    fits = whole[:20]  # the digits an integer (32 or 64 bits) holds; then a double takes the rest
    while int(fits) > limit:
        fits = fits[:-1]
    significant = max(len(fits) - 1, 0)
    as_double = len(fits) < len(whole)
    if as_double:
        d = float(int(fits))
        for digit in whole[len(fits):]:
            if d >= _MAX_TENTH:
                raise _ParseFailure("big", start)
            d = d * 10 + (digit - 48)
    exp_frac = 0
    if reader.consume(b"."):
        if not (reader.peek() in _DIGITS and reader.peek()):
            raise _ParseFailure("fraction", reader.pos)
        fraction, taken = _digits(reader), 0
        if not as_double:  # the 2^53 fast path, then a double
            significand = value
            for digit in fraction:
                if significand > (1 << 53) - 1:
                    break
                significand = significand * 10 + digit - 48
                exp_frac, taken = exp_frac - 1, taken + 1
                significant += significand != 0
            d, as_double = float(significand), True
        for digit in fraction[taken:]:
            if significant < 17:
                d, exp_frac = d * 10.0 + digit - 48, exp_frac - 1
                significant += d > 0.0
    if reader.consume(b"e") or reader.consume(b"E"):
        as_double = True
        negative = not reader.consume(b"+") and reader.consume(b"-")
        if not (reader.peek() in _DIGITS and reader.peek()):
            raise _ParseFailure("exponent", reader.pos)
        exp = 0
        for digit in _digits(reader):
            exp = exp * 10 + digit - 48
            if not negative and exp > 308 - exp_frac:
                raise _ParseFailure("big", start)
    if special is not None:
        return special
    text = reader.data[start:reader.pos].decode("ascii")
    if as_double:
        return float(text) if "e" in text or "E" in text or "." in text else float(int(text))
    return -value if minus else value


def _parse_scalar(reader):
    c = reader.peek()
    for literal, value in ((b"null", None), (b"true", True), (b"false", False)):
        if c == literal[0]:
            reader.pos += 1
            if not reader.consume(literal[1:]):
                raise _ParseFailure("value", reader.pos)
            return value
    if c == ord('"'):
        return _parse_string(reader)
    return _parse_number(reader)


# The iterative parser's states; what a token leads to from each (rapidjson's Predict table), and the error it
# reports there for any other token or for the end of the body (HandleError).
_START, _OBJECT, _KEY, _COLON, _MEMBER, _COMMA, _ARRAY, _ELEMENT, _ELEMENT_COMMA, _FINISH = range(10)
_SCALAR = "scalar"
_PREDICT = {
    _START: {b"["[0]: _ARRAY, b"{"[0]: _OBJECT, _SCALAR: _FINISH},
    _OBJECT: {b"}"[0]: "end", b'"'[0]: _KEY},
    _KEY: {b":"[0]: _COLON},
    _COLON: {b"["[0]: _ARRAY, b"{"[0]: _OBJECT, _SCALAR: _MEMBER},
    _MEMBER: {b"}"[0]: "end", b","[0]: _COMMA},
    _COMMA: {b"}"[0]: "end", b'"'[0]: _KEY},
    _ARRAY: {b"["[0]: _ARRAY, b"]"[0]: "end", b"{"[0]: _OBJECT, _SCALAR: _ELEMENT},
    _ELEMENT: {b"]"[0]: "end", b","[0]: _ELEMENT_COMMA},
    _ELEMENT_COMMA: {b"["[0]: _ARRAY, b"]"[0]: "end", b"{"[0]: _OBJECT, _SCALAR: _ELEMENT},
}
_FAILS = {_START: "empty", _OBJECT: "name", _COMMA: "name", _KEY: "colon", _MEMBER: "curly", _COLON: "value",
          _ARRAY: "value", _ELEMENT_COMMA: "value", _ELEMENT: "square"}
_STRUCTURAL = frozenset(b"[]{},:")


def _rapidjson_parse(data):
    """A body -> its JSON value, or _ParseFailure(kind, offset) where rapidjson 1.1.0 (kParseIterativeFlag |
    kParseNanAndInfFlag | kParseStopWhenDoneFlag) stops: what follows a complete value is not read."""
    reader = _Reader(data)
    state, frames, root = _START, [], None  # frames: [container, state to return to, pending key]
    reader.skip_ws()
    while reader.peek():
        c = reader.peek()
        token = c if c in _STRUCTURAL or c == ord('"') else _SCALAR
        following = _PREDICT[state]
        target = following.get(token, following.get(_SCALAR) if token == ord('"') else None)
        if target is None:
            raise _ParseFailure(_FAILS[state], reader.pos)
        if target in (_OBJECT, _ARRAY):
            back = {_ARRAY: _ELEMENT, _ELEMENT_COMMA: _ELEMENT, _COLON: _MEMBER}.get(state, state)
            frames.append([{} if target == _OBJECT else [], back, None])
            reader.pos += 1
            state = target
        elif target == "end":
            if state == _COMMA:
                raise _ParseFailure("name", reader.pos)
            if state == _ELEMENT_COMMA:
                raise _ParseFailure("value", reader.pos)
            container, state, _ = frames.pop()
            reader.pos += 1
            state = _FINISH if state == _START else state
            root = _attach(frames, container, root)
        elif target == _KEY:
            frames[-1][2] = _parse_string(reader)
            state = _KEY
        elif target in (_COLON, _COMMA, _ELEMENT_COMMA):
            reader.pos += 1
            state = target
        else:  # a scalar: the root, a member's value or an element
            root = _attach(frames, _parse_scalar(reader), root)
            state = target
        if state == _FINISH:
            return root
        reader.skip_ws()
    raise _ParseFailure(_FAILS[state], reader.pos)


def _attach(frames, value, root):
    if not frames:
        return value
    container, _, key = frames[-1]
    if isinstance(container, list):
        container.append(value)
    else:
        container.setdefault(key, value)  # FindMember finds a name's first member
    return root


def _checked_int(text):
    value = int(text)
    if -_INT64 <= value <= _UINT64:
        return value
    raise ValueError("an integer rapidjson holds as a double")


def _checked_float(text):
    value = float(text)
    if math.isinf(value):
        raise ValueError("too big for a double")
    return value


_FAST = json.JSONDecoder()
_CHECKED = json.JSONDecoder(parse_int=_checked_int, parse_float=_checked_float)


def load_json(body):
    """A request body -> its JSON value, as TensorFlow Serving's json_tensor.cc parses it with rapidjson:
    INVALID_ARGUMENT "JSON Parse error: The document is empty" for an empty body, "JSON Parse error: <rapidjson's
    message> at offset: <byte>" for the rest (what follows a complete value is ignored). Python's json module
    reads the body; only when it refuses it, or the body holds what the two read differently (19-digit
    integers, 3-digit exponents, surrogate escapes), is it read again as rapidjson does. Bytes that are not UTF-8
    inside a string (rapidjson keeps them) are refused as "Invalid encoding in string."; arrays and objects
    nested more than MAX_JSON_DEPTH deep too (never a RecursionError)."""
    if not body:
        raise errors.invalid_argument("JSON Parse error: The document is empty")
    too_deep = f"JSON Parse error: arrays and objects nested more than {MAX_JSON_DEPTH} deep"
    value = _NOT_READ = object()
    try:
        text = body.decode("utf-8")
        start = len(text) - len(text.lstrip(" \t\n\r"))
        decoder = _CHECKED if _BIG_NUMBER.search(body) else _FAST
        if start < len(text) and not _SURROGATE.search(body):
            value, end = decoder.raw_decode(text, start)
            if end < len(text) and type(value) is not dict and type(value) is not list:
                value = _NOT_READ  # a number may go on where Python's stops ("1.", "1e"): rapidjson reads it
    except RecursionError:
        raise errors.invalid_argument(too_deep) from None
    except ValueError:  # JSONDecodeError, UnicodeDecodeError, a number read differently
        pass
    if value is _NOT_READ:
        try:
            value = _rapidjson_parse(bytes(body))
        except _ParseFailure as failure:
            raise errors.invalid_argument(f"JSON Parse error: {_ERRORS[failure.kind]} at offset: "
                                          f"{failure.offset}") from None
    if body.count(b"[") + body.count(b"{") > MAX_JSON_DEPTH:  # only then can it nest that deep
        stack = [(value, 1)]
        while stack:
            node, depth = stack.pop()
            if depth > MAX_JSON_DEPTH:
                raise errors.invalid_argument(too_deep)
            for child in node.values() if type(node) is dict else node:
                if type(child) is list or type(child) is dict:
                    stack.append((child, depth + 1))
    return value


# -- what TensorFlow Serving's messages show of a JSON value (json_tensor.cc) ----------------------------------

DEBUG_STRING_BYTES = 256  # kMaxJsonDebugStringBytes


def json_type(value):
    """rapidjson's name of a value's type (JsonTypeString)."""
    if value is None or isinstance(value, bool):
        return {None: "Null", False: "False", True: "True"}[value]
    return {dict: "Object", list: "Array", str: "String"}.get(type(value), "Number")


def _double(value):
    """A double as rapidjson's Writer prints it (shortest digits, its Prettify layout)."""
    if value == 0:
        return "-0.0" if math.copysign(1.0, value) < 0 else "0.0"
    sign, digits, k = decimal.Decimal(repr(abs(value))).normalize().as_tuple()
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


def _quoted(text):
    out = ['"']
    for ch in text:
        code = ord(ch)
        if ch in '"\\':
            out.append("\\" + ch)
        elif code < 0x20:
            out.append({8: "\\b", 9: "\\t", 10: "\\n", 12: "\\f", 13: "\\r"}.get(code, f"\\u00{code:02X}"))
        else:
            out.append(ch)
    out.append('"')
    return "".join(out)


class _Full(Exception):
    pass


def debug_string(value):
    """JsonValueToDebugString: the value as rapidjson's PrettyWriter writes it (4-space indents, arrays on one
    line), stopped once DEBUG_STRING_BYTES are written (and at a NaN or infinity, which it cannot write)."""
    out, size, levels = [], [0], []  # levels: [in an array, values written]

    def put(text):
        out.append(text)
        size[0] += len(text.encode("utf-8", "surrogatepass"))

    def event():
        if size[0] >= DEBUG_STRING_BYTES:
            raise _Full
        if levels:
            level = levels[-1]
            if level[0]:
                put(", " if level[1] else "")
            else:
                put(("," if level[1] % 2 == 0 else ": ") if level[1] else "")
                if level[1] % 2 == 0:
                    put("\n" + " " * 4 * len(levels))
            level[1] += 1

    def write(node):
        if isinstance(node, (dict, list)):
            event()
            put("{" if isinstance(node, dict) else "[")
            levels.append([isinstance(node, list), 0])
            for key, item in node.items() if isinstance(node, dict) else ((None, item) for item in node):
                if key is not None:
                    event()
                    put(_quoted(key))
                write(item)
            if size[0] >= DEBUG_STRING_BYTES:
                raise _Full
            written = levels.pop()[1]
            put(("\n" + " " * 4 * len(levels) + "}" if written else "}") if isinstance(node, dict) else "]")
            return
        event()
        if node is None or isinstance(node, bool):
            put({None: "null", False: "false", True: "true"}[node])
        elif isinstance(node, str):
            put(_quoted(node))
        elif isinstance(node, int):
            put(str(node))
        elif math.isfinite(node):
            put(_double(node))
        else:
            raise _Full

    try:
        write(value)
    except _Full:
        pass
    return "".join(out)
