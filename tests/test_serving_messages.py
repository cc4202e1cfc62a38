"""TensorFlow Serving's error messages, to the byte, with its status codes (gRPC) and HTTP statuses (REST).

Each expected message is TensorFlow Serving's text (the file of its repository it comes from is named beside
the cases), filled in as it fills it for this request. One server (a stand-in classifier, see
serving/testing.py) answers every case, and a good request after each: it keeps serving. Every check prints
what it got next to what it must be (run with -s).
"""

from __future__ import annotations

import http.client
import json

import grpc
import pytest

from xlnet_tf.serving import serve
from xlnet_tf.serving.testing import build_standin

NAME = "clf"
PREDICT = f"/v1/models/{NAME}:predict"
CLASSIFY = f"/v1/models/{NAME}:classify"


def check(label, value, bound, ok):
    print(f"  CHECK {label}: {value} (bound: {bound}) -> {'ok' if ok else 'FAILED'}")
    assert ok, f"{label}: {value} (bound: {bound})"


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    base = tmp_path_factory.mktemp("messages") / NAME
    build_standin(base / "1", "classifier", warmup=False)
    instance = serve(model_base_path=str(base), model_name=NAME, port=0, rest_api_port=0).start()
    try:
        yield instance
    finally:
        instance.stop(5)


def _http(server, method, path, body=None):
    """-> (HTTP status, the answer's "error" or its JSON). `body`: bytes as they are, anything else as JSON."""
    data = body if isinstance(body, bytes) or body is None else json.dumps(body).encode()
    connection = http.client.HTTPConnection("127.0.0.1", server.rest_api_port, timeout=30)
    try:
        connection.request(method, path, body=data)
        response = connection.getresponse()
        answer = json.loads(response.read() or b"{}")
        return response.status, answer.get("error", answer) if isinstance(answer, dict) else answer
    finally:
        connection.close()


def _still_serving(server):
    status, answer = _http(server, "POST", PREDICT, {"instances": ["a fine film"]})
    assert status == 200 and len(answer["predictions"]) == 1, (status, answer)


def _check_rest(server, label, method, path, body, http_status, message):
    status, got = _http(server, method, path, body)
    check(f"{label}: HTTP status", status, http_status, status == http_status)
    check(f"{label}: message", repr(got), repr(message), got == message)
    _still_serving(server)


# --- REST: bodies (util/json_tensor.cc: ParseJson, FillSignature, FillPredictRequestFromJson; rapidjson 1.1.0's
# GetParseError_En for the parse errors) -----------------------------------------------------------------------

