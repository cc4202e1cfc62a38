"""The Open Inference Protocol's ("v2") REST API on the REST port, beside TensorFlow Serving's /v1/ API and over
the same ServerCore (models, versions, batching, deadlines, limits, metrics):

    GET  /v2                                        server metadata {"name", "version", "extensions"}
    GET  /v2/health/live                            200 {"live": true}
    GET  /v2/health/ready                           200 {"ready": true} when every configured model has a version
                                                    available, else 503 {"ready": false}
    GET  /v2/models/NAME[/versions/V]               model metadata {"name", "versions", "platform", "inputs",
                                                    "outputs"} (serving_default's tensors)
    GET  /v2/models/NAME[/versions/V]/ready         200 {"name", "ready": true}, 503 with ready false
    POST /v2/models/NAME[/versions/V]/infer         {"id"?, "parameters"?, "inputs", "outputs"?} -> {"model_name",
                                                    "model_version", "id", "outputs"}

Tensors: v2_tensors.py. The binary-data extension (tritonclient's default): the request's
`Inference-Header-Content-Length` header gives the JSON's length and the inputs whose parameters hold
`binary_data_size` read their raw bytes, in input order, from what follows it; outputs requested with
`"parameters": {"binary_data": true}` (or all of them, with the request parameter `binary_data_output`) are sent
raw after the JSON, each with its `binary_data_size`, and the answer carries the header. Errors answer
{"error": "..."} with the HTTP status of the canonical code (errors.HTTP_STATUS: 400 INVALID_ARGUMENT, 404
NOT_FOUND, ...). Paths are case-sensitive, as the protocol says; another path under /v2 is 404.
"""

from __future__ import annotations

import json
import re

from . import errors, gate, v2_tensors
from .http_messages import Answer
from .manager import AVAILABLE
from .request_log import rest_predict_log
from .methods import DEFAULT_SIGNATURE
from .rest_json import load_json

HEADER_LENGTH = "inference-header-content-length"
SERVER_NAME = "xlnet-tf"  # the server metadata's name (its version: the xlnet-tf package's)
_V2 = re.compile(r"/v2(?:/.*)?", re.DOTALL)
_HEALTH = re.compile(r"/v2/health/(?P<what>live|ready)")
_MODEL = re.compile(r"/v2/models/(?P<name>[^/]+)(?:/versions/(?P<version>[^/]+))?(?:/(?P<action>ready|infer))?")


def server_version():
    """The xlnet-tf package's version, for the server metadata."""
    from xlnet_tf import __version__

    return __version__


def is_v2(path):
    """Whether a request path belongs to this API."""
    return _V2.fullmatch(path) is not None


def _version(text):
    return None if text is None else gate.version_number(text, "model version")


def metric_labels(method, path):
    """(model name, API) a v2 request is counted under; None for the health and server endpoints."""
    match = _MODEL.fullmatch(path)
    if match is None:
        return None
    api = {"infer": "v2_infer", "ready": "v2_model_ready"}.get(match["action"], "v2_model_metadata")
    return match["name"], api


def model_ready(core, name, version=None):
    """Whether `name` (that version, or any) has a version available (NOT_FOUND for a model not served)."""
    return any(state == AVAILABLE for _, state, _ in _states(core, name, version))


def _states(core, name, version):
    try:
        return core.status(name, version)
    except errors.ServingError as error:
        if error.code.name == "NOT_FOUND" and name in core.manager.models:
            return []  # served, but no version (of that number) known yet
        raise


def server_ready(core):
    """Every configured model has a version available."""
    return all(model_ready(core, name) for name in list(core.manager.models))


