"""Issue 50, one request at a time: each hostile request of the issue, over each API it reaches, sent to a tiny real
classification export served by `xlnet-tf serve` in its own process.

For every case: the server is still alive afterwards; the answer is a client error (REST 4xx; gRPC a status other
than INTERNAL / UNKNOWN / DATA_LOSS / UNAVAILABLE / DEADLINE_EXCEEDED), or a correct answer where the request is
legal; no traceback text in the answer; the message names the request's field or input (loosely: the input's
name, "shape", "rank", "dim", "version", ...); and then every good request of `served_export.good_requests` (REST
/v1, /v2 JSON and binary, gRPC Predict / Classify / MultiInference / GetModelMetadata / ModelInfer) is answered
exactly as it was before any abuse. A case that kills the server fails with its exit status, and the server is
started again for the next case. Each case prints one line (run with -s):

    CASE <api> <what>: <status> <message> (expected: ...) -> ok/FAILED
"""

from __future__ import annotations

import json
import struct
from dataclasses import dataclass

import pytest
from served_export import (MODEL, References, ServerProcess, shared_export, examples_input, has_traceback,
                           infer_request, int_proto, multi_inference_request, predict_request, string_proto,
                           classify_request)

pytestmark = pytest.mark.slow  # trains, serves or starts processes: `make test` only, not `make test-quick`

HUGE = 4611686018427387904  # 2**62
WORD = "a" * (10 << 20)  # one 10 MB word (today: 7-16 s and +2.8 GB of server memory per request)
COST_BOUND_S = 5.0  # a 10 MB word answered, or a too-wide id input refused, within
RSS_GROWTH_BOUND = 1.5  # the server's RSS after every case <= this x its RSS after warm-up
LABELS = ("negative", "neutral", "positive")  # the export's (conftest.tiny_finetuned_classifier)
LONG_VERSION = "9" * 5000  # beyond Python's 4300-digit limit of int(str)
EXAMPLES = 200_000  # a :classify of this many Examples, the last one bad
CLASSIFY_BOUND_S = 5.0  # refused within (today: 11-12 s, every valid piece run first)
IDS = ("input_ids", "segment_ids", "padding_mask")
SHAPE_WORDS = ("text", "shape", "rank")  # the input's name, or the field named loosely
IDS_WORDS = ("input_ids", "shape", "rank")


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    work = tmp_path_factory.mktemp("hostile")
    server = ServerProcess(shared_export(tmp_path_factory), work).start()
    references = References(server)
    server.warm_rss = server.rss_bytes()  # after warm-up and the good requests
    yield server, references
    server.stop()
    print(f"\nserver processes started: {server.starts}; deaths: {[status for status, _ in server.deaths]}")


# -- the cases ------------------------------------------------------------------------------------------------


@dataclass
class Case:
    id: str
    api: str  # as printed: "REST /v1", "REST /v2", "gRPC Predict", "gRPC ModelInfer", ...
    what: str
    send: object  # server -> Answer
    words: tuple = ()  # the message names one of these (case-insensitive); () : not checked
    legal: object = None  # an OK answer is right when legal(answer) is True; None: the request must be refused
    bound_s: float | None = None  # answered within (printed)


def v1_predict(body, path=f"/v1/models/{MODEL}:predict"):
    return lambda server: server.rest("POST", path, body)


def nested(depth, key):
    """A REST /v1 predict body whose `key` ("inputs" / "instances") holds "a" inside `depth` lists."""
    return '{"%s": %s"a"%s}' % (key, "[" * depth, "]" * depth)


def v2_infer(payload, path=f"/v2/models/{MODEL}/infer"):
    return lambda server: server.rest("POST", path, payload)


def v2_text(shape, data=("a",), **extra):
    return {"inputs": [{"name": "text", "datatype": "BYTES", "shape": list(shape), "data": list(data), **extra}]}


def v2_binary(shape, elements, size=None):
    """A v2 REST infer with the binary-data extension: BYTES `elements` raw after the JSON."""
    raw = b"".join(struct.pack("<I", len(e)) + e for e in elements)
    parameters = {"binary_data_size": len(raw) if size is None else size}
    header = json.dumps({"inputs": [{"name": "text", "datatype": "BYTES", "shape": list(shape),
                                     "parameters": parameters}]}).encode()
    return lambda server: server.rest("POST", f"/v2/models/{MODEL}/infer", header + raw,
                                      {"Inference-Header-Content-Length": str(len(header))})


