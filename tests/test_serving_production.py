"""`xlnet-tf serve` in production: deadlines, bounded gRPC load and its default cap, TensorFlow Serving's command
line, config-file polling, health checks, version-label checks and Predict without shape checks.

Models are the stand-in SavedModels of xlnet_tf.serving.testing (`busy` burns CPU in proportion to its batch,
`slow` sleeps without CPU). Every checked figure is printed with its bound (run with -s to see them).
"""

from __future__ import annotations

import logging
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time

import grpc
import numpy as np
import pytest

from xlnet_tf.errors import UserError
from xlnet_tf.serving import Client, ServingError, serve
from xlnet_tf.serving.testing import build_standin

GRPC_THREADS = 4
DEADLINE_S = 0.5
RECOVERY_S = 0.5  # after its deadline, an abandoned request stops using its worker and the CPU within this
BUSY_TEXTS = 20000  # about 5 s of CPU here: far longer than the deadline


def check(label, value, bound, ok):
    print(f"  CHECK {label}: {value} (bound: {bound}) -> {'ok' if ok else 'FAILED'}")
    assert ok, f"{label}: {value} (bound: {bound})"


@pytest.fixture(scope="module")
def base(tmp_path_factory):
    """BASE/clf/1: a stand-in classifier; BASE/spare: a copy for new versions and models."""
    root = tmp_path_factory.mktemp("production")
    build_standin(root / "clf" / "1")
    shutil.copytree(root / "clf" / "1", root / "spare")
    return root


@pytest.fixture(scope="module")
def server(base):
    instance = serve(model_base_path=str(base / "clf"), model_name="clf", port=0, rest_api_port=None,
                     poll_interval=0.1, grpc_max_threads=GRPC_THREADS).start()
    yield instance
    instance.stop(2)


def _code(call):
    try:
        call()
    except ServingError as error:
        return error.code.name
    return "OK"


def _concurrently(calls, timeout=60):
    """Runs the calls at once (one thread each, released together) -> [(status name, seconds, result)]."""
    barrier = threading.Barrier(len(calls))
    results = [None] * len(calls)

    def run(index):
        barrier.wait(timeout)
        began = time.monotonic()
        try:
            value, code = calls[index](), "OK"
        except ServingError as error:
            value, code = error.message, error.code.name
        results[index] = (code, time.monotonic() - began, value)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(calls))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout)
    return results


def _servable(server, version=1):
    return server.manager.models["clf"].versions[version].servable


def test_deadline_abandons_a_long_run_and_frees_its_worker_and_the_cpu(server):
    texts = 3 * BUSY_TEXTS  # 1.5 s per BUSY_TEXTS on an AVX-512 core: still well past 4 deadlines there
    print(f"\n{texts} texts on `busy` with a {DEADLINE_S}s deadline, --grpc_max_threads {GRPC_THREADS}")
    client = Client(server.grpc_target, "clf", timeout=DEADLINE_S, retries=0)
    servable = _servable(server)
    pieces_before = servable.pieces_run
    began = time.monotonic()
    code = _code(lambda: client.predict({"text": ["some text to score"] * texts}, signature_name="busy"))
    answered = time.monotonic() - began
    check("status of the request", code, "DEADLINE_EXCEEDED", code == "DEADLINE_EXCEEDED")
    check("seconds until the client had its answer", f"{answered:.2f}", f"<= {DEADLINE_S + 0.25}",
          answered <= DEADLINE_S + 0.25)
    per_row = max(seconds for key, seconds in servable._row_seconds.items() if key[0] == "busy")
    full = per_row * texts
    check("seconds the whole request would have run (measured time per row x rows)", f"{full:.1f}",
          f">= {4 * DEADLINE_S}", full >= 4 * DEADLINE_S)
    check("pieces it ran before it was abandoned", servable.pieces_run - pieces_before, ">= 1",
          servable.pieces_run > pieces_before)

    time.sleep(max(0.0, began + DEADLINE_S + RECOVERY_S - time.monotonic()))
    clients = [Client(server.grpc_target, "clf", timeout=10, retries=0) for _ in range(GRPC_THREADS)]
    results = _concurrently([lambda c=c: c.predict({"seconds": np.array([0.3], np.float32)}, "slow")
                             for c in clients])
    refused = [r for r in results if r[0] != "OK"]
    check(f"{GRPC_THREADS} concurrent requests {RECOVERY_S}s after the deadline: not answered", len(refused),
          f"== 0 ({[r[0] for r in refused]})", not refused)

    cpu_before, wall_before = time.process_time(), time.monotonic()
    time.sleep(1.0)
    cpu = (time.process_time() - cpu_before) / (time.monotonic() - wall_before)
    check("CPU used by the server process afterwards (cores)", f"{cpu:.3f}", "<= 0.1", cpu <= 0.1)
    _ok_after(client)