class V2RestApi:
    """The v2 REST API over `core` (a ServerCore): `handle(request)` -> Answer. `server_name` and
    `server_version` answer the server metadata."""

    def __init__(self, core, server_name, server_version):
        self.core = core
        self.server_name, self.server_version = server_name, server_version

    def handle(self, request) -> Answer:
        try:
            return self._route(request)
        except errors.ServingError as error:
            return Answer.error(error)

    def _route(self, request):
        method, path = request.method, request.path
        if path == "/v2" and method == "GET":
            return Answer.json(200, {"name": self.server_name, "version": self.server_version,
                                     "extensions": list(v2_tensors.EXTENSIONS)})
        health = _HEALTH.fullmatch(path)
        if health and method == "GET":
            if health["what"] == "live":
                return Answer.json(200, {"live": True})
            ready = server_ready(self.core)
            return Answer.json(200 if ready else 503, {"ready": ready}, code="OK" if ready else "UNAVAILABLE")
        match = _MODEL.fullmatch(path)
        if match is None or (method, match["action"]) not in (("GET", None), ("GET", "ready"), ("POST", "infer")):
            return Answer.error(errors.not_found(f"Not found: {method} {path}"))
        name, version = match["name"], _version(match["version"])
        if match["action"] == "ready":
            ready = model_ready(self.core, name, version)
            return Answer.json(200 if ready else 503, {"name": name, "ready": ready},
                               code="OK" if ready else "UNAVAILABLE")
        if match["action"] == "infer":
            return self._infer(request, name, version)
        return Answer.json(200, model_metadata(self.core, name, version))

    def _infer(self, request, name, version):
        body, raw = _split_body(request)
        payload = load_json(body)
        if not isinstance(payload, dict):
            raise errors.invalid_argument("the inference request must be a JSON object")
        inputs = payload.get("inputs")
        parameters = v2_tensors.parameters_of(payload.get("parameters"), "the inference request")
        if not isinstance(inputs, list) or not inputs:
            raise errors.invalid_argument("the inference request needs 'inputs', a non-empty list")
        requested = payload.get("outputs")
        if requested is not None and not (isinstance(requested, list) and all(
                isinstance(o, dict) and isinstance(o.get("name"), str) for o in requested)):
            raise errors.invalid_argument("'outputs' must be a list of objects with a 'name'")
        binary = {o["name"] for o in requested or ()
                  if v2_tensors.parameters_of(o.get("parameters"), f"output '{o['name']}'").get("binary_data") is True}
        request_id = payload.get("id", "")
        if not isinstance(request_id, str):
            raise errors.invalid_argument("'id' must be a string")

        def build(signature):
            ran["arrays"] = _input_arrays(inputs, raw, signature.inputs, self.core.limits.elements)
            return ran["arrays"]

        ran, output_filter = {}, tuple(o["name"] for o in requested) if requested else ()
        requested_signature = v2_tensors.signature_name(parameters)
        served, signature, outputs = self.core.predict(name, version, None, requested_signature, build,
                                                       output_filter, deadline=request.deadline)
        self.core.log(name, served, signature, lambda: rest_predict_log(
            name, version, None, requested_signature, ran["arrays"], served, signature, outputs))
        binary_all = parameters.get("binary_data_output") is True
        answer, chunks = {"model_name": name, "model_version": str(served), "outputs": []}, []
        if request_id:
            answer["id"] = request_id
        for alias in output_filter or sorted(outputs):
            array = outputs[alias]
            tensor = {"name": alias, "datatype": v2_tensors.output_datatype(array), "shape": list(array.shape)}
            if binary_all or alias in binary:
                chunks.append(v2_tensors.to_raw(array))
                tensor["parameters"] = {"binary_data_size": len(chunks[-1])}
            else:
                tensor["data"] = v2_tensors.to_data(array)
            answer["outputs"].append(tensor)
        header = json.dumps(answer).encode("utf-8")
        if not chunks:
            return Answer(200, header)
        return Answer(200, header + b"".join(chunks), "application/octet-stream",
                      headers=(("Inference-Header-Content-Length", str(len(header))),))


def _split_body(request):
    """The request body -> (JSON bytes, the binary part after it: b"" without the extension)."""
    length = request.header(HEADER_LENGTH)
    if not length:
        return request.body, b""
    if not length.isascii() or not length.isdigit() or len(length) > 19 or int(length) > len(request.body):
        raise errors.invalid_argument(f"Inference-Header-Content-Length {length[:40]!r} is not a length within the "
                                      f"body ({len(request.body)} bytes)")
    return request.body[:int(length)], request.body[int(length):]


def _input_arrays(inputs, raw, tensor_infos, max_elements):
    """The request's inputs -> {alias: ndarray}, checked against the signature's inputs (`tensor_infos`); each at
    most `max_elements` elements (the gate bounds them together)."""
    arrays, offset = {}, 0
    for item in inputs:
        if not isinstance(item, dict) or not isinstance(item.get("name"), str):
            raise errors.invalid_argument("each input must be an object with a 'name'")
        name, datatype, shape = item["name"], item.get("datatype"), item.get("shape")
        if name in arrays:
            raise errors.invalid_argument(f"input '{name}' is given twice")
        v2_tensors.check_datatype(name, datatype, tensor_infos)
        size = v2_tensors.parameters_of(item.get("parameters"), f"input '{name}'").get("binary_data_size")
        if size is not None:
            if isinstance(size, bool) or not isinstance(size, int) or size < 0 or offset + size > len(raw):
                raise errors.invalid_argument(f"input '{name}': binary_data_size {str(size)[:40]} runs past the "
                                              f"binary data ({len(raw)} bytes after the JSON)")
            arrays[name] = v2_tensors.from_raw(raw[offset:offset + size], datatype, shape, name, max_elements)
            offset += size
        elif "data" in item:
            arrays[name] = v2_tensors.from_data(item["data"], datatype, shape, name, max_elements)
        else:
            raise errors.invalid_argument(f"input '{name}' has neither 'data' nor binary_data_size")
    return arrays


def model_metadata(core, name, version=None):
    """The model metadata answer (as a dict): versions available, and serving_default's inputs and outputs of
    the version a request would use."""
    _, signatures, _ = core.metadata(name, version)
    signature = signatures.get(DEFAULT_SIGNATURE) or next(iter(signatures.values()))
    available = sorted(v for v, state, _ in _states(core, name, None) if state == AVAILABLE)

    def tensors(infos):
        return [{"name": n, "datatype": d, "shape": s} for n, d, s in v2_tensors.tensor_metadata(infos)]

    return {"name": name, "versions": [str(v) for v in available], "platform": v2_tensors.PLATFORM,
            "inputs": tensors(signature.inputs), "outputs": tensors(signature.outputs)}