def predict(inputs, **spec):
    """gRPC Predict; `inputs`: {alias: TensorProto} or a function returning it (built when sent)."""
    return lambda server: server.grpc("predict", "Predict", predict_request(inputs() if callable(inputs) else inputs,
                                                                            **spec))


def ids_predict(**changed):
    """gRPC Predict on predict_ids: int32 [1, 3] ids, with `changed` {alias: TensorProto} replacing some."""
    from tensorflow.core.framework import types_pb2

    inputs = {name: int_proto([1, 2, 3] if name != "padding_mask" else [1, 1, 1], [1, 3], types_pb2.DT_INT32)
              for name in IDS}
    inputs.update(changed)
    return predict(inputs, signature="predict_ids")


def model_infer(tensors, **extra):
    return lambda server: server.grpc("v2", "ModelInfer", infer_request(tensors, **extra))


def v2_rpc(method, **fields):
    def send(server):
        from tritonclient.grpc import service_pb2

        return server.grpc("v2", method, getattr(service_pb2, f"{method}Request")(**fields))

    return send


def dt(name):
    from tensorflow.core.framework import types_pb2

    return getattr(types_pb2, name)


def empty_logits(answer):
    """A correct answer to an empty predict_ids batch: logits of shape [0, 3]."""
    if answer.api == "grpc":
        logits = answer.response.outputs["logits"]
        return [d.size for d in logits.tensor_shape.dim] == [0, 3]
    body = json.loads(answer.body)
    return body.get("outputs") == [] or body.get("outputs", {}).get("logits") == []


def bad_last(count):
    """`count` Examples of "a fine film", the last one without the `text` feature (it has `txt`)."""
    listed = examples_input(["a fine film"] * (count - 1))
    listed.example_list.examples.add().features.feature["txt"].bytes_list.value.append(b"a fine film")
    return listed


def labelled(answer):
    """A correct answer to one text: one label of the export's."""
    if answer.api == "grpc":
        response = answer.response
        label = response.outputs["label"] if hasattr(response, "model_spec") else None
        if label is None:  # ModelInfer: outputs in alias order, typed contents
            found = [t for t in response.outputs if t.name == "label"]
            values = list(found[0].contents.bytes_contents) if found else []
        else:
            values = list(label.string_val)
        return len(values) == 1 and values[0].decode() in LABELS
    body = json.loads(answer.body)
    if "predictions" in body:
        return len(body["predictions"]) == 1 and body["predictions"][0]["label"] in LABELS
    labels = [t for t in body.get("outputs", []) if t["name"] == "label"]
    return len(labels) == 1 and labels[0]["data"][0] in LABELS


def wide_ids(width):
    """{alias: TensorProto} int32 [1, width] ids (one int_val each, filled by TensorFlow's rule)."""
    return {name: int_proto([7 if name == "input_ids" else 1], [1, width], dt("DT_INT32")) for name in IDS}


def classify_rest(count):
    body = json.dumps({"signature_name": "classification",
                       "examples": [{"text": "a fine film"}] * (count - 1) + [{"txt": "a fine film"}]}).encode()
    return lambda server: server.rest("POST", f"/v1/models/{MODEL}:classify", body)


