"""TensorFlow Serving's REST API, served by one event-loop thread and a fixed pool of worker threads.

    GET  /v1/models/NAME[/versions/N|/labels/L]            model status (GetModelStatusResponse as JSON)
    GET  /v1/models/NAME[/versions/N|/labels/L]/metadata   model metadata (GetModelMetadataResponse as JSON)
    GET  <prometheus path>                                 Prometheus metrics, with a monitoring config
    POST /v1/models/NAME[/versions/N|/labels/L]:predict    {"signature_name"?, "instances" | "inputs"}
    POST /v1/models/NAME[/versions/N|/labels/L]:classify   {"signature_name"?, "context"?, "examples"}
    POST /v1/models/NAME[/versions/N|/labels/L]:regress    (the same)
    OPTIONS /v1/...                                        CORS preflight

Row format ("instances") answers {"predictions": ...}, columnar ("inputs") answers {"outputs": ...}, with
the name omitted when there is a single input/output, as the REST API doc specifies. :classify answers
{"results": [[[label, score], ...] per example]}, :regress {"results": [value per example]} (examples as
JSON objects of features: see `inference.example_from_json`). Errors answer {"error": "..."} with
TensorFlow Serving's HTTP status for the canonical code (`errors.HTTP_STATUS`, its http_server.cc
ToHTTPStatusCode: 400 INVALID_ARGUMENT and FAILED_PRECONDITION, 404 NOT_FOUND, 429 RESOURCE_EXHAUSTED,
500 INTERNAL, 501 UNIMPLEMENTED, 503 UNAVAILABLE, 504 DEADLINE_EXCEEDED).

Paths follow TensorFlow Serving's http_rest_api_util.cc: everything under /v1/ (case-insensitive) goes to
the API, anything else is 404. Under /v1/, POST must match
`/v1/models/NAME[/versions/DIGITS|/labels/LABEL]:(predict|classify|regress)` and GET
`/v1/models[/NAME][/versions/DIGITS|/labels/LABEL][/metadata]` (NAME and LABEL: no '/' or ':'); what does
not (another method, a verb in capitals, a version that is not digits, a trailing '/') is 400
INVALID_ARGUMENT "Malformed request: METHOD PATH"; GET without a name is "Missing model name in request.",
a version beyond int64 "Failed to convert version: V to numeric.". NAME and LABEL are percent-decoded
(`%20` is a space, `+` stays '+', a '%' not followed by two hex digits stays as it is) and must be UTF-8.
The query string is ignored (TensorFlow Serving would match the regex against it too and answer 400).

How a connection is served: the event loop (`serve_forever`) accepts connections and does all socket I/O
without blocking. It reads a request's line, headers and body and checks them; only a complete request
goes to a worker (`rest_api_num_threads` of them), which finds the model and runs it; the loop writes the
answer. One request per connection: every answer says `Connection: close` (a stop never waits on idle
keep-alive connections, and nothing is read past the request).

Limits (TensorFlow Serving's behaviour, where it has one, in brackets):

* Load: a complete request that finds all `rest_api_num_threads` workers busy is answered at once 503
  UNAVAILABLE with `Retry-After: 1`, never queued [tensorflow_model_server queues it in its executor's
  unbounded queue]. 503 rather than 429: it is what the server's own overload means in TensorFlow Serving's
  table (UNAVAILABLE; RESOURCE_EXHAUSTED/429 is a request too large or a client over its quota, RFC 6585),
  what RFC 9110 defines for "temporarily overloaded", what load balancers retry on another backend, and
  what `serving.Client` retries. A worker stays taken until its answer is written, and also, when a request
  was answered at its deadline, until its run really ends (a session run cannot be stopped), so the load
  stays bounded. Open connections are bounded too (`max_connections`, at least 64; beyond: 503 at once),
  and so are the request bytes held at once (`max_request_bytes` x workers; beyond: 503).
* Time: a request's deadline is `rest_api_timeout_in_ms` from when its body has been read. It is passed to
  the core (batch queue, session run, pieces of long runs) and, should the run go on, the loop answers at
  the deadline itself: 504 DEADLINE_EXCEEDED [the handler puts rest_api_timeout_in_ms in the session's
  RunOptions; ToHTTPStatusCode maps DEADLINE_EXCEEDED to GATEWAY_TO, 504]. Reading the request line,
  headers and body must end within `rest_body_timeout` seconds of the connection's accept, in total: a
  client dripping bytes is answered 408 and the connection closed [TensorFlow Serving sets no timeout:
  libevent's default read timeout, 50 s, closes the connection without an answer]; a connection that sent
  nothing is closed without an answer.
* Framing: a request line or headers over 64 KiB: 414 / 431; more than 100 headers: 431; not HTTP/1.x: 505;
  a method other than GET, POST, HEAD, PUT, DELETE, OPTIONS, PATCH: 501 [libevent, with the methods
  evhttp_server.cc allows; those others reach the handler: 400 "Malformed request" under /v1/].
  Content-Length negative, not a number, or given twice with different values: 400; a POST with neither
  Content-Length nor `Transfer-Encoding: chunked`: 400 [libevent: 400 for a bad Content-Length]; both: 400;
  another transfer coding: 501. A body larger than `max_request_bytes`: 429 RESOURCE_EXHAUSTED, answered as
  soon as the headers (or the chunks so far) say so, the body not read: `Expect: 100-continue` is answered
  with that 429 (the client sends nothing), otherwise what the client still sends is discarded, never kept,
  for at most LINGER_SECONDS, so that it can read the answer (closing a socket with unread data resets the
  connection and the client loses the answer), then the connection is closed. Nothing past Content-Length
  is ever parsed.
* JSON: a body nested deeper than MAX_JSON_DEPTH (e.g. 100000 '['), not UTF-8, or with a number of more
  digits than Python converts: 400 "JSON Parse error: ...", never a RecursionError.

Classify and Regress look the model up before they parse the body (the examples are a function for
`core.infer`): an unknown model is 404 whatever the body, as over gRPC. Predict parses the JSON first, as
TensorFlow Serving does, and builds its tensors once the model's signature is known.

CORS (`rest_api_enable_cors_support`): every answer to a request under /v1/, and the HTTP layer's own
errors, carry `Access-Control-Allow-Origin: *`, `Access-Control-Allow-Methods: POST, GET` and
`Access-Control-Allow-Headers: Content-Type` (http_rest_api_util.cc AddCORSHeaders). OPTIONS under /v1/
is a preflight, with or without CORS support, as in http_server.cc: 200 with an empty body when the Origin
header holds "http://" or "https://", else 400 "Origin header is missing in CORS preflight"
(FAILED_PRECONDITION; TensorFlow Serving's body is empty there, ours the usual {"error": ...}).

Stopping (`ModelServer.stop`): `stopping = True` and `shutdown()` make the loop refuse new requests (503
"the server is shutting down", also to connections still sending theirs) while the requests in progress
finish; `server_close()` waits for them (and their answers to be written), then closes the port and the
workers. `serve_forever` returns once the requests in progress are answered.
"""