def _ok_after(client):
    rows = Client(client.target, "clf", timeout=10, retries=0).classify(["a fine film"])
    check("a normal request afterwards", rows[0]["label"], "a label", rows[0]["label"] in ("negative", "positive"))


def test_a_retired_version_closes_at_its_abandoned_requests_deadline(server, base):
    deadline_s = 4.0
    print(f"\nversion 1 retired while a request with a {deadline_s}s deadline runs on it")
    client = Client(server.grpc_target, "clf", version=1, timeout=deadline_s, retries=0)
    outcome = {}

    def long_request():
        outcome["began"] = time.monotonic()
        # 10 x BUSY_TEXTS: far more than 4 s of work even in big pieces on a fast CPU (it runs until its deadline)
        outcome["code"] = _code(lambda: client.predict({"text": ["some text to score"] * BUSY_TEXTS * 10},
                                                        signature_name="busy"))

    thread = threading.Thread(target=long_request)
    thread.start()
    time.sleep(0.3)
    shutil.copytree(base / "spare", base / "clf" / "2")
    model = server.manager.models["clf"]
    wait_until = time.monotonic() + deadline_s
    while model.versions.get(1).state != "UNLOADING" and time.monotonic() < wait_until:
        time.sleep(0.05)
    check("version 1 once version 2 is available", model.versions[1].state, "UNLOADING (its request runs)",
          model.versions[1].state == "UNLOADING")
    thread.join(30)
    check("status of the abandoned request", outcome["code"], "DEADLINE_EXCEEDED", outcome["code"] == "DEADLINE_EXCEEDED")
    deadline = outcome["began"] + deadline_s
    wait_until = deadline + 5
    while model.versions[1].state != "END" and time.monotonic() < wait_until:
        time.sleep(0.02)
    late = time.monotonic() - deadline if model.versions[1].state == "END" else float("inf")
    check("version 1 closing (END), seconds after the request's deadline", f"{late:.2f}", f"<= {RECOVERY_S}",
          late <= RECOVERY_S)
    after = Client(server.grpc_target, "clf", timeout=10, retries=0)
    response = after.predict({"text": ["a fine film"]})
    check("version answering afterwards", after.last_version, "== 2", after.last_version == 2 and
          response["label"].shape == (1,))


def test_grpc_overload_is_refused_at_once_and_serving_goes_on(server):
    total = 4 * GRPC_THREADS
    print(f"\n{total} concurrent 1-second requests on --grpc_max_threads {GRPC_THREADS}")
    check("the cap given wins over the default (at least 64)", server.options.grpc_max_threads, f"== {GRPC_THREADS}",
          server.options.grpc_max_threads == GRPC_THREADS)
    clients = [Client(server.grpc_target, "clf", timeout=20, retries=0) for _ in range(total)]
    results = _concurrently([lambda c=c: c.predict({"seconds": np.array([1.0], np.float32)}, "slow")
                             for c in clients])
    accepted = [r for r in results if r[0] == "OK"]
    refused = [r for r in results if r[0] == "RESOURCE_EXHAUSTED"]
    other = [r for r in results if r[0] not in ("OK", "RESOURCE_EXHAUSTED")]
    check("requests answered", len(accepted), f">= {GRPC_THREADS - 1} and <= {GRPC_THREADS}",
          GRPC_THREADS - 1 <= len(accepted) <= GRPC_THREADS)
    check("requests refused with RESOURCE_EXHAUSTED", len(refused), f"== {total} - answered",
          len(refused) == total - len(accepted))
    check("other outcomes", len(other), "== 0", not other)
    slowest_refusal = max(r[1] for r in refused)
    check("slowest refusal (s)", f"{slowest_refusal:.3f}", "<= 0.5", slowest_refusal <= 0.5)
    wrong = [r for r in accepted if not (np.allclose(r[2]["elapsed"], [1.0]) and r[1] >= 1.0)]
    check("answered requests with a wrong answer", len(wrong), "== 0", not wrong)
    for client in clients:
        client.close()
    _ok_after(Client(server.grpc_target, "clf"))


