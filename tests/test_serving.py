"""End-to-end tests of `xlnet-tf serve` (xlnet_tf.serving) and, when it is installed, tensorflow_model_server.

Everything runs on loopback (127.0.0.1, or a UNIX socket for tensorflow_model_server, whose gRPC port
would otherwise bind every interface). Models are stand-in SavedModels with the export contract's shape
(xlnet_tf.serving.testing), plus one real tiny XLNet export when xlnet_tf.export provides export_model.
Every checked figure is printed with its bound (run with -s to see them).
"""

from __future__ import annotations

import argparse
import base64
import io
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request

import grpc
import numpy as np
import pytest

from conftest import warm_command
from xlnet_tf.serving import Client, ServingError, serve
from xlnet_tf.serving.testing import build_standin

TF_SERVING = shutil.which("tensorflow_model_server")
MAX_REQUEST_BYTES = 8 << 20  # both servers refuse larger requests (gRPC's default would be 4 MiB)
POLL_SECONDS = {"xlnet-tf": 0.25, "tensorflow_model_server": 1}
NEW_VERSION_BOUND_S = 15.0  # a new version answers within this many seconds of appearing on disk
CLIENTS, REQUESTS_PER_CLIENT = 32, 50
GRPC_THREADS = 64  # above CLIENTS: every request is taken (given: tensorflow_model_server's 4 x CPUs refuses some)
TEXTS = ["a fine film", "dull", "Ünïcödé text — with punctuation!", "x" * 300, "two words", "?"]

BATCHING_CONFIG = """
max_batch_size { value: 32 }
batch_timeout_micros { value: 5000 }
max_enqueued_batches { value: 100 }
num_batch_threads { value: 2 }
"""


def check(label, value, bound, ok, explain=""):
    print(f"  CHECK {label}: {value} (bound: {bound}) -> {'ok' if ok else 'FAILED'}")
    assert ok, f"{label}: {value} (bound: {bound}){explain}"


# --- models and servers -----------------------------------------------------------------------------


class Models:
    pass


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    root = tmp_path_factory.mktemp("serving")
    m = Models()
    m.root = root
    m.base = root / "models"
    m.clf = build_standin(m.base / "clf" / "1", "classifier")
    m.qa = build_standin(m.base / "qa" / "1", "qa")
    m.reload_v1 = build_standin(root / "staging" / "reload-1", "classifier", offset=0.0)
    m.reload_v2 = build_standin(root / "staging" / "reload-2", "classifier", offset=1.5)
    (m.base / "pending").mkdir()
    m.batching_config = root / "batching.config"
    m.batching_config.write_text(BATCHING_CONFIG)
    return m


@pytest.fixture(scope="module")
def reference(models):
    """Calls the SavedModels in process (tf.saved_model.load), the figure the servers must match."""
    import tensorflow as tf

    loaded = {"clf": tf.saved_model.load(models.clf), "qa": tf.saved_model.load(models.qa),
              "reload-1": tf.saved_model.load(models.reload_v1), "reload-2": tf.saved_model.load(models.reload_v2)}

    def call(model, signature="serving_default", **inputs):
        function = loaded[model].signatures[signature]
        return {k: v.numpy() for k, v in function(**{k: tf.constant(v) for k, v in inputs.items()}).items()}

    return call


def _model_config(models, kind, reload_base, with_pending):
    entries = [("clf", models.base / "clf"), ("qa", models.base / "qa"), ("reload", reload_base),
               ("swap", models.base / f"swap-{kind}")]
    if with_pending:
        entries.append(("pending", models.base / "pending"))
    labels = {"clf": ' version_labels { key: "stable" value: 1 }'}
    text = "model_config_list {\n" + "".join(
        f'  config {{ name: "{name}" base_path: "{path}" model_platform: "tensorflow"{labels.get(name, "")} }}\n'
        for name, path in entries) + "}\n"
    path = models.root / f"models-{kind}.config"
    path.write_text(text)
    return path


class Running:
    """What a test needs of a running server."""

    def __init__(self, kind, target, rest_url, reload_base, server=None):
        self.kind, self.target, self.rest_url = kind, target, rest_url
        self.reload_base, self.server = reload_base, server
        self.models_base = reload_base.parent if reload_base is not None else None

    @property
    def ours(self):
        return self.kind == "xlnet-tf"

    def client(self, model, **kwargs):
        return Client(self.target, model, **kwargs)


@pytest.fixture(scope="module", params=["xlnet-tf", "tensorflow_model_server"])
def server(request, models):
    kind = request.param
    if kind == "tensorflow_model_server" and TF_SERVING is None:
        reason = "tensorflow_model_server is not on PATH: the suite ran against xlnet-tf serve only"
        print(f"\n  SKIP [{kind}]: {reason}")
        pytest.skip(reason)
    reload_base = models.base / f"reload-{kind}"
    shutil.copytree(models.reload_v1, reload_base / "1")
    shutil.copytree(models.reload_v1, models.base / f"swap-{kind}" / "1")
    config = _model_config(models, kind, reload_base, with_pending=kind == "xlnet-tf")
    if kind == "xlnet-tf":
        instance = serve(model_config_file=str(config), port=0, rest_api_port=0, enable_batching=True,
                         batching_parameters_file=str(models.batching_config), poll_interval=POLL_SECONDS[kind],
                         max_request_bytes=MAX_REQUEST_BYTES, grpc_max_threads=GRPC_THREADS).start()
        try:
            yield Running(kind, instance.grpc_target, instance.rest_url, reload_base, instance)
        finally:
            instance.stop(5)
        return
    socket_path = models.root / "tfs.sock"
    command = [TF_SERVING, "--port=0", f"--grpc_socket_path={socket_path}", "--rest_api_port=0",
               f"--model_config_file={config}", "--enable_batching=true",
               f"--batching_parameters_file={models.batching_config}",
               f"--file_system_poll_wait_seconds={POLL_SECONDS[kind]}", f"--grpc_max_threads={GRPC_THREADS}",
               f"--grpc_channel_arguments=grpc.max_receive_message_length={MAX_REQUEST_BYTES}"]
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    target = f"unix:{socket_path}"
    try:
        deadline = time.monotonic() + 120
        while True:
            try:
                if all(s["state"] == "AVAILABLE" for s in Client(target, "clf", timeout=2, retries=0).status()):
                    break
            except ServingError:
                pass
            if process.poll() is not None or time.monotonic() > deadline:
                pytest.fail(f"tensorflow_model_server did not start (exit code {process.poll()})")
            time.sleep(0.5)
        print(f"\n  [{kind}] gRPC on {target}; REST not started (it would bind every interface)")
        yield Running(kind, target, None, reload_base)
    finally:
        process.terminate()
        process.wait(30)


def _rest(running, method, path, body=None, raw=None):
    """-> (HTTP status, decoded JSON body)."""
    data = raw if raw is not None else (json.dumps(body).encode() if body is not None else None)
    request = urllib.request.Request(running.rest_url + path, data=data, method=method,
                                     headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read() or b"{}")


def _needs_rest(running):
    if running.rest_url is None:
        print(f"  [{running.kind}] REST checks not run: its REST server would bind every interface")
        return False
    return True


def _compare(label, got, want, atol=1e-6):
    """Same output names, shapes and values (strings exactly, numbers within atol)."""
    assert sorted(got) == sorted(want), (label, sorted(got), sorted(want))
    worst = 0.0
    for name, expected in want.items():
        value = np.asarray(got[name])
        assert value.shape == expected.shape, (label, name, value.shape, expected.shape)
        if expected.dtype == object:
            assert [v if isinstance(v, bytes) else v.encode() for v in value.reshape(-1).tolist()] == \
                expected.reshape(-1).tolist(), (label, name)
        elif expected.size:
            worst = max(worst, float(np.max(np.abs(value.astype(np.float64) - expected.astype(np.float64)))))
    check(f"{label}: max |served - in process|", f"{worst:.3g}", f"<= {atol}", worst <= atol)


# --- end to end ---------------------------------------------------------------------------------------


@pytest.mark.slow
def test_grpc_results_equal_in_process(server, reference):
    print(f"\n[{server.kind}] gRPC client vs the SavedModel called in process")
    clf = server.client("clf")
    _compare("clf serving_default (predict)", clf.predict({"text": TEXTS}), reference("clf", text=TEXTS))
    want = reference("clf", text=TEXTS)
    rows = clf.classify(TEXTS)
    assert [r["label"] for r in rows] == [v.decode() for v in want["label"]]
    assert [r["label_id"] for r in rows] == want["label_id"].tolist()
    _compare("clf classify() probabilities", {"p": np.array([r["probabilities"] for r in rows], np.float32)},
             {"p": want["probabilities"]})
    pair_b = ["and more"] * len(TEXTS)
    rows = clf.classify(TEXTS, pair_b, signature_name="pair")
    want = reference("clf", "pair", text_a=TEXTS, text_b=pair_b)
    assert [r["label"] for r in rows] == [v.decode() for v in want["label"]]
    _compare("clf encode()", clf.encode(TEXTS), reference("clf", "encode", text=TEXTS))

    qa = server.client("qa")
    questions, contexts = ["who wrote it?", "when?"], ["Ada Lovelace wrote it in 1843.", "In 1843."]
    answers = qa.answer(questions, contexts)
    want = reference("qa", question=questions, context=contexts)
    assert [a["answer"] for a in answers] == [v.decode() for v in want["answer"]]
    assert [a["start"] for a in answers] == want["answer_start"].tolist()
    assert [a["end"] for a in answers] == want["answer_end"].tolist()
    _compare("qa answer() scores", {"s": np.array([a["score"] for a in answers], np.float32),
                                    "n": np.array([a["no_answer_probability"] for a in answers], np.float32)},
             {"s": want["score"], "n": want["no_answer_probability"]})

    metadata = clf.metadata()
    assert metadata["version"] == 1
    assert metadata["signatures"]["serving_default"]["inputs"]["text"]["dtype"] == "DT_STRING"
    assert {"serving_default", "encode", "pair"} <= set(metadata["signatures"])
    assert clf.status() == [{"version": 1, "state": "AVAILABLE", "error_code": 0, "error_message": ""}]
    stable = server.client("clf", version_label="stable")
    _compare("clf by version label 'stable'", stable.predict({"text": TEXTS}), reference("clf", text=TEXTS))
    assert stable.last_version == 1
    big = ["y" * (5 << 20)]  # 5 MiB: over gRPC's default 4 MiB, under the configured 8 MiB
    _compare("5 MiB request (over gRPC's default limit)", clf.predict({"text": big}, output_filter=["logits"]),
             {"logits": reference("clf", text=big)["logits"]})