PAIR_MISSING = '{\n    "text_a": "a"\n}'
BOTH = '{\n    "instances": ["a"],\n    "inputs": ["a"]\n}'
CUT = ('{\n    "signature_name": 7,\n    "instances": [' + ", ".join(map(str, range(56))))  # cut at 256 bytes
REST_BODIES = [
    ("empty body", b"", "JSON Parse error: The document is empty"),
    ("only spaces", b"   ", "JSON Parse error: The document is empty. at offset: 3"),
    ("not JSON (TensorFlow Serving's own test)", b"instances = [1, 2]", "JSON Parse error: Invalid value. at offset: 0"),
    ("a name without quotes", b"{not json", "JSON Parse error: Missing a name for object member. at offset: 1"),
    ("a trailing comma in an object", b'{"instances": ["a"],}',
     "JSON Parse error: Missing a name for object member. at offset: 20"),
    ("a trailing comma in an array", b'{"instances": ["a",]}', "JSON Parse error: Invalid value. at offset: 19"),
    ("an array closed by '}'", b'{"instances": [1, 2}',
     "JSON Parse error: Missing a comma or ']' after an array element. at offset: 19"),
    ("no colon", b'{"instances" ["a"]}',
     "JSON Parse error: Missing a colon after a name of object member. at offset: 13"),
    ("no comma between members", b'{"instances": ["a"] "x": 1}',
     "JSON Parse error: Missing a comma or '}' after an object member. at offset: 20"),
    ("an unclosed string", b'{"instances": ["a', "JSON Parse error: Missing a closing quotation mark in string. at offset: 17"),
    ("a bad escape", b'{"instances": ["\\q"]}', "JSON Parse error: Invalid escape character in string. at offset: 16"),
    ("a bad \\u escape", b'{"instances": ["\\u12G4"]}',
     "JSON Parse error: Incorrect hex digit after \\u escape in string. at offset: 16"),
    ("a lone surrogate", b'{"instances": ["\\ud800"]}',
     "JSON Parse error: The surrogate pair in string is invalid. at offset: 16"),
    ("a number without its fraction", b'{"instances": [1.]}', "JSON Parse error: Miss fraction part in number. at offset: 17"),
    ("a number without its exponent", b'{"instances": [1e]}', "JSON Parse error: Miss exponent in number. at offset: 17"),
    ("a number beyond a double", b'{"instances": [1e400]}',
     "JSON Parse error: Number too big to be stored in double. at offset: 15"),
    ("a body that is not an object", b"[1, 2]", "JSON Value: [1, 2] Is not object"),
    ("a non-string signature_name (TensorFlow Serving's own test)", {"signature_name": 100},
     'JSON Value: {\n    "signature_name": 100\n} not formatted correctly. \'signature_name\' key must be a string value.'),
    ("a value cut at 256 bytes", {"signature_name": 7, "instances": list(range(200))},
     f"JSON Value: {CUT} not formatted correctly. 'signature_name' key must be a string value."),
    ("neither 'instances' nor 'inputs'", {"signature_name": "serving_default"}, "Missing 'inputs' or 'instances' key"),
    ("both 'instances' and 'inputs'", {"instances": ["a"], "inputs": ["a"]},
     f"JSON Value: {BOTH} Not formatted correctly expecting only one of 'inputs' or 'instances' keys to exist "),
    ("'instances' not a list", {"instances": "a"},
     'JSON Value: {\n    "instances": "a"\n} Expecting \'instances\' to be an list/array'),
    ("'instances' empty", {"instances": []}, 'JSON Value: {\n    "instances": []\n} No values in \'instances\' array'),
    ("a string for a float input (TensorFlow Serving's own test)", {"signature_name": "scale", "instances": ["x", "y"]},
     "Failed to process element: 0 of 'instances' list. Error: INVALID_ARGUMENT: JSON Value: \"x\" Type: String "
     "is not of expected type: float"),
    ("a string for a float input, columnar", {"signature_name": "scale", "inputs": [[1.5], ["a"]]},
     'JSON Value: "a" Type: String is not of expected type: float'),
    ("a number for a string input", {"instances": [1.5]},
     "Failed to process element: 0 of 'instances' list. Error: INVALID_ARGUMENT: JSON Value: 1.5 Type: Number "
     "is not of expected type: string"),
    ("instances of different sizes", {"signature_name": "scale", "instances": [[1.0], [1.0, 2.0]]},
     "Failed to process element: 1 of 'instances' list. Error: INVALID_ARGUMENT: Expecting tensor size: 1 but got: 2"),
    ("instances of different shapes", {"signature_name": "scale", "instances": [[[1.0, 2.0]], [[1.0], [2.0]]]},
     "Failed to process element: 1 of 'instances' list. Error: INVALID_ARGUMENT: Expecting shape [1,2] but got: [2,1]"),
    ("ragged columns", {"inputs": [["a"], ["b", "c"]]},
     "Encountered list at unexpected size: 2 at level: 1 expected size: 1"),
    ("a value above the tensor's rank", {"inputs": [["a"], "b"]},
     'JSON Value: "b" found at incorrect level: 2 in the JSON DOM. Expected at level: 2'),
    ("bad base64", {"instances": [{"b64": "!!"}]},
     "Failed to process element: 0 of 'instances' list. Error: INVALID_ARGUMENT: Unable to base64 decode"),
    ("a plain list for two inputs", {"signature_name": "pair", "instances": ["a"]},
     "instances is a plain list, but expecting list of objects as multiple input tensors required as per "
     "tensorinfo_map"),
    ("an instance missing an input", {"signature_name": "pair", "instances": [{"text_a": "a"}]},
     f"Failed to process element: 0 of 'instances' list. JSON object: {PAIR_MISSING} keys must be equal to: "
     "text_a,text_b"),
    ("an instance with an input not in the signature",
     {"signature_name": "pair", "instances": [{"text_a": "a", "text_b": "b", "c": "x"}]},
     "Failed to process element: 0 key: c of 'instances' list. Error: INVALID_ARGUMENT: JSON object: does not have "
     "named input: c"),
    ("an object after a list", {"signature_name": "pair", "instances": [{"text_a": "a", "text_b": "b"}, "c"]},
     "Expecting object but got list at item 1 of input list"),
    ("'inputs' missing an input", {"signature_name": "pair", "inputs": {"text_a": ["a"]}},
     "Missing named input: text_b in 'inputs' object."),
    ("'inputs' a plain list for two inputs", {"signature_name": "pair", "inputs": ["a"]},
     "inputs is a plain value/list, but expecting an object as multiple input tensors required as per tensorinfo_map"),
]


