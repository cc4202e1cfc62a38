"""A tiny real classification export served by `xlnet-tf serve` in its own process, and plain clients for it, for
the tests that send it hostile requests (tests/test_serving_hostile.py, tests/test_serving_fuzz.py).

The server runs as a subprocess so that a crash shows as a dead process (its exit status kept, the server started
again for the next test) and the resident memory read (/proc/PID/status VmRSS) is the server's own. Requests are
sent by hand (http.client, grpcio stubs) so that any bytes, paths, headers and protos can be sent; every answer
comes back as an `Answer` (the API, the status, the message, seconds) whatever happened.
"""

from __future__ import annotations

import http.client
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field

TEXTS = ["the service was quick and the food was good", "terrible, slow and cold",
         "an ordinary evening with nothing to say about it, which went on for a while and then ended", "ok"]
MODEL = "cls"
MAX_SEQ_LEN = 32
START_TIMEOUT_S = 240
REQUEST_TIMEOUT_S = 120  # the client's own limit: a request not answered by then is a stall
# gRPC statuses that say "the server failed", never right for a client's mistake (UNAVAILABLE: the server is gone)
SERVER_FAULTS = ("INTERNAL", "UNKNOWN", "DATA_LOSS", "UNAVAILABLE", "DEADLINE_EXCEEDED")
TRACEBACK_MARKS = ("Traceback", 'File "')
GRPC_OPTIONS = [("grpc.max_receive_message_length", 256 << 20), ("grpc.max_send_message_length", 256 << 20)]


def build_export(work):
    """A tiny classifier (n_token 400, max_seq_len 32, seed 17), exported under work/exports/cls -> the base path
    (str). Shared by the files that serve it: `shared_export`."""
    from conftest import tiny_config, tiny_finetuned_classifier

    from xlnet_tf.export.exporter import export_model

    model_dir = tiny_finetuned_classifier(work, TEXTS, tiny_config(n_token=400), MAX_SEQ_LEN, 17)
    base = work / "exports" / MODEL
    export_model(model_dir, base)
    return str(base)


def shared_export(tmp_path_factory):
    """`build_export`'s export, built once per test run for every file that serves it (tests/shared_artefacts.py)
    -> the base path (str, read-only)."""
    from shared_artefacts import built_once

    folder = built_once(tmp_path_factory, "served-cls", build_export, texts=TEXTS, n_token=400,
                        max_seq_len=MAX_SEQ_LEN, seed=17)
    return str(folder / "exports" / MODEL)


def has_traceback(text):
    return any(mark in text for mark in TRACEBACK_MARKS)


@dataclass
class Answer:
    api: str  # "rest" or "grpc"
    status: object  # REST: the HTTP status (int); gRPC: the status code's name ("OK", "INVALID_ARGUMENT", ...)
    message: str  # REST: the "error" of the body (else the body); gRPC: the details ("" when OK)
    seconds: float
    body: bytes = b""  # REST: the raw body
    response: object = None  # gRPC: the response message when OK
    headers: dict = field(default_factory=dict)

    @property
    def ok(self):
        return self.status == 200 if self.api == "rest" else self.status == "OK"

    @property
    def client_error(self):
        """REST 4xx; gRPC an error status that is not a server fault."""
        if self.api == "rest":
            return isinstance(self.status, int) and 400 <= self.status < 500
        return self.status != "OK" and self.status not in SERVER_FAULTS

    @property
    def server_fault(self):
        if self.api == "rest":
            return not isinstance(self.status, int) or self.status >= 500
        return self.status in SERVER_FAULTS

    def short(self, width=120):
        return " ".join(self.message.split())[:width]