def _serve_command_line(*argv):
    """A parsed `xlnet-tf serve` command line."""
    from xlnet_tf.serving.cli import build_parser

    return build_parser().parse_args(["serve", *argv])


def _one_sentence_clients(target, clients, requests):
    """`clients` threads, released together, each sending `requests` one-sentence Predicts one after another ->
    {status name: requests}."""
    statuses, lock = {}, threading.Lock()
    barrier = threading.Barrier(clients)

    def run():
        client = Client(target, "clf", timeout=30, retries=0)
        barrier.wait(60)
        for _ in range(requests):
            code = _code(lambda: client.predict({"text": ["a fine film"]}))
            with lock:
                statuses[code] = statuses.get(code, 0) + 1
        client.close()

    threads = [threading.Thread(target=run) for _ in range(clients)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
    return statuses


@pytest.mark.parametrize("batching", [False, True], ids=["unbatched", "batched"])
def test_the_native_command_line_answers_16_and_32_concurrent_clients(base, tmp_path, batching):
    """`xlnet-tf serve --model-base-path ... --port 0` with no cap given: its default takes 16 and 32 concurrent
    one-sentence clients (the default of 4 x CPUs refused most of them on 2 cores, and every request held its
    slot while it waited for its batch)."""
    from xlnet_tf.serving.cli import build_server

    argv = ["--model-base-path", str(base / "clf"), "--model-name", "clf", "--port", "0", "--rest-api-port", "-1",
            "--poll-interval", "0"]
    max_batch_size = 16
    if batching:
        config = tmp_path / "batching.config"
        config.write_text(f"max_batch_size {{ value: {max_batch_size} }} batch_timeout_micros {{ value: 2000 }} "
                          "num_batch_threads { value: 1 }\n")
        argv += ["--enable-batching", "--batching-parameters-file", str(config)]
    instance = build_server(_serve_command_line(*argv), environ={}).start()
    try:
        print(f"\n{' '.join(argv[4:])}: --grpc-max-workers {instance.options.grpc_max_threads} (its default)")
        for clients in (16, 32):
            requests = 8
            statuses = _one_sentence_clients(instance.grpc_target, clients, requests)
            answered = statuses.get("OK", 0)
            check(f"{clients} clients x {requests} one-sentence Predicts: answered", answered,
                  f"== {clients * requests}", answered == clients * requests)
            errors = {code: n for code, n in statuses.items() if code != "OK"}
            check(f"{clients} clients: errors", errors, "{} (no RESOURCE_EXHAUSTED)", not errors)
        if batching:
            stats = instance.batch_stats()
            fullest = stats["max_requests_per_batch"]
            check(f"requests in the fullest batch ({stats['batches']} batches)", fullest,
                  f">= 1 and <= {max_batch_size} (max_batch_size)", 1 <= fullest <= max_batch_size)
    finally:
        instance.stop(2)


def test_the_default_grpc_cap_of_each_command_line_and_an_explicit_cap_wins(base, tmp_path, caplog):
    """Ours (and serve() / ServerOptions()): the most of 64, 4 x CPUs and 2 x max_batch_size x models; TensorFlow
    Serving's spellings: its 4 x CPUs, with one warning line when batching needs more; a cap given always wins."""
    import logging

    from xlnet_tf.serving import ModelServer, ServerOptions
    from xlnet_tf.serving.cli import build_server
    from xlnet_tf.serving.config import BatchingConfig, ModelEntry
    from xlnet_tf.serving.options import cpu_count

    cpus = cpu_count()
    clf = str(base / "clf")
    batching_file = tmp_path / "batching.config"
    batching_file.write_text("max_batch_size { value: 100 }\n")
    models = tmp_path / "models.config"
    models.write_text(_config_text([("a", base / "clf"), ("b", base / "clf")]))
    theirs_batch = 4 * cpus  # batches that need 2 x 4 x CPUs: more than their default on any machine
    theirs_file = tmp_path / "theirs.config"
    theirs_file.write_text(f"max_batch_size {{ value: {theirs_batch} }}\n")

    def cap(*argv):
        caplog.clear()
        with caplog.at_level(logging.WARNING, logger="xlnet_tf.serving"):
            server = build_server(_serve_command_line(*argv), environ={})
        lines = [r.getMessage() for r in caplog.records if "grpc" in r.getMessage()]
        return server.options.grpc_max_threads, lines

    print(f"\n{cpus} CPUs")
    rows = [
        ("ours, no batching", cap("--model-base-path", clf), max(64, 4 * cpus), 0),
        ("ours, batching max_batch_size 100, 2 models",
         cap("--model-config-file", str(models), "--enable-batching", "--batching-parameters-file", str(batching_file)),
         max(64, 4 * cpus, 2 * 100 * 2), 0),
        ("ours, batching max_batch_size 100, --grpc-max-workers 3",
         cap("--model-base-path", clf, "--enable-batching", "--batching-parameters-file", str(batching_file),
             "--grpc-max-workers", "3"), 3, 1),
        ("theirs, no batching", cap(f"--model_base_path={clf}"), 4 * cpus, 0),
        (f"theirs, batching max_batch_size {theirs_batch}",
         cap(f"--model_base_path={clf}", "--enable_batching=true", f"--batching_parameters_file={theirs_file}"),
         4 * cpus, 1),
        (f"theirs, batching max_batch_size {theirs_batch}, --grpc_max_threads={2 * theirs_batch}",
         cap(f"--model_base_path={clf}", "--enable_batching=true", f"--batching_parameters_file={theirs_file}",
             f"--grpc_max_threads={2 * theirs_batch}"), 2 * theirs_batch, 0),
    ]
    for label, (got, lines), want, warnings in rows:
        check(f"{label}: cap", got, f"== {want}", got == want)
        check(f"{label}: warning lines", len(lines), f"== {warnings}", len(lines) == warnings)
        for line in lines:
            print(f"    {line}")
    _, (_, lines), _, _ = rows[4]
    want = f"--grpc_max_threads={2 * theirs_batch}"
    check("the warning with TensorFlow Serving's spellings", lines[0][:60] + "...", f"names {want}", want in lines[0])
    _, (_, lines), _, _ = rows[2]
    check("the warning with ours", lines[0][:60] + "...", "names --grpc-max-workers=200",
          "--grpc-max-workers=200" in lines[0])

    batching = BatchingConfig(max_batch_size=100)
    python = {
        "serve(), no cap": serve(model_base_path=clf).options.grpc_max_threads,
        "serve(), batching": serve(model_base_path=clf, enable_batching=True,
                                   batching_parameters={"max_batch_size": 100}).options.grpc_max_threads,
        "ModelServer(ServerOptions(batching))": ModelServer([ModelEntry("clf", clf)],
                                                            ServerOptions(batching=batching)).options.grpc_max_threads,
        "serve(), batching, grpc_max_threads=5": serve(model_base_path=clf, enable_batching=True,
                                                       grpc_max_threads=5).options.grpc_max_threads,
        "serve(), grpc_max_workers=6": serve(model_base_path=clf, grpc_max_workers=6).options.grpc_max_threads,
    }
    want = {"serve(), no cap": max(64, 4 * cpus), "serve(), batching": max(64, 4 * cpus, 200),
            "ModelServer(ServerOptions(batching))": max(64, 4 * cpus, 200), "serve(), batching, grpc_max_threads=5": 5,
            "serve(), grpc_max_workers=6": 6}
    check("Python callers' caps (the native command line's default)", python, f"== {want}", python == want)


def _label_config(base, labels, all_versions=False):
    """A ModelServerConfig serving BASE/clf with these version labels."""
    from tensorflow_serving.config import model_server_config_pb2

    config = model_server_config_pb2.ModelServerConfig()
    entry = config.model_config_list.config.add(name="clf", base_path=str(base / "clf"), model_platform="tensorflow")
    if all_versions:
        entry.model_version_policy.all.SetInParent()
    for label, version in labels.items():
        entry.version_labels[label] = version
    return config


def _reload(target, config=None):
    """HandleReloadConfigRequest through tensorflow-serving-api's stub -> the status name (details printed)."""
    from tensorflow_serving.apis import model_management_pb2, model_service_pb2_grpc

    request = model_management_pb2.ReloadConfigRequest(config=config) if config is not None else \
        model_management_pb2.ReloadConfigRequest()
    with grpc.insecure_channel(target) as channel:
        try:
            model_service_pb2_grpc.ModelServiceStub(channel).HandleReloadConfigRequest(request, timeout=30)
            return "OK"
        except grpc.RpcError as error:
            print(f"    reload: {error.code().name} {error.details()[:100]}")
            return error.code().name


def test_predict_checks_shapes_against_the_signature_and_version_labels_are_checked(server, base):
    # Until issue 50, shapes were left to the graph, as TensorFlow Serving does: `scale` took a [3] tensor. A declared
    # rank is enforced now (a string tensor of rank 33 crashed TensorFlow's feed), so that request is refused; the
    # same values in the declared rank are answered.
    client = Client(server.grpc_target, "clf", timeout=10, retries=0)
    y = client.predict({"x": np.array([[1.0], [2.0], [3.0]], np.float32)}, signature_name="scale")["y"]
    check("`scale` (input [-1, 1]) on a [3, 1] tensor", y.reshape(-1).tolist(), "[2, 4, 6]",
          y.reshape(-1).tolist() == [2.0, 4.0, 6.0])
    for what, inputs, signature in (("[3] floats for a [-1, 1] input", {"x": np.array([1.0, 2.0, 3.0], np.float32)},
                                     "scale"),
                                    ("[2,2] strings for a [-1] input", {"text": np.array([["a", "b"], ["c", "d"]],
                                                                                         object)}, None)):
        try:
            client.predict(inputs, signature_name=signature or "serving_default")
            code, message = "OK", ""
        except ServingError as error:
            code, message = error.code.name, error.message
        print(f"    {what}: {code} {message[:120]}")
        check(what, code, "INVALID_ARGUMENT naming the input and the signature's shape",
              code == "INVALID_ARGUMENT" and "has shape" in message and "the signature takes" in message)

    model = server.manager.models["clf"]
    available = sorted(v for v, s in model.versions.items() if s.state == "AVAILABLE")
    code = _reload(server.grpc_target, _label_config(base, {"canary": 7}, all_versions=True))  # no version 7
    check("a reload naming an unavailable version in a label", code, "FAILED_PRECONDITION", code == "FAILED_PRECONDITION")
    still = sorted(v for v, s in model.versions.items() if s.state == "AVAILABLE")
    check("versions serving after the refused reload", still, f"== {available}", still == available)


def test_a_small_message_declaring_a_huge_tensor_is_refused_before_it_is_decoded(server):
    from tensorflow_serving.apis import predict_pb2, prediction_service_pb2_grpc

    request = predict_pb2.PredictRequest()
    request.model_spec.name = "clf"
    request.model_spec.signature_name = "slow"
    tensor = request.inputs["seconds"]
    tensor.dtype = 1  # DT_FLOAT
    tensor.tensor_shape.dim.add(size=10 ** 10)  # 40 GB once filled with its one value
    tensor.float_val.append(0.0)
    began = time.monotonic()
    with grpc.insecure_channel(server.grpc_target) as channel:
        try:
            prediction_service_pb2_grpc.PredictionServiceStub(channel).Predict(request, timeout=10)
            code = "OK"
        except grpc.RpcError as error:
            code, message = error.code().name, error.details()
    took = time.monotonic() - began
    print(f"\n{request.ByteSize()}-byte request declaring [10^10] floats: {code} after {took:.3f}s")
    check("a 10^10-float tensor in a small message", code, "RESOURCE_EXHAUSTED", code == "RESOURCE_EXHAUSTED"
          and "max_request_bytes" in message)
    check("seconds to refuse it", f"{took:.3f}", "<= 0.5", took <= 0.5)
    _ok_after(Client(server.grpc_target, "clf"))

def _free_port():
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _health(target, service=""):
    from grpc_health.v1 import health_pb2, health_pb2_grpc

    with grpc.insecure_channel(target) as channel:
        try:
            answer = health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(service=service), timeout=5)
            return health_pb2.HealthCheckResponse.ServingStatus.Name(answer.status)
        except grpc.RpcError as error:
            return error.code().name