@pytest.mark.parametrize("label,body,message", REST_BODIES, ids=[case[0] for case in REST_BODIES])
def test_rest_predict_bodies(server, label, body, message):
    _check_rest(server, label, "POST", PREDICT, body, 400, message)


# --- REST: models, versions, labels, signatures (http_rest_api_handler.cc GetInfoMap, model_servers/
# server_core.cc, core/basic_manager.cc with core/manager.h's ServableRequest::DebugString,
# model_servers/get_model_status_impl.cc, servables/tensorflow/classifier.cc, util/json_tensor.cc) --------------

REST_ROUTES = [
    ("an unknown signature", "POST", PREDICT, {"signature_name": "nope", "instances": ["a"]}, 400,
     'Serving signature name: "nope" not found in signature def'),
    ("an unknown model", "POST", "/v1/models/nope:predict", {"instances": ["a"]}, 404,
     "Servable not found for request: Latest(nope)"),
    ("an unknown version", "POST", f"/v1/models/{NAME}/versions/99:predict", {"instances": ["a"]}, 404,
     f"Servable not found for request: Specific({NAME}, 99)"),
    ("an unknown label", "POST", f"/v1/models/{NAME}/labels/nope:predict", {"instances": ["a"]}, 400,
     "Unrecognized servable version label: nope"),
    ("an unknown label of an unknown model", "POST", "/v1/models/nope/labels/x:predict", {"instances": ["a"]}, 400,
     "Unrecognized servable version label: x"),
    ("the status of an unknown model", "GET", "/v1/models/nope", None, 404, "Could not find any versions of model nope"),
    ("the status of an unknown version", "GET", f"/v1/models/{NAME}/versions/99", None, 404,
     f"Could not find version 99 of model {NAME}"),
    ("classify: no examples", "POST", CLASSIFY, {"signature_name": "classification"}, 400,
     'JSON Value: {\n    "signature_name": "classification"\n} When method is classify, key \'examples\' is '
     "expected and was not found"),
    ("regress: no examples (TensorFlow Serving says classify there too)", "POST", f"/v1/models/{NAME}:regress",
     {"signature_name": "regression"}, 400,
     'JSON Value: {\n    "signature_name": "regression"\n} When method is classify, key \'examples\' is '
     "expected and was not found"),
    ("classify: an example that is not an object", "POST", CLASSIFY,
     {"signature_name": "classification", "examples": ["text"]}, 400, "Example must be JSON object but got JSON String"),
    ("classify: a non-string signature_name", "POST", CLASSIFY, {"signature_name": 1, "examples": [{"text": "a"}]},
     400, 'JSON Value: {\n    "signature_name": 1,\n    "examples": [{\n            "text": "a"\n        }]\n} not '
     "formatted correctly. 'signature_name' key must be a string value."),
    ("classify: mixed types in a feature", "POST", CLASSIFY,
     {"signature_name": "classification", "examples": [{"text": ["a", 1]}]}, 400,
     "Unexpected element type in feature: text expecting type: bytes"),
    ("classify: an unknown signature", "POST", CLASSIFY, {"signature_name": "nope", "examples": [{"text": "a"}]},
     400, "No signature was found with the name: nope"),
]


