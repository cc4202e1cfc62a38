"""Request logs (TensorFlow Serving's per-model `logging_config`, serving/request_log.py) on a stand-in model.

One server serves the stand-in classifier under several names, each with its own `logging_config`: every request
logged (`clf`), a quarter of them (`quarter`), into ram:// (`ram`), into a prefix that cannot be written
(`broken`), and into small rotated files (`rotate`; every prefix rotates at ROTATE_BYTES). A second, short-lived
server, its writer slowed, is stopped while clients are sending; a RequestLogger on its own shows the bounded
queue. Every check prints its figure next to its bound (run with -s).
"""

from __future__ import annotations

import glob
import json
import math
import os
import threading
import time
import urllib.error
import urllib.request

import grpc
import numpy as np
import pytest

from xlnet_tf.errors import UserError
from xlnet_tf.serving import serve
from xlnet_tf.serving.testing import build_standin

ROTATE_BYTES = 2048  # request_log_max_file_bytes of the shared server
ROTATE_SECONDS = 1.0  # request_log_max_file_seconds: ram:// files (flushed only when closed) close soon
QUARTER_REQUESTS, QUARTER_RATE, SIGMAS = 400, 0.25, 4.0
RAM_PREFIX = "ram://request-logs-test/ram/requests"
SETTLE_S = 20.0  # records queued are written within this


def check(label, value, bound, ok):
    print(f"  CHECK {label}: {value} (bound: {bound}) -> {'ok' if ok else 'FAILED'}")
    assert ok, f"{label}: {value} (bound: {bound})"


def _logging(rate, prefix, kind="tfrecord"):
    return (f' logging_config {{ sampling_config {{ sampling_rate: {rate} }} '
            f'log_collector_config {{ type: "{kind}" filename_prefix: "{prefix}" }} }}')


def _config(path, base, models):
    """Writes a model_config_list serving `base` under each name of `models` {name: logging_config text}."""
    path.write_text("model_config_list {\n" + "".join(
        f'  config {{ name: "{name}" base_path: "{base}" model_platform: "tensorflow"{text} }}\n'
        for name, text in models.items()) + "}\n")
    return str(path)


class Shared:
    pass


@pytest.fixture(scope="module")
def shared(tmp_path_factory):
    root = tmp_path_factory.mktemp("request-logs")
    s = Shared()
    s.root, s.base = root, root / "models" / "clf"
    build_standin(s.base / "1", "classifier")
    (root / "afile").write_text("a file where the broken model's log folder would be\n")
    s.prefix = {"clf": str(root / "logs" / "clf" / "requests"), "quarter": str(root / "logs" / "quarter" / "q"),
                "ram": RAM_PREFIX, "broken": str(root / "afile" / "logs" / "requests"),
                "rotate": str(root / "logs" / "rotate" / "r")}
    rates = {"clf": 1.0, "quarter": QUARTER_RATE, "ram": 1.0, "broken": 1.0, "rotate": 1.0}
    config = _config(root / "models.config", s.base,
                     {name: _logging(rates[name], prefix) for name, prefix in s.prefix.items()})
    monitoring = root / "monitoring.config"
    monitoring.write_text('prometheus_config { enable: true }\n')
    s.server = serve(model_config_file=config, port=0, rest_api_port=0, poll_interval=0,
                     monitoring_config_file=str(monitoring), request_log_max_file_bytes=ROTATE_BYTES,
                     request_log_max_file_seconds=ROTATE_SECONDS).start()
    try:
        yield s
    finally:
        s.server.stop(5)


# --- clients and records ----------------------------------------------------------------------------------


def _stub(target):
    from tensorflow_serving.apis import prediction_service_pb2_grpc

    channel = grpc.insecure_channel(target)
    return channel, prediction_service_pb2_grpc.PredictionServiceStub(channel)


def _predict_request(model, texts, signature=""):
    from tensorflow_serving.apis import predict_pb2

    from xlnet_tf.serving.tensors import from_ndarray

    request = predict_pb2.PredictRequest()
    request.model_spec.name = model
    if signature:
        request.model_spec.signature_name = signature
    request.inputs["text"].CopyFrom(from_ndarray(np.array([t.encode() for t in texts], dtype=object)))
    return request


def _examples(texts):
    from xlnet_tf.serving.client import text_examples

    return text_examples({"text": texts})