def _raw_predict(target, text):
    from tensorflow_serving.apis import predict_pb2, prediction_service_pb2_grpc

    request = predict_pb2.PredictRequest()
    request.model_spec.name = "clf"
    request.inputs["text"].CopyFrom(__import__("tensorflow").make_tensor_proto([text]))
    with grpc.insecure_channel(target) as channel:
        return prediction_service_pb2_grpc.PredictionServiceStub(channel).Predict(request, timeout=10)


@pytest.mark.slow
def test_a_tensorflow_model_server_command_line_starts_it(base):
    """The single-model command line of TensorFlow Serving's docs (and Docker image), as a process."""
    grpc_port, rest_port = _free_port(), _free_port()
    command = [sys.executable, "-m", "xlnet_tf.serving", "serve", f"--port={grpc_port}",
               f"--rest_api_port={rest_port}", "--model_name=clf", f"--model_base_path={base / 'clf'}",
               "--enable_grpc_healthcheck_service=true"]
    print("\n" + " ".join(command[3:]))
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        line = process.stdout.readline()
        while line and not line.startswith("serving gRPC"):
            line = process.stdout.readline()
        print("   ", line.strip()[:200])
        check("it starts serving", line.startswith("serving gRPC"), "True", line.startswith("serving gRPC"))
        check("bound as TensorFlow Serving binds (every interface)", f"0.0.0.0:{grpc_port}" in line,
              "True", f"0.0.0.0:{grpc_port}" in line)
        target = f"127.0.0.1:{grpc_port}"
        response = _raw_predict(target, "a fine film")
        probabilities = response.outputs["probabilities"]
        check("Predict's probabilities in float_val (TensorFlow Serving's default)", len(probabilities.float_val),
              "== 2 and no tensor_content", len(probabilities.float_val) == 2 and not probabilities.tensor_content)
        check("health of the server", _health(target), "SERVING", _health(target) == "SERVING")
        check("health of PredictionService", _health(target, "PredictionService"), "SERVING",
              _health(target, "PredictionService") == "SERVING")
        import json
        import urllib.request

        with urllib.request.urlopen(urllib.request.Request(
                f"http://127.0.0.1:{rest_port}/v1/models/clf:predict", data=json.dumps(
                    {"instances": ["a fine film"]}).encode(), method="POST"), timeout=10) as answer:
            label = json.loads(answer.read())["predictions"][0]["label"]
        check("REST on --rest_api_port", label, "a label", label in ("negative", "positive"))
    finally:
        process.send_signal(signal.SIGTERM)
        code = process.wait(60)
    check("exit code after SIGTERM", code, "== 0", code == 0)


