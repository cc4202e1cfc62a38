"""TensorFlow Serving's REST API on the standard library's threaded HTTP server.

    GET  /v1/models/NAME[/versions/N|/labels/L]            model status (GetModelStatusResponse as JSON)
    GET  /v1/models/NAME[/versions/N|/labels/L]/metadata   model metadata (GetModelMetadataResponse as JSON)
    GET  <prometheus path>                                 Prometheus metrics, with a monitoring config
    POST /v1/models/NAME[/versions/N|/labels/L]:predict    {"signature_name"?, "instances" | "inputs"}
    POST /v1/models/NAME[/versions/N|/labels/L]:classify   {"signature_name"?, "context"?, "examples"}
    POST /v1/models/NAME[/versions/N|/labels/L]:regress    (the same)

Row format ("instances") answers {"predictions": ...}, columnar ("inputs") answers {"outputs": ...}, with
the name omitted when there is a single input/output, as the REST API doc specifies. :classify answers
{"results": [[[label, score], ...] per example]}, :regress {"results": [value per example]} (examples as
JSON objects of features: see `inference.example_from_json`). Errors answer
{"error": "..."} with TensorFlow Serving's HTTP status for the canonical code (400 INVALID_ARGUMENT and
FAILED_PRECONDITION, 404 NOT_FOUND, 429 RESOURCE_EXHAUSTED, 500 INTERNAL, 501 UNIMPLEMENTED, 503
UNAVAILABLE).
"""

from __future__ import annotations

import http.server
import json
import logging
import re
import socketserver
import time

import numpy as np
from google.protobuf import json_format

from . import errors, inference
from .servable import CLASSIFY_METHOD, DEFAULT_SIGNATURE, REGRESS_METHOD
from .tensors import json_to_ndarray, ndarray_to_json, shape_of

log = logging.getLogger("xlnet_tf.serving")

_PATH = re.compile(
    r"^/v1/models/(?P<name>[^/:]+)(?:/versions/(?P<version>\d+)|/labels/(?P<label>[^/:]+))?"
    r"(?:(?P<metadata>/metadata)|:(?P<verb>[A-Za-z]+))?/?$")


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