CASES = [
    # 1. String inputs of rank 33..64 (today: the server segfaults inside the session run)
    Case("rank33-v1-inputs", "REST /v1", ":predict 'inputs' nested 33 deep", v1_predict(nested(33, "inputs")),
         SHAPE_WORDS),
    Case("rank40-v1-instances", "REST /v1", ":predict 'instances' nested 40 deep", v1_predict(nested(40, "instances")),
         SHAPE_WORDS),
    Case("rank40-v2", "REST /v2", "infer BYTES of shape forty 1s", v2_infer(v2_text([1] * 40)), SHAPE_WORDS),
    Case("rank64-v2-binary", "REST /v2", "infer binary BYTES of shape sixty-four 1s", v2_binary([1] * 64, [b"a"]),
         SHAPE_WORDS),
    Case("rank40-predict", "gRPC Predict", "DT_STRING with forty dims of 1",
         predict(lambda: {"text": string_proto(["a"], [1] * 40)}), SHAPE_WORDS),
    Case("rank64-predict", "gRPC Predict", "DT_STRING with sixty-four dims of 1",
         predict(lambda: {"text": string_proto(["a"], [1] * 64)}), SHAPE_WORDS),
    Case("rank40-infer", "gRPC ModelInfer", "BYTES of shape forty 1s", model_infer([("text", "BYTES", [1] * 40,
                                                                                   ["a"])]), SHAPE_WORDS),
    # 2. Rank 65 and more (today: 500 / INTERNAL "maximum supported dimension for an ndarray is currently 64")
    Case("rank98-v1-instances", "REST /v1", ":predict 'instances' nested 98 deep", v1_predict(nested(98, "instances")),
         SHAPE_WORDS),
    Case("rank65-v1-inputs", "REST /v1", ":predict 'inputs' nested 65 deep", v1_predict(nested(65, "inputs")),
         SHAPE_WORDS),
    Case("rank65-v2", "REST /v2", "infer BYTES of shape sixty-five 1s", v2_infer(v2_text([1] * 65)), SHAPE_WORDS),
    Case("rank65-predict", "gRPC Predict", "DT_STRING with sixty-five dims of 1",
         predict(lambda: {"text": string_proto(["a"], [1] * 65)}), SHAPE_WORDS),
    Case("rank65-infer", "gRPC ModelInfer", "BYTES of shape sixty-five 1s",
         model_infer([("text", "BYTES", [1] * 65, ["a"])]), SHAPE_WORDS),
    # 2. Shapes whose product overflows, or a zero beside a huge dim
    Case("overflow-v2", "REST /v2", "shape [2**62, 4] with data []", v2_infer(v2_text([HUGE, 4], [])), SHAPE_WORDS),
    Case("zero-huge-v2", "REST /v2", "shape [0, 2**62] with data []", v2_infer(v2_text([0, HUGE], [])), SHAPE_WORDS),
    Case("overflow-v2-ids", "REST /v2", "predict_ids INT32 shape [2**62, 4] with data []", v2_infer({
        "parameters": {"signature_name": "predict_ids"},
        "inputs": [{"name": n, "datatype": "INT32", "shape": [HUGE, 4], "data": []} for n in IDS]}), IDS_WORDS),
    Case("overflow-infer", "gRPC ModelInfer", "BYTES shape [2**62, 4], no contents",
         model_infer([("text", "BYTES", [HUGE, 4], [])]), SHAPE_WORDS),
    Case("zero-huge-infer", "gRPC ModelInfer", "BYTES shape [0, 2**62], no contents",
         model_infer([("text", "BYTES", [0, HUGE], [])]), SHAPE_WORDS),
    Case("zero-huge-predict", "gRPC Predict", "DT_STRING dims [0, 2**62]", predict(lambda: {"text": string_proto([],
                                                                                                     [0, HUGE])}),
         SHAPE_WORDS),
    Case("zero-huge-predict-ids", "gRPC Predict", "predict_ids DT_INT32 dims [0, 2**62] (an empty batch)",
         lambda server: ids_predict(**{n: int_proto([], [0, HUGE], dt("DT_INT32")) for n in IDS})(server),
         IDS_WORDS + ("width", "max_seq_len", "length"), legal=empty_logits),
    # 2. Negative dims
    Case("negative-v2", "REST /v2", "shape [-1]", v2_infer(v2_text([-1])), SHAPE_WORDS),
    Case("negative-v2-2d", "REST /v2", "shape [2, -3]", v2_infer(v2_text([2, -3], [])), SHAPE_WORDS),
    Case("negative-predict", "gRPC Predict", "DT_STRING dims [-1]",
         predict(lambda: {"text": string_proto(["a"], [-1])}), SHAPE_WORDS),
    Case("negative-predict-ids", "gRPC Predict", "predict_ids DT_INT32 dims [1, -3]",
         lambda server: ids_predict(input_ids=int_proto([1, 2, 3], [1, -3], dt("DT_INT32")))(server), IDS_WORDS),
    Case("negative-infer", "gRPC ModelInfer", "BYTES shape [-1]", model_infer([("text", "BYTES", [-1], ["a"])]),
         SHAPE_WORDS),
    # 2. v2 `parameters` that are not objects (today: 500 "'int' object has no attribute 'get'")
    Case("input-parameters-int", "REST /v2", "an input's parameters: 7", v2_infer(v2_text([1], parameters=7)),
         ("parameters",)),
    Case("input-parameters-str", "REST /v2", "an input's parameters: \"binary\"",
         v2_infer(v2_text([1], parameters="binary")), ("parameters",)),
    Case("input-parameters-list", "REST /v2", "an input's parameters: [1]", v2_infer(v2_text([1], parameters=[1])),
         ("parameters",)),
    Case("output-parameters-int", "REST /v2", "an output's parameters: 7 (after the model ran, today)",
         v2_infer({**v2_text([1]), "outputs": [{"name": "label", "parameters": 7}]}), ("parameters",)),
    Case("output-parameters-list", "REST /v2", "an output's parameters: [true]",
         v2_infer({**v2_text([1]), "outputs": [{"name": "probabilities", "parameters": [True]}]}), ("parameters",)),
    Case("request-parameters-int", "REST /v2", "the request's parameters: 7", v2_infer({**v2_text([1]),
                                                                                       "parameters": 7}),
         ("parameters",)),
    Case("infer-signature-parameter-int", "gRPC ModelInfer", "parameter signature_name as an int64 (gRPC's "
         "parameters are typed: the nearest case)", model_infer([("text", "BYTES", [1], ["a"])],
                                                                parameters={"signature_name": 7}),
         ("signature_name", "parameter")),
    # 2. A version of 5000 digits (today: 500 / INTERNAL "Exceeds the limit (4300 digits) for integer string
    # conversion"; TensorFlow Serving: 400 "Failed to convert version")
    Case("version-v1-predict", "REST /v1", "POST /versions/<5000 digits>:predict",
         v1_predict({"instances": ["a"]}, f"/v1/models/{MODEL}/versions/{LONG_VERSION}:predict"), ("version",)),
    Case("version-v1-classify", "REST /v1", "POST /versions/<5000 digits>:classify",
         v1_predict({"signature_name": "classification", "examples": [{"text": "a"}]},
                    f"/v1/models/{MODEL}/versions/{LONG_VERSION}:classify"), ("version",)),
    Case("version-v1-status", "REST /v1", "GET /versions/<5000 digits>",
         lambda server: server.rest("GET", f"/v1/models/{MODEL}/versions/{LONG_VERSION}"), ("version",)),
    Case("version-v1-metadata", "REST /v1", "GET /versions/<5000 digits>/metadata",
         lambda server: server.rest("GET", f"/v1/models/{MODEL}/versions/{LONG_VERSION}/metadata"), ("version",)),
    Case("label-v1-predict", "REST /v1", "POST /labels/<5000 digits>:predict",
         v1_predict({"instances": ["a"]}, f"/v1/models/{MODEL}/labels/{LONG_VERSION}:predict"), ("label",)),
    Case("version-v2-infer", "REST /v2", "POST /versions/<5000 digits>/infer",
         v2_infer(v2_text([1]), f"/v2/models/{MODEL}/versions/{LONG_VERSION}/infer"), ("version",)),
    Case("version-v2-ready", "REST /v2", "GET /versions/<5000 digits>/ready",
         lambda server: server.rest("GET", f"/v2/models/{MODEL}/versions/{LONG_VERSION}/ready"), ("version",)),
    Case("version-v2-metadata", "REST /v2", "GET /versions/<5000 digits>",
         lambda server: server.rest("GET", f"/v2/models/{MODEL}/versions/{LONG_VERSION}"), ("version",)),
    Case("version-model-ready", "gRPC ModelReady", "version of 5000 digits",
         v2_rpc("ModelReady", name=MODEL, version=LONG_VERSION), ("version",)),
    Case("version-model-metadata", "gRPC ModelMetadata", "version of 5000 digits",
         v2_rpc("ModelMetadata", name=MODEL, version=LONG_VERSION), ("version",)),
    Case("version-model-infer", "gRPC ModelInfer", "model_version of 5000 digits",
         model_infer([("text", "BYTES", [1], ["a"])], version=LONG_VERSION), ("version",)),
    Case("label-predict", "gRPC Predict", "model_spec.version_label of 5000 digits (the string in its model_spec)",
         predict(lambda: {"text": string_proto(["a"], [1])}, label=LONG_VERSION), ("label",)),
    # 2. int_val outside its dtype (today: INTERNAL "OverflowError: Python integer ... out of bounds for int8")
    Case("int8-text", "gRPC Predict", "DT_INT8 int_val -195884157 to text",
         predict(lambda: {"text": int_proto([-195884157], [1], dt("DT_INT8"))}), ("text", "int8")),
    Case("int8-ids", "gRPC Predict", "predict_ids: DT_INT8 int_val -195884157 to input_ids",
         lambda server: ids_predict(input_ids=int_proto([-195884157, 1, 2], [1, 3], dt("DT_INT8")))(server),
         ("input_ids", "int8")),
    Case("uint8-ids", "gRPC Predict", "predict_ids: DT_UINT8 int_val 70000 to segment_ids",
         lambda server: ids_predict(segment_ids=int_proto([70000, 0, 0], [1, 3], dt("DT_UINT8")))(server),
         ("segment_ids", "uint8")),
    Case("int16-ids", "gRPC Predict", "predict_ids: DT_INT16 int_val -195884157 to padding_mask",
         lambda server: ids_predict(padding_mask=int_proto([-195884157, 1, 1], [1, 3], dt("DT_INT16")))(server),
         ("padding_mask", "int16")),
    Case("int32-range-v1", "REST /v1", "predict_ids: input_ids value 2**40 (int32)", v1_predict({
        "signature_name": "predict_ids", "inputs": {"input_ids": [[2 ** 40]], "segment_ids": [[0]],
                                                    "padding_mask": [[1]]}}), ("input_ids", "int32")),
    Case("int32-range-v2", "REST /v2", "predict_ids: INT32 value 2**40", v2_infer({
        "parameters": {"signature_name": "predict_ids"},
        "inputs": [{"name": n, "datatype": "INT32", "shape": [1, 1], "data": [2 ** 40 if n == "input_ids" else 1]}
                   for n in IDS]}), ("input_ids", "int32")),
    # 2. A text input of rank 0 or 2 where the signature declares [None] (today: answered 200 / OK)
    Case("rank0-v1-inputs", "REST /v1", ":predict 'inputs': \"a\" (rank 0)", v1_predict({"inputs": "a"}),
         SHAPE_WORDS),
    Case("rank2-v1-inputs", "REST /v1", ":predict 'inputs': [[\"a\"]] (rank 2)", v1_predict({"inputs": [["a"]]}),
         SHAPE_WORDS),
    Case("rank2-v1-instances", "REST /v1", ":predict 'instances': [[\"a\"]] (rank 2)",
         v1_predict({"instances": [["a"]]}), SHAPE_WORDS),
    Case("rank0-v2", "REST /v2", "infer BYTES shape []", v2_infer(v2_text([])), SHAPE_WORDS),
    Case("rank2-v2", "REST /v2", "infer BYTES shape [1, 1]", v2_infer(v2_text([1, 1])), SHAPE_WORDS),
    Case("rank0-predict", "gRPC Predict", "DT_STRING dims []", predict(lambda: {"text": string_proto(["a"], [])}),
         SHAPE_WORDS),
    Case("rank2-predict", "gRPC Predict", "DT_STRING dims [1, 1]",
         predict(lambda: {"text": string_proto(["a"], [1, 1])}), SHAPE_WORDS),
    Case("rank0-infer", "gRPC ModelInfer", "BYTES shape []", model_infer([("text", "BYTES", [], ["a"])]),
         SHAPE_WORDS),
    Case("rank2-infer", "gRPC ModelInfer", "BYTES shape [1, 1]", model_infer([("text", "BYTES", [1, 1], ["a"])]),
         SHAPE_WORDS),
    Case("rank1-ids-predict", "gRPC Predict", "predict_ids: input_ids of rank 1 (declared [None, None])",
         lambda server: ids_predict(input_ids=int_proto([1, 2, 3], [3], dt("DT_INT32")))(server), IDS_WORDS),
    # 2. Shape / data count mismatches
    Case("count-v2", "REST /v2", "shape [3] with one value", v2_infer(v2_text([3])), SHAPE_WORDS),
    Case("count-v2-binary", "REST /v2", "binary: shape [2] with one raw element", v2_binary([2], [b"a"]),
         SHAPE_WORDS),
    Case("count-v2-binary-size", "REST /v2", "binary: binary_data_size past the body", v2_binary([1], [b"a"], 99),
         ("text", "binary_data_size")),
    Case("count-predict", "gRPC Predict", "DT_STRING dims [2] with one value",
         predict(lambda: {"text": string_proto(["a"], [2])}), SHAPE_WORDS),
    Case("count-predict-too-many", "gRPC Predict", "DT_STRING dims [1] with three values",
         predict(lambda: {"text": string_proto(["a", "b", "c"], [1])}), SHAPE_WORDS),
    Case("count-infer", "gRPC ModelInfer", "BYTES shape [2] with one value",
         model_infer([("text", "BYTES", [2], ["a"])]), SHAPE_WORDS),
    Case("count-infer-raw", "gRPC ModelInfer", "raw BYTES: shape [2] with one element",
         model_infer([("text", "BYTES", [2], None)], raw=[struct.pack("<I", 1) + b"a"]), SHAPE_WORDS),
    Case("count-predict-content", "gRPC Predict", "predict_ids: tensor_content of 5 bytes for [1, 3] int32",
         lambda server: ids_predict(input_ids=_content_proto(b"\x01\x00\x00\x00\x02", [1, 3]))(server),
         IDS_WORDS + ("tensor_content",)),
    # (TensorFlow Serving's own words, pinned by tests/test_serving_messages.py: "... unexpected size ...")
    Case("ragged-v1", "REST /v1", "predict_ids: rows of 3 and 2 ids", v1_predict({
        "signature_name": "predict_ids", "inputs": {"input_ids": [[1, 2, 3], [1, 2]], "segment_ids": [[0, 0, 0]] * 2,
                                                    "padding_mask": [[1, 1, 1]] * 2}}),
         ("input_ids", "size", "shape")),
    # 3. One 10 MB word (today: 7-16 s and about +2.8 GB of server memory: the export's SentencePiece read it all,
    # then kept 30 pieces); the export now reads its first pieces x piece_bytes bytes
    Case("word-10mb-v1", "REST /v1", ":predict 'instances' of one 10 MB word", v1_predict({"instances": [WORD]}),
         legal=labelled, bound_s=COST_BOUND_S),
    Case("word-10mb-v2", "REST /v2", "infer one 10 MB word", v2_infer(v2_text([1], [WORD])), legal=labelled,
         bound_s=COST_BOUND_S),
    Case("word-10mb-predict", "gRPC Predict", "one 10 MB word", predict(lambda: {"text": string_proto([WORD], [1])}),
         legal=labelled, bound_s=COST_BOUND_S),
    Case("word-10mb-infer", "gRPC ModelInfer", "one 10 MB word", model_infer([("text", "BYTES", [1], [WORD])]),
         legal=labelled, bound_s=COST_BOUND_S),
    # 3. predict_ids wider than the export's length (today: the encoder ran first: [1, 4096] +2 GB in a second,
    # [1, 100000] over 60 s and 11.8 GB)
    Case("ids-4096-predict", "gRPC Predict", "predict_ids [1, 4096]", lambda server: ids_predict(**wide_ids(4096))(
        server), ("input_ids", "positions"), bound_s=COST_BOUND_S),
    Case("ids-100000-predict", "gRPC Predict", "predict_ids [1, 100000]", lambda server: ids_predict(
        **wide_ids(100_000))(server), ("input_ids", "positions"), bound_s=COST_BOUND_S),
    Case("ids-100000-v1", "REST /v1", "predict_ids [1, 100000] (columnar)", v1_predict({
        "signature_name": "predict_ids", "inputs": {n: [[1] * 100_000] for n in IDS}}), ("input_ids", "positions"),
         bound_s=COST_BOUND_S),
    Case("ids-100000-v2", "REST /v2", "predict_ids INT32 [1, 100000]", v2_infer({
        "parameters": {"signature_name": "predict_ids"},
        "inputs": [{"name": n, "datatype": "INT32", "shape": [1, 100_000], "data": [1] * 100_000} for n in IDS]}),
         ("input_ids", "positions"), bound_s=COST_BOUND_S),
    Case("ids-100000-infer", "gRPC ModelInfer", "predict_ids INT32 [1, 100000]", model_infer(
        [(n, "INT32", [1, 100_000], [1] * 100_000) for n in IDS], parameters={"signature_name": "predict_ids"}),
         ("input_ids", "positions"), bound_s=COST_BOUND_S),
    # 3. A Classify of 200,000 Examples whose last one is bad (today: every valid piece runs first, 11-12 s, and
    # the error does not name the request's index)
    Case("classify-last-bad-rest", "REST /v1", f":classify of {EXAMPLES} Examples, the last without 'text'",
         classify_rest(EXAMPLES), (str(EXAMPLES - 1),), bound_s=CLASSIFY_BOUND_S),
    Case("classify-last-bad-grpc", "gRPC Classify", f"{EXAMPLES} Examples, the last without 'text'",
         lambda server: server.grpc("predict", "Classify", classify_request(bad_last(EXAMPLES))),
         (str(EXAMPLES - 1),), bound_s=CLASSIFY_BOUND_S),
    Case("multi-inference-last-bad-grpc", "gRPC MultiInference", f"{EXAMPLES} Examples, the last without 'text'",
         lambda server: server.grpc("predict", "MultiInference", multi_inference_request(bad_last(EXAMPLES))),
         (str(EXAMPLES - 1),), bound_s=CLASSIFY_BOUND_S),
]


