"""TensorFlow Serving's REST API: routing and the API handler (`RestHandler`), over the ServerCore and the JSON
codec (rest_json.py), served by http_server.py (one event-loop thread and a fixed pool of worker threads).

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
the API; /v2 and what is under it is the Open Inference Protocol (v2_rest.py); anything else is 404. Under /v1/, POST must match
`/v1/models/NAME[/versions/DIGITS|/labels/LABEL]:(predict|classify|regress)` and GET
`/v1/models[/NAME][/versions/DIGITS|/labels/LABEL][/metadata]` (NAME and LABEL: no '/' or ':'); what does
not (another method, a verb in capitals, a version that is not digits, a trailing '/') is 400
INVALID_ARGUMENT "Malformed request: METHOD PATH"; GET without a name is "Missing model name in request.",
a version beyond int64 "Failed to convert version: V to numeric.". NAME and LABEL are percent-decoded
(`%20` is a space, `+` stays '+', a '%' not followed by two hex digits stays as it is) and must be UTF-8.
The query string is ignored (TensorFlow Serving would match the regex against it too and answer 400).

A successful predict / classify / regress is handed to the request logs (ServerCore.log) as the gRPC request and
response TensorFlow Serving converts it to (request_log.rest_predict_log / rest_infer_log, built only when
sampled).

Classify and Regress look the model up before they parse the body (the examples are a function for
`core.infer`): an unknown model is 404 whatever the body, as over gRPC. Predict parses the JSON first, as
TensorFlow Serving does, and builds its tensors once the model's signature is known.

CORS (`rest_api_enable_cors_support`): every answer to a request under /v1/, and the HTTP layer's own
errors, carry `Access-Control-Allow-Origin: *`, `Access-Control-Allow-Methods: POST, GET` and
`Access-Control-Allow-Headers: Content-Type` (http_rest_api_util.cc AddCORSHeaders). OPTIONS under /v1/
is a preflight, with or without CORS support, as in http_server.cc: 200 with an empty body when the Origin
header holds "http://" or "https://", else 400 "Origin header is missing in CORS preflight"
(FAILED_PRECONDITION; TensorFlow Serving's body is empty there, ours the usual {"error": ...}). The HTTP
server (http_server.py) adds the headers (`RestHandler.cors_headers`) to the answers that take them.
"""

from __future__ import annotations

import re
import urllib.parse

from . import errors, gate, inference, v2_rest
from .http_messages import Answer
from .json_reader import MAX_JSON_DEPTH
from .methods import CLASSIFY_METHOD, REGRESS_METHOD
from .request_log import rest_infer_log, rest_predict_log
from .rest_json import format_outputs, message_to_dict, parse_predict_body, request_object, signature_name_of
from .status import status_response


CORS_HEADERS = (("Access-Control-Allow-Origin", "*"), ("Access-Control-Allow-Methods", "POST, GET"),
                ("Access-Control-Allow-Headers", "Content-Type"))

_FLAGS = re.IGNORECASE | re.DOTALL
_V1 = re.compile(r"/v1/.*", _FLAGS)
_VERSION = r"(?:/versions/(?P<version>[0-9]+)|/labels/(?P<label>[^/:]+))?"
_PREDICT_PATH = re.compile(r"/v1/models/(?P<name>[^/:]+)" + _VERSION + r":(?P<verb>classify|regress|predict)", _FLAGS)
_STATUS_PATH = re.compile(r"/v1/models(?:/(?P<name>[^/:]+))?" + _VERSION + r"(?:/(?P<sub>metadata))?", _FLAGS)
_VERBS = ("predict", "classify", "regress")
_ORIGIN = re.compile(r"https?://")


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
    version = gate.version_number(match["version"]) if match["version"] else None
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


