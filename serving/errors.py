"""Request errors with a canonical status code, shared by the gRPC and REST front ends and the client.

The codes are gRPC's canonical codes (the same numbers as TensorFlow's `error::Code`). REST maps them to
HTTP statuses with TensorFlow Serving's table (`http_server.cc`, ToHTTPStatusCode), and answers
`{"error": "<message>"}`.
"""

from __future__ import annotations

import logging
import uuid

import grpc

log = logging.getLogger("xlnet_tf.serving")

# TensorFlow Serving truncates messages at 1024 characters (grpc_status_util.cc); so do we.
MAX_MESSAGE_CHARS = 1024

_BY_VALUE = {code.value[0]: code for code in grpc.StatusCode}

HTTP_STATUS = {
    grpc.StatusCode.OK: 200,
    grpc.StatusCode.CANCELLED: 499,
    grpc.StatusCode.UNKNOWN: 500,
    grpc.StatusCode.INVALID_ARGUMENT: 400,
    grpc.StatusCode.DEADLINE_EXCEEDED: 504,
    grpc.StatusCode.NOT_FOUND: 404,
    grpc.StatusCode.ALREADY_EXISTS: 409,
    grpc.StatusCode.PERMISSION_DENIED: 403,
    grpc.StatusCode.RESOURCE_EXHAUSTED: 429,
    grpc.StatusCode.FAILED_PRECONDITION: 400,
    grpc.StatusCode.ABORTED: 409,
    grpc.StatusCode.OUT_OF_RANGE: 400,
    grpc.StatusCode.UNIMPLEMENTED: 501,
    grpc.StatusCode.INTERNAL: 500,
    grpc.StatusCode.UNAVAILABLE: 503,
    grpc.StatusCode.DATA_LOSS: 500,
    grpc.StatusCode.UNAUTHENTICATED: 401,
}


def status_code(value) -> grpc.StatusCode:
    """A grpc.StatusCode from a StatusCode, its name ("NOT_FOUND") or its number (5)."""
    if isinstance(value, grpc.StatusCode):
        return value
    if isinstance(value, str):
        return grpc.StatusCode[value.upper()]
    return _BY_VALUE.get(int(value), grpc.StatusCode.UNKNOWN)


def truncate(message: str) -> str:
    message = str(message)
    if len(message) > MAX_MESSAGE_CHARS:
        return message[:MAX_MESSAGE_CHARS] + "...TRUNCATED"
    return message


class ServingError(Exception):
    """A request failed with a canonical status `code` (a grpc.StatusCode) and a readable `message`.

    The server raises it internally and turns it into a gRPC status or an HTTP error; the client raises it
    for a failed call (with the server's code and message).
    """

    def __init__(self, code, message: str):
        self.code = status_code(code)
        self.message = truncate(message)
        super().__init__(f"{self.code.name}: {self.message}")

    @property
    def http_status(self) -> int:
        return HTTP_STATUS.get(self.code, 500)

    @classmethod
    def from_tf_error(cls, error) -> "ServingError":
        """From a tf.errors.OpError: its error_code is the canonical code. Keeps the first lines only."""
        message = getattr(error, "message", None) or str(error)
        lines = [line for line in str(message).splitlines() if line.strip()]
        text = " ".join(lines[:3]) if lines else type(error).__name__
        return cls(getattr(error, "error_code", 2), text)


def invalid_argument(message):
    return ServingError(grpc.StatusCode.INVALID_ARGUMENT, message)


def not_found(message):
    return ServingError(grpc.StatusCode.NOT_FOUND, message)


def failed_precondition(message):
    return ServingError(grpc.StatusCode.FAILED_PRECONDITION, message)


def resource_exhausted(message):
    return ServingError(grpc.StatusCode.RESOURCE_EXHAUSTED, message)


def internal(error, what):
    """INTERNAL for a fault of the server itself while it answered `what` ("REST POST /v1/..."): `error`'s traceback
    goes to the log under an incident id, which the client gets instead of Python's words."""
    incident = uuid.uuid4().hex[:12]
    log.error("%s failed (incident %s)", what, incident, exc_info=(type(error), error, error.__traceback__))
    return ServingError(grpc.StatusCode.INTERNAL, f"the server failed on this request (incident {incident} in its "
                        "log)")