def _content_proto(content, dims):
    from tensorflow.core.framework import tensor_pb2, types_pb2

    proto = tensor_pb2.TensorProto(dtype=types_pb2.DT_INT32, tensor_content=content)
    for size in dims:
        proto.tensor_shape.dim.add(size=size)
    return proto


def _expected(case):
    refused = "4xx" if case.api.startswith("REST") else "a client status (INVALID_ARGUMENT ...)"
    named = f", naming one of {'/'.join(case.words)}" if case.words else ""
    legal = " or a correct answer" if case.legal is not None else ""
    return f"{refused}{named}{legal}; alive; no traceback; good requests as before"


@pytest.mark.parametrize("case", CASES, ids=[case.id for case in CASES])
def test_hostile_request(served, case):
    server, references = served
    if server.ensure():
        status, console = server.deaths[-1]
        print(f"\n  (the server had died before this case, exit status {status}: started again)")
    answer = case.send(server)
    problems = []
    alive = server.alive_after(answer)
    if not alive:
        problems.append(f"the server DIED (exit status {server.exit_status()}); it is started again for the next case")
    if answer.ok:
        if case.legal is None:
            problems.append("answered OK where the request must be refused")
        elif not case.legal(answer):
            problems.append("answered OK, but not correctly")
    elif not answer.client_error:
        problems.append(f"not a client error: {answer.status}")
    text = answer.message + answer.body.decode("utf-8", "replace")
    if has_traceback(text):
        problems.append("traceback text in the answer")
    if not answer.ok and alive and case.words and not any(w.lower() in answer.message.lower() for w in case.words):
        problems.append(f"the message names none of {case.words}")
    if case.bound_s is not None:
        timely = answer.seconds <= case.bound_s
        print(f"\n  {case.api} {case.what}: answered in {answer.seconds:.2f}s (bound {case.bound_s:.1f}s) -> "
              f"{'ok' if timely else 'FAILED'}")
        if not timely:
            problems.append(f"answered in {answer.seconds:.2f}s (bound {case.bound_s:.1f}s)")
    if alive:
        for name, problem in references.check(server):
            problems.append(f"good request afterwards, {name}: {problem}")
    print(f"\nCASE {case.api} {case.what}: {answer.status} {answer.short()!r} (expected: {_expected(case)}) -> "
          f"{'ok' if not problems else 'FAILED'}")
    for problem in problems:
        print(f"    - {problem}")
    if not alive:
        print("    last console lines of the server:\n" + "".join("      " + line for line in
                                                            server.lines[-8:]))
    if problems:
        pytest.fail(f"{case.api} {case.what}: " + "; ".join(problems), pytrace=False)


def test_memory_after_every_case(served):
    """The server's RSS after every case above (10 MB words and 200,000 Examples among them) against its RSS after
    warm-up; run last in this file."""
    server, _ = served
    assert not server.deaths, f"the server died {len(server.deaths)} times during the cases"
    after = server.rss_bytes()
    ratio = after / server.warm_rss
    print(f"\nserver RSS after warm-up {server.warm_rss / 2**20:.0f} MiB, after {len(CASES)} cases "
          f"{after / 2**20:.0f} MiB: x{ratio:.2f} (bound x{RSS_GROWTH_BOUND})")
    assert ratio <= RSS_GROWTH_BOUND