def test_rest_row_and_columnar_equal_in_process(server, reference):
    print(f"\n[{server.kind}] REST (row and columnar) vs the SavedModel called in process")
    if not _needs_rest(server):
        return
    want = reference("clf", text=TEXTS)
    status, body = _rest(server, "POST", "/v1/models/clf:predict", {"instances": TEXTS})
    assert status == 200, body
    rows = body["predictions"]
    got = {k: np.array([r[k] for r in rows], dtype=object if k == "label" else want[k].dtype) for k in rows[0]}
    _compare("REST row format (instances)", got, want)
    status, body = _rest(server, "POST", "/v1/models/clf/versions/1:predict",
                         {"signature_name": "encode", "inputs": {"text": TEXTS}})
    assert status == 200, body
    expected = reference("clf", "encode", text=TEXTS)
    _compare("REST columnar format (inputs), signature encode",
             {k: np.array(v, np.float32) for k, v in body["outputs"].items()}, expected)
    status, body = _rest(server, "POST", "/v1/models/clf:predict",
                         {"inputs": [{"b64": base64.b64encode(t.encode()).decode()} for t in TEXTS]})
    assert status == 200, body
    assert body["outputs"]["label"] == [v.decode() for v in want["label"]]

    questions, contexts = ["who wrote it?", "when?"], ["Ada Lovelace wrote it in 1843.", "In 1843."]
    want = reference("qa", question=questions, context=contexts)
    status, body = _rest(server, "POST", "/v1/models/qa:predict",
                         {"instances": [{"question": q, "context": c} for q, c in zip(questions, contexts)]})
    assert status == 200, body
    assert [r["answer"] for r in body["predictions"]] == [v.decode() for v in want["answer"]]
    status, body = _rest(server, "POST", "/v1/models/qa:predict",
                         {"inputs": {"question": questions, "context": contexts}})
    assert status == 200, body
    _compare("REST columnar QA", {k: np.array(v, dtype=object if k == "answer" else want[k].dtype)
                                  for k, v in body["outputs"].items()}, want)

    status, body = _rest(server, "GET", "/v1/models/clf")
    assert status == 200 and body["model_version_status"][0]["state"] == "AVAILABLE", body
    assert body["model_version_status"][0]["status"]["error_code"] == "OK"
    status, body = _rest(server, "POST", "/v1/models/clf/labels/stable:predict", {"instances": TEXTS[:1]})
    assert status == 200 and body["predictions"][0]["label"] == reference("clf", text=TEXTS[:1])["label"][0].decode()
    status, body = _rest(server, "GET", "/v1/models/clf/versions/1/metadata")
    assert status == 200 and "serving_default" in body["metadata"]["signature_def"]["signature_def"], body