class _Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.0"  # one request per connection: a stop never waits on idle keep-alives
    server_version = "xlnet-tf-serving"
    timeout = 30  # seconds a connection may stay silent

    def log_message(self, fmt, *args):  # route access logs to logging at DEBUG
        log.debug("rest %s - " + fmt, self.address_string(), *args)

    def _reply(self, status, body):
        data = json.dumps(body).encode("utf-8")
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        if self.server.stopping:
            self.send_header("Connection", "close")
            self.close_connection = True
        self.end_headers()
        self.wfile.write(data)

    def _error(self, error: errors.ServingError):
        self._reply(error.http_status, {"error": error.message})

    def _count(self, match, api, began, status):
        self.server.core.count(match["name"] if match else "", api, "REST", status, time.monotonic() - began)

    def _route(self):
        path = self.path.split("?", 1)[0]
        match = _PATH.match(path)
        if not match:
            raise errors.not_found(f"Malformed request: {self.command} {path}")
        return match

    def do_GET(self):  # noqa: N802 - http.server's naming
        path = self.path.split("?", 1)[0]
        if self.server.monitoring_path and path == self.server.monitoring_path:
            data = self.server.core.metrics.exposition().encode("utf-8")
            self.send_response(200)
            self.send_header("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)
            return
        began, match, api, status = time.monotonic(), None, "get_model_status", "OK"
        try:
            match = self._route()
            if match["verb"]:
                raise errors.invalid_argument(f"{match['verb']} needs POST")
            name, label = match["name"], match["label"]
            version = int(match["version"]) if match["version"] else None
            core = self.server.core
            if match["metadata"]:
                api = "get_model_metadata"
                served, signatures = core.signatures(name, version, label)
                body = {
                    "model_spec": {"name": name, "signature_name": "", "version": str(served)},
                    "metadata": {"signature_def": {
                        "signature_def": {k: _to_dict(v) for k, v in signatures.items()}}},
                }
                self._reply(200, body)
            else:
                from .grpc_api import status_response

                self._reply(200, _to_dict(status_response(core, name, version, label)))
        except errors.ServingError as error:
            status = error.code.name
            self._error(error)
        except Exception as error:  # noqa: BLE001
            log.exception("REST GET failed")
            status = "INTERNAL"
            self._error(errors.ServingError("INTERNAL", f"{type(error).__name__}: {error}"))
        finally:
            self._count(match, api, began, status)

    def do_POST(self):  # noqa: N802
        began, match, api, status = time.monotonic(), None, "predict", "OK"
        try:
            body = self._read_body()
            match = self._route()
            verb = match["verb"]
            if match["metadata"] or verb is None:
                raise errors.invalid_argument(f"Malformed request: POST {self.path} (expected :predict, "
                                              ":classify or :regress)")
            if verb not in ("predict", "classify", "regress"):
                raise errors.not_found(f"Malformed request: POST {self.path}")
            api = verb
            try:
                request = json.loads(body)
            except (UnicodeDecodeError, json.JSONDecodeError) as error:
                raise errors.invalid_argument(f"JSON Parse error: {error}") from None
            name, label = match["name"], match["label"]
            version = int(match["version"]) if match["version"] else None
            if verb != "predict":
                method = CLASSIFY_METHOD if verb == "classify" else REGRESS_METHOD
                signature_name, examples = inference.input_from_json(request, verb)
                _, [(_, result)] = self.server.core.infer(name, version, label, [(method, signature_name)],
                                                          inference.serialized_examples(examples))
                self._reply(200, {"results": inference.result_to_json(method, result)})
                return
            if not isinstance(request, dict):
                raise errors.invalid_argument("the request body must be a JSON object")
            signature_name = request.get("signature_name") or DEFAULT_SIGNATURE
            if not isinstance(signature_name, str):
                raise errors.invalid_argument("'signature_name' must be a string")
            layout = {}

            def build(signature):
                arrays, layout["rows"] = parse_predict_body(request, signature)
                return arrays

            _, _, outputs = self.server.core.predict(name, version, label, signature_name, build)
            self._reply(200, format_outputs(outputs, layout["rows"]))
        except errors.ServingError as error:
            status = error.code.name
            self._error(error)
        except Exception as error:  # noqa: BLE001
            log.exception("REST POST failed")
            status = "INTERNAL"
            self._error(errors.ServingError("INTERNAL", f"{type(error).__name__}: {error}"))
        finally:
            self._count(match, api, began, status)

    def _read_body(self):
        length = self.headers.get("Content-Length")
        if length is None:
            self.close_connection = True
            raise errors.ServingError("INVALID_ARGUMENT", "a Content-Length header is required")
        try:
            length = int(length)
        except ValueError:
            self.close_connection = True
            raise errors.invalid_argument("bad Content-Length") from None
        limit = self.server.max_request_bytes
        if length > limit:
            # Drain a moderately oversized body so the client reads our answer; close the connection.
            self.close_connection = True
            if length <= 4 * limit:
                left = length
                while left > 0:
                    chunk = self.rfile.read(min(left, 1 << 20))
                    if not chunk:
                        break
                    left -= len(chunk)
            raise errors.resource_exhausted(f"request of {length} bytes is larger than the limit of {limit} "
                                            "bytes (max_request_bytes)")
        return self.rfile.read(length)


class RestServer(socketserver.ThreadingMixIn, http.server.HTTPServer):
    """Threaded HTTP server whose request threads are joined on close (graceful stop)."""

    daemon_threads = False
    block_on_close = True
    allow_reuse_address = True

    def __init__(self, address, core, options):
        self.core = core
        self.options = options
        self.max_request_bytes = options.max_request_bytes
        self.monitoring_path = options.monitoring_path  # GET it for Prometheus metrics (None: no endpoint)
        self.stopping = False
        super().__init__(address, _Handler)
