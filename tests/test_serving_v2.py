"""The Open Inference Protocol ("v2": KServe, Triton) on `xlnet-tf serve`, through tritonclient's own HTTP and gRPC
clients, on a real tiny classifier export: health, server and model metadata, model readiness, infer on raw text
(JSON and binary tensors over REST, typed and raw contents over gRPC), the answers equal TensorFlow Serving's
Predict answer from the same server, the signature picked by a parameter, and errors as the protocol gives them
(unknown model, wrong datatype, bad shapes) with the server still serving after each. TLS on the gRPC port: in
tests/test_serving_tls.py."""

from __future__ import annotations

import json
import urllib.error
import urllib.request

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from served_export import TEXTS, shared_export
from tritonclient.utils import InferenceServerException

BOUND = 1e-6  # the same process, model and inputs: the same float32 computation


def check(label, value, bound, ok):
    print(f"  CHECK {label}: {value} (bound: {bound}) -> {'ok' if ok else 'FAILED'}")
    assert ok, f"{label}: {value} (bound: {bound})"


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    from xlnet_tf.serving import serve

    # The tiny classifier export the hostile and fuzz tests serve (built once per run: tests/served_export.py).
    # Server-side batching on: v2 requests go through the same scheduler as TensorFlow Serving's.
    instance = serve(model_base_path=shared_export(tmp_path_factory), model_name="cls", port=0, rest_api_port=0,
                     poll_interval=0, grpc_max_threads=8, enable_batching=True,
                     batching_parameters={"max_batch_size": 8, "batch_timeout_micros": 1000,
                                          "num_batch_threads": 1}).start()
    yield instance
    instance.stop()


@pytest.fixture(scope="module")
def clients(server):
    http = httpclient.InferenceServerClient(server.rest_url.split("://", 1)[1])
    grpc = grpcclient.InferenceServerClient(server.grpc_target)
    yield http, grpc
    http.close()
    grpc.close()


def tfs_predict(server, texts):
    """TensorFlow Serving's Predict answer (gRPC) of the same server for `texts`."""
    from xlnet_tf.serving.client import Client

    return Client(server.grpc_target, "cls").predict({"text": texts})


def text_input(module, texts, **binary):
    tensor = module.InferInput("text", [len(texts)], "BYTES")
    tensor.set_data_from_numpy(np.array([t.encode() for t in texts], dtype=np.object_), **binary)
    return tensor


def test_health_and_metadata(server, clients):
    http, grpc = clients
    check("server-side batching on", server.scheduler is not None, "True", server.scheduler is not None)
    for name, client in (("HTTP", http), ("gRPC", grpc)):
        live, ready = client.is_server_live(), client.is_server_ready()
        check(f"{name}: server live and ready", (live, ready), "(True, True)", live and ready)
        model_ready = client.is_model_ready("cls"), client.is_model_ready("cls", "1")
        check(f"{name}: model cls ready (latest, version 1)", model_ready, "(True, True)", all(model_ready))
        unknown = client.is_model_ready("cls", "7")
        check(f"{name}: version 7 of cls ready", unknown, "False (not served)", unknown is False)
    metadata = http.get_server_metadata()
    check("HTTP server metadata", metadata, "name xlnet-tf, binary_tensor_data among the extensions",
          metadata["name"] == "xlnet-tf" and "binary_tensor_data" in metadata["extensions"])
    grpc_metadata = grpc.get_server_metadata()
    check("gRPC server metadata name / version", (grpc_metadata.name, grpc_metadata.version),
          "equal to HTTP's", (grpc_metadata.name, grpc_metadata.version) == (metadata["name"], metadata["version"]))
    model = http.get_model_metadata("cls")
    inputs = [(t["name"], t["datatype"], t["shape"]) for t in model["inputs"]]
    outputs = {t["name"]: (t["datatype"], t["shape"]) for t in model["outputs"]}
    check("HTTP model metadata inputs", inputs, "[('text', 'BYTES', [-1])]", inputs == [("text", "BYTES", [-1])])
    check("HTTP model metadata outputs", outputs, "label BYTES, label_id INT32 / INT64, logits and probabilities "
          "FP32 [-1, 3]", outputs["label"][0] == "BYTES" and outputs["probabilities"] == ("FP32", [-1, 3])
          and outputs["logits"] == ("FP32", [-1, 3]) and outputs["label_id"][0] in ("INT32", "INT64"))
    check("HTTP model metadata versions / platform", (model["versions"], model["platform"]),
          "(['1'], 'tensorflow_savedmodel')", (model["versions"], model["platform"]) == (["1"], "tensorflow_savedmodel"))
    proto = grpc.get_model_metadata("cls", "1")
    grpc_inputs = [(t.name, t.datatype, list(t.shape)) for t in proto.inputs]
    check("gRPC model metadata inputs", grpc_inputs, "equal to HTTP's", grpc_inputs == inputs)