from __future__ import annotations

import email.utils
import heapq
import http
import itertools
import json
import logging
import queue
import re
import selectors
import socket
import threading
import time
import urllib.parse

import numpy as np
from google.protobuf import json_format

from . import errors, inference
from .deadline import Deadline
from .servable import CLASSIFY_METHOD, DEFAULT_SIGNATURE, REGRESS_METHOD
from .tensors import json_to_ndarray, ndarray_to_json, shape_of

log = logging.getLogger("xlnet_tf.serving")

SERVER = "xlnet-tf-serving"
MAX_HEAD_BYTES = 64 << 10  # request line + headers
MAX_HEADERS = 100
MAX_JSON_DEPTH = 100  # arrays/objects nested in a body: a tensor has at most 64 dimensions
MAX_CHUNK_LINE = 4096  # a chunk-size line (with extensions) or a trailer line of a chunked body
LINGER_SECONDS = 2.0  # how long unread bytes are discarded after an early answer, before closing
CONNECTIONS_PER_THREAD = 16  # open connections at most: max(MIN_CONNECTIONS, this x rest_api_num_threads)
MIN_CONNECTIONS = 64
RETRY_AFTER_SECONDS = 1
BACKLOG = 1024
READ_CHUNK = 256 << 10

CORS_HEADERS = (("Access-Control-Allow-Origin", "*"), ("Access-Control-Allow-Methods", "POST, GET"),
                ("Access-Control-Allow-Headers", "Content-Type"))

_FLAGS = re.IGNORECASE | re.DOTALL
_V1 = re.compile(r"/v1/.*", _FLAGS)
_VERSION = r"(?:/versions/(?P<version>[0-9]+)|/labels/(?P<label>[^/:]+))?"
_PREDICT_PATH = re.compile(r"/v1/models/(?P<name>[^/:]+)" + _VERSION + r":(?P<verb>classify|regress|predict)", _FLAGS)
_STATUS_PATH = re.compile(r"/v1/models(?:/(?P<name>[^/:]+))?" + _VERSION + r"(?:/(?P<sub>metadata))?", _FLAGS)
_VERBS = ("predict", "classify", "regress")
_METHODS = ("GET", "POST", "HEAD", "PUT", "DELETE", "OPTIONS", "PATCH")  # what evhttp_server.cc lets through
_INT64_MAX = (1 << 63) - 1
_TOKEN = re.compile(rb"[!#$%&'*+.^_`|~0-9A-Za-z-]+")
_HTTP_VERSION = re.compile(rb"HTTP/([0-9])\.([0-9])")
_ORIGIN = re.compile(r"https?://")
_REASONS = {499: "Client Closed Request"}


# --- the API: JSON bodies <-> tensors ---------------------------------------------------------------------


def _to_dict(message):
    try:
        return json_format.MessageToDict(message, always_print_fields_with_no_presence=True,
                                         preserving_proto_field_name=True)
    except TypeError:  # protobuf < 26
        return json_format.MessageToDict(message, including_default_value_fields=True,
                                         preserving_proto_field_name=True)


def _is_b64(value):
    return isinstance(value, dict) and set(value) == {"b64"}


def parse_predict_body(body, signature):
    """JSON body -> ({alias: ndarray}, row_format) for this SignatureDef (TF Serving's json_tensor rules)."""
    if not isinstance(body, dict):
        raise errors.invalid_argument("the request body must be a JSON object")
    has_instances, has_inputs = "instances" in body, "inputs" in body
    if has_instances == has_inputs:
        raise errors.invalid_argument("Missing 'inputs' or 'instances' key" if not has_instances else
                                      "a request can have either 'instances' or 'inputs', not both")
    specs = signature.inputs
    names = sorted(specs)
    if has_instances:
        rows = body["instances"]
        if not isinstance(rows, list):
            raise errors.invalid_argument("'instances' must be a list")
        named = bool(rows) and isinstance(rows[0], dict) and not _is_b64(rows[0])
        if named:
            columns = {}
            for index, row in enumerate(rows):
                if not isinstance(row, dict) or _is_b64(row):
                    raise errors.invalid_argument(f"Expecting object but got list at item {index} of input list")
                for key in row:
                    if key not in specs:
                        raise errors.invalid_argument(f"JSON object has an input not in the signature: {key} "
                                                      f"(inputs: {', '.join(names)})")
                for name in names:
                    if name not in row:
                        raise errors.invalid_argument(f"Missing named input: {name} in item {index} of "
                                                      "'instances' (every instance needs every input)")
                    columns.setdefault(name, []).append(row[name])
            if not rows:
                columns = {}
        else:
            if len(names) != 1:
                if not rows:  # an empty batch: every input empty
                    columns = {name: [] for name in names}
                else:
                    raise errors.invalid_argument(
                        f"the signature has {len(names)} inputs ({', '.join(names)}): each instance must be "
                        "an object naming them")
            else:
                columns = {names[0]: rows}
        arrays = {}
        for name, value in columns.items():
            arrays[name] = _column(value, specs[name], name)
        if not rows and not arrays:
            arrays = {name: _column([], specs[name], name) for name in names}
        return arrays, True
    value = body["inputs"]
    if isinstance(value, dict) and not _is_b64(value):
        arrays = {}
        for name, column in value.items():
            if name not in specs:
                raise errors.invalid_argument(f"input {name!r} is not in the signature (inputs: {', '.join(names)})")
            arrays[name] = _column(column, specs[name], name)
        return arrays, False
    if len(names) != 1:
        raise errors.invalid_argument(f"the signature has {len(names)} inputs ({', '.join(names)}): 'inputs' "
                                      "must be an object naming them")
    return {names[0]: _column(value, specs[names[0]], names[0])}, False