@pytest.mark.parametrize("label,method,path,body,http_status,message", REST_ROUTES,
                         ids=[case[0] for case in REST_ROUTES])
def test_rest_models_and_signatures(server, label, method, path, body, http_status, message):
    _check_rest(server, label, method, path, body, http_status, message)


# --- gRPC (servables/tensorflow/predict_util.cc, TensorFlow's cc/saved_model/util.cc GetInputValues,
# classifier.cc, regressor.cc, multi_inference.cc, model_servers/server_core.cc, core/basic_manager.cc,
# model_servers/get_model_status_impl.cc) -------------------------------------------------------------------------


def _predict(model="clf", signature="", inputs=None, output_filter=(), version=None, label=None):
    from tensorflow_serving.apis import predict_pb2

    from xlnet_tf.serving.tensors import from_ndarray

    request = predict_pb2.PredictRequest()
    request.model_spec.SetInParent()
    request.model_spec.name, request.model_spec.signature_name = model, signature
    if version is not None:
        request.model_spec.version.value = version
    if label is not None:
        request.model_spec.version_label = label
    for alias, values in (inputs if inputs is not None else {"text": ["a"]}).items():
        request.inputs[alias].CopyFrom(from_ndarray(values))
    request.output_filter.extend(output_filter)
    return "Predict", request


def _infer(kind, signature, model="clf"):
    from tensorflow_serving.apis import classification_pb2, regression_pb2

    from xlnet_tf.serving.client import text_examples

    request = {"Classify": classification_pb2.ClassificationRequest,
               "Regress": regression_pb2.RegressionRequest}[kind]()
    request.model_spec.name, request.model_spec.signature_name = model, signature
    request.input.CopyFrom(text_examples({"text": ["a fine film"]}))
    return kind, request


def _multi(*tasks):
    from tensorflow_serving.apis import inference_pb2

    from xlnet_tf.serving.client import text_examples

    request = inference_pb2.MultiInferenceRequest()
    for model, signature, method in tasks:
        task = request.tasks.add()
        task.model_spec.name, task.model_spec.signature_name, task.method_name = model, signature, method
    request.input.CopyFrom(text_examples({"text": ["a fine film"]}))
    return "MultiInference", request


def _status(model):
    from tensorflow_serving.apis import get_model_status_pb2

    request = get_model_status_pb2.GetModelStatusRequest()
    request.model_spec.name = model
    return "GetModelStatus", request