@pytest.mark.parametrize("how", ["http-binary", "http-json", "grpc-raw"])
def test_infer_equals_tensorflow_serving_predict(server, clients, how):
    http, grpc = clients
    want = tfs_predict(server, TEXTS)
    if how == "grpc-raw":  # tritonclient's gRPC client sends raw_input_contents
        result = grpc.infer("cls", [text_input(grpcclient, TEXTS)], model_version="1",
                            outputs=[grpcclient.InferRequestedOutput(n) for n in ("probabilities", "label")])
    else:
        binary = how == "http-binary"
        result = http.infer("cls", [text_input(httpclient, TEXTS, binary_data=binary)],
                            outputs=[httpclient.InferRequestedOutput(n, binary_data=binary)
                                     for n in ("probabilities", "label")])
    probabilities, labels = result.as_numpy("probabilities"), result.as_numpy("label")
    diff = float(np.abs(probabilities - want["probabilities"]).max())
    check(f"{how}: probabilities vs TensorFlow Serving Predict, max |diff|", diff, f"<= {BOUND}", diff <= BOUND)
    got = [v.decode() if isinstance(v, bytes) else v for v in labels.reshape(-1)]
    check(f"{how}: labels", got, "Predict's", got == [v.decode() for v in want["label"]])
    response = result.get_response(as_json=True) if how == "grpc-raw" else result.get_response()
    names = sorted(o["name"] for o in response["outputs"])
    check(f"{how}: only the requested outputs", names, "['label', 'probabilities']",
          names == ["label", "probabilities"])


def test_grpc_typed_contents_and_every_output(server, clients):
    """A request with typed contents (bytes_contents), as KServe's clients send it; no outputs named: all."""
    from tritonclient.grpc import service_pb2

    _, grpc = clients
    request = service_pb2.ModelInferRequest(model_name="cls", id="req-7")
    tensor = request.inputs.add(name="text", datatype="BYTES", shape=[2])
    tensor.contents.bytes_contents.extend([t.encode() for t in TEXTS[:2]])
    response = grpc._client_stub.ModelInfer(request)
    names = [o.name for o in response.outputs]
    check("typed request: outputs (all of them, sorted)", names, "['label', 'label_id', 'logits', 'probabilities']",
          names == ["label", "label_id", "logits", "probabilities"])
    probabilities = np.array(response.outputs[3].contents.fp32_contents).reshape(2, 3)
    diff = float(np.abs(probabilities - tfs_predict(server, TEXTS[:2])["probabilities"]).max())
    check("typed request: probabilities vs Predict", diff, f"<= {BOUND}", diff <= BOUND)
    check("typed request: id and version echoed", (response.id, response.model_version), "('req-7', '1')",
          (response.id, response.model_version) == ("req-7", "1"))
    # TensorFlow Serving's Predict from a client that sets no deadline, on this batching server (gRPC's remaining
    # time is then ~2**63 ns, which once overflowed the batch queue's wait: INTERNAL).
    import grpc as grpc_module
    from tensorflow_serving.apis import predict_pb2, prediction_service_pb2_grpc

    from xlnet_tf.serving.tensors import from_ndarray, to_ndarray

    predict = predict_pb2.PredictRequest()
    predict.model_spec.name = "cls"
    predict.inputs["text"].CopyFrom(from_ndarray(np.array([t.encode() for t in TEXTS[:2]], dtype=np.object_)))
    with grpc_module.insecure_channel(server.grpc_target) as channel:
        answer = prediction_service_pb2_grpc.PredictionServiceStub(channel).Predict(predict)
    diff = float(np.abs(to_ndarray(answer.outputs["probabilities"]) - probabilities).max())
    check("Predict without a deadline, batching on: probabilities vs v2", diff, f"<= {BOUND}", diff <= BOUND)