class RestHandler:
    """TensorFlow Serving's REST API over a ServerCore, for an http_server.HttpServer: `handle(request)` answers
    a request (in a worker thread), `count(request, answer, seconds)` counts its answer for monitoring,
    `cors_headers` are what CORS support adds to answers (none with rest_api_enable_cors_support off).
    `options` (a ServerOptions): rest_api_enable_cors_support, monitoring_path (GET it for Prometheus metrics;
    None: no endpoint)."""

    def __init__(self, core, options):
        self.core = core
        self.v2 = v2_rest.V2RestApi(core, v2_rest.SERVER_NAME, v2_rest.server_version())
        self.vertex = options.vertex  # environment.VertexRoutes, or None
        self.monitoring_path = options.monitoring_path
        self.cors_headers = CORS_HEADERS if options.rest_api_enable_cors_support else ()

    def count(self, request, answer, seconds):
        """An answer to a complete request, counted by model and API when it is an API request."""
        if self._vertex_route(request.path):
            labels = (self.vertex.model_name, "predict") if request.path == self.vertex.predict_route else None
        elif _V1.fullmatch(request.path):
            labels = _metric_labels(request.method, request.path)
        else:
            labels = v2_rest.metric_labels(request.method, request.path) if v2_rest.is_v2(request.path) else None
        if answer.code is not None and labels is not None:
            self.core.count(labels[0], labels[1], "REST", answer.code, seconds)

    def handle(self, request) -> Answer:
        """A complete request -> its answer (in a worker thread)."""
        method, path = request.method, request.path
        if self.monitoring_path and path == self.monitoring_path and method in ("GET", "HEAD"):
            metrics = self.core.metrics.exposition() if self.core.metrics is not None else ""
            return Answer(200, metrics.encode("utf-8"), "text/plain; version=0.0.4; charset=utf-8", code=None,
                          cors=False)
        if self._vertex_route(path):
            return self._vertex(request)
        v2 = v2_rest.is_v2(path)
        if not v2 and not _V1.fullmatch(path):
            return Answer.json(404, {"error": f"Not found: {method} {path}"}, code=None, cors=False)
        if method == "OPTIONS":  # CORS preflight (http_server.cc), with or without CORS support
            if _ORIGIN.search(request.header("origin")):
                return Answer(200, b"", None, code=None)
            return Answer.error(errors.failed_precondition("Origin header is missing in CORS preflight"),
                                code=None)
        try:
            return self.v2.handle(request) if v2 else Answer.json(200, self._api(request))
        except errors.ServingError as error:
            return Answer.error(error)
        except RecursionError:
            return Answer.error(errors.invalid_argument(
                f"the request nests arrays and objects too deeply (at most {MAX_JSON_DEPTH})"))
        except Exception as error:  # noqa: BLE001
            return Answer.error(errors.internal(error, f"REST {method} {request.path}"))

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
            signature_defs = {key: message_to_dict(value) for key, value in signatures.items()}
            return {"model_spec": {"name": name, "signature_name": "", "version": str(served)},
                    "metadata": {"signature_def": {"signature_def": signature_defs}}}
        return message_to_dict(status_response(core, name, version, label))

    def _vertex_route(self, path):
        return self.vertex is not None and path in (self.vertex.health_route, self.vertex.predict_route)

    def _vertex(self, request):
        """Vertex AI's health route (200 once the model has a version available, else 503) and predict route
        ({"instances", "parameters"?} -> {"predictions"}: TensorFlow Serving's row format)."""
        name, method = self.vertex.model_name, request.method
        try:
            if request.path == self.vertex.health_route:
                if method != "GET":
                    raise errors.ServingError("UNIMPLEMENTED", f"{request.path} answers GET, not {method}")
                if v2_rest.model_ready(self.core, name):
                    return Answer.json(200, {})
                return Answer.error(errors.ServingError("UNAVAILABLE", f"model {name} has no version loaded yet"))
            if method != "POST":
                raise errors.ServingError("UNIMPLEMENTED", f"{request.path} answers POST, not {method}")
            payload = request_object(request.body)
            parameters = payload.get("parameters") or {}
            if not isinstance(parameters, dict):
                raise errors.invalid_argument("'parameters' must be an object")
            body = {"instances": payload.get("instances")}
            if "signature_name" in parameters:
                body["signature_name"] = parameters["signature_name"]
            return Answer.json(200, self._predict(request, name, None, None, body))
        except errors.ServingError as error:
            return Answer.error(error)
        except Exception as error:  # noqa: BLE001
            return Answer.error(errors.internal(error, f"REST {method} {request.path}"))

    def _predict(self, request, name, version, label, body=None):
        """A predict request (its body parsed here unless given) -> TensorFlow Serving's JSON answer."""
        body = request_object(request.body) if body is None else body
        signature_name = signature_name_of(body)
        layout = {}

        def build(signature):
            layout["arrays"], layout["rows"] = parse_predict_body(body, signature, signature_name)
            return layout["arrays"]

        served, signature, outputs = self.core.predict(name, version, label, signature_name, build,
                                                       deadline=request.deadline)
        answer = format_outputs(outputs, layout["rows"])
        tensor_content = self.core.options is not None and self.core.options.tensor_content
        self.core.log(name, served, signature, lambda: rest_predict_log(
            name, version, label, body.get("signature_name", ""), layout["arrays"], served, signature, outputs,
            tensor_content))
        return answer

    def _infer(self, request, name, version, label, verb):
        method = CLASSIFY_METHOD if verb == "classify" else REGRESS_METHOD
        try:
            body, failure = request_object(request.body), None
            signature_name = signature_name_of(body)
        except errors.ServingError as error:
            body, failure, signature_name = None, error, ""

        def examples():  # called once the model is found: an unknown model is NOT_FOUND whatever the body
            if failure is not None:
                raise failure
            _, parsed["input"] = inference.input_from_json(body)
            return inference.serialized_examples(parsed["input"])

        parsed = {}
        served, [(signature, result)] = self.core.infer(name, version, label, [(method, signature_name)], examples,
                                                        deadline=request.deadline, input_first=True)
        answer = {"results": inference.result_to_json(method, result)}
        self.core.log(name, served, signature, lambda: rest_infer_log(
            verb, name, version, label, signature_name, parsed["input"], served, signature, result))
        return answer