def _config_text(models):
    return "model_config_list {\n" + "".join(
        f'  config {{ name: "{name}" base_path: "{path}" model_platform: "tensorflow" }}\n'
        for name, path in models) + "}\n"


def test_model_config_file_form_with_polling(base, tmp_path, caplog):
    """The --model_config_file form, parsed by `xlnet-tf serve`'s own parser; a model added to the file is
    served within two poll periods and its load (the seconds the server logs for it: loading is as slow as the
    machine is busy) while the kept model answers every request."""
    from xlnet_tf.serving.cli import build_parser, server_options
    from xlnet_tf.serving.server import serve_with

    poll = 1
    caplog.set_level(logging.INFO, logger="xlnet_tf.serving")
    config = tmp_path / "models.config"
    config.write_text(_config_text([("clf", base / "clf")]))
    port = _free_port()
    argv = ["serve", f"--port={port}", f"--model_config_file={config}",
            f"--model_config_file_poll_wait_seconds={poll}", "--enable_batching=true",
            "--enable_serialization_as_tensor_content=true", "--enable_grpc_healthcheck_service", "true",
            "--file_system_poll_wait_seconds", "1", "--enable_reload_config=false"]
    options = server_options(build_parser().parse_args(argv), environ={})
    print("\n" + " ".join(argv[1:]))
    print(f"    -> {options}")
    check("REST without --rest_api_port", options.rest_api_port, "None (off, as there)", options.rest_api_port is None)
    instance = serve_with(options).start()
    try:
        target = f"127.0.0.1:{port}"
        response = _raw_predict(target, "a fine film")
        packed = response.outputs["probabilities"]
        check("Predict with --enable_serialization_as_tensor_content=true", len(packed.tensor_content),
              "== 8 bytes and no float_val", len(packed.tensor_content) == 8 and not packed.float_val)
        check("health", _health(target), "SERVING", _health(target) == "SERVING")
        code = _reload(target)
        check("HandleReloadConfigRequest with --enable_reload_config=false", code, "PERMISSION_DENIED",
              code == "PERMISSION_DENIED")

        failures, answered, stop = [], [0], threading.Event()

        def kept_model_traffic():
            client = Client(target, "clf", timeout=10, retries=0)
            while not stop.is_set():
                try:
                    client.classify(["a fine film"])
                    answered[0] += 1
                except ServingError as error:
                    failures.append(error.code.name)

        workers = [threading.Thread(target=kept_model_traffic) for _ in range(2)]
        for worker in workers:
            worker.start()
        time.sleep(0.5)
        shutil.copytree(base / "spare", base / "added" / "1")
        config.write_text(_config_text([("clf", base / "clf"), ("added", base / "added")]))
        written = time.monotonic()
        added = Client(target, "added", timeout=5, retries=0)
        served_after = None
        while time.monotonic() - written < 30:  # polled, then loaded: the bound below says how soon it must answer
            try:
                added.classify(["a fine film"])
                served_after = time.monotonic() - written
                break
            except ServingError:
                time.sleep(0.05)
        stop.set()
        for worker in workers:
            worker.join(30)
        loads = [float(m.group(1)) for r in caplog.records
                 for m in [re.match(r"model added version 1 loaded in ([0-9.]+)s", r.getMessage())] if m]
        load = loads[0] if loads else 0.0
        check("seconds until the added model answered", "never" if served_after is None else f"{served_after:.2f}",
              f"<= {2 * poll} + its load {load:.2f}", served_after is not None and served_after <= 2 * poll + load)
        check(f"failed requests on the kept model ({answered[0]} answered)", len(failures), "== 0", not failures)
    finally:
        instance.stop(2)