def _column(value, info, name):
    array = json_to_ndarray(value, info.dtype, name)
    if array.size == 0 and array.ndim == 1:  # [] -> [0, fixed dims...] from the signature's shape
        shape = shape_of(info.tensor_shape)
        if shape and len(shape) > 1:
            array = array.reshape([0] + [max(s, 0) for s in shape[1:]])
    return array


def format_outputs(outputs, row_format):
    """{alias: ndarray} -> the JSON response body."""
    if row_format:
        if len(outputs) == 1:
            (alias, value), = outputs.items()
            return {"predictions": ndarray_to_json(value, alias)}
        sizes = {alias: (np.shape(v)[0] if np.ndim(v) else None) for alias, v in outputs.items()}
        batch = set(sizes.values())
        if len(batch) != 1 or None in batch:
            raise errors.invalid_argument(
                "Tensors of a row-format ('instances') response must share dim 0; sizes: "
                + ", ".join(f"{a}={s}" for a, s in sorted(sizes.items())) + ". Use 'inputs' instead.")
        columns = {alias: ndarray_to_json(value, alias) for alias, value in outputs.items()}
        rows = batch.pop()
        return {"predictions": [{alias: columns[alias][i] for alias in columns} for i in range(rows)]}
    if len(outputs) == 1:
        (alias, value), = outputs.items()
        return {"outputs": ndarray_to_json(value, alias)}
    return {"outputs": {alias: ndarray_to_json(value, alias) for alias, value in outputs.items()}}


def load_json(body):
    """A request body -> its JSON value; INVALID_ARGUMENT "JSON Parse error: ..." for anything that is not JSON
    nested at most MAX_JSON_DEPTH deep (never a RecursionError)."""
    too_deep = f"JSON Parse error: arrays and objects nested more than {MAX_JSON_DEPTH} deep"
    try:
        value = json.loads(body)
    except RecursionError:
        raise errors.invalid_argument(too_deep) from None
    except ValueError as error:  # JSONDecodeError, UnicodeDecodeError, an integer of too many digits
        raise errors.invalid_argument(f"JSON Parse error: {error}") from None
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


def _malformed(method, target):
    return errors.invalid_argument(f"Malformed request: {method} {target}")


def _decode(text, what):
    """A percent-encoded path segment -> text (as curl_easy_unescape: %XX decoded, nothing else)."""
    try:
        return urllib.parse.unquote_to_bytes(text.encode("latin-1")).decode("utf-8")
    except (UnicodeDecodeError, UnicodeEncodeError):
        raise errors.invalid_argument(f"Failed to decode {what}:{text}") from None


def _model_spec(match):
    """A path match -> (name, version or None, label or None), decoded and checked as TensorFlow Serving."""
    name = _decode(match["name"], "model name") if match["name"] else ""
    version = None
    if match["version"]:
        version = int(match["version"])
        if version > _INT64_MAX:
            raise errors.invalid_argument(f"Failed to convert version: {match['version']} to numeric.")
    label = _decode(match["label"], "model version label") if match["label"] else None
    return name, version, label


def _metric_labels(method, path):
    """(model name, API) a request is counted under, None when it is not counted (not an API request)."""
    if method == "POST":
        match = _PREDICT_PATH.fullmatch(path)
        if match and match["verb"] in _VERBS:
            try:
                return _decode(match["name"], ""), match["verb"]
            except errors.ServingError:
                pass
        return "", "predict"
    if method == "GET":
        match = _STATUS_PATH.fullmatch(path)
        api = "get_model_metadata" if match and match["sub"] == "metadata" else "get_model_status"
        try:
            return (_decode(match["name"], "") if match and match["name"] else ""), api
        except errors.ServingError:
            return "", api
    return None


# --- HTTP ---------------------------------------------------------------------------------------------------


class _HttpError(Exception):
    """A request refused by the HTTP layer: HTTP `status`, message, extra headers."""

    def __init__(self, status, message, headers=()):
        super().__init__(message)
        self.status, self.message, self.headers = status, message, tuple(headers)


class _Answer:
    """What a request gets: status, body, content type, extra headers; `code` the canonical code name for
    the request count ("OK", "NOT_FOUND", ...); `cors` whether CORS headers go with it."""

    __slots__ = ("status", "body", "content_type", "headers", "code", "cors")

    def __init__(self, status, body=b"", content_type="application/json", headers=(), code="OK", cors=True):
        self.status, self.body, self.content_type = status, body, content_type
        self.headers, self.code, self.cors = tuple(headers), code, cors

    @classmethod
    def json(cls, status, value, **kwargs):
        return cls(status, json.dumps(value).encode("utf-8"), **kwargs)

    @classmethod
    def error(cls, error: errors.ServingError, **kwargs):
        kwargs.setdefault("code", error.code.name)
        return cls.json(error.http_status, {"error": error.message}, **kwargs)


class _Request:
    """A complete request, read by the loop and handled by a worker."""

    __slots__ = ("method", "target", "path", "headers", "body", "received", "deadline")

    def __init__(self, method, target, path, headers, body, received, deadline):
        self.method, self.target, self.path, self.headers = method, target, path, headers
        self.body, self.received, self.deadline = body, received, deadline

    def header(self, name, default=""):
        values = self.headers.get(name)
        return values[0] if values else default


