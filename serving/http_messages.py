"""HTTP/1.1 messages for the REST server (http_server.py): a request's head (request line, headers) and how
its body is framed (Content-Length or chunked), the complete `Request` a handler gets and the `Answer` it
gives, encoded with `Connection: close`. The limits and statuses are described in http_server.py."""

from __future__ import annotations

import email.utils
import http
import json
import re

from . import errors

SERVER = "xlnet-tf-serving"
MAX_HEAD_BYTES = 64 << 10  # request line + headers
MAX_HEADERS = 100
MAX_CHUNK_LINE = 4096  # a chunk-size line (with extensions) or a trailer line of a chunked body
METHODS = ("GET", "POST", "HEAD", "PUT", "DELETE", "OPTIONS", "PATCH")  # what evhttp_server.cc lets through

_TOKEN = re.compile(rb"[!#$%&'*+.^_`|~0-9A-Za-z-]+")
_HTTP_VERSION = re.compile(rb"HTTP/([0-9])\.([0-9])")
_REASONS = {499: "Client Closed Request"}


class HttpError(Exception):
    """A request refused by the HTTP layer: HTTP `status`, message, extra headers."""

    def __init__(self, status, message, headers=()):
        super().__init__(message)
        self.status, self.message, self.headers = status, message, tuple(headers)


class Answer:
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


class Request:
    """A complete request, read by the loop and handled by a worker."""

    __slots__ = ("method", "target", "path", "headers", "body", "received", "deadline")

    def __init__(self, method, target, path, headers, body, received, deadline):
        self.method, self.target, self.path, self.headers = method, target, path, headers
        self.body, self.received, self.deadline = body, received, deadline

    def header(self, name, default=""):
        values = self.headers.get(name)
        return values[0] if values else default


def path_of(target):
    """A request target -> its path (origin or absolute form), without query or fragment."""
    if not target.startswith("/") and re.match(r"https?://", target, re.IGNORECASE):
        rest = target.split("://", 1)[1]
        slash = rest.find("/")
        target = rest[slash:] if slash >= 0 else "/"
    return target.split("?", 1)[0].split("#", 1)[0]


def parse_head(head):
    """Request line and headers (bytes, CRLF or LF lines) -> (method, target, (major, minor), {name: [values]})."""
    lines = [line[:-1] if line.endswith(b"\r") else line for line in head.split(b"\n")]
    parts = lines[0].split(b" ")
    if len(parts) != 3 or not _TOKEN.fullmatch(parts[0]) or not parts[1]:
        raise HttpError(400, f"Malformed HTTP request line: {lines[0][:200].decode('latin-1')!r}")
    version = _HTTP_VERSION.fullmatch(parts[2])
    if version is None:
        raise HttpError(400, f"Malformed HTTP version: {parts[2][:40].decode('latin-1')!r}")
    major, minor = int(version[1]), int(version[2])
    if major != 1:
        raise HttpError(505, f"HTTP version {major}.{minor} is not supported (HTTP/1.0 and HTTP/1.1 are)")
    if len(lines) - 1 > MAX_HEADERS:
        raise HttpError(431, f"more than {MAX_HEADERS} header lines")
    headers = {}
    for line in lines[1:]:
        name, colon, value = line.partition(b":")
        if not colon or not _TOKEN.fullmatch(name):  # also obsolete line folding (a line starting with space)
            raise HttpError(400, f"Malformed header line: {line[:100].decode('latin-1')!r}")
        headers.setdefault(name.decode("ascii").lower(), []).append(value.strip(b" \t").decode("latin-1"))
    return parts[0].decode("ascii"), parts[1].decode("latin-1"), (major, minor), headers


def head_end(head):
    """Where the request line and headers in `head` (a bytearray, as received so far) end: the match of the
    empty line after them, None while it has not come. Empty lines before the request line are removed from
    `head` (RFC 9112 ignores them); HttpError 414 / 431 past MAX_HEAD_BYTES."""
    while head[:1] in (b"\r", b"\n"):
        del head[:1]
    end = re.search(rb"\r?\n\r?\n", head)
    if end is None:
        if len(head) > MAX_HEAD_BYTES:
            if b"\n" not in head:
                raise HttpError(414, f"request line longer than {MAX_HEAD_BYTES} bytes")
            raise HttpError(431, f"request headers larger than {MAX_HEAD_BYTES} bytes")
        return None
    if end.start() > MAX_HEAD_BYTES:
        raise HttpError(431, f"request headers larger than {MAX_HEAD_BYTES} bytes")
    return end


def framing(method, headers):
    """-> (Content-Length or None, chunked?) from a request's method and headers; HttpError when they do
    not say."""
    lengths = headers.get("content-length")
    codings = headers.get("transfer-encoding")
    if codings is not None:
        if lengths is not None:
            raise HttpError(400, "a request cannot have both Content-Length and Transfer-Encoding")
        names = [c.strip().lower() for value in codings for c in value.split(",") if c.strip()]
        if names != ["chunked"]:
            raise HttpError(501, f"Transfer-Encoding {', '.join(codings)!r} is not supported (only chunked)")
        return None, True
    if lengths is None:
        if method == "POST":
            raise HttpError(400, "a POST request needs a Content-Length header (or Transfer-Encoding: "
                            "chunked)")
        return 0, False
    values = {part.strip() for value in lengths for part in value.split(",")}
    value = values.pop() if len(values) == 1 else None
    if value is None or not re.fullmatch(r"[0-9]+", value):
        raise HttpError(400, f"bad Content-Length {', '.join(lengths)[:40]!r}: a non-negative integer "
                        "is required")
    return (int(value) if len(value) <= 18 else 10 ** 18), False


class Chunked:
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
                    raise HttpError(400, "Malformed chunked body: no CRLF after a chunk")
                self.state = "size"
            else:  # a chunk-size line, or a trailer line
                end = pending.find(b"\n", pos)
                if end < 0:
                    if len(pending) - pos > MAX_CHUNK_LINE:
                        raise HttpError(400, "Malformed chunked body: a line longer than "
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
                    raise HttpError(400, f"Malformed chunked body: chunk size {size[:20].decode('latin-1')!r}")
                self.need = int(size, 16)
                if len(self.body) + self.need > self.limit:
                    raise HttpError(429, f"request body larger than the limit of {self.limit} bytes "
                                    "(max_request_bytes)")
                self.state = "data" if self.need else "trailer"
        self.extra = self.done and pos < len(pending)
        del pending[:pos]


def encode_answer(answer, extra_headers, head_only):
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