def test_signature_parameter(server, clients):
    http, grpc = clients
    result = http.infer("cls", [text_input(httpclient, TEXTS[:2])], parameters={"signature_name": "serving_default"})
    check("HTTP signature_name serving_default: rows", result.as_numpy("probabilities").shape, "(2, 3)",
          result.as_numpy("probabilities").shape == (2, 3))
    with pytest.raises(InferenceServerException) as error:
        grpc.infer("cls", [text_input(grpcclient, TEXTS[:2])], parameters={"signature_name": "nope"})
    check("gRPC unknown signature_name", (error.value.status(), error.value.message()),
          "INVALID_ARGUMENT naming the signature (TensorFlow Serving's REST Predict: the same)",
          "INVALID_ARGUMENT" in str(error.value.status())
          and "nope" in error.value.message())


def _post(server, path, body, headers=None):
    request = urllib.request.Request(server.rest_url + path, data=body, method="POST",
                                     headers={"Content-Type": "application/json", **(headers or {})})
    try:
        with urllib.request.urlopen(request, timeout=30) as answer:
            return answer.status, answer.read()
    except urllib.error.HTTPError as error:
        return error.code, error.read()


def test_errors_as_the_protocol_gives_them(server, clients):
    http, grpc = clients
    with pytest.raises(InferenceServerException) as error:
        http.infer("nosuch", [text_input(httpclient, TEXTS[:1])])
    check("HTTP unknown model", (error.value.status(), error.value.message()[:60]), "status 404, the model named",
          str(error.value.status()) == "404" and "nosuch" in error.value.message())
    with pytest.raises(InferenceServerException) as error:
        grpc.infer("nosuch", [text_input(grpcclient, TEXTS[:1])])
    check("gRPC unknown model", error.value.status(), "StatusCode.NOT_FOUND", "NOT_FOUND" in str(error.value.status()))
    wrong = httpclient.InferInput("text", [2], "FP32")
    wrong.set_data_from_numpy(np.zeros(2, np.float32))
    with pytest.raises(InferenceServerException) as error:
        http.infer("cls", [wrong])
    check("HTTP wrong datatype", (error.value.status(), error.value.message()), "400, FP32 and BYTES named",
          str(error.value.status()) == "400" and "FP32" in error.value.message() and "BYTES" in error.value.message())
    wrong = grpcclient.InferInput("text", [2], "INT32")
    wrong.set_data_from_numpy(np.zeros(2, np.int32))
    with pytest.raises(InferenceServerException) as error:
        grpc.infer("cls", [wrong])
    check("gRPC wrong datatype", (error.value.status(), error.value.message()), "INVALID_ARGUMENT, INT32 named",
          "INVALID_ARGUMENT" in str(error.value.status()) and "INT32" in error.value.message())
    bad = [  # (what, body, headers, status, words in the error)
        ("shape and data disagree", {"inputs": [{"name": "text", "datatype": "BYTES", "shape": [3], "data": ["a"]}]},
         None, 400, "holds 3 elements"),
        ("no inputs", {"inputs": []}, None, 400, "inputs"),
        ("unknown input", {"inputs": [{"name": "txt", "datatype": "BYTES", "shape": [1], "data": ["a"]}]},
         None, 400, "'txt'"),
        ("not JSON", b"{", None, 400, "JSON"),
        ("binary size past the body", {"inputs": [{"name": "text", "datatype": "BYTES", "shape": [1],
                                                   "parameters": {"binary_data_size": 99}}]}, "json", 400,
         "binary_data_size"),
    ]
    for what, body, headers, status, words in bad:
        raw = body if isinstance(body, bytes) else json.dumps(body).encode()
        extra = {"Inference-Header-Content-Length": str(len(raw))} if headers == "json" else None
        code, answer = _post(server, "/v2/models/cls/infer", raw, extra)
        message = json.loads(answer).get("error", "")
        check(f"REST {what}", (code, message), f"{status}, mentions {words!r}", code == status and words in message)
    code, _ = _post(server, "/v2/models/cls/versions/x/infer", b"{}")
    check("REST version that is not a number", code, "400", code == 400)
    code, answer = _post(server, "/v2/models/cls/explain", b"{}")
    check("REST path outside the protocol", code, "404", code == 404)
    check("after every bad request: still serving", http.is_model_ready("cls") and grpc.is_server_live(),
          "True", http.is_model_ready("cls") and grpc.is_server_live())