def _infer_request(kind, model, texts):
    from tensorflow_serving.apis import classification_pb2, regression_pb2

    request = (classification_pb2.ClassificationRequest if kind == "classify" else regression_pb2.RegressionRequest)()
    request.model_spec.name = model
    request.model_spec.signature_name = "classification" if kind == "classify" else "regression"
    request.input.CopyFrom(_examples(texts))
    return request


def _rest(server, model, verb, body):
    request = urllib.request.Request(f"{server.rest_url}/v1/models/{model}:{verb}", data=json.dumps(body).encode(),
                                     method="POST", headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=30) as response:
        return json.loads(response.read())


def _records(prefix):
    """(file paths sorted by name, the PredictionLogs in them, in file order)."""
    import tensorflow as tf
    from tensorflow_serving.apis import prediction_log_pb2

    paths = sorted(tf.io.gfile.glob(prefix + "-*.tfrecord"))
    logs = [prediction_log_pb2.PredictionLog.FromString(raw)
            for path in paths for raw in tf.compat.v1.io.tf_record_iterator(path)]
    return paths, logs


def _wait_counted(server, model, count, limit=SETTLE_S):
    """Waits until `count` records of `model` are counted (written or dropped); -> (written, dropped)."""
    deadline = time.monotonic() + limit
    while True:
        counts = server.request_log.counts()
        written = counts.get((model, "OK"), 0)
        dropped = sum(n for (name, status), n in counts.items() if name == model and status != "OK")
        if written + dropped >= count or time.monotonic() > deadline:
            return written, dropped
        time.sleep(0.05)


def _text_of(tensor):
    from xlnet_tf.serving.tensors import to_ndarray

    return [v.decode() for v in to_ndarray(tensor).tolist()]


# --- the tests --------------------------------------------------------------------------------------------