def test_concurrent_clients_and_batching(server, reference):
    print(f"\n[{server.kind}] {CLIENTS} concurrent clients x {REQUESTS_PER_CLIENT} requests")
    want = reference("clf", text=TEXTS)
    expected = [(want["label"][i].decode(), want["probabilities"][i]) for i in range(len(TEXTS))]
    before = server.server.batch_stats() if server.ours else None
    errors, wrong, done = [], [], [0]
    lock = threading.Lock()
    barrier = threading.Barrier(CLIENTS)

    def worker(seed):
        client = server.client("clf", timeout=30)
        barrier.wait(30)
        for i in range(REQUESTS_PER_CLIENT):
            index = (seed + i) % len(TEXTS)
            try:
                (row,) = client.classify([TEXTS[index]])
            except Exception as error:  # noqa: BLE001 - counted
                with lock:
                    errors.append(repr(error))
                continue
            label, probabilities = expected[index]
            ok = row["label"] == label and np.allclose(row["probabilities"], probabilities, atol=1e-6)
            with lock:
                done[0] += 1
                if not ok:
                    wrong.append((index, row))
        client.close()

    started = time.monotonic()
    threads = [threading.Thread(target=worker, args=(n,)) for n in range(CLIENTS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(240)
    elapsed = time.monotonic() - started
    total = CLIENTS * REQUESTS_PER_CLIENT
    print(f"  {done[0]} requests in {elapsed:.1f}s ({done[0] / elapsed:.0f} requests/s)")
    check("failed requests", len(errors), "== 0", not errors)
    check("answers differing from in-process results", len(wrong), "== 0", not wrong)
    check("requests answered", done[0], f"== {total}", done[0] == total)
    if not server.ours:
        print("  tensorflow_model_server's batch counters are not exposed over gRPC: merging not checked")
        return
    after = server.server.batch_stats()
    merged = after["merged_batches"] - before["merged_batches"]
    batches = after["batches"] - before["batches"]
    print(f"  batches: {batches} for {total} requests; requests per batch histogram: {after['requests_per_batch']}")
    check("batches holding more than one request", merged, "> 0", merged > 0)
    check("largest batch (requests)", after["max_requests_per_batch"], "> 1 and <= max_batch_size 32",
          1 < after["max_requests_per_batch"] <= 32)
    check("batches run", batches, f"< {total} requests", batches < total)


def _versions_seen_during(server, action, model="reload", threads=4, settle=1.0, limit=NEW_VERSION_BOUND_S + 20):
    """Runs clients on `model` while `action()` runs; returns (events [(t, version, error)], action time)."""
    events, stop = [], threading.Event()
    lock = threading.Lock()

    def worker():
        client = server.client(model, timeout=30)
        while not stop.is_set():
            try:
                client.predict({"text": ["a fine film"]}, output_filter=["logits"])
                entry = (time.monotonic(), client.last_version, None)
            except Exception as error:  # noqa: BLE001 - counted
                entry = (time.monotonic(), None, repr(error))
            with lock:
                events.append(entry)
        client.close()

    pool = [threading.Thread(target=worker) for _ in range(threads)]
    for thread in pool:
        thread.start()
    try:
        time.sleep(0.5)
        acted_at, target = action()
        deadline = acted_at + limit
        while time.monotonic() < deadline:
            with lock:
                seen = [t for t, v, _ in events if v == target and t >= acted_at]
            if seen:
                break
            time.sleep(0.05)
        time.sleep(settle)
    finally:
        stop.set()
        for thread in pool:
            thread.join(60)
    return events, acted_at


def test_new_version_served_while_clients_run(server, reference):
    print(f"\n[{server.kind}] a new version copied into the base path while clients run")
    base = server.reload_base
    client = server.client("reload")
    assert client.predict({"text": ["a fine film"]}) and client.last_version == 1

    def copy_version_2():
        staging = base / ".incoming-2"  # like the exporter: a dot-directory (ignored), then a rename
        shutil.copytree(_staging(base, 2), staging)
        os.rename(staging, base / "2")
        return time.monotonic(), 2

    events, acted_at = _versions_seen_during(server, copy_version_2)
    failures = [e for e in events if e[2] is not None]
    first_v2 = min((t for t, v, _ in events if v == 2), default=None)
    latency = (first_v2 - acted_at) if first_v2 else float("inf")
    print(f"  {len(events)} requests during the switch; versions answered: "
          f"{sorted({v for _, v, _ in events if v})}")
    check("failed requests during the version switch", len(failures), "== 0", not failures)
    check("seconds from the new version on disk to its first answer", f"{latency:.2f}",
          f"<= {NEW_VERSION_BOUND_S}", latency <= NEW_VERSION_BOUND_S)
    late_v1 = [t for t, v, _ in events if v == 1 and first_v2 and t > first_v2 + 1.0]
    check("answers from version 1 more than 1 s after version 2 answered", len(late_v1), "== 0", not late_v1)
    _compare("version 2 answers", client.predict({"text": TEXTS}), reference("reload-2", text=TEXTS))
    assert client.last_version == 2

    deadline = time.monotonic() + 15
    while time.monotonic() < deadline:
        states = {s["version"]: s["state"] for s in client.status()}
        if states.get(1) == "END":
            break
        time.sleep(0.2)
    check("model status after the switch", states, "{1: END, 2: AVAILABLE}", states == {1: "END", 2: "AVAILABLE"})

    if not server.ours:
        return
    events_log = [e for e in server.server.manager.events if e[1] == "reload"]
    available = [e for e in events_log if e[2] == 2 and e[3] == "available"]
    assert available, events_log
    print(f"  version 2 loaded: {available[0][4]}")
    check("warmup requests replayed before version 2 took traffic", available[0][4], "'warmup requests: 2'",
          available[0][4] == "warmup requests: 2" and available[0][0] <= first_v2)
    order = [e[3] for e in events_log if e[3] in ("available", "unloading", "unloaded")]
    check("lifecycle order", order, "v2 available, then v1 unloading, unloaded",
          order[-3:] == ["available", "unloading", "unloaded"])

    # A plain copy straight into the base path (files appear one by one) is also picked up, unbroken.
    def copy_version_3():
        shutil.copytree(_staging(base, 2), base / "3")
        return time.monotonic(), 3

    events, acted_at = _versions_seen_during(server, copy_version_3)
    failures = [e for e in events if e[2] is not None]
    first_v3 = min((t for t, v, _ in events if v == 3), default=None)
    latency = (first_v3 - acted_at) if first_v3 else float("inf")
    check("failed requests during a non-atomic copy", len(failures), "== 0", not failures)
    check("seconds to serve a version copied in place", f"{latency:.2f}", f"<= {NEW_VERSION_BOUND_S}",
          latency <= NEW_VERSION_BOUND_S)


@pytest.mark.slow
def test_version_swap_never_fails_a_request(server):
    """Clients busy on version 1, one of them in a request that runs for seconds; version 2 published and
    version 1's directory deleted: no request fails, the long one answers from version 1, no request sent after
    version 2's first answer comes back from version 1, and (ours) a broken version 3 published while version 1
    still holds its long request is tried at once: nothing waits for that request."""
    print(f"\n[{server.kind}] version swap under load with a long request on the old version")
    base = server.models_base / f"swap-{server.kind}"
    long_seconds = 6.0
    events, stop, lock = [], threading.Event(), threading.Lock()

    def worker():
        client = server.client("swap", timeout=60)
        while not stop.is_set():
            sent = time.monotonic()
            try:
                client.predict({"text": ["a fine film"]}, output_filter=["logits"])
                entry = (sent, time.monotonic(), client.last_version, None)
            except Exception as error:  # noqa: BLE001 - counted
                entry = (sent, time.monotonic(), None, repr(error))
            with lock:
                events.append(entry)
        client.close()

    long_result = {}

    def long_request():
        client = server.client("swap", timeout=120)
        began = time.monotonic()
        try:
            outputs = client.predict({"seconds": np.array([long_seconds], np.float32)}, signature_name="slow")
            # slept: the sleep as the servable timed it (its wall clock)
            long_result.update(version=client.last_version, slept=round(float(outputs["slept"][0]), 2))
        except Exception as error:  # noqa: BLE001 - reported
            long_result.update(error=repr(error))
        long_result["seconds"], long_result["began"] = time.monotonic() - began, began
        long_result["done_at"] = time.monotonic()
        client.close()

    pool = [threading.Thread(target=worker) for _ in range(4)]
    holder = threading.Thread(target=long_request)
    for thread in pool:
        thread.start()
    try:
        time.sleep(0.5)
        holder.start()
        time.sleep(0.5)  # the long request is running on version 1
        staging = base / ".incoming-2"
        shutil.copytree(_staging(base, 2), staging)
        os.rename(staging, base / "2")
        published = time.monotonic()
        deadline = published + NEW_VERSION_BOUND_S + 20
        while time.monotonic() < deadline and not any(v == 2 for _, _, v, _ in events):
            time.sleep(0.05)
        shutil.rmtree(base / "1")  # version 1 deleted while its long request still runs
        broken = base / ".incoming-3"
        broken.mkdir()
        (broken / "saved_model.pb").write_bytes(b"not a SavedModel")
        os.rename(broken, base / "3")
        broken_at = time.monotonic()
        holder.join(120)
        time.sleep(1.0)
    finally:
        stop.set()
        for thread in pool:
            thread.join(60)
    failures = [e for e in events if e[3] is not None]
    first_v2 = min((done for _, done, v, _ in events if v == 2), default=float("inf"))
    late_v1 = [e for e in events if e[2] == 1 and e[0] > first_v2]
    print(f"  {len(events)} requests; versions answered {sorted({e[2] for e in events if e[2]})}; long request "
          f"{long_result}")
    check("failed requests during the swap (long request included)", len(failures) + ("error" in long_result),
          "== 0", not failures and "error" not in long_result)
    check("the long request's version and its sleep (the servable's clock)", (long_result.get("version"),
          long_result.get("slept")), f"version 1, >= {long_seconds - 0.05} s", long_result.get("version") == 1 and
          long_result.get("slept", 0) >= long_seconds - 0.05)
    check("answers from version 1 to requests sent after version 2's first answer", len(late_v1), "== 0",
          first_v2 < float("inf") and not late_v1)
    if server.ours:
        log = [e for e in server.server.manager.events if e[1] == "swap"]
        tried = min((t for t, _, version, event, _ in log if version == 3 and event == "load_failed"),
                    default=float("inf"))
        closed = min((t for t, _, version, event, _ in log if version == 1 and event == "unloaded"),
                     default=float("inf"))
        print(f"  version 3 (broken) tried {tried - broken_at:.2f} s after it appeared; version 1 closed "
              f"{closed - long_result['began']:.2f} s after its long request was sent")
        check("broken version 3 tried while version 1 still held its long request", f"{tried - broken_at:.2f} s",
              f"before the long request ended ({long_result['done_at'] - broken_at:.2f} s)",
              tried < long_result["done_at"])
        # Closed once the long request was answered (the client's stamp of the answer may come a little after
        # the server moved on): a version closed under its request would fail it or close seconds earlier.
        check("version 1 closed after its long request had run, not before",
              f"{closed - long_result['began']:.2f} s after it was sent (answered after "
              f"{long_result['done_at'] - long_result['began']:.2f} s; slept {long_result.get('slept')} s by the "
              "servable's clock)", "no earlier than 0.25 s before the answer",
              closed >= long_result["done_at"] - 0.25)
    states = {s["version"]: s["state"] for s in server.client("swap").status()}
    check("swap model status", states, "version 1 END, version 2 AVAILABLE", states.get(1) == "END" and
          states.get(2) == "AVAILABLE")


def _staging(base, version):
    return base.parent.parent / "staging" / f"reload-{version}"


# --- bad requests -------------------------------------------------------------------------------------


def _grpc_code(call):
    try:
        call()
    except ServingError as error:
        return error.code, error.message
    return grpc.StatusCode.OK, ""


def test_bad_requests_get_the_right_status_and_serving_continues(server, reference):
    print(f"\n[{server.kind}] bad requests (gRPC), each followed by a good request")
    clf, qa = server.client("clf", retries=0), server.client("qa", retries=0)
    good = reference("clf", text=["ok"])
    cases = [
        ("missing input", lambda: qa.predict({"question": ["who?"]}), "INVALID_ARGUMENT"),
        ("extra input", lambda: clf.predict({"text": ["a"], "other": ["b"]}), "INVALID_ARGUMENT"),
        ("wrong dtype (float for text)", lambda: clf.predict({"text": np.array([1.0], np.float32)}), "INVALID_ARGUMENT"),
        ("shape mismatch ([2,2] for [None])", lambda: clf.predict({"text": [["a", "b"], ["c", "d"]]}), "INVALID_ARGUMENT"),
        ("empty batch (model refuses it)", lambda: clf.predict({"text": []}), "INVALID_ARGUMENT"),
        ("10 MB string", lambda: clf.predict({"text": ["z" * (10 << 20)]}), "RESOURCE_EXHAUSTED"),
        ("non-UTF-8 bytes", lambda: clf.predict({"text": [b"caf\xe9 \xff"]}), "INVALID_ARGUMENT"),
        ("unknown model", lambda: Client(server.target, "nope", retries=0).predict({"text": ["a"]}), "NOT_FOUND"),
        ("unknown version", lambda: Client(server.target, "clf", version=99, retries=0).predict({"text": ["a"]}),
         "NOT_FOUND"),
        ("unknown version label", lambda: Client(server.target, "clf", version_label="nope", retries=0).predict(
            {"text": ["a"]}), "INVALID_ARGUMENT"),
        ("unknown signature", lambda: clf.predict({"text": ["a"]}, signature_name="nope"), "FAILED_PRECONDITION"),
        ("unknown output_filter", lambda: clf.predict({"text": ["a"]}, output_filter=["nope"]), "INVALID_ARGUMENT"),
        ("status of an unknown model", lambda: Client(server.target, "nope", retries=0).status(), "NOT_FOUND"),
    ]
    if server.ours:
        cases.append(("model with no version loaded yet",
                      lambda: Client(server.target, "pending", retries=0).predict({"text": ["a"]}),
                      "NOT_FOUND"))
    for label, call, expected in cases:
        code, message = _grpc_code(call)
        print(f"    {label}: {code.name} ({message[:110]})")
        check(f"status of '{label}'", code.name, expected, code.name == expected)
        _compare(f"  next good request after '{label}'", clf.predict({"text": ["ok"]}), good)

    if not _needs_rest(server):
        return
    print(f"[{server.kind}] bad requests (REST)")
    rest_cases = [
        ("malformed JSON", "POST", "/v1/models/clf:predict", None, b"{not json", 400),
        ("neither instances nor inputs", "POST", "/v1/models/clf:predict", {"signature_name": "serving_default"}, None, 400),
        ("missing input", "POST", "/v1/models/qa:predict", {"instances": [{"question": "q"}]}, None, 400),
        ("wrong type (number for text)", "POST", "/v1/models/clf:predict", {"instances": [1.5]}, None, 400),
        ("ragged nested lists", "POST", "/v1/models/clf:predict", {"inputs": [["a"], ["b", "c"]]}, None, 400),
        ("empty batch", "POST", "/v1/models/clf:predict", {"instances": []}, None, 400),
        ("non-UTF-8 bytes (b64)", "POST", "/v1/models/clf:predict",
         {"instances": [{"b64": base64.b64encode(b"\xff\xfe").decode()}]}, None, 400),
        ("10 MB body", "POST", "/v1/models/clf:predict", {"instances": ["z" * (10 << 20)]}, None, 429),
        ("unknown model", "POST", "/v1/models/nope:predict", {"instances": ["a"]}, None, 404),
        ("unknown version", "POST", "/v1/models/clf/versions/99:predict", {"instances": ["a"]}, None, 404),
        ("unknown signature", "POST", "/v1/models/clf:predict", {"signature_name": "nope", "instances": ["a"]},
         None, 400),
        ("unknown path", "GET", "/v2/whatever", None, None, 404),
        ("status of an unknown model", "GET", "/v1/models/nope", None, None, 404),
    ]
    for label, method, path, body, raw, expected in rest_cases:
        status, answer = _rest(server, method, path, body, raw)
        print(f"    {label}: HTTP {status} {str(answer)[:110]}")
        check(f"HTTP status of '{label}'", status, expected, status == expected and "error" in answer)
        status, answer = _rest(server, "POST", "/v1/models/clf:predict", {"instances": ["ok"]})
        assert status == 200 and answer["predictions"][0]["label"] == good["label"][0].decode(), answer


# --- TensorFlow Serving's inference API: Classify, Regress, MultiInference on tf.Examples ---------------------


def _stubs(target):
    """tensorflow-serving-api's own PredictionService stub on a fresh channel."""
    from tensorflow_serving.apis import prediction_service_pb2_grpc

    channel = grpc.insecure_channel(target, options=[("grpc.max_receive_message_length", MAX_REQUEST_BYTES),
                                                     ("grpc.max_send_message_length", MAX_REQUEST_BYTES)])
    return channel, prediction_service_pb2_grpc.PredictionServiceStub(channel)


def _examples(**columns):
    """Input proto of tf.Examples, each feature a bytes_list of one UTF-8 value per row."""
    from xlnet_tf.serving.client import text_examples

    return text_examples(columns)


def _request(kind, model, signature, input_proto):
    from tensorflow_serving.apis import classification_pb2, regression_pb2

    request = {"classify": classification_pb2.ClassificationRequest,
               "regress": regression_pb2.RegressionRequest}[kind]()
    request.model_spec.name = model
    request.model_spec.signature_name = signature
    request.input.CopyFrom(input_proto)
    return request


def _scores(result):
    """A ClassificationResult's scores, [examples, classes]."""
    return np.array([[c.score for c in row.classes] for row in result.classifications], np.float32)


def _labels(result):
    return [[c.label for c in row.classes] for row in result.classifications]


def test_classify_regress_and_multi_inference(server, reference):
    """Classify / Regress / MultiInference through tensorflow-serving-api's stubs equal Predict on the same
    texts; with context; REST :classify / :regress equal gRPC; bad Examples get INVALID_ARGUMENT / 400 and the
    server keeps serving."""
    from tensorflow_serving.apis import inference_pb2, input_pb2

    print(f"\n[{server.kind}] Classify, Regress, MultiInference (the stand-in's classification / regression)")
    channel, stub = _stubs(server.target)
    try:
        want = reference("clf", text=TEXTS)
        classified = stub.Classify(_request("classify", "clf", "classification", _examples(text=TEXTS)), timeout=30)
        scores = _scores(classified.result)
        diff = float(np.max(np.abs(scores - want["probabilities"])))
        check("Classify scores vs Predict probabilities (max |diff|)", f"{diff:.1e}", "<= 1e-6", diff <= 1e-6)
        best = [row[int(np.argmax(p))] for row, p in zip(_labels(classified.result), scores)]
        check("Classify's best classes vs Predict's labels", best, [v.decode() for v in want["label"]],
              best == [v.decode() for v in want["label"]])
        check("Classify response model_spec", (classified.model_spec.name, classified.model_spec.version.value,
                                               classified.model_spec.signature_name),
              "('clf', 1, 'classification')", (classified.model_spec.name, classified.model_spec.version.value,
                                               classified.model_spec.signature_name) == ("clf", 1, "classification"))
        regressed = stub.Regress(_request("regress", "clf", "regression", _examples(text=TEXTS)), timeout=30)
        values = np.array([r.value for r in regressed.result.regressions], np.float32)
        diff = float(np.max(np.abs(values - want["probabilities"][:, 1])))
        check("Regress outputs vs Predict probabilities[:, 1] (max |diff|)", f"{diff:.1e}", "<= 1e-6", diff <= 1e-6)

        # example_list_with_context: the context's features, the example's winning where both have one
        context = input_pb2.Input()
        listed = context.example_list_with_context
        listed.context.features.feature["text"].bytes_list.value.append(TEXTS[0].encode())
        listed.examples.add()  # no feature: the context's text
        listed.examples.add().features.feature["text"].bytes_list.value.append(TEXTS[1].encode())
        merged = _scores(stub.Classify(_request("classify", "clf", "classification", context), timeout=30).result)
        expected = want["probabilities"][:2]
        diff = float(np.max(np.abs(merged - expected)))
        check("example_list_with_context: [context's text, example's own] vs Predict (max |diff|)", f"{diff:.1e}",
              "<= 1e-6", diff <= 1e-6)

        request = inference_pb2.MultiInferenceRequest()
        for method, signature in (("tensorflow/serving/classify", "classification"),
                                  ("tensorflow/serving/regress", "regression")):
            task = request.tasks.add()
            task.model_spec.name, task.model_spec.signature_name, task.method_name = "clf", signature, method
        request.input.CopyFrom(_examples(text=TEXTS))
        multi = stub.MultiInference(request, timeout=30)
        got = (_scores(multi.results[0].classification_result),
               np.array([r.value for r in multi.results[1].regression_result.regressions], np.float32))
        diff = max(float(np.max(np.abs(got[0] - scores))), float(np.max(np.abs(got[1] - values))))
        check("MultiInference (classify + regress tasks) vs Classify and Regress (max |diff|)", f"{diff:.1e}",
              "<= 1e-6", diff <= 1e-6 and [r.model_spec.signature_name for r in multi.results] ==
              ["classification", "regression"])

        def code_of(call):
            try:
                call()
            except grpc.RpcError as error:
                return error.code().name, error.details()
            return "OK", ""

        bad_utf8 = input_pb2.Input()
        bad_utf8.example_list.examples.add().features.feature["text"].bytes_list.value.append(b"caf\xe9 \xff")
        wrong_type = input_pb2.Input()
        wrong_type.example_list.examples.add().features.feature["text"].int64_list.value.append(7)
        duplicate = inference_pb2.MultiInferenceRequest()
        duplicate.CopyFrom(request)
        duplicate.tasks[1].model_spec.signature_name = "classification"
        duplicate.tasks[1].method_name = "tensorflow/serving/classify"
        other_model = inference_pb2.MultiInferenceRequest()
        other_model.CopyFrom(request)
        other_model.tasks[1].model_spec.name = "qa"
        cases = [
            ("missing feature", lambda: stub.Classify(_request("classify", "clf", "classification",
                                                               _examples(other=TEXTS[:1])), timeout=30),
             "INVALID_ARGUMENT", "text"),
            ("feature of another type", lambda: stub.Classify(_request("classify", "clf", "classification",
                                                                       wrong_type), timeout=30),
             "INVALID_ARGUMENT", "text"),
            ("non-UTF-8 text", lambda: stub.Regress(_request("regress", "clf", "regression", bad_utf8), timeout=30),
             "INVALID_ARGUMENT", ""),
            ("empty input", lambda: stub.Classify(_request("classify", "clf", "classification", input_pb2.Input()),
                                                  timeout=30), "INVALID_ARGUMENT", "Input is empty"),
            ("Classify on a predict signature (four outputs)",
             lambda: stub.Classify(_request("classify", "clf", "serving_default", _examples(text=TEXTS[:1])),
                                   timeout=30), "INVALID_ARGUMENT", "output Tensors"),
            ("Regress on the classification signature (two outputs)",
             lambda: stub.Regress(_request("regress", "clf", "classification", _examples(text=TEXTS[:1])),
                                  timeout=30), "INVALID_ARGUMENT", "one output"),
            ("unknown model", lambda: stub.Classify(_request("classify", "nope", "classification",
                                                             _examples(text=TEXTS[:1])), timeout=30), "NOT_FOUND", ""),
            ("MultiInference: a signature twice", lambda: stub.MultiInference(duplicate, timeout=30),
             "INVALID_ARGUMENT", "Duplicate"),
            ("MultiInference: two models", lambda: stub.MultiInference(other_model, timeout=30),
             "INVALID_ARGUMENT", "same model name"),
        ]
        for label, call, expected, named in cases:
            code, message = code_of(call)
            print(f"    {label}: {code} ({message[:120]})")
            check(f"status of '{label}'", code, f"{expected}, message naming {named!r}",
                  code == expected and named in message)
            again = _scores(stub.Classify(_request("classify", "clf", "classification", _examples(text=TEXTS[:2])),
                                          timeout=30).result)
            assert float(np.max(np.abs(again - want["probabilities"][:2]))) <= 1e-6
    finally:
        channel.close()

    if not _needs_rest(server):
        return
    status, body = _rest(server, "POST", "/v1/models/clf:classify",
                         {"signature_name": "classification", "examples": [{"text": t} for t in TEXTS]})
    rest_scores = np.array([[score for _, score in row] for row in body.get("results", [])], np.float32)
    check("REST :classify labels", [[label for label, _ in row] for row in body["results"]], "gRPC's",
          status == 200 and [[label for label, _ in row] for row in body["results"]] == _labels(classified.result))
    diff = float(np.max(np.abs(rest_scores - scores)))
    check("REST :classify scores vs gRPC Classify (max |diff|)", f"{diff:.1e}", "<= 1e-6", diff <= 1e-6)
    status, body = _rest(server, "POST", "/v1/models/clf/versions/1:regress",
                         {"signature_name": "regression", "context": {"text": TEXTS[0]},
                          "examples": [{}, {"text": TEXTS[1]}]})
    diff = float(np.max(np.abs(np.array(body.get("results", [np.inf]), np.float32) - values[:2])))
    check("REST :regress with context vs gRPC Regress (max |diff|)", f"{diff:.1e}", "<= 1e-6",
          status == 200 and diff <= 1e-6)
    rest_cases = [
        ("an example that is not an object", {"signature_name": "classification", "examples": ["text"]}),
        ("no examples", {"signature_name": "classification"}),
        ("missing feature", {"signature_name": "classification", "examples": [{"other": "a"}]}),
        ("non-UTF-8 text (b64)", {"signature_name": "classification",
                                  "examples": [{"text": {"b64": base64.b64encode(b"\xff\xfe").decode()}}]}),
        ("mixed types in a feature", {"signature_name": "classification", "examples": [{"text": ["a", 1]}]}),
    ]
    for label, request_body in rest_cases:
        status, answer = _rest(server, "POST", "/v1/models/clf:classify", request_body)
        print(f"    REST {label}: HTTP {status} {str(answer)[:110]}")
        check(f"HTTP status of '{label}'", status, 400, status == 400 and "error" in answer)
        status, answer = _rest(server, "POST", "/v1/models/clf:classify",
                               {"signature_name": "classification", "examples": [{"text": TEXTS[0]}]})
        assert status == 200 and answer["results"][0][0][0] == "negative", answer


# --- our server only ------------------------------------------------------------------------------------


def test_batch_scheduler_limits():
    """Queue full -> RESOURCE_EXHAUSTED; oversized tasks refused or split; padding to allowed sizes."""
    from xlnet_tf.serving.batching import BatchScheduler
    from xlnet_tf.serving.config import BatchingConfig

    gate = threading.Event()
    seen = []

    def run(inputs):
        seen.append(len(inputs["x"]))
        gate.wait(10)
        return {"y": inputs["x"] * 2}

    scheduler = BatchScheduler(BatchingConfig(max_batch_size=2, batch_timeout_micros=0, max_enqueued_batches=1,
                                              num_batch_threads=1))
    results, codes = [], []

    def submit(value):
        try:
            results.append(scheduler.submit("k", run, {"x": np.array([value, value])}, 2)["y"].tolist())
        except ServingError as error:
            codes.append(error.code.name)

    first = threading.Thread(target=submit, args=(1,))
    first.start()
    time.sleep(0.3)  # the worker holds the first batch at the gate
    second = threading.Thread(target=submit, args=(2,))
    second.start()
    time.sleep(0.3)  # the queue (1 batch of 2 rows) is now full
    submit(3)
    check("a request beyond max_enqueued_batches", codes, "['RESOURCE_EXHAUSTED']", codes == ["RESOURCE_EXHAUSTED"])
    gate.set()
    first.join(10)
    second.join(10)
    assert sorted(results) == [[2, 2], [4, 4]]
    code, _ = _grpc_code(lambda: scheduler.submit("k", run, {"x": np.arange(3)}, 3))
    check("a request larger than max_batch_size", code.name, "INVALID_ARGUMENT", code.name == "INVALID_ARGUMENT")
    scheduler.stop()

    split = BatchScheduler(BatchingConfig(max_batch_size=8, max_execution_batch_size=3,
                                          enable_large_batch_splitting=True, allowed_batch_sizes=(2, 3),
                                          num_batch_threads=1))
    seen.clear()
    out = split.submit("k", run, {"x": np.arange(7)}, 7)["y"]
    check("split and padded batch sizes run", seen, "[3, 3, 2] (7 rows: 3+3+1 padded to 2)", seen == [3, 3, 2])
    assert out.tolist() == (np.arange(7) * 2).tolist()
    split.stop()


def test_config_files_parse_with_the_real_protos():
    from tensorflow_serving.config import model_server_config_pb2

    from xlnet_tf.errors import UserError
    from xlnet_tf.serving import config

    here = os.path.join(os.path.dirname(config.__file__))
    message = config.parse_model_server_config(open(os.path.join(here, "models.config")).read(), "models.config")
    assert isinstance(message, model_server_config_pb2.ModelServerConfig)
    entries = config.model_entries_from_proto(message, "models.config")
    print("\n  serving/models.config:", [(e.name, e.base_path, e.policy, e.versions) for e in entries])
    assert entries and entries[0].base_path.startswith("/models/")
    batching = config.batching_parameters_class()
    print(f"  BatchingParameters message: {batching.DESCRIPTOR.full_name}, {config.batching_parameters_source()}")
    assert batching.DESCRIPTOR.full_name == "tensorflow.serving.BatchingParameters"
    loaded = config.load_batching_config(os.path.join(here, "batching.config"))
    print("  serving/batching.config:", loaded)
    assert loaded.max_batch_size >= 1 and loaded.num_batch_threads >= 1
    with pytest.raises(UserError, match="bad.config"):
        config.parse_model_server_config("model_config_list { config { nme: 'x' } }", "bad.config")
    with pytest.raises(UserError, match="max_batch_size"):
        config.batching_config_from_proto(config.parse_batching_parameters("max_batch_size { value: 0 }"))
    entry = config.ModelEntry("m", "/x", policy="specific", versions=(1, 3))
    assert entry.aspired([1, 2, 3, 4]) == [1, 3]
    assert config.ModelEntry("m", "/x", num_versions=2).aspired([4, 1, 9]) == [4, 9]


def test_query_command(server):
    from xlnet_tf.serving.cli import add_query_arguments, query_main

    parser = add_query_arguments(argparse.ArgumentParser())
    out = io.StringIO()
    args = parser.parse_args(["--server", server.target, "--model", "clf", "--text", "a fine film", "--text", "dull",
                              "--json"])
    assert query_main(args, out=out) == 0
    result = json.loads(out.getvalue())
    assert result["version"] == 1 and len(result["results"]) == 2 and "label" in result["results"][0]
    out = io.StringIO()
    args = parser.parse_args(["--server", server.target, "--model", "qa", "--question", "who?", "--context",
                              "Ada wrote it."])
    assert query_main(args, out=out) == 0
    print("\n" + out.getvalue())
    assert "'Ada '" in out.getvalue()
    args = parser.parse_args(["--server", server.target, "--model", "nope", "--text", "x"])
    assert query_main(args, out=io.StringIO()) == 1


def test_client_retries_unavailable_only(models):
    """UNAVAILABLE (no server yet) is retried with backoff until the server is up; other codes are not."""
    port = _free_port()
    client = Client(f"127.0.0.1:{port}", "clf", timeout=5, retries=12, backoff=0.05, max_backoff=1.0)
    calls = []
    original = client._predict.Predict
    client._predict.Predict = lambda request, timeout: (calls.append(time.monotonic()), original(request, timeout=timeout))[1]
    started = {}

    def start_later():
        time.sleep(0.5)
        started["server"] = serve(model_base_path=str(models.base / "clf"), port=port, rest_api_port=None).start()
        started["at"] = time.monotonic()

    thread = threading.Thread(target=start_later)
    thread.start()
    t0 = time.monotonic()
    try:
        result = client.predict({"text": ["ok"]}, output_filter=["label"])
        thread.join(30)
        print(f"\n  answered after {time.monotonic() - t0:.2f}s and {len(calls)} attempts (server up after "
              f"{started['at'] - t0:.2f}s)")
        check("attempts while the server was starting", len(calls), "2..13 (retries=12)", 2 <= len(calls) <= 13)
        check("seconds from the server being up to the answer", f"{time.monotonic() - started['at']:.2f}",
              "<= 2.5 (client backoff <= 1 s, channel reconnect backoff <= 1 s)",
              time.monotonic() - started["at"] <= 2.5)
        assert result["label"].shape == (1,)
        calls.clear()
        code, _ = _grpc_code(lambda: client.predict({"text": [b"\xff"]}))
        check("attempts for INVALID_ARGUMENT (not retried)", (code.name, len(calls)), "('INVALID_ARGUMENT', 1)",
              (code.name, len(calls)) == ("INVALID_ARGUMENT", 1))
    finally:
        thread.join(30)
        if "server" in started:
            started["server"].stop(1)
        client.close()


def _free_port():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.mark.slow
def test_sigterm_finishes_in_flight_request_then_exits_0(models):
    print("\n[xlnet-tf serve subprocess] SIGTERM with a request in flight")
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", PYTHONUNBUFFERED="1")
    port = _free_port()
    process = subprocess.Popen(
        [sys.executable, "-m", "xlnet_tf.serving", "serve", "--model-base-path", str(models.base / "clf"),
         "--model-name", "clf", "--port", str(port), "--rest-api-port", "-1", "--grace-period", "20"],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
    lines = []
    reader = threading.Thread(target=lambda: lines.extend(iter(process.stdout.readline, "")), daemon=True)
    reader.start()
    try:
        deadline = time.monotonic() + 90
        while not any(line.startswith("serving gRPC") for line in lines):
            assert process.poll() is None and time.monotonic() < deadline, "".join(lines)
            time.sleep(0.1)
        client = Client(f"127.0.0.1:{port}", "clf", timeout=30, retries=0)
        outcome = {}

        def slow_request():
            started = time.monotonic()
            try:
                outcome["elapsed"] = client.predict({"seconds": np.array([4.0], np.float32)}, "slow")["elapsed"]
            except ServingError as error:
                outcome["error"] = error
            outcome["seconds"] = time.monotonic() - started

        thread = threading.Thread(target=slow_request)
        thread.start()
        time.sleep(1.5)  # the request is now sleeping inside the model
        sent_at = time.monotonic()
        process.send_signal(signal.SIGTERM)
        time.sleep(1.0)
        code, _ = _grpc_code(lambda: Client(f"127.0.0.1:{port}", "clf", timeout=5, retries=0).predict({"text": ["x"]}))
        thread.join(30)
        rc = process.wait(30)
        exited_after = time.monotonic() - sent_at
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    output = "".join(lines)
    check("in-flight request result", outcome.get("error") or outcome["elapsed"].tolist(), "[4.0], no error",
          "error" not in outcome and outcome["elapsed"].tolist() == [4.0])
    check("a new request while draining", code.name, "UNAVAILABLE (refused)", code == grpc.StatusCode.UNAVAILABLE)
    check("exit code after SIGTERM", rc, "== 0", rc == 0)
    check("seconds from SIGTERM to exit", f"{exited_after:.1f}", "<= 25 (grace 20 s)", exited_after <= 25)
    assert "stopped (SIGTERM)" in output, output


# --- a real tiny XLNet export (xlnet_tf.export) ----------------------------------------------------------

REAL_TEXTS = ["Le café « Zoë » sert une crème brûlée.", "XLNet is a generalized autoregressive pretraining method.",
              "", "naïve résumé — “smart quotes” 🙂 " * 12]


@pytest.fixture(scope="module")
def real_exports(tmp_path_factory, warm_cli):
    """Tiny fine-tuned classification and SQuAD models (random weights), exported by export_model (SQuAD's by
    `xlnet-tf export` in a process of its own, forked by tests/conftest.py's `warm_cli`)."""
    import keras
    import pydoc_data.topics

    from xlnet_tf.config import RunOptions, XLNetConfig
    from xlnet_tf.export.exporter import export_model
    from xlnet_tf.heads import head_arguments, save_finetuned
    from xlnet_tf.tasks import build_head_model
    from xlnet_tf.tokenization import train_spm

    work = tmp_path_factory.mktemp("real_export")
    lines = [line.strip() for _, text in sorted(pydoc_data.topics.topics.items())
             for line in text.splitlines() if line.strip()]
    corpus = work / "corpus.txt"
    corpus.write_text("\n".join(lines[:3000] + REAL_TEXTS * 3) + "\n", encoding="utf-8")
    spm = train_spm(corpus, work / "spm", 1000, minloglevel=2, num_threads=2)
    (work / "spm_dir").mkdir()
    shutil.copy(spm, work / "spm_dir" / "spiece.model")
    config = XLNetConfig(n_token=1000, d_model=32, n_layer=2, n_head=4, d_head=8, d_inner=64)
    tasks = {"cls": ("classification", dict(max_seq_len=32, num_labels=3, label_names=["negative", "neutral", "positive"])),
             "squad": ("squad", dict(max_seq_len=48, start_n_top=5, end_n_top=5, doc_stride=8, max_query_len=10)),
             # long documents: segments of 16 read with memory in a tf.while_loop
             "doc": ("classification", dict(max_seq_len=16, num_labels=2, label_names=["no", "yes"], long_doc="memory",
                                            max_doc_len=64, mem_len=48)),
             "reg": ("regression", dict(max_seq_len=32, pairs=True))}
    for index, (name, (task, extra)) in enumerate(tasks.items()):
        keras.utils.set_random_seed(200 + index)
        finetune_config = {"task": task, "lower_case": False, "spm_model": "spiece.model", "doc_stride": 128,
                           "max_query_len": 64, **extra}
        model = build_head_model(task, config, RunOptions(dropout=0.0, dropatt=0.0, initializer_range=0.3),
                                 **head_arguments(finetune_config))
        save_finetuned(model, str(work / "finetuned" / name), finetune_config,
                       extra_files=[str(work / "spm_dir" / "spiece.model")])
    # SQuAD's exported by `xlnet-tf export` in its own process meanwhile (tracing keeps one core busy).
    console = work / "export-console.txt"
    with open(console, "w", encoding="utf-8") as out:
        exporter = subprocess.Popen(warm_command(warm_cli, "export", "--model-dir", work / "finetuned" / "squad",
                                                 "--export-base", work / "serving" / "squad"),
                                    stdout=out, stderr=subprocess.STDOUT, env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2"))
    try:
        paths = {name: export_model(work / "finetuned" / name, work / "serving" / name)
                 for name in tasks if name != "squad"}
        assert exporter.wait(timeout=600) == 0, console.read_text(encoding="utf-8", errors="replace")[-3000:]
    finally:
        if exporter.poll() is None:  # a failure above: stop it too
            exporter.kill()
    paths["squad"] = str(work / "serving" / "squad" / "1")
    assert os.path.exists(os.path.join(paths["squad"], "saved_model.pb"))
    paths["root"] = work
    return paths


@pytest.mark.slow
def test_real_tiny_export_end_to_end(real_exports):
    import tensorflow as tf

    print("\n[xlnet-tf serve] a real tiny XLNet export (xlnet_tf.export.export_model)")
    work = real_exports["root"]
    config = work / "models.config"
    config.write_text("model_config_list {\n" + "".join(
        f'  config {{ name: "{name}" base_path: "{work / "serving" / name}" model_platform: "tensorflow" }}\n'
        for name in ("cls", "squad", "doc")) + "}\n")
    instance = serve(model_config_file=str(config), port=0, grpc_max_threads=GRPC_THREADS, rest_api_port=0, enable_batching=True,
                     batching_parameters={"max_batch_size": 16, "batch_timeout_micros": 2000, "num_batch_threads": 2},
                     poll_interval=0).start()
    try:
        for name in ("cls", "squad", "doc"):
            (state,) = Client(instance.grpc_target, name).status()
            check(f"{name} version 1 state after load + warmup", state["state"],
                  "AVAILABLE (what TF Serving's loader accepts: restore op + init op in a TF1 Session)",
                  state["state"] == "AVAILABLE",
                  f"\n{name}: {state['error_message']}\nThe export cannot run in a TF1 Session, which is how "
                  "TensorFlow Serving loads it: its functions read variables its checkpoint does not restore "
                  "(Keras 3 Variables tracked instead of their backing tf.Variables, `.value`).")
            servable = instance.manager.models[name].versions[1].servable
            records = sum(1 for _ in tf.data.TFRecordDataset(
                os.path.join(real_exports[name], "assets.extra", "tf_serving_warmup_requests")))
            check(f"{name} warmup requests replayed at load", servable.warmup_requests_run, f"== {records} records",
                  servable.warmup_requests_run == records)

        loaded = {name: tf.saved_model.load(real_exports[name]) for name in ("cls", "squad", "doc")}

        def in_process(name, signature, **inputs):
            function = loaded[name].signatures[signature]
            return {k: v.numpy() for k, v in function(**{k: tf.constant(v) for k, v in inputs.items()}).items()}

        clf = Client(instance.grpc_target, "cls")
        want = in_process("cls", "serving_default", text=REAL_TEXTS)
        _compare("real cls serving_default via gRPC", clf.predict({"text": REAL_TEXTS}), want, atol=1e-5)
        rows = clf.classify(REAL_TEXTS)
        assert [r["label"] for r in rows] == [v.decode() for v in want["label"]]
        _compare("real cls encode via gRPC", clf.encode(REAL_TEXTS), in_process("cls", "encode", text=REAL_TEXTS),
                 atol=1e-5)
        status, body = _rest(Running("xlnet-tf", None, instance.rest_url, None), "POST", "/v1/models/cls:predict",
                             {"instances": REAL_TEXTS})
        assert status == 200, body
        assert [r["label"] for r in body["predictions"]] == [v.decode() for v in want["label"]]
        _compare("real cls via REST (row format)",
                 {"probabilities": np.array([r["probabilities"] for r in body["predictions"]], np.float32)},
                 {"probabilities": want["probabilities"]}, atol=1e-5)

        # 1, 2 and 4 segments of 16 (the last truncated to max_doc_len 64) in one request: padded segments too
        documents = [REAL_TEXTS[0], " ".join(REAL_TEXTS[:2]), " ".join(REAL_TEXTS * 4)]
        _compare("real long-document classifier (tf.while_loop over segments) via gRPC",
                 Client(instance.grpc_target, "doc").predict({"text": documents}),
                 in_process("doc", "serving_default", text=documents), atol=1e-5)

        qa = Client(instance.grpc_target, "squad")
        questions = ["What is XLNet?", "Qui sert une crème brûlée ?"]
        contexts = [REAL_TEXTS[1] + " " + REAL_TEXTS[3], REAL_TEXTS[0]]
        want = in_process("squad", "serving_default", question=questions, context=contexts)
        answers = qa.answer(questions, contexts)
        assert [a["answer"] for a in answers] == [v.decode() for v in want["answer"]]
        assert [a["start"] for a in answers] == want["answer_start"].tolist()
        _compare("real squad scores via gRPC",
                 {"score": np.array([a["score"] for a in answers], np.float32),
                  "no_answer_probability": np.array([a["no_answer_probability"] for a in answers], np.float32)},
                 {"score": want["score"], "no_answer_probability": want["no_answer_probability"]}, atol=1e-5)

        # Concurrent one-text requests of different lengths are merged into batches, which the signature pads
        # once, to the longest merged row: each request still gets what it gets alone.
        results, failures = [], []
        before = instance.batch_stats()

        def worker(i):
            try:
                results.append((i, clf.classify([REAL_TEXTS[i % len(REAL_TEXTS)]])[0]))
            except Exception as error:  # noqa: BLE001 - counted
                failures.append(repr(error))

        threads = [threading.Thread(target=worker, args=(i,)) for i in range(16)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(120)
        alone = [in_process("cls", "serving_default", text=[text]) for text in REAL_TEXTS]
        wrong = [(i, row["label"]) for i, row in results if row["label"] != alone[i % len(REAL_TEXTS)]["label"][0].decode()]
        diff = max((float(np.max(np.abs(np.array(row["probabilities"]) - alone[i % len(REAL_TEXTS)]["probabilities"][0])))
                    for i, row in results), default=float("inf"))
        merged = instance.batch_stats()["merged_batches"] - before["merged_batches"]
        check("16 concurrent requests of mixed lengths on the real export: failures, wrong labels",
              (len(failures), len(wrong)), "(0, 0)", not failures and not wrong and len(results) == 16)
        check("their probabilities vs each text alone in process (max |diff|)", f"{diff:.1e}", "<= 1e-5", diff <= 1e-5)
        print(f"    batches holding more than one of these requests: {merged}")

        code, message = _grpc_code(lambda: clf.predict({"text": []}))
        print(f"    empty batch on the real export: {code.name} {message[:100]}")
        check("empty batch on the real export", code.name, "OK (0 rows) or INVALID_ARGUMENT",
              code.name in ("OK", "INVALID_ARGUMENT"))
        code, _ = _grpc_code(lambda: clf.predict({"text": [b"\xff\xfe"]}))
        check("non-UTF-8 text on the real export", code.name, "INVALID_ARGUMENT", code.name == "INVALID_ARGUMENT")
        _compare("good request afterwards", clf.predict({"text": REAL_TEXTS[:1]}, output_filter=["logits"]),
                 {"logits": in_process("cls", "serving_default", text=REAL_TEXTS[:1])["logits"]}, atol=1e-5)
    finally:
        instance.stop(5)


@pytest.mark.slow
def test_real_export_classify_and_regress(real_exports):
    """The exports' classification / regression signatures (tf.Examples in) through xlnet-tf serve, which loads
    them in a TF1 Session as tensorflow_model_server does, with tensorflow-serving-api's stubs: equal to Predict
    on the same texts; errors name the feature; the signatures use only allowlisted ops and carry TensorFlow
    Serving's method names."""
    from tensorflow_serving.apis import input_pb2

    from xlnet_tf.export import ops

    print("\n[xlnet-tf serve] Classify / Regress on real tiny exports")
    for name, signature, method in (("cls", "classification", "tensorflow/serving/classify"),
                                    ("reg", "regression", "tensorflow/serving/regress")):
        saved = ops._read_saved_model(real_exports[name]).meta_graphs[0].signature_def
        check(f"{name}: method_name of {signature!r}", saved[signature].method_name, method,
              saved[signature].method_name == method and saved["serving_default"].method_name ==
              "tensorflow/serving/predict")
        bad = ops.disallowed_ops(real_exports[name])
        check(f"{name}: ops outside the allowlist", bad, "[]", bad == [])
    metadata = json.loads(open(os.path.join(real_exports["reg"], "assets.extra", "xlnet_export.json")).read())
    check("reg: recorded Example features", metadata["example_features"], "['text_a', 'text_b']",
          metadata["example_features"] == ["text_a", "text_b"])
    work = real_exports["root"]
    config = work / "classify.config"
    config.write_text("model_config_list {\n" + "".join(
        f'  config {{ name: "{name}" base_path: "{work / "serving" / name}" model_platform: "tensorflow" }}\n'
        for name in ("cls", "reg")) + "}\n")
    instance = serve(model_config_file=str(config), port=0, grpc_max_threads=GRPC_THREADS, rest_api_port=0, enable_batching=True,
                     batching_parameters={"max_batch_size": 16, "batch_timeout_micros": 2000, "num_batch_threads": 2},
                     poll_interval=0).start()
    channel, stub = _stubs(instance.grpc_target)
    try:
        for name in ("cls", "reg"):
            (state,) = Client(instance.grpc_target, name).status()
            check(f"{name} loaded in a TF1 Session", state["state"], "AVAILABLE", state["state"] == "AVAILABLE")
        predicted = Client(instance.grpc_target, "cls").predict({"text": REAL_TEXTS})
        classified = stub.Classify(_request("classify", "cls", "classification", _examples(text=REAL_TEXTS)),
                                   timeout=60)
        diff = float(np.max(np.abs(_scores(classified.result) - predicted["probabilities"])))
        check("cls: Classify scores vs Predict probabilities (max |diff|)", f"{diff:.1e}", "<= 1e-6", diff <= 1e-6)
        labels = _labels(classified.result)
        check("cls: Classify classes", labels[0], "['negative', 'neutral', 'positive'] for every example",
              labels == [["negative", "neutral", "positive"]] * len(REAL_TEXTS))
        rows = Client(instance.grpc_target, "cls").classify(REAL_TEXTS, api="classify")
        check("cls: Client.classify(api='classify') labels vs Predict's", [r["label"] for r in rows],
              [v.decode() for v in predicted["label"]], [r["label"] for r in rows] == [v.decode() for v in
                                                                                      predicted["label"]])
        text_b = REAL_TEXTS[::-1]
        predicted = Client(instance.grpc_target, "reg").predict({"text_a": REAL_TEXTS, "text_b": text_b})
        regressed = stub.Regress(_request("regress", "reg", "regression",
                                          _examples(text_a=REAL_TEXTS, text_b=text_b)), timeout=60)
        values = np.array([r.value for r in regressed.result.regressions], np.float32)
        diff = float(np.max(np.abs(values - predicted["prediction"])))
        check("reg: Regress outputs vs Predict prediction (text pairs; max |diff|)", f"{diff:.1e}", "<= 1e-6",
              diff <= 1e-6)
        via_client = [r["prediction"] for r in Client(instance.grpc_target, "reg").regress(REAL_TEXTS, text_b)]
        check("reg: Client.regress == Regress", via_client, "the same values", np.allclose(via_client, values,
                                                                                          atol=0, rtol=0))

        bad_utf8 = input_pb2.Input()
        features = bad_utf8.example_list.examples.add().features.feature
        features["text_a"].bytes_list.value.append(b"fine")
        features["text_b"].bytes_list.value.append(b"caf\xe9 \xff")
        wrong_type = input_pb2.Input()
        wrong_type.example_list.examples.add().features.feature["text"].float_list.value.append(1.5)
        for label, call, named in (
                ("missing feature text_b", lambda: stub.Regress(_request("regress", "reg", "regression",
                                                                         _examples(text_a=["only a"])), timeout=60),
                 "text_b"),
                ("float feature text", lambda: stub.Classify(_request("classify", "cls", "classification",
                                                                      wrong_type), timeout=60), "text"),
                ("non-UTF-8 text_b", lambda: stub.Regress(_request("regress", "reg", "regression", bad_utf8),
                                                          timeout=60), "text_b")):
            try:
                call()
                code, message = "OK", ""
            except grpc.RpcError as error:
                code, message = error.code().name, error.details()
            print(f"    {label}: {code} ({message[:140]})")
            check(f"status of '{label}'", code, f"INVALID_ARGUMENT naming {named!r}",
                  code == "INVALID_ARGUMENT" and re.search(rf"\b{named}\b", message) is not None)
        again = stub.Classify(_request("classify", "cls", "classification", _examples(text=REAL_TEXTS[:1])),
                              timeout=60)
        assert len(again.result.classifications) == 1
    finally:
        channel.close()
        instance.stop(5)


def test_reload_config_adds_and_removes_models_while_clients_run(models, tmp_path):
    """ModelService.HandleReloadConfigRequest (tensorflow-serving-api's stub) swaps the config [first, third]
    for [first, second] while 16 clients call the first: none of their requests fails, the second is AVAILABLE
    when the call returns, the third answers NOT_FOUND; a config TensorFlow Serving refuses gets INVALID_ARGUMENT
    and changes nothing."""
    from tensorflow_serving.apis import model_management_pb2, model_service_pb2_grpc
    from tensorflow_serving.config import model_server_config_pb2

    print("\n[xlnet-tf serve] HandleReloadConfigRequest under load")
    shutil.copytree(models.reload_v1, tmp_path / "second" / "1")

    def config(*entries):
        message = model_server_config_pb2.ModelServerConfig()
        for name, base in entries:
            entry = message.model_config_list.config.add()
            entry.name, entry.base_path, entry.model_platform = name, str(base), "tensorflow"
        return message

    first, second, third = ("first", models.base / "clf"), ("second", tmp_path / "second"), ("third", models.base / "qa")
    path = tmp_path / "models.config"
    path.write_text(f'model_config_list {{ config {{ name: "first" base_path: "{first[1]}" model_platform: '
                    f'"tensorflow" }} config {{ name: "third" base_path: "{third[1]}" model_platform: "tensorflow" }} }}')
    instance = serve(model_config_file=str(path), port=0, grpc_max_threads=GRPC_THREADS, rest_api_port=None, poll_interval=0.25).start()
    events, stop, lock = [], threading.Event(), threading.Lock()

    def worker():
        client = Client(instance.grpc_target, "first", timeout=30, retries=0)
        while not stop.is_set():
            try:
                client.predict({"text": ["a fine film"]}, output_filter=["logits"])
                entry = None
            except Exception as error:  # noqa: BLE001 - counted
                entry = repr(error)
            with lock:
                events.append(entry)
        client.close()

    channel = grpc.insecure_channel(instance.grpc_target)
    stub = model_service_pb2_grpc.ModelServiceStub(channel)
    pool = [threading.Thread(target=worker) for _ in range(16)]
    try:
        for thread in pool:
            thread.start()
        time.sleep(0.5)
        began = time.monotonic()
        response = stub.HandleReloadConfigRequest(model_management_pb2.ReloadConfigRequest(
            config=config(first, second)), timeout=120)
        took = time.monotonic() - began
        (state,) = Client(instance.grpc_target, "second").status()
        code, message = _grpc_code(lambda: Client(instance.grpc_target, "third", retries=0).predict(
            {"question": ["who?"], "context": ["Ada."]}))
        bad = model_server_config_pb2.ModelServerConfig()
        bad.CopyFrom(config(first, second, ("first", third[1])))
        try:
            stub.HandleReloadConfigRequest(model_management_pb2.ReloadConfigRequest(config=bad), timeout=60)
            bad_code, bad_message = "OK", ""
        except grpc.RpcError as error:
            bad_code, bad_message = error.code().name, error.details()
        time.sleep(0.5)
    finally:
        stop.set()
        for thread in pool:
            thread.join(60)
        channel.close()
    try:
        failures = [e for e in events if e is not None]
        print(f"  reload answered in {took:.2f} s with status {response.status.error_code} "
              f"{response.status.error_message!r}; {len(events)} requests to 'first' meanwhile")
        check("failed requests to the kept model during the reload", len(failures), f"== 0 of {len(events)}",
              not failures and len(events) > 16)
        check("the added model's state when the reload returns", state["state"], "AVAILABLE",
              state["state"] == "AVAILABLE" and response.status.error_code == 0)
        check("the removed model", code.name, "NOT_FOUND", code.name == "NOT_FOUND")
        print(f"  a config naming 'first' twice: {bad_code} ({bad_message[:100]})")
        check("a config naming a model twice", bad_code, "INVALID_ARGUMENT", bad_code == "INVALID_ARGUMENT")
        still = Client(instance.grpc_target, "second").predict({"text": ["a fine film"]}, output_filter=["logits"])
        assert still["logits"].shape == (1, 2)
        log = [e for e in instance.manager.events if e[1] == "third"]
        check("the removed model's version", [e[3] for e in log][-2:], "['unloading', 'unloaded']",
              [e[3] for e in log][-2:] == ["unloading", "unloaded"])
    finally:
        instance.stop(5)


def test_prometheus_metrics_count_the_requests(models, tmp_path):
    """--monitoring-config-file: the REST port serves Prometheus text at the configured path, which
    prometheus_client's parser reads; its request counts equal the requests sent, by model, API, entrypoint and
    status; latency histograms count the same requests; loads and batch sizes are there."""
    from prometheus_client.parser import text_string_to_metric_families

    print("\n[xlnet-tf serve] Prometheus metrics")
    monitoring = tmp_path / "monitoring.config"
    monitoring.write_text('prometheus_config { enable: true path: "/monitoring/prometheus/metrics" }\n')
    instance = serve(model_base_path=str(models.base / "clf"), model_name="clf", port=0, grpc_max_threads=GRPC_THREADS, rest_api_port=0,
                     enable_batching=True, batching_parameters={"max_batch_size": 8, "batch_timeout_micros": 1000},
                     poll_interval=0, monitoring_config_file=str(monitoring)).start()
    try:
        client = Client(instance.grpc_target, "clf", retries=0)
        sent = {("clf", "predict", "GRPC", "OK"): 5, ("clf", "predict", "GRPC", "INVALID_ARGUMENT"): 3,
                ("nope", "predict", "GRPC", "NOT_FOUND"): 2, ("clf", "classify", "GRPC", "OK"): 2,
                ("clf", "predict", "REST", "OK"): 4, ("clf", "predict", "REST", "INVALID_ARGUMENT"): 1}
        for _ in range(5):
            client.predict({"text": ["a fine film"]})
        for _ in range(3):
            _grpc_code(lambda: client.predict({"text": ["a"], "other": ["b"]}))
        for _ in range(2):
            _grpc_code(lambda: Client(instance.grpc_target, "nope", retries=0).predict({"text": ["a"]}))
        for _ in range(2):
            client.classify(["a fine film", "dull"], api="classify")
        rest = Running("xlnet-tf", None, instance.rest_url, None)
        for _ in range(4):
            assert _rest(rest, "POST", "/v1/models/clf:predict", {"instances": ["ok"]})[0] == 200
        assert _rest(rest, "POST", "/v1/models/clf:predict", {"instances": [1.5]})[0] == 400
        with urllib.request.urlopen(instance.rest_url + "/monitoring/prometheus/metrics", timeout=30) as response:
            content_type, text = response.headers["Content-Type"], response.read().decode()
        families = {family.name: family for family in text_string_to_metric_families(text)}
        print(f"  {len(text.splitlines())} lines, Content-Type {content_type}; families {sorted(families)}")
        counted = {}
        for sample in families[":tensorflow:serving:request_count"].samples:
            key = tuple(sample.labels[k] for k in ("model_name", "API", "entrypoint", "status"))
            counted[key] = counted.get(key, 0) + sample.value
        check("request_count by (model, API, entrypoint, status)", counted, f"the requests sent {sent}",
              counted == sent)
        latency = {tuple(s.labels[k] for k in ("model_name", "API", "entrypoint")): s.value
                   for s in families[":tensorflow:serving:request_latency"].samples if s.name.endswith("_count")}
        by_api = {}
        for (model, api, entrypoint, _), count in sent.items():
            by_api[(model, api, entrypoint)] = by_api.get((model, api, entrypoint), 0) + count
        check("request_latency histogram counts", latency, f"{by_api}", latency == by_api)
        loads = {s.labels["status"]: s.value for s in families[":tensorflow:cc:saved_model:load_attempt_count"].samples}
        check("load_attempt_count", loads, "{'success': 1.0}", loads == {"success": 1.0})
        batches = [s.value for s in families[":tensorflow:serving:batching_session:processed_batch_size"].samples
                   if s.name.endswith("_count")]
        check("processed_batch_size observations", batches, "one count >= 7 (the batched Predict / Classify calls)",
              len(batches) == 1 and batches[0] >= 7)
    finally:
        instance.stop(5)


def test_predict_outputs_in_typed_fields_unless_tensor_content_is_asked(models, reference):
    """TensorFlow Serving's Predict writes numeric outputs to the typed fields (its example clients read
    `.float_val`); packed `tensor_content` only with --enable_serialization_as_tensor_content."""
    from tensorflow_serving.apis import predict_pb2

    from xlnet_tf.serving.cli import add_serve_arguments, server_options
    from xlnet_tf.serving.tensors import from_ndarray, to_ndarray

    parser = add_serve_arguments(argparse.ArgumentParser())
    spellings = {(): False, ("--enable_serialization_as_tensor_content",): True,
                 ("--enable_serialization_as_tensor_content=true",): True,
                 ("--enable_serialization_as_tensor_content=false",): False,
                 ("--enable_serialization_as_tensor_content", "true"): True,
                 ("--enable-serialization-as-tensor-content",): True}
    parsed = {" ".join(k) or "(none)": server_options(parser.parse_args(["--model-base-path", "x", *k]),
                                                      environ={}).tensor_content
              for k in spellings}
    print(f"\n--enable_serialization_as_tensor_content parsed: {parsed} (bound {list(spellings.values())})")
    assert list(parsed.values()) == list(spellings.values())
    with pytest.raises(SystemExit):
        parser.parse_args(["--enable_serialization_as_tensor_content=maybe"])

    want = reference("clf", text=TEXTS)
    request = predict_pb2.PredictRequest()
    request.model_spec.name = "clf"
    request.inputs["text"].CopyFrom(from_ndarray(np.array(TEXTS, dtype=object)))
    for packed in (False, True):
        with serve(model_base_path=str(models.base / "clf"), port=0, rest_api_port=None, poll_interval=0,
                   enable_serialization_as_tensor_content=packed) as server:
            channel, stub = _stubs(server.grpc_target)
            with channel:
                outputs = stub.Predict(request, timeout=30).outputs
        probabilities, label_id = outputs["probabilities"], outputs["label_id"]
        typed = (len(probabilities.float_val), len(label_id.int64_val))
        content = (len(probabilities.tensor_content), len(label_id.tensor_content))
        diff = float(np.max(np.abs(to_ndarray(probabilities) - want["probabilities"])))
        print(f"packed={packed}: float_val / int64_val counts {typed}, tensor_content bytes {content} (bound "
              f"{(0, 0) if packed else (2 * len(TEXTS), len(TEXTS))} typed, "
              f"{(8 * len(TEXTS), 8 * len(TEXTS)) if packed else (0, 0)} packed); probabilities vs in process "
              f"max |diff| {diff:.1e} (bound 1e-6); labels still string_val: {len(outputs['label'].string_val)}")
        assert typed == ((0, 0) if packed else (2 * len(TEXTS), len(TEXTS)))
        assert content == ((8 * len(TEXTS), 8 * len(TEXTS)) if packed else (0, 0))
        assert diff <= 1e-6 and to_ndarray(label_id).tolist() == want["label_id"].tolist()
        assert len(outputs["label"].string_val) == len(TEXTS)
    half = from_ndarray(np.array([[1.5, -2.25]], np.float16), tensor_content=False)
    print(f"float16 in half_val as bit patterns: {list(half.half_val)} -> {to_ndarray(half).tolist()} "
          f"(bound [[1.5, -2.25]])")
    assert to_ndarray(half).tolist() == [[1.5, -2.25]] and not half.tensor_content