def test_v2_requests_counted_in_the_metrics(tmp_path_factory, server):
    """The v2 front ends count their requests like TensorFlow Serving's APIs (monitoring config on)."""
    from xlnet_tf.serving import serve

    base = server.entries[0].base_path
    work = tmp_path_factory.mktemp("v2-metrics")
    monitoring = work / "monitoring.config"
    monitoring.write_text("prometheus_config { enable: true }\n")
    with serve(model_base_path=base, model_name="cls", port=0, rest_api_port=0, poll_interval=0,
               monitoring_config_file=str(monitoring), grpc_max_threads=4) as instance:
        http = httpclient.InferenceServerClient(instance.rest_url.split("://", 1)[1])
        grpc = grpcclient.InferenceServerClient(instance.grpc_target)
        http.infer("cls", [text_input(httpclient, TEXTS[:1])])
        grpc.infer("cls", [text_input(grpcclient, TEXTS[:1])])
        with urllib.request.urlopen(instance.rest_url + "/monitoring/prometheus/metrics", timeout=30) as answer:
            text = answer.read().decode()
        http.close()
        grpc.close()
    counted = sorted(line.split(" ")[0] for line in text.splitlines()
                     if line.startswith(":tensorflow:serving:request_count{") and "v2_infer" in line)
    check("request_count lines of v2_infer", counted, "one REST and one GRPC, status OK",
          len(counted) == 2 and any("REST" in c for c in counted) and any("GRPC" in c for c in counted))


# --- Vertex AI's custom-container contract ------------------------------------------------------------------


def _free_port():
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _vertex_server(environ):
    """`xlnet-tf serve` with no model flag (gRPC on a free port), configured by `environ` alone."""
    from xlnet_tf.cli import build_parser
    from xlnet_tf.serving.cli import build_server

    args = build_parser().parse_args(["serve", "--port", "0", "--poll-interval", "0.5"])
    return build_server(args, environ)


def _http(url, body=None):
    request = urllib.request.Request(url, data=None if body is None else json.dumps(body).encode(),
                                     method="GET" if body is None else "POST",
                                     headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=30) as answer:
            return answer.status, json.loads(answer.read() or b"{}")
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read() or b"{}")


def _copy_tree(source, target):
    """A local SavedModel directory copied file by file to `target` (any filesystem), saved_model.pb last."""
    import os

    import tensorflow as tf

    names = [os.path.relpath(os.path.join(folder, name), source) for folder, _, found in os.walk(source)
             for name in found]
    for name in sorted(names, key=lambda n: n == "saved_model.pb"):
        tf.io.gfile.makedirs(os.path.dirname(f"{target}/{name}"))
        tf.io.gfile.copy(os.path.join(source, name), f"{target}/{name}", overwrite=True)