def test_every_request_logged_once_as_sent_and_answered(shared):
    """Rate 1.0: a mixed run (gRPC Predict, Classify, Regress, MultiInference; REST predict row and columnar,
    classify, regress; the Open Inference Protocol's infer over REST and gRPC) gives exactly one record per request, whose request and response are what the client sent
    and got (gRPC: the protos themselves; REST: the tensors run and the outputs answered), with log_metadata."""
    from tensorflow_serving.apis import inference_pb2

    from xlnet_tf.serving.tensors import to_ndarray

    server = shared.server
    print("\n[request logs] rate 1.0: a mixed run of gRPC and REST requests")
    channel, stub = _stub(server.grpc_target)
    sent = []  # (kind, signature, request, response) in sending order
    try:
        request = _predict_request("clf", ["a fine film", "dull"])
        sent.append(("predict_log", "serving_default", request, stub.Predict(request, timeout=30)))
        for kind in ("classify", "regress"):
            request = _infer_request(kind, "clf", ["a fine film", "two words"])
            call = stub.Classify if kind == "classify" else stub.Regress
            sent.append((f"{kind}_log", request.model_spec.signature_name, request, call(request, timeout=30)))
        request = inference_pb2.MultiInferenceRequest()
        for method, signature in (("tensorflow/serving/classify", "classification"),
                                  ("tensorflow/serving/regress", "regression")):
            task = request.tasks.add()
            task.model_spec.name, task.model_spec.signature_name, task.method_name = "clf", signature, method
        request.input.CopyFrom(_examples(["multi", "inference"]))
        sent.append(("multi_inference_log", "", request, stub.MultiInference(request, timeout=30)))
    finally:
        channel.close()
    rest = [("predict", {"instances": ["rest rows", "second"]}),
            ("predict", {"signature_name": "pair", "inputs": {"text_a": ["left"], "text_b": ["right"]}}),
            ("classify", {"signature_name": "classification", "examples": [{"text": "rest classify"}]}),
            ("regress", {"signature_name": "regression", "examples": [{"text": "rest regress"}, {"text": "x"}]})]
    for verb, body in rest:
        sent.append((f"{verb}_log", body.get("signature_name", "serving_default"), body,
                     _rest(server, "clf", verb, body)))
    # The Open Inference Protocol's infer, over REST (JSON tensors) and gRPC (tritonclient, raw tensors).
    import tritonclient.grpc as grpcclient

    v2_body = {"inputs": [{"name": "text", "datatype": "BYTES", "shape": [2], "data": ["v2 rest", "again"]}]}
    v2_request = urllib.request.Request(f"{server.rest_url}/v2/models/clf/infer", data=json.dumps(v2_body).encode(),
                                        method="POST", headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(v2_request, timeout=30) as response:
        sent.append(("predict_log", "serving_default", v2_body, json.loads(response.read())))
    triton = grpcclient.InferenceServerClient(server.grpc_target)
    v2_text = grpcclient.InferInput("text", [1], "BYTES")
    v2_text.set_data_from_numpy(np.array([b"v2 grpc"], dtype=np.object_))
    sent.append(("predict_log", "serving_default", ["v2 grpc"], triton.infer("clf", [v2_text])))
    triton.close()
    written, dropped = _wait_counted(server, "clf", len(sent))
    assert server.request_log.settle(SETTLE_S)
    paths, logs = _records(shared.prefix["clf"])
    print(f"  {len(logs)} records in {len(paths)} files under {shared.prefix['clf']}-*")
    check("records written / dropped", (written, dropped), f"({len(sent)}, 0)", (written, dropped) == (len(sent), 0))
    check("records in the files", len(logs), f"== requests sent ({len(sent)})", len(logs) == len(sent))
    kinds = [log.WhichOneof("log_type") for log in logs]
    check("record kinds in order", kinds, [kind for kind, *_ in sent], kinds == [kind for kind, *_ in sent])
    metadata = [(m.model_spec.name, m.model_spec.version.value, m.model_spec.signature_name,
                 m.sampling_config.sampling_rate, list(m.saved_model_tags)) for m in (log.log_metadata for log in logs)]
    want = [("clf", 1, signature, 1.0, ["serve"]) for _, signature, *_ in sent]
    check("log_metadata (model, version, signature, sampling_rate, tags)", metadata[0], "as served, for every record",
          metadata == want)
    grpc_equal = [getattr(log, kind).request == request and getattr(log, kind).response == response
                  for log, (kind, _, request, response) in zip(logs[:4], sent[:4])]
    check("gRPC records: request and response equal the client's protos", grpc_equal, "all True", all(grpc_equal))

    rows, columns, classified, regressed, v2_rest, v2_grpc = logs[4:]
    logged_in = _text_of(rows.predict_log.request.inputs["text"])
    outputs = {alias: to_ndarray(t) for alias, t in rows.predict_log.response.outputs.items()}
    answer = sent[4][3]["predictions"]
    same = (logged_in == rest[0][1]["instances"]
            and [v.decode() for v in outputs["label"]] == [row["label"] for row in answer]
            and np.allclose(outputs["probabilities"], [row["probabilities"] for row in answer], atol=1e-6)
            and outputs["label_id"].tolist() == [row["label_id"] for row in answer])
    check("REST predict (rows) record: tensors run and outputs answered", (logged_in, outputs["label"].tolist()),
          "the body's instances and the predictions", same)
    logged = {alias: _text_of(t) for alias, t in columns.predict_log.request.inputs.items()}
    spec = columns.predict_log.request.model_spec
    probabilities = to_ndarray(columns.predict_log.response.outputs["probabilities"])
    same = (logged == rest[1][1]["inputs"] and spec.signature_name == "pair"
            and np.allclose(probabilities, sent[5][3]["outputs"]["probabilities"], atol=1e-6))
    check("REST predict (columnar, signature pair) record", (logged, spec.signature_name),
          "the body's inputs and signature_name, the outputs answered", same)
    result = classified.classify_log.response.result
    scores = [[[c.label, c.score] for c in row.classes] for row in result.classifications]
    texts = [e.features.feature["text"].bytes_list.value[0].decode()
             for e in classified.classify_log.request.input.example_list.examples]
    same = texts == ["rest classify"] and all(
        a[0] == b[0] and abs(a[1] - b[1]) < 1e-6 for row, got in zip(scores, sent[6][3]["results"])
        for a, b in zip(row, got))
    check("REST classify record: Examples sent, classes answered", (texts, scores), sent[6][3]["results"], same)
    values = [r.value for r in regressed.regress_log.response.result.regressions]
    texts = [e.features.feature["text"].bytes_list.value[0].decode()
             for e in regressed.regress_log.request.input.example_list.examples]
    same = texts == ["rest regress", "x"] and np.allclose(values, sent[7][3]["results"], atol=1e-6)
    check("REST regress record: Examples sent, values answered", (texts, values), sent[7][3]["results"], same)
    answered = {o["name"]: o["data"] for o in sent[8][3]["outputs"]}
    logged_in = _text_of(v2_rest.predict_log.request.inputs["text"])
    probabilities = to_ndarray(v2_rest.predict_log.response.outputs["probabilities"]).reshape(-1)
    same = logged_in == ["v2 rest", "again"] and np.allclose(probabilities, answered["probabilities"], atol=1e-6)
    check("v2 REST infer record: tensors sent, outputs answered", logged_in, "the request's data", same)
    logged_in = _text_of(v2_grpc.predict_log.request.inputs["text"])
    probabilities = to_ndarray(v2_grpc.predict_log.response.outputs["probabilities"])
    same = logged_in == ["v2 grpc"] and np.allclose(probabilities, sent[9][3].as_numpy("probabilities"), atol=1e-6)
    check("v2 gRPC infer record: tensors sent, outputs answered", logged_in, "the request's data", same)


def test_sampling_rate_a_quarter(shared):
    """Rate 0.25 over QUARTER_REQUESTS requests: the share logged is within SIGMAS binomial standard deviations."""
    server = shared.server
    print(f"\n[request logs] rate {QUARTER_RATE} over {QUARTER_REQUESTS} gRPC Predict requests")
    channel, stub = _stub(server.grpc_target)
    try:
        for index in range(QUARTER_REQUESTS):
            stub.Predict(_predict_request("quarter", [f"request {index}"]), timeout=30)
    finally:
        channel.close()
    assert server.request_log.settle(SETTLE_S)
    _, logs = _records(shared.prefix["quarter"])
    share = len(logs) / QUARTER_REQUESTS
    sigma = math.sqrt(QUARTER_RATE * (1 - QUARTER_RATE) / QUARTER_REQUESTS)
    check(f"share logged ({len(logs)} of {QUARTER_REQUESTS})", f"{share:.4f}",
          f"{QUARTER_RATE} +- {SIGMAS:.0f} sd = [{QUARTER_RATE - SIGMAS * sigma:.4f}, "
          f"{QUARTER_RATE + SIGMAS * sigma:.4f}]", abs(share - QUARTER_RATE) <= SIGMAS * sigma)
    indices = [int(_text_of(log.predict_log.request.inputs["text"])[0].split()[1]) for log in logs]
    check("records are distinct requests, in sending order", f"{len(set(indices))} distinct",
          "increasing", indices == sorted(set(indices)))


def test_failing_target_costs_no_request(shared):
    """A prefix under a regular file cannot be written: every request is answered OK, every record is dropped
    and counted in :tensorflow:serving:request_log_count (status_code not OK), and the server keeps serving."""
    from prometheus_client.parser import text_string_to_metric_families

    server = shared.server
    print("\n[request logs] a prefix that cannot be written (under a regular file)")
    channel, stub = _stub(server.grpc_target)
    answered, began = 0, time.monotonic()
    try:
        for index in range(20):
            answered += bool(stub.Predict(_predict_request("broken", [f"text {index}"]), timeout=30).outputs)
    finally:
        channel.close()
    for index in range(5):
        answered += len(_rest(server, "broken", "predict", {"instances": [f"rest {index}"]})["predictions"])
    seconds = time.monotonic() - began
    check("requests answered OK", answered, "25 of 25", answered == 25)
    written, dropped = _wait_counted(server, "broken", 25)
    with urllib.request.urlopen(server.rest_url + "/monitoring/prometheus/metrics", timeout=30) as response:
        families = {f.name: f for f in text_string_to_metric_families(response.read().decode())}
    counted = {s.labels["status_code"]: s.value for s in families[":tensorflow:serving:request_log_count"].samples
               if s.labels["model_name"] == "broken"}
    print(f"  25 requests in {seconds:.2f}s; request_log_count of broken: {counted}")
    check("records dropped (the logger's count)", (written, dropped), "(0, 25)", (written, dropped) == (0, 25))
    check("request_log_count{model_name=broken}: not-OK total", sum(counted.values()), "25, none OK",
          sum(counted.values()) == 25 and "OK" not in counted)
    check("nothing created under the file", os.path.isfile(shared.root / "afile"), "still a plain file",
          os.path.isfile(shared.root / "afile"))
    requests = {(s.labels["API"], s.labels["entrypoint"], s.labels["status"]): s.value
                for s in families[":tensorflow:serving:request_count"].samples if s.labels["model_name"] == "broken"}
    check("request_count{model_name=broken}", requests, "{predict GRPC OK: 20, predict REST OK: 5}",
          requests == {("predict", "GRPC", "OK"): 20.0, ("predict", "REST", "OK"): 5.0})


def test_ram_prefix_lands_in_memory_only(shared):
    """A ram:// prefix: the records are read back from TensorFlow's in-memory filesystem; no file appears on
    local disk (no 'ram:' folder in the working directory, nothing new under the test's folder)."""
    server = shared.server
    print(f"\n[request logs] prefix {RAM_PREFIX}")
    before = set(glob.glob(str(shared.root / "**"), recursive=True))
    channel, stub = _stub(server.grpc_target)
    try:
        for index in range(6):
            stub.Predict(_predict_request("ram", [f"in memory {index}"]), timeout=30)
    finally:
        channel.close()
    written, dropped = _wait_counted(server, "ram", 6)  # counted when the file closes (ROTATE_SECONDS)
    paths, logs = _records(RAM_PREFIX)
    print(f"  files: {paths}")
    check("records written / dropped", (written, dropped), "(6, 0)", (written, dropped) == (6, 0))
    texts = [_text_of(log.predict_log.request.inputs["text"])[0] for log in logs]
    check("records read from ram://", texts, "the 6 texts sent, in order",
          texts == [f"in memory {i}" for i in range(6)])
    new = sorted(set(glob.glob(str(shared.root / "**"), recursive=True)) - before)
    local = new + [p for p in ("ram:", "request-logs-test") if os.path.exists(p)]
    check("new local files (test folder, working directory)", local, "none", not local)


def test_rotation_by_size_keeps_every_record_in_order(shared):
    """Files rotated at ROTATE_BYTES: several files, each no larger than the limit plus one record, and the
    records read in file-name order are the requests in sending order."""
    server = shared.server
    print(f"\n[request logs] rotation at {ROTATE_BYTES} bytes")
    channel, stub = _stub(server.grpc_target)
    try:
        for index in range(30):
            stub.Predict(_predict_request("rotate", [f"rotated record {index:02d} " + "x" * 40]), timeout=30)
    finally:
        channel.close()
    assert server.request_log.settle(SETTLE_S)
    paths, logs = _records(shared.prefix["rotate"])
    sizes = [os.path.getsize(p) for p in paths]
    largest = max(len(log.SerializeToString()) + 16 for log in logs)
    print(f"  {len(paths)} files, sizes {sizes}; e.g. {os.path.basename(paths[0])}")
    check("files", len(paths), ">= 3", len(paths) >= 3)
    check("largest file", max(sizes), f"<= {ROTATE_BYTES} + one record ({largest})",
          max(sizes) <= ROTATE_BYTES + largest)
    texts = [_text_of(log.predict_log.request.inputs["text"])[0].rsplit(" ", 1)[0] for log in logs]
    check("records in file-name order", f"{len(texts)} records", "the 30 requests in sending order",
          texts == [f"rotated record {i:02d}" for i in range(30)])


class _SlowWriter:
    """tf.io.TFRecordWriter whose writes take WRITE_DELAY_S: the writer falls behind the clients."""

    real = None  # the real class, set before tf.io's is replaced by this one

    def __init__(self, path):
        self.writer = self.real(path)

    def write(self, data):
        time.sleep(WRITE_DELAY_S)
        self.writer.write(data)

    def flush(self):
        self.writer.flush()

    def close(self):
        self.writer.close()


WRITE_DELAY_S = 0.002


def test_stop_loses_no_accepted_record(shared, tmp_path, monkeypatch):
    """A server stopped (as on SIGTERM) while 6 clients send, its writer slowed (WRITE_DELAY_S a record) so that
    records are still queued when the stop begins: every request answered OK has exactly one record after the
    stop, and no other record exists."""
    import tensorflow as tf

    prefix = str(tmp_path / "logs" / "requests")
    config = _config(tmp_path / "models.config", shared.base, {"clf": _logging(1.0, prefix)})
    server = serve(model_config_file=config, port=0, rest_api_port=None, poll_interval=0,
                   request_log_queue_size=1 << 20).start()
    monkeypatch.setattr(_SlowWriter, "real", tf.io.TFRecordWriter)
    monkeypatch.setattr(tf.io, "TFRecordWriter", _SlowWriter)
    print(f"\n[request logs] stop while 6 clients send; each record written in {WRITE_DELAY_S * 1e3:.0f} ms")
    answered, stopping = [], threading.Event()

    def client(number):
        channel, stub = _stub(server.grpc_target)
        try:
            index = 0
            while True:
                text = f"client {number} request {index}"
                try:
                    stub.Predict(_predict_request("clf", [text]), timeout=30)
                except grpc.RpcError:
                    if stopping.is_set():
                        return
                    raise
                answered.append(text)
                index += 1
        finally:
            channel.close()

    threads = [threading.Thread(target=client, args=(n,), daemon=True) for n in range(6)]
    for thread in threads:
        thread.start()
    time.sleep(1.0)
    stopping.set()
    queued, began = server.request_log.queued(), time.monotonic()
    server.stop(5)
    stopped = time.monotonic() - began
    for thread in threads:
        thread.join(30)
    _, logs = _records(prefix)
    logged = [_text_of(log.predict_log.request.inputs["text"])[0] for log in logs]
    print(f"  {len(answered)} requests answered OK; {queued} records queued when stop began; stop took "
          f"{stopped:.2f}s")
    check("records queued when the stop began", queued, "> 0 (the stop has records to write)", queued > 0)
    check("records after stop", len(logged), f"== requests answered OK ({len(answered)})",
          len(logged) == len(answered) > 0)
    check("records are the answered requests", "same set" if sorted(logged) == sorted(answered) else "differ",
          "same set, none twice", sorted(logged) == sorted(answered))
    counts = server.request_log.counts()
    check("counted written / dropped", counts, f"{{('clf', 'OK'): {len(answered)}}}",
          counts == {("clf", "OK"): len(answered)})


def test_unknown_collector_type_is_a_startup_error(shared, tmp_path):
    """A collector type other than "tfrecord" stops the server before it starts, naming the model and the field
    (TensorFlow Serving's "Cannot find LogCollector::Factory for type: ..."); so does a rate outside [0, 1]."""
    print("\n[request logs] config errors")
    for text, expect in ((_logging(1.0, "/tmp/x", kind="kafka"),
                          ["(clf)", "logging_config.log_collector_config.type", "kafka",
                           "Cannot find LogCollector::Factory for type: kafka"]),
                         (_logging(1.5, "/tmp/x"), ["(clf)", "logging_config.sampling_config.sampling_rate", "1.5"])):
        config = _config(tmp_path / "bad.config", shared.base, {"clf": text})
        with pytest.raises(UserError) as raised:
            serve(model_config_file=config, port=0, rest_api_port=None)
        message = str(raised.value)
        check("startup error", message, f"names {expect}", all(part in message for part in expect))


def test_full_queue_drops_and_counts_without_waiting(tmp_path, monkeypatch):
    """A writer stuck on its first record, a queue of 2: of 10 records, 1 is being written, 2 wait, 7 are dropped
    as RESOURCE_EXHAUSTED, and no log() call waits; once the writer is free the 3 are written."""
    import tensorflow as tf
    from tensorflow_serving.apis import prediction_log_pb2

    from xlnet_tf.serving.config import ModelEntry
    from xlnet_tf.serving.options import ServerOptions
    from xlnet_tf.serving.request_log import LoggingSettings, RequestLogger

    release = threading.Event()

    class StuckWriter(_SlowWriter):
        def write(self, data):
            release.wait(30)
            self.writer.write(data)

    monkeypatch.setattr(_SlowWriter, "real", tf.io.TFRecordWriter)
    monkeypatch.setattr(tf.io, "TFRecordWriter", StuckWriter)
    prefix = str(tmp_path / "requests")
    entry = ModelEntry("m", str(tmp_path), logging=LoggingSettings(1.0, b"", prefix))
    logger = RequestLogger(ServerOptions(request_log_queue_size=2), entries=[entry])
    print("\n[request logs] a full queue")
    slowest, taken = 0.0, []
    for index in range(10):
        began = time.monotonic()
        taken.append(logger.log("m", 1, "serving_default", prediction_log_pb2.PredictionLog()))
        slowest = max(slowest, time.monotonic() - began)
        if index == 0:
            time.sleep(0.2)  # the writer takes the first record and is stuck on it
    release.set()
    logger.stop(10)
    _, logs = _records(prefix)
    check("log() calls accepted", sum(taken), "3 (one being written, two queued)", sum(taken) == 3)
    check("slowest log() call", f"{slowest * 1e3:.2f} ms", "<= 50 ms", slowest <= 0.05)
    check("counts", logger.counts(), "{OK: 3, RESOURCE_EXHAUSTED: 7}",
          logger.counts() == {("m", "OK"): 3, ("m", "RESOURCE_EXHAUSTED"): 7})
    check("records in the file", len(logs), "3", len(logs) == 3)