def test_command_line_spellings_defaults_and_environment():
    from xlnet_tf.serving import ServerOptions
    from xlnet_tf.serving.cli import build_parser, server_options

    def settings(*argv, environ=None):
        return server_options(build_parser().parse_args(["serve", *argv]), environ=environ or {})

    ours = settings("--model-base-path", "/m/x", "--rest-api-port", "0", "--port", "0")
    loopback = ServerOptions().host  # --host not given: the default kept
    check("our spellings: --rest-api-port 0 --port 0", (ours.rest_api_port, ours.port, ours.host),
          f"(0, 0, {loopback!r}): free ports, loopback", (ours.rest_api_port, ours.port, ours.host) == (0, 0, loopback)
          and loopback == "127.0.0.1")
    theirs = settings("--model_base_path=/m/x", "--model_name", "x", "--rest_api_port=8501", "--grpc_max_threads=3",
                      "--rest_api_num_threads=5", "--rest_api_timeout_in_ms=700", "--saved_model_tags=serve,gpu",
                      "--tensorflow_session_parallelism=2", "--enable_model_warmup=false",
                      "--num_request_iterations_for_warmup=3", "--load_retry_interval_micros=2000000")
    want = {"model_base_path": "/m/x", "model_name": "x", "rest_api_port": 8501, "grpc_max_threads": 3,
            "rest_api_num_threads": 5, "rest_api_timeout_in_ms": 700, "saved_model_tags": ("serve", "gpu"),
            "enable_warmup": False, "warmup_iterations": 3, "load_retry_interval": 2.0, "host": "0.0.0.0"}
    got = {key: getattr(theirs, key) for key in want}
    check("TensorFlow Serving's spellings", got, f"== {want}", got == want)
    session = theirs.session_config
    check("--tensorflow_session_parallelism=2", (session.intra_op_parallelism_threads,
                                                session.inter_op_parallelism_threads), "(2, 2)",
          (session.intra_op_parallelism_threads, session.inter_op_parallelism_threads) == (2, 2))
    docker = settings(environ={"MODEL_NAME": "sentiment", "MODEL_BASE_PATH": "/models"})
    check("MODEL_NAME / MODEL_BASE_PATH", (docker.model_name, docker.model_base_path),
          "('sentiment', '/models/sentiment')", (docker.model_name, docker.model_base_path) ==
          ("sentiment", "/models/sentiment"))
    for argv, why in ((["--model_base_path=/m/x", "--port=0"], "--port=0"),
                      (["--model_base_path=/m/x", "--platform_config_file=p"], "--platform_config_file"),
                      (["--model_base_path=/m/x", "--tensorflow_session_parallelism=1",
                        "--tensorflow_intra_op_parallelism=1", "--tensorflow_inter_op_parallelism=1"],
                       "--tensorflow_session_parallelism")):
        try:
            settings(*argv)
            message = "accepted"
        except UserError as error:
            message = str(error)
        check(f"{' '.join(argv[1:])}", message[:90], f"a UserError naming {why}", why in message)