CLASSIFY_METHOD, REGRESS_METHOD = "tensorflow/serving/classify", "tensorflow/serving/regress"
GRPC_CASES = [
    ("MultiInference naming an undefined signature",
     lambda: _multi(("clf", "classification", CLASSIFY_METHOD), ("clf", "nope", REGRESS_METHOD)),
     "INVALID_ARGUMENT", "Requested signature not found in model graph: nope"),
    ("MultiInference naming a signature twice",
     lambda: _multi(("clf", "classification", CLASSIFY_METHOD), ("clf", "classification", CLASSIFY_METHOD)),
     "INVALID_ARGUMENT", "Duplicate evaluation of signature: classification"),
    ("MultiInference on two models",
     lambda: _multi(("clf", "classification", CLASSIFY_METHOD), ("other", "regression", REGRESS_METHOD)),
     "INVALID_ARGUMENT", "All ModelSpecs in a MultiInferenceRequest must access the same model name."),
    ("MultiInference with another method", lambda: _multi(("clf", "classification", "tensorflow/serving/predict")),
     "UNIMPLEMENTED", "Unsupported signature method_name: tensorflow/serving/predict"),
    ("MultiInference without tasks", lambda: _multi(), "INVALID_ARGUMENT", "ModelSpec has no name specified."),
    ("MultiInference on an unknown model", lambda: _multi(("nope", "classification", CLASSIFY_METHOD)), "NOT_FOUND",
     "Servable not found for request: Latest(nope)"),
    ("Classify naming an undefined signature", lambda: _infer("Classify", "nope"), "INVALID_ARGUMENT",
     "No signature was found with the name: nope"),
    ("Regress naming an undefined signature", lambda: _infer("Regress", "nope"), "INVALID_ARGUMENT",
     "No signature was found with the name: nope"),
    ("Predict naming an undefined signature", lambda: _predict(signature="nope"), "FAILED_PRECONDITION",
     'Serving signature key "nope" not found.'),
    ("Predict with an extra input", lambda: _predict(inputs={"text": ["a"], "other": ["b"]}), "INVALID_ARGUMENT",
     "input size does not match signature: 2!=1 len({other,text}) != len({text}). Sent extra: {other}. Missing but "
     "required: {}."),
    ("Predict missing an input", lambda: _predict(signature="pair", inputs={"text_a": ["a"]}), "INVALID_ARGUMENT",
     "input size does not match signature: 1!=2 len({text_a}) != len({text_a,text_b}). Sent extra: {}. Missing but "
     "required: {text_b}."),
    ("Predict with an unknown output_filter", lambda: _predict(output_filter=["nope"]), "INVALID_ARGUMENT",
     "output tensor alias not found in signature: nope Outputs expected to be in the set "
     "{label,label_id,logits,probabilities}."),
    ("Predict with an output_filter twice", lambda: _predict(output_filter=["label", "label"]), "INVALID_ARGUMENT",
     "duplicate output tensor alias: label"),
    ("Predict on an unknown model", lambda: _predict(model="nope"), "NOT_FOUND",
     "Servable not found for request: Latest(nope)"),
    ("Predict on an unknown version", lambda: _predict(version=99), "NOT_FOUND",
     "Servable not found for request: Specific(clf, 99)"),
    ("Predict with an unknown label", lambda: _predict(label="nope"), "INVALID_ARGUMENT",
     "Unrecognized servable version label: nope"),
    ("Predict without a model name", lambda: _predict(model=""), "INVALID_ARGUMENT", "ModelSpec has no name specified."),
    ("GetModelStatus of an unknown model", lambda: _status("nope"), "NOT_FOUND",
     "Could not find any versions of model nope"),
]


@pytest.mark.parametrize("label,request_of,code,message", GRPC_CASES, ids=[case[0] for case in GRPC_CASES])
def test_grpc_messages(server, label, request_of, code, message):
    from tensorflow_serving.apis import model_service_pb2_grpc, prediction_service_pb2_grpc

    method, request = request_of()
    with grpc.insecure_channel(server.grpc_target) as channel:
        stub = (model_service_pb2_grpc.ModelServiceStub if method == "GetModelStatus" else
                prediction_service_pb2_grpc.PredictionServiceStub)(channel)
        try:
            getattr(stub, method)(request, timeout=30)
            got_code, got = "OK", ""
        except grpc.RpcError as error:
            got_code, got = error.code().name, error.details()
    check(f"{label}: status code", got_code, code, got_code == code)
    check(f"{label}: message", repr(got), repr(message), got == message)
    _still_serving(server)


def test_grpc_input_not_in_the_signature(server):
    """Predict with one input under another name: TensorFlow's GetInputValues names the signature's feed."""
    feed = server.manager.models[NAME].versions[1].servable.signatures["serving_default"].inputs["text"].name
    test_grpc_messages(server, "Predict with an input under another name", lambda: _predict(inputs={"other": ["a"]}),
                       "INVALID_ARGUMENT", f"Signature input alias: text(feed name: {feed}) not found in request and "
                       "no default value provided. Inputs expected to be in the request {other}, or default input "
                       "alias set: ")


# --- the model config file (util/proto_util.h ParseProtoTextFile; protobuf's TextFormat parser logs the first
# line) -----------------------------------------------------------------------------------------------------


def test_a_bad_model_config_file():
    from xlnet_tf.errors import UserError
    from xlnet_tf.serving import config

    try:
        config.parse_model_server_config("model_config_list { config { nme: 'x' } }", "/models/bad.config")
        got = ""
    except UserError as error:
        got = str(error)
    want = ('Error parsing text-format tensorflow.serving.ModelServerConfig: 1:30: Message type '
            '"tensorflow.serving.ModelConfig" has no field named "nme".\n'
            "Invalid protobuf file: '/models/bad.config'")
    check("a misspelt field: message", repr(got), repr(want), got == want)