class ServerProcess:
    """`xlnet-tf serve` on `base` in a subprocess (gRPC and REST on free ports). `ensure()` starts it again when
    it has died (each death is kept in `deaths`); `rss_bytes()` is its resident memory."""

    def __init__(self, base, work, extra_args=()):
        self.base, self.work, self.extra_args = str(base), work, tuple(extra_args)
        self.process = None
        self.lines = []
        self.deaths = []  # (exit status, the last console lines)
        self.starts = 0
        self.grpc_target = self.rest_host = None
        self.rest_port = None
        self._channel = None
        self._stubs = {}

    # -- the process ------------------------------------------------------------------------------------------
    def start(self):
        tmp = self.work / "tmp"
        tmp.mkdir(parents=True, exist_ok=True)
        env = {**os.environ, "TMPDIR": str(tmp)}
        command = [sys.executable, "-m", "xlnet_tf.cli", "serve", "--model-base-path", self.base, "--model-name",
                   MODEL, "--port", "0", "--rest-api-port", "0", *self.extra_args]
        self.lines = []
        self.process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                        env=env, cwd=str(self.work), errors="replace")
        ready = threading.Event()
        lines, process = self.lines, self.process

        def read():
            for line in process.stdout:
                lines.append(line)
                del lines[:-2000]
                if line.startswith("serving gRPC"):
                    ready.set()
            ready.set()

        threading.Thread(target=read, daemon=True).start()
        if not ready.wait(START_TIMEOUT_S) or self.process.poll() is not None:
            console = "".join(self.lines)[-4000:]
            self.stop()
            raise RuntimeError(f"xlnet-tf serve did not start:\n{console}")
        line = next(line for line in self.lines if line.startswith("serving gRPC"))
        match = re.match(r"serving gRPC (\S+) .*REST http://([^:/\s]+):(\d+)", line)
        assert match, line
        self.grpc_target, self.rest_host, self.rest_port = match[1], match[2], int(match[3])
        self._close_channel()
        self.starts += 1
        return self

    def alive(self):
        return self.process is not None and self.process.poll() is None

    def alive_after(self, answer, wait_s=5.0):
        """Whether the server lives after `answer`: when the answer is no answer at all (a dropped connection,
        UNAVAILABLE), the process is given `wait_s` to be seen dead."""
        dropped = not isinstance(answer.status, int) if answer.api == "rest" else answer.status == "UNAVAILABLE"
        if not dropped:
            return self.alive()
        until = time.monotonic() + wait_s
        while self.alive() and time.monotonic() < until:
            time.sleep(0.05)
        return self.alive()

    def exit_status(self):
        return None if self.process is None else self.process.poll()

    def ensure(self):
        """Starts the server again if it has died since (the death is recorded) -> True when it was restarted."""
        if self.alive():
            return False
        if self.process is not None:
            self.deaths.append((self.process.poll(), "".join(self.lines[-20:])))
        self.start()
        return True

    def stop(self):
        self._close_channel()
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(60)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(30)

    def rss_bytes(self):
        with open(f"/proc/{self.process.pid}/status") as status:
            for line in status:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) * 1024
        raise RuntimeError("no VmRSS")

    def console(self, last=40):
        return "".join(self.lines[-last:])

    # -- REST -------------------------------------------------------------------------------------------------
    def rest(self, method, path, body=None, headers=None, timeout=REQUEST_TIMEOUT_S):
        """One HTTP request (path sent as given; body bytes, str or a JSON value) -> Answer."""
        if body is not None and not isinstance(body, (bytes, bytearray)):
            body = body.encode("utf-8", "surrogatepass") if isinstance(body, str) else json.dumps(body).encode()
        sent = {"Content-Type": "application/json", **(headers or {})}
        began = time.monotonic()
        connection = http.client.HTTPConnection(self.rest_host, self.rest_port, timeout=timeout)
        connection.putrequest(method, path, skip_accept_encoding=True)  # a path it cannot send: the test's fault
        if body is not None:
            sent.setdefault("Content-Length", str(len(body)))
        for key, value in sent.items():
            connection.putheader(key, value)
        try:
            connection.endheaders(body)
            response = connection.getresponse()
            data = response.read()
            status, got_headers = response.status, dict(response.getheaders())
        except (OSError, http.client.HTTPException) as error:
            return Answer("rest", f"no answer ({type(error).__name__}: {error})", str(error),
                          time.monotonic() - began)
        finally:
            connection.close()
        seconds = time.monotonic() - began
        message = data.decode("utf-8", "replace")
        try:
            parsed = json.loads(data)
            if isinstance(parsed, dict) and isinstance(parsed.get("error"), str):
                message = parsed["error"]
        except ValueError:
            pass
        return Answer("rest", status, message if status != 200 else "", seconds, body=data, headers=got_headers)

    # -- gRPC -------------------------------------------------------------------------------------------------
    def _close_channel(self):
        if self._channel is not None:
            self._channel.close()
        self._channel, self._stubs = None, {}

    def stub(self, service):
        """service: "predict" (PredictionService), "model" (ModelService) or "v2" (GRPCInferenceService)."""
        import grpc

        if self._channel is None:
            self._channel = grpc.insecure_channel(self.grpc_target, options=GRPC_OPTIONS)
        if service not in self._stubs:
            from tensorflow_serving.apis import model_service_pb2_grpc, prediction_service_pb2_grpc
            from tritonclient.grpc import service_pb2_grpc

            make = {"predict": prediction_service_pb2_grpc.PredictionServiceStub,
                    "model": model_service_pb2_grpc.ModelServiceStub,
                    "v2": service_pb2_grpc.GRPCInferenceServiceStub}[service]
            self._stubs[service] = make(self._channel)
        return self._stubs[service]

    def grpc(self, service, method, request, timeout=REQUEST_TIMEOUT_S):
        """One RPC -> Answer (status: the code's name)."""
        import grpc

        began = time.monotonic()
        try:
            response = getattr(self.stub(service), method)(request, timeout=timeout)
            return Answer("grpc", "OK", "", time.monotonic() - began, response=response)
        except grpc.RpcError as error:
            return Answer("grpc", error.code().name, error.details() or "", time.monotonic() - began)