def test_readme_lists_every_tensorflow_model_server_flag():
    from xlnet_tf.serving.cli import TF_SERVING_FLAGS, tf_serving_flag_table

    readme = open(os.path.join(os.path.dirname(__file__), "..", "serving", "README.md"), encoding="utf-8").read()
    table = tf_serving_flag_table()
    check("serving/README.md holds the generated flag table", table in readme, "True (regenerate it with "
          "`python -c 'from xlnet_tf.serving.cli import tf_serving_flag_table as t; print(t())'`)", table in readme)
    check("flags in the table", len(TF_SERVING_FLAGS), ">= 47 (tensorflow_model_server 2.21's main.cc)",
          len(TF_SERVING_FLAGS) >= 47)


def test_batched_requests_stop_waiting_at_their_deadline_and_labels_may_wait_when_allowed(base):
    instance = serve(model_base_path=str(base / "clf"), model_name="clf", port=0, rest_api_port=None,
                     poll_interval=0, enable_batching=True, allow_version_labels_for_unavailable_models=True,
                     batching_parameters={"max_batch_size": 64, "batch_timeout_micros": 1_000_000,
                                          "num_batch_threads": 1}).start()
    try:
        client = Client(instance.grpc_target, "clf", timeout=0.3, retries=0)
        began = time.monotonic()
        code = _code(lambda: client.predict({"text": ["a fine film"]}))
        waited = time.monotonic() - began
        print(f"\nbatch timeout 1 s, deadline 0.3 s: {code} after {waited:.2f}s")
        check("a batched request with a 0.3 s deadline in a batch that waits 1 s", code, "DEADLINE_EXCEEDED",
              code == "DEADLINE_EXCEEDED")
        check("seconds until its answer", f"{waited:.2f}", "<= 0.5", waited <= 0.5)
        time.sleep(max(0.0, began + 1.2 - time.monotonic()))  # past the batch timeout: the worker looked
        stats = instance.batch_stats()
        check("requests dropped from the queue, not run (expired_in_queue)", stats["expired_in_queue"], "== 1",
              stats["expired_in_queue"] == 1)

        code = _reload(instance.grpc_target, _label_config(base, {"next": 9}))  # a new label, no version 9 yet
        check("with --allow_version_labels_for_unavailable_models, a new label on version 9", code, "OK", code == "OK")
        code = _reload(instance.grpc_target, _label_config(base, {"next": 8}))  # re-pointing it needs version 8
        check("re-pointing that label at version 8, also unavailable", code, "FAILED_PRECONDITION",
              code == "FAILED_PRECONDITION")
    finally:
        instance.stop(2)