def _path_of(target):
    """A request target -> its path (origin or absolute form), without query or fragment."""
    if not target.startswith("/") and re.match(r"https?://", target, re.IGNORECASE):
        rest = target.split("://", 1)[1]
        slash = rest.find("/")
        target = rest[slash:] if slash >= 0 else "/"
    return target.split("?", 1)[0].split("#", 1)[0]


def _parse_head(head):
    """Request line and headers (bytes, CRLF or LF lines) -> (method, target, (major, minor), {name: [values]})."""
    lines = [line[:-1] if line.endswith(b"\r") else line for line in head.split(b"\n")]
    parts = lines[0].split(b" ")
    if len(parts) != 3 or not _TOKEN.fullmatch(parts[0]) or not parts[1]:
        raise _HttpError(400, f"Malformed HTTP request line: {lines[0][:200].decode('latin-1')!r}")
    version = _HTTP_VERSION.fullmatch(parts[2])
    if version is None:
        raise _HttpError(400, f"Malformed HTTP version: {parts[2][:40].decode('latin-1')!r}")
    major, minor = int(version[1]), int(version[2])
    if major != 1:
        raise _HttpError(505, f"HTTP version {major}.{minor} is not supported (HTTP/1.0 and HTTP/1.1 are)")
    if len(lines) - 1 > MAX_HEADERS:
        raise _HttpError(431, f"more than {MAX_HEADERS} header lines")
    headers = {}
    for line in lines[1:]:
        name, colon, value = line.partition(b":")
        if not colon or not _TOKEN.fullmatch(name):  # also obsolete line folding (a line starting with space)
            raise _HttpError(400, f"Malformed header line: {line[:100].decode('latin-1')!r}")
        headers.setdefault(name.decode("ascii").lower(), []).append(value.strip(b" \t").decode("latin-1"))
    return parts[0].decode("ascii"), parts[1].decode("latin-1"), (major, minor), headers


class _Chunked:
    """Decodes a chunked body as it arrives; at most `limit` bytes of data (429 beyond)."""

    def __init__(self, limit):
        self.limit = limit
        self.body = bytearray()
        self.pending = bytearray()
        self.state = "size"
        self.need = 0
        self.done = False
        self.extra = False  # bytes after the last chunk

    def feed(self, data):
        pending = self.pending
        pending += data
        pos = 0
        while not self.done:
            if self.state == "data":
                take = min(self.need, len(pending) - pos)
                self.body += pending[pos:pos + take]
                pos += take
                self.need -= take
                if self.need:
                    break
                self.state = "crlf"
            elif self.state == "crlf":
                if pending[pos:pos + 2] == b"\r\n":
                    pos += 2
                elif pending[pos:pos + 1] == b"\n":
                    pos += 1
                elif len(pending) - pos < 2:
                    break
                else:
                    raise _HttpError(400, "Malformed chunked body: no CRLF after a chunk")
                self.state = "size"
            else:  # a chunk-size line, or a trailer line
                end = pending.find(b"\n", pos)
                if end < 0:
                    if len(pending) - pos > MAX_CHUNK_LINE:
                        raise _HttpError(400, "Malformed chunked body: a line longer than "
                                              f"{MAX_CHUNK_LINE} bytes")
                    break
                line = bytes(pending[pos:end]).rstrip(b"\r")
                pos = end + 1
                if self.state == "trailer":
                    if not line:
                        self.done = True
                    continue
                size = line.split(b";", 1)[0].strip()
                if not re.fullmatch(rb"[0-9A-Fa-f]{1,15}", size):
                    raise _HttpError(400, f"Malformed chunked body: chunk size {size[:20].decode('latin-1')!r}")
                self.need = int(size, 16)
                if len(self.body) + self.need > self.limit:
                    raise _HttpError(429, f"request body larger than the limit of {self.limit} bytes "
                                          "(max_request_bytes)")
                self.state = "data" if self.need else "trailer"
        self.extra = self.done and pos < len(pending)
        del pending[:pos]


READ, RUN, WRITE, LINGER, CLOSED = "read", "run", "write", "linger", "closed"


class _Conn:
    """One client connection and where it stands: READ (its request), RUN (a worker has it), WRITE (the
    answer), LINGER (answered early: unread bytes are discarded until the client closes), CLOSED."""

    __slots__ = ("sock", "address", "state", "events", "head", "method", "target", "path", "version",
                 "headers", "body", "filled", "chunked", "received_any", "unclean", "reserved", "timers",
                 "request", "labels", "worker_running", "answered", "holds_slot", "out", "linger_left")

    def __init__(self, sock, address):
        self.sock, self.address = sock, address
        self.state = READ
        self.events = 0
        self.head = bytearray()  # request line and headers, until they are complete (None after)
        self.method = self.target = self.path = None
        self.version = (1, 0)
        self.headers = {}
        self.body = None  # bytearray of Content-Length bytes
        self.filled = 0
        self.chunked = None
        self.received_any = False
        self.unclean = False  # bytes of the client's still unread: linger before closing
        self.reserved = 0  # request bytes counted against the server's budget
        self.timers = {}
        self.request = None
        self.labels = None
        self.worker_running = False
        self.answered = False
        self.holds_slot = False
        self.out = None  # [memoryview, ...] still to send
        self.linger_left = 0


_LISTENER, _WAKE = object(), object()