# -- requests -------------------------------------------------------------------------------------------------


def string_proto(values, dims, dtype=None):
    """A TensorProto of `dims` (any, even inconsistent with the values) holding `values` in string_val."""
    from tensorflow.core.framework import tensor_pb2, types_pb2

    proto = tensor_pb2.TensorProto(dtype=dtype or types_pb2.DT_STRING)
    for size in dims:
        proto.tensor_shape.dim.add(size=size)
    proto.string_val.extend(v if isinstance(v, bytes) else v.encode() for v in values)
    return proto


def int_proto(values, dims, dtype):
    """A TensorProto of `dims` and DataType `dtype` (an enum value) with `values` in int_val."""
    from tensorflow.core.framework import tensor_pb2

    proto = tensor_pb2.TensorProto(dtype=dtype)
    for size in dims:
        proto.tensor_shape.dim.add(size=size)
    proto.int_val.extend(values)
    return proto


def predict_request(inputs, signature="", model=MODEL, version=None, label=None, output_filter=()):
    """A PredictRequest of {alias: TensorProto}."""
    from tensorflow_serving.apis import predict_pb2

    request = predict_pb2.PredictRequest()
    request.model_spec.name, request.model_spec.signature_name = model, signature
    if version is not None:
        request.model_spec.version.value = version
    if label is not None:
        request.model_spec.version_label = label
    for alias, proto in inputs.items():
        request.inputs[alias].CopyFrom(proto)
    request.output_filter.extend(output_filter)
    return request


def examples_input(texts, feature="text"):
    """An Input proto (example_list) of one Example per text, its bytes feature `feature` holding the text."""
    from tensorflow_serving.apis import input_pb2

    listed = input_pb2.Input()
    examples = listed.example_list.examples
    for text in texts:
        examples.add().features.feature[feature].bytes_list.value.append(text.encode("utf-8"))
    return listed


def classify_request(input_proto, signature="classification", model=MODEL):
    from tensorflow_serving.apis import classification_pb2

    request = classification_pb2.ClassificationRequest()
    request.model_spec.name, request.model_spec.signature_name = model, signature
    request.input.CopyFrom(input_proto)
    return request


def multi_inference_request(input_proto, tasks=(("classification", "tensorflow/serving/classify"),), model=MODEL):
    from tensorflow_serving.apis import inference_pb2

    request = inference_pb2.MultiInferenceRequest()
    for signature, method in tasks:
        task = request.tasks.add()
        task.model_spec.name, task.model_spec.signature_name, task.method_name = model, signature, method
    request.input.CopyFrom(input_proto)
    return request


def infer_request(tensors, model=MODEL, version="", outputs=(), raw=None, parameters=None):
    """A ModelInferRequest: tensors = [(name, datatype, shape, bytes_contents or None)]; `raw`: raw_input_contents;
    `parameters`: {name: str / int / bool} request parameters."""
    from tritonclient.grpc import service_pb2

    request = service_pb2.ModelInferRequest(model_name=model, model_version=version)
    for name, datatype, shape, contents in tensors:
        tensor = request.inputs.add(name=name, datatype=datatype, shape=shape)
        if contents is not None:
            field = {"BYTES": "bytes_contents", "INT32": "int_contents", "INT8": "int_contents",
                     "INT64": "int64_contents", "FP32": "fp32_contents", "BOOL": "bool_contents",
                     "UINT8": "uint_contents", "FP64": "fp64_contents"}[datatype]
            values = [v.encode() if isinstance(v, str) else v for v in contents]
            getattr(tensor.contents, field).extend(values)
    for name in outputs:
        request.outputs.add(name=name)
    if raw is not None:
        request.raw_input_contents.extend(raw)
    for key, value in (parameters or {}).items():
        parameter = request.parameters[key]
        if isinstance(value, bool):
            parameter.bool_param = value
        elif isinstance(value, int):
            parameter.int64_param = value
        else:
            parameter.string_param = value
    return request


# -- good requests and their reference answers ----------------------------------------------------------------