def test_mixed_precision_bfloat16_runs_the_rewrite_or_is_refused(base):
    from xlnet_tf.serving.precision import bfloat16_rewrite_applies, rewrite_applies

    control = rewrite_applies("auto_mixed_precision_cpu", "float16")
    check("the probe finds TensorFlow's float16 rewrite for CPUs (its positive control)", control, "True", control)
    applies = bfloat16_rewrite_applies()
    print(f"\nTensorFlow's oneDNN bfloat16 rewrite changes a float32 graph on this CPU: {applies}")
    if not applies:
        with pytest.raises(UserError) as refused:
            serve(model_base_path=str(base / "clf"), port=0, rest_api_port=None, poll_interval=0,
                  mixed_precision="bfloat16")
        print(f"    {refused.value}")
        check("--mixed_precision=bfloat16 where the rewrite changes nothing", "refused", "refused, naming the flag",
              "--mixed_precision=bfloat16" in str(refused.value))
    else:
        with serve(model_base_path=str(base / "clf"), port=0, rest_api_port=None, poll_interval=0,
                   mixed_precision="bfloat16") as instance:
            got = Client(instance.grpc_target, "clf", timeout=30).predict({"text": ["a fine film", "dull"]})
        with serve(model_base_path=str(base / "clf"), port=0, rest_api_port=None, poll_interval=0) as instance:
            want = Client(instance.grpc_target, "clf", timeout=30).predict({"text": ["a fine film", "dull"]})
        diff = float(np.max(np.abs(got["probabilities"] - want["probabilities"])))
        check("bfloat16-rewritten probabilities vs float32: max |diff|", f"{diff:.1e}", "<= 2e-2", diff <= 2e-2)
    with serve(model_base_path=str(base / "clf"), port=0, rest_api_port=None, poll_interval=0,
               mixed_precision="float16") as instance:
        rows = Client(instance.grpc_target, "clf", timeout=30).classify(["a fine film"])
    check("--mixed_precision=float16 (ignored with a warning, as TensorFlow Serving does)", rows[0]["label"],
          "served", rows[0]["label"] in ("negative", "positive"))