def test_vertex_ai_from_its_variables_alone(server):
    """Only $AIP_* set: the model in $AIP_STORAGE_URI (a ram:// SavedModel directory, copied there after the
    server started), health 503 before it loads and 200 after, predictions in Vertex's format for both instance
    forms, equal to TensorFlow Serving's Predict."""
    import uuid

    port = _free_port()
    storage = f"ram://vertex-{uuid.uuid4().hex[:8]}/artefacts"
    health, predict = "/v1/endpoints/7/deployedModels/8", "/v1/endpoints/7/deployedModels/8:predict"
    environ = {"AIP_HTTP_PORT": str(port), "AIP_HEALTH_ROUTE": health, "AIP_PREDICT_ROUTE": predict,
               "AIP_STORAGE_URI": storage, "AIP_MODEL_NAME": "sentiment"}
    instance = _vertex_server(environ).start()
    try:
        url = f"http://127.0.0.1:{port}"
        check("Vertex: REST port and interface", (instance.rest_api_port, instance.options.host),
              f"({port}, '0.0.0.0')", (instance.rest_api_port, instance.options.host) == (port, "0.0.0.0"))
        status, _ = _http(url + health)
        check("health before the model is there", status, "503", status == 503)
        _copy_tree(server.entries[0].base_path + "/1", storage)
        for _ in range(120):
            status, _ = _http(url + health)
            if status == 200:
                break
            import time

            time.sleep(0.5)
        check("health once the SavedModel has loaded (as version 1)", status, "200", status == 200)
        want = tfs_predict(server, TEXTS)["probabilities"]
        for form, instances in (("values", TEXTS), ("objects", [{"text": t} for t in TEXTS])):
            status, answer = _http(url + predict, {"instances": instances,
                                                   "parameters": {"signature_name": "serving_default"}})
            got = np.array([row["probabilities"] for row in answer.get("predictions", [])])
            diff = float(np.abs(got - want).max()) if got.shape == want.shape else float("inf")
            check(f"predict route, instances as {form}: status and probabilities vs Predict", (status, diff),
                  f"(200, <= {BOUND})", status == 200 and diff <= BOUND)
        status, answer = _http(url + predict, {"instances": 3})
        check("predict route, instances not a list", (status, answer.get("error", "")[:70]), "400 with a message",
              status == 400 and answer.get("error"))
        status, _ = _http(url + "/v2/models/sentiment/ready")
        check("the other APIs serve it under $AIP_MODEL_NAME", status, "200", status == 200)
    finally:
        instance.stop()


def test_vertex_ai_export_base_and_bad_variables(server):
    """$AIP_STORAGE_URI may also be an export base (integer versions); bad variables are errors naming them."""
    from xlnet_tf.errors import UserError

    port = _free_port()
    instance = _vertex_server({"AIP_HTTP_PORT": str(port), "AIP_STORAGE_URI": server.entries[0].base_path}).start()
    try:
        status, _ = _http(f"http://127.0.0.1:{port}/health")
        check("export base, default routes: health", status, "200", status == 200)
        status, answer = _http(f"http://127.0.0.1:{port}/predict", {"instances": TEXTS[:2]})
        check("export base: predictions", (status, len(answer.get("predictions", []))), "(200, 2)",
              (status, len(answer.get("predictions", []))) == (200, 2))
        check("model name without $AIP_MODEL_NAME", [e.name for e in instance.entries], "['model']",
              [e.name for e in instance.entries] == ["model"])
    finally:
        instance.stop()
    for environ, words in (({"AIP_HTTP_PORT": "eighty"}, "$AIP_HTTP_PORT"),
                           ({"AIP_HTTP_PORT": "8080"}, "$AIP_STORAGE_URI"),
                           ({"AIP_STORAGE_URI": "/x", "AIP_HEALTH_ROUTE": "/a", "AIP_PREDICT_ROUTE": "/a"}, "same path"),
                           ({"AIP_STORAGE_URI": "/x", "AIP_HEALTH_ROUTE": "health"}, "$AIP_HEALTH_ROUTE")):
        with pytest.raises(UserError) as error:
            _vertex_server(environ)
        check(f"environment {environ}", str(error.value), f"names {words}", words in str(error.value))