def good_requests():
    """[(name, send(server) -> Answer, comparable(Answer))]: legal requests over each API; the comparable part of
    the answer must stay the same, to the bit, whatever the server was sent before."""
    from tensorflow_serving.apis import get_model_metadata_pb2

    def rest_row(server):
        return server.rest("POST", f"/v1/models/{MODEL}:predict", {"instances": TEXTS})

    def rest_columnar(server):
        return server.rest("POST", f"/v1/models/{MODEL}/versions/1:predict", {"inputs": {"text": TEXTS[:2]}})

    def rest_classify(server):
        return server.rest("POST", f"/v1/models/{MODEL}:classify",
                           {"signature_name": "classification", "examples": [{"text": t} for t in TEXTS]})

    def rest_ids(server):
        ids = [[5] * 4 + [30, 41, 52, 4, 3], [17, 18, 19, 20, 21, 22, 23, 4, 3]]
        return server.rest("POST", f"/v1/models/{MODEL}:predict", {
            "signature_name": "predict_ids", "inputs": {"input_ids": ids, "segment_ids": [[0] * 9, [0] * 9],
                                                        "padding_mask": [[0] * 4 + [1] * 5, [1] * 9]}})

    def v2_json(server):
        return server.rest("POST", f"/v2/models/{MODEL}/infer", {
            "id": "good", "inputs": [{"name": "text", "datatype": "BYTES", "shape": [len(TEXTS)], "data": TEXTS}]})

    def v2_binary(server):
        import struct

        raw = b"".join(struct.pack("<I", len(t.encode())) + t.encode() for t in TEXTS[:3])
        header = json.dumps({"inputs": [{"name": "text", "datatype": "BYTES", "shape": [3],
                                         "parameters": {"binary_data_size": len(raw)}}],
                             "outputs": [{"name": "probabilities", "parameters": {"binary_data": True}},
                                         {"name": "label"}]}).encode()
        return server.rest("POST", f"/v2/models/{MODEL}/infer", header + raw,
                           {"Inference-Header-Content-Length": str(len(header))})

    def grpc_predict(server):
        return server.grpc("predict", "Predict", predict_request({"text": string_proto(TEXTS, [len(TEXTS)])}))

    def grpc_classify(server):
        return server.grpc("predict", "Classify", classify_request(examples_input(TEXTS)))

    def grpc_multi(server):
        return server.grpc("predict", "MultiInference", multi_inference_request(examples_input(TEXTS[:2])))

    def grpc_metadata(server):
        request = get_model_metadata_pb2.GetModelMetadataRequest(metadata_field=["signature_def"])
        request.model_spec.name = MODEL
        return server.grpc("predict", "GetModelMetadata", request)

    def model_infer(server):
        return server.grpc("v2", "ModelInfer", infer_request([("text", "BYTES", [len(TEXTS)], TEXTS)]))

    def rest_body(answer):
        return answer.status, json.loads(answer.body) if answer.status == 200 else answer.message

    def v2_binary_body(answer):
        length = int(answer.headers.get("Inference-Header-Content-Length", "0") or 0)
        return answer.status, answer.body[length:], json.loads(answer.body[:length] or b"null")

    def grpc_body(answer):
        if not answer.ok:
            return answer.status, answer.message
        return answer.status, answer.response.SerializeToString(deterministic=True)

    def metadata_body(answer):  # the signatures, unpacked (an Any's bytes keep the map order of the process)
        if not answer.ok:
            return answer.status, answer.message
        signature_map = get_model_metadata_pb2.SignatureDefMap()
        answer.response.metadata["signature_def"].Unpack(signature_map)
        return (answer.status, answer.response.model_spec.SerializeToString(deterministic=True),
                signature_map.SerializeToString(deterministic=True))

    return [("REST /v1 :predict instances", rest_row, rest_body),
            ("REST /v1 :predict inputs", rest_columnar, rest_body),
            ("REST /v1 :classify", rest_classify, rest_body),
            ("REST /v1 :predict predict_ids", rest_ids, rest_body),
            ("REST /v2 infer JSON", v2_json, rest_body),
            ("REST /v2 infer binary", v2_binary, v2_binary_body),
            ("gRPC Predict", grpc_predict, grpc_body),
            ("gRPC Classify", grpc_classify, grpc_body),
            ("gRPC MultiInference", grpc_multi, grpc_body),
            ("gRPC GetModelMetadata", grpc_metadata, metadata_body),
            ("gRPC ModelInfer", model_infer, grpc_body)]


class References:
    """The good requests' answers recorded once (on a freshly started server) and compared afterwards."""

    def __init__(self, server):
        self.requests = good_requests()
        self.reference = {}
        for name, send, comparable in self.requests:
            answer = send(server)
            assert answer.ok, f"good request {name}: {answer.status} {answer.message[:300]}"
            self.reference[name] = comparable(answer)

    def check(self, server, which=None):
        """Sends the good requests (all, or those at the indices `which`) -> [(name, problem)] (empty: every
        answer equals its reference exactly)."""
        problems = []
        chosen = self.requests if which is None else [self.requests[i % len(self.requests)] for i in which]
        for name, send, comparable in chosen:
            answer = send(server)
            if comparable(answer) != self.reference[name]:
                problems.append((name, f"{answer.status} {answer.short(200)}" if not answer.ok else
                                 "answered, but not as before"))
        return problems