def _encode_answer(answer, extra_headers, head_only):
    reason = _REASONS.get(answer.status)
    if reason is None:
        try:
            reason = http.HTTPStatus(answer.status).phrase
        except ValueError:
            reason = "Unknown"
    lines = [f"HTTP/1.1 {answer.status} {reason}", f"Server: {SERVER}",
             f"Date: {email.utils.formatdate(usegmt=True)}", "Connection: close"]
    if answer.content_type:
        lines.append(f"Content-Type: {answer.content_type}")
    lines.append(f"Content-Length: {len(answer.body)}")
    lines += [f"{name}: {value}" for name, value in (*answer.headers, *extra_headers)]
    head = ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")
    if head_only or not answer.body:
        return [memoryview(head)]
    if len(answer.body) < (64 << 10):
        return [memoryview(head + answer.body)]
    return [memoryview(head), memoryview(answer.body)]


class RestServer:
    """TensorFlow Serving's REST API on `address` (host, port; port 0: any free port) over a ServerCore,
    configured by `options` (a ServerOptions: rest_api_num_threads, rest_api_timeout_in_ms,
    rest_body_timeout, rest_api_enable_cors_support, max_request_bytes, monitoring_path).

    `serve_forever()` runs the event loop (in the caller's thread); `shutdown()` asks it to refuse new
    requests and return once the requests in progress are answered; `server_close()` waits for that and
    frees the port and the worker threads. See the module docstring for limits and statuses.
    """

    def __init__(self, address, core, options):
        self.core = core
        self.options = options
        self.max_request_bytes = options.max_request_bytes
        self.monitoring_path = options.monitoring_path  # GET it for Prometheus metrics (None: no endpoint)
        self.num_threads = max(1, int(options.rest_api_num_threads))
        self.timeout = options.rest_api_timeout_in_ms / 1000.0
        self.body_timeout = float(options.rest_body_timeout)
        self.cors = bool(options.rest_api_enable_cors_support)
        self.max_connections = max(MIN_CONNECTIONS, CONNECTIONS_PER_THREAD * self.num_threads)
        self.byte_budget = self.num_threads * self.max_request_bytes
        self.stopping = False  # set by ModelServer.stop: new requests are refused (503)
        host, port = address
        family = socket.AF_INET6 if ":" in (host or "") else socket.AF_INET
        self.socket = socket.socket(family, socket.SOCK_STREAM)
        try:
            self.socket.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            self.socket.bind((host, port))
            self.socket.listen(BACKLOG)
            self.socket.setblocking(False)
        except OSError:
            self.socket.close()
            raise
        self.server_address = self.socket.getsockname()[:2]
        self._wake_r, self._wake_w = socket.socketpair()
        self._wake_r.setblocking(False)
        self._wake_w.setblocking(False)
        self._selector = selectors.DefaultSelector()
        self._conns = set()
        self._timers = []  # heap of (at, seq, conn, kind)
        self._seq = itertools.count()
        self._busy = 0  # workers taken (RUN, or writing what a worker answered)
        self._reserved = 0  # request bytes held (declared Content-Length of requests being read or run)
        self._scratch = bytearray(64 << 10)
        self._jobs = queue.SimpleQueue()
        self._finished = queue.SimpleQueue()
        self._shutdown_requested = False
        self._draining = False
        self._abort = False
        self._closing = False
        self._closed = False
        self._running = False
        self._lock = threading.Lock()
        self._loop_done = threading.Event()
        self._accept_paused_until = None
        self.rejected = 0  # requests answered 503 because every worker was busy (or too many connections)
        self._workers = [threading.Thread(target=self._work, name=f"rest-worker-{i}", daemon=True)
                         for i in range(self.num_threads)]
        for worker in self._workers:
            worker.start()

    def fileno(self):
        return self.socket.fileno()

    # -- lifecycle ----------------------------------------------------------------------------------------

    def serve_forever(self, poll_interval=0.5):
        """Runs the event loop until `shutdown()` (or `stopping`) and the requests in progress are answered."""
        with self._lock:
            if self._closing or self._running:
                return
            self._running = True
            self._loop_done.clear()
        try:
            self._loop(max(0.01, poll_interval))
        except Exception:  # noqa: BLE001 - the loop must not die silently
            log.exception("REST event loop failed")
            raise
        finally:
            for conn in list(self._conns):
                self._close(conn)
            for key in list(self._selector.get_map().values()):
                self._selector.unregister(key.fileobj)
            with self._lock:
                self._running = False
            self._loop_done.set()

    def shutdown(self):
        """Refuse new requests from now on (503); serve_forever returns once those in progress are answered.
        Returns at once (`server_close` waits)."""
        self._shutdown_requested = True
        self._wake()

    def server_close(self, timeout=None):
        """Waits (up to `timeout` seconds, None: as long as they take) for the requests in progress to be
        answered, then closes the port and stops the worker threads."""
        self._shutdown_requested = True
        self._wake()
        with self._lock:
            self._closing = True  # serve_forever does not start from now on
            running = self._running
        if running and not self._loop_done.wait(timeout):
            log.warning("REST: requests still running after %.1fs; closing their connections", timeout)
            self._abort = True
            self._wake()
            self._loop_done.wait(5.0)
        with self._lock:
            if self._closed:
                return
            self._closed = True
        self.socket.close()
        for _ in self._workers:
            self._jobs.put(None)
        for worker in self._workers:
            worker.join(1.0 if timeout is not None else None)
        self._selector.close()
        self._wake_r.close()
        self._wake_w.close()

    def _wake(self):
        try:
            self._wake_w.send(b"x")
        except OSError:  # full (the loop is awake anyway) or closed
            pass

    # -- the event loop -----------------------------------------------------------------------------------

    def _loop(self, poll_interval):
        self._selector.register(self.socket, selectors.EVENT_READ, _LISTENER)
        self._selector.register(self._wake_r, selectors.EVENT_READ, _WAKE)
        while True:
            if (self.stopping or self._shutdown_requested) and not self._draining:
                self._begin_drain()
            if self._abort or (self._draining and not any(c.holds_slot or c.worker_running for c in self._conns)):
                return
            now = time.monotonic()
            timeout = poll_interval
            if self._timers:
                timeout = min(timeout, max(0.0, self._timers[0][0] - now))
            if self._accept_paused_until is not None:
                if now >= self._accept_paused_until:
                    self._accept_paused_until = None
                    self._selector.register(self.socket, selectors.EVENT_READ, _LISTENER)
                else:
                    timeout = min(timeout, self._accept_paused_until - now)
            for key, mask in self._selector.select(timeout):
                if key.data is _LISTENER:
                    self._accept()
                elif key.data is _WAKE:
                    try:
                        while self._wake_r.recv(4096):
                            pass
                    except OSError:
                        pass
                else:
                    conn = key.data
                    if mask & selectors.EVENT_READ and conn.state in (READ, LINGER):
                        self._on_readable(conn)
                    if mask & selectors.EVENT_WRITE and conn.state == WRITE:
                        self._send(conn)
            self._collect()
            self._fire_timers(time.monotonic())

    def _set_events(self, conn, events):
        if conn.events == events:
            return
        if not events:
            self._selector.unregister(conn.sock)
        elif not conn.events:
            self._selector.register(conn.sock, events, conn)
        else:
            self._selector.modify(conn.sock, events, conn)
        conn.events = events

    def _set_timer(self, conn, kind, at):
        conn.timers[kind] = at
        heapq.heappush(self._timers, (at, next(self._seq), conn, kind))

    def _fire_timers(self, now):
        while self._timers and self._timers[0][0] <= now:
            at, _, conn, kind = heapq.heappop(self._timers)
            if conn.state == CLOSED or conn.timers.get(kind) != at:
                continue
            del conn.timers[kind]
            if kind == "read" and conn.state == READ:
                if not conn.received_any:
                    self._close(conn)  # nothing asked: nothing to answer
                else:
                    self._http_error(conn, _HttpError(
                        408, f"the request was not received within rest_body_timeout={self.body_timeout:g}s "
                             "(request line, headers and body)"))
            elif kind == "deadline" and conn.worker_running and not conn.answered:
                self._answer(conn, _Answer.error(errors.ServingError(
                    "DEADLINE_EXCEEDED", "Deadline exceeded: the request did not finish within "
                                         f"rest_api_timeout_in_ms={self.options.rest_api_timeout_in_ms}")))
            elif kind in ("write", "linger"):
                self._close(conn)

    def _begin_drain(self):
        self._draining = True
        for conn in list(self._conns):
            if conn.state == READ:
                if conn.received_any:
                    self._http_error(conn, _HttpError(503, "the server is shutting down"))
                else:
                    self._close(conn)

    def _accept(self):
        for _ in range(256):
            try:
                sock, address = self.socket.accept()
            except (BlockingIOError, InterruptedError):
                return
            except ConnectionAbortedError:
                continue
            except OSError as error:  # out of file descriptors: stop accepting for a moment
                log.warning("REST: cannot accept a connection: %s", error)
                self._selector.unregister(self.socket)
                self._accept_paused_until = time.monotonic() + 0.1
                return
            sock.setblocking(False)
            try:
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            except OSError:
                pass
            conn = _Conn(sock, address)
            self._conns.add(conn)
            if self._draining:
                self._http_error(conn, _HttpError(503, "the server is shutting down"))
            elif len(self._conns) > self.max_connections:
                self.rejected += 1
                self._http_error(conn, self._busy_error(f"{self.max_connections} connections are open"))
            else:
                self._set_events(conn, selectors.EVENT_READ)
                self._set_timer(conn, "read", time.monotonic() + self.body_timeout)

    def _busy_error(self, why):
        return _HttpError(503, f"the server is busy ({why}); retry later",
                          headers=[("Retry-After", str(RETRY_AFTER_SECONDS))])

    # -- reading a request --------------------------------------------------------------------------------

    def _on_readable(self, conn):
        sock = conn.sock
        try:
            if conn.state == LINGER:
                count = sock.recv_into(self._scratch)
                conn.linger_left -= count
                if not count or conn.linger_left <= 0:
                    self._close(conn)
                return
            if conn.body is not None:
                want = min(len(conn.body) - conn.filled, READ_CHUNK)
                count = sock.recv_into(memoryview(conn.body)[conn.filled:conn.filled + want], want)
                data = None
            else:
                data = sock.recv(READ_CHUNK)
                count = len(data)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            self._close(conn)
            return
        if not count:  # the client closed (or half-closed) before its request was complete
            if conn.received_any:
                self._http_error(conn, _HttpError(400, "the connection was closed before the request was "
                                                       "complete"), unclean=False)
            else:
                self._close(conn)
            return
        conn.received_any = True
        try:
            if conn.body is not None:
                conn.filled += count
            elif conn.chunked is not None:
                conn.chunked.feed(data)
            else:
                conn.head += data
                self._read_head(conn)
            if conn.state == READ and self._complete(conn):
                self._dispatch(conn)
        except (_HttpError, errors.ServingError) as error:
            self._http_error(conn, error)

    def _read_head(self, conn):
        head = conn.head
        while head[:1] in (b"\r", b"\n"):  # empty lines before the request line are ignored (RFC 9112)
            del head[:1]
        end = re.search(rb"\r?\n\r?\n", head)
        if end is None:
            if len(head) > MAX_HEAD_BYTES:
                if b"\n" not in head:
                    raise _HttpError(414, f"request line longer than {MAX_HEAD_BYTES} bytes")
                raise _HttpError(431, f"request headers larger than {MAX_HEAD_BYTES} bytes")
            return
        if end.start() > MAX_HEAD_BYTES:
            raise _HttpError(431, f"request headers larger than {MAX_HEAD_BYTES} bytes")
        rest = head[end.end():]
        conn.method, conn.target, conn.version, conn.headers = _parse_head(bytes(head[:end.start()]))
        conn.path = _path_of(conn.target)
        conn.head = None
        if conn.method not in _METHODS:
            raise _HttpError(501, f"method {conn.method[:20]} is not supported")
        length, chunked = self._framing(conn)
        conn.linger_left = self.max_request_bytes if chunked else length - len(rest)  # were an answer early
        if length is not None and length > self.max_request_bytes:
            raise errors.resource_exhausted(f"request of {length} bytes is larger than the limit of "
                                            f"{self.max_request_bytes} bytes (max_request_bytes)")
        reserve = self.max_request_bytes if chunked else length
        if reserve and self._reserved + reserve > self.byte_budget:
            self.rejected += 1
            raise self._busy_error(f"{self._reserved} request bytes are held")
        conn.reserved = reserve
        self._reserved += reserve
        expect = ",".join(conn.headers.get("expect", ())).lower()
        if "100-continue" in expect and conn.version >= (1, 1) and (chunked or length) and not rest:
            try:
                conn.sock.send(b"HTTP/1.1 100 Continue\r\n\r\n")
            except OSError:
                pass
        if chunked:
            conn.chunked = _Chunked(self.max_request_bytes)
            conn.chunked.feed(rest)
        else:
            conn.body = bytearray(length)
            taken = min(len(rest), length)
            conn.body[:taken] = rest[:taken]
            conn.filled = taken
            conn.unclean = len(rest) > length  # bytes past Content-Length: dropped, never parsed

    def _framing(self, conn):
        """-> (Content-Length or None, chunked?) from the headers; _HttpError when they do not say."""
        lengths = conn.headers.get("content-length")
        codings = conn.headers.get("transfer-encoding")
        if codings is not None:
            if lengths is not None:
                raise _HttpError(400, "a request cannot have both Content-Length and Transfer-Encoding")
            names = [c.strip().lower() for value in codings for c in value.split(",") if c.strip()]
            if names != ["chunked"]:
                raise _HttpError(501, f"Transfer-Encoding {', '.join(codings)!r} is not supported (only chunked)")
            return None, True
        if lengths is None:
            if conn.method == "POST":
                raise _HttpError(400, "a POST request needs a Content-Length header (or Transfer-Encoding: "
                                      "chunked)")
            return 0, False
        values = {part.strip() for value in lengths for part in value.split(",")}
        value = values.pop() if len(values) == 1 else None
        if value is None or not re.fullmatch(r"[0-9]+", value):
            raise _HttpError(400, f"bad Content-Length {', '.join(lengths)[:40]!r}: a non-negative integer "
                                  "is required")
        return (int(value) if len(value) <= 18 else 10 ** 18), False

    def _complete(self, conn):
        if conn.head is not None:
            return False
        if conn.chunked is not None:
            if not conn.chunked.done:
                return False
            conn.unclean = conn.chunked.extra
            body = conn.chunked.body
        else:
            if conn.filled < len(conn.body):
                return False
            body = conn.body
        now = time.monotonic()
        conn.timers.pop("read", None)
        conn.request = _Request(conn.method, conn.target, conn.path, conn.headers, body, now,
                                Deadline.after(self.timeout))
        conn.body = conn.chunked = None
        return True

    def _dispatch(self, conn):
        """A complete request: to a free worker, or 503 at once."""
        request = conn.request
        conn.labels = _metric_labels(request.method, request.path) if _V1.fullmatch(request.path) else None
        if self._draining or self.stopping:
            self._http_error(conn, _HttpError(503, "the server is shutting down"), unclean=conn.unclean,
                             count="UNAVAILABLE")
            return
        if self._busy >= self.num_threads:
            self.rejected += 1
            self._http_error(conn, self._busy_error(f"all {self.num_threads} REST worker threads are handling "
                                                    "requests (rest_api_num_threads)"),
                             unclean=conn.unclean, count="UNAVAILABLE")
            return
        self._busy += 1
        conn.holds_slot = conn.worker_running = True
        conn.state = RUN
        self._set_events(conn, 0)
        self._set_timer(conn, "deadline", request.deadline.at)
        self._jobs.put((conn, request))

    def _collect(self):
        """Answers of the workers that finished."""
        while True:
            try:
                conn, answer = self._finished.get_nowait()
            except queue.Empty:
                return
            conn.worker_running = False
            conn.timers.pop("deadline", None)
            conn.request.body = None
            if conn.state == RUN and not conn.answered:
                self._answer(conn, answer)
            self._release(conn)

    # -- answering ----------------------------------------------------------------------------------------

    def _http_error(self, conn, error, unclean=True, count=None):
        """An answer from the HTTP layer; by default the request's bytes may not all have been read."""
        if isinstance(error, errors.ServingError):
            answer = _Answer.error(error)
        else:
            answer = _Answer.json(error.status, {"error": error.message}, headers=error.headers, code=None)
        if count is not None:
            answer.code = count
        conn.unclean = conn.unclean or unclean
        self._answer(conn, answer)

    def _answer(self, conn, answer):
        if conn.answered or conn.state == CLOSED:
            return
        conn.answered = True
        conn.timers.pop("read", None)
        request = conn.request
        now = time.monotonic()
        if answer.code is not None and conn.labels is not None:
            self.core.count(conn.labels[0], conn.labels[1], "REST", answer.code,
                            now - (request.received if request else now))
        if request is not None:
            log.debug("rest %s %s %s -> %d", conn.address[0] if conn.address else "", request.method,
                      request.target, answer.status)
        extra = CORS_HEADERS if self.cors and answer.cors else ()
        conn.out = _encode_answer(answer, extra, head_only=conn.method == "HEAD")
        conn.state = WRITE
        self._send(conn)

    def _send(self, conn):
        """Writes what it can of the answer; the rest when the socket is writable (a client that reads
        nothing for rest_body_timeout seconds is dropped)."""
        try:
            while conn.out:
                sent = conn.sock.send(conn.out[0])
                if sent < len(conn.out[0]):
                    conn.out[0] = conn.out[0][sent:]
                    break
                conn.out.pop(0)
        except (BlockingIOError, InterruptedError):
            pass
        except OSError:
            self._close(conn)
            return
        if conn.out:
            self._set_events(conn, selectors.EVENT_WRITE)
            at = time.monotonic() + self.body_timeout
            if at - conn.timers.get("write", 0.0) > 0.5:  # progress moves the timer (not every send)
                self._set_timer(conn, "write", at)
            return
        conn.out = None
        if conn.unclean:  # the client may still be sending: read and drop it, so that it gets the answer
            try:
                conn.sock.shutdown(socket.SHUT_WR)
            except OSError:
                self._close(conn)
                return
            conn.state = LINGER
            conn.timers.pop("write", None)
            conn.linger_left = max(conn.linger_left, 0) + (64 << 10)
            self._set_events(conn, selectors.EVENT_READ)
            self._set_timer(conn, "linger", time.monotonic() + LINGER_SECONDS)
            self._release(conn)
        else:
            self._close(conn)

    def _close(self, conn):
        if conn.state == CLOSED:
            return
        if conn.events:
            try:
                self._selector.unregister(conn.sock)
            except (KeyError, ValueError):
                pass
            conn.events = 0
        try:
            conn.sock.close()
        except OSError:
            pass
        conn.state = CLOSED
        conn.timers.clear()
        conn.out = None
        self._conns.discard(conn)
        self._release(conn)

    def _release(self, conn):
        """Frees the connection's worker slot and request bytes once it is answered and its worker is done."""
        if conn.worker_running or conn.state not in (LINGER, CLOSED):
            return
        if conn.holds_slot:
            conn.holds_slot = False
            self._busy -= 1
        if conn.reserved:
            self._reserved -= conn.reserved
            conn.reserved = 0

    # -- the workers --------------------------------------------------------------------------------------

    def _work(self):
        while True:
            job = self._jobs.get()
            if job is None:
                return
            conn, request = job
            try:
                answer = self._handle(request)
            except BaseException as error:  # noqa: BLE001 - a worker answers whatever happens
                log.exception("REST request failed")
                answer = _Answer.error(errors.ServingError("INTERNAL", f"{type(error).__name__}: {error}"))
            self._finished.put((conn, answer))
            self._wake()

    def _handle(self, request) -> _Answer:
        """A complete request -> its answer (in a worker thread)."""
        method, path = request.method, request.path
        if self.monitoring_path and path == self.monitoring_path and method in ("GET", "HEAD"):
            metrics = self.core.metrics.exposition() if self.core.metrics is not None else ""
            return _Answer(200, metrics.encode("utf-8"), "text/plain; version=0.0.4; charset=utf-8", code=None,
                           cors=False)
        if not _V1.fullmatch(path):
            return _Answer.json(404, {"error": f"Not found: {method} {path}"}, code=None, cors=False)
        if method == "OPTIONS":  # CORS preflight (http_server.cc), with or without CORS support
            if _ORIGIN.search(request.header("origin")):
                return _Answer(200, b"", None, code=None)
            return _Answer.error(errors.failed_precondition("Origin header is missing in CORS preflight"),
                                 code=None)
        try:
            return _Answer.json(200, self._api(request))
        except errors.ServingError as error:
            return _Answer.error(error)
        except RecursionError:
            return _Answer.error(errors.invalid_argument(
                f"the request nests arrays and objects too deeply (at most {MAX_JSON_DEPTH})"))
        except Exception as error:  # noqa: BLE001
            log.exception("REST %s %s failed", method, request.target)
            return _Answer.error(errors.ServingError("INTERNAL", f"{type(error).__name__}: {error}"))

    def _api(self, request):
        """An API request -> its JSON answer (ServingError for an error answer)."""
        method, core = request.method, self.core
        if method == "POST":
            match = _PREDICT_PATH.fullmatch(request.path)
            if match is None or match["verb"] not in _VERBS:  # the regex ignores case, the verbs do not
                raise _malformed(method, request.target)
            name, version, label = _model_spec(match)
            if match["verb"] == "predict":
                return self._predict(request, name, version, label)
            return self._infer(request, name, version, label, match["verb"])
        if method != "GET":
            raise _malformed(method, request.target)
        match = _STATUS_PATH.fullmatch(request.path)
        if match is None:
            raise _malformed(method, request.target)
        name, version, label = _model_spec(match)
        if not name:
            raise errors.invalid_argument("Missing model name in request.")
        if match["sub"] == "metadata":
            served, signatures = core.signatures(name, version, label)
            return {"model_spec": {"name": name, "signature_name": "", "version": str(served)},
                    "metadata": {"signature_def": {"signature_def": {k: _to_dict(v) for k, v in signatures.items()}}}}
        from .grpc_api import status_response

        return _to_dict(status_response(core, name, version, label))

    def _predict(self, request, name, version, label):
        body = load_json(request.body)
        if not isinstance(body, dict):
            raise errors.invalid_argument("the request body must be a JSON object")
        signature_name = body.get("signature_name") or DEFAULT_SIGNATURE
        if not isinstance(signature_name, str):
            raise errors.invalid_argument("'signature_name' must be a string")
        layout = {}

        def build(signature):
            arrays, layout["rows"] = parse_predict_body(body, signature)
            return arrays

        _, _, outputs = self.core.predict(name, version, label, signature_name, build, deadline=request.deadline)
        return format_outputs(outputs, layout["rows"])

    def _infer(self, request, name, version, label, verb):
        method = CLASSIFY_METHOD if verb == "classify" else REGRESS_METHOD
        try:
            body, failure = load_json(request.body), None
        except errors.ServingError as error:
            body, failure = None, error
        signature_name = body.get("signature_name", "") if isinstance(body, dict) else ""
        if not isinstance(signature_name, str):
            signature_name = ""  # input_from_json refuses it, once the model is found

        def examples():  # called once the model is found: an unknown model is NOT_FOUND whatever the body
            if failure is not None:
                raise failure
            _, input_proto = inference.input_from_json(body, verb)
            return inference.serialized_examples(input_proto)

        _, [(_, result)] = self.core.infer(name, version, label, [(method, signature_name)], examples,
                                           deadline=request.deadline)
        return {"results": inference.result_to_json(method, result)}
