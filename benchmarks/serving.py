"""Serving benchmark: requests/s and p50/p99 latency of `xlnet-tf serve`, against calling the SavedModel in process.

    python benchmarks/serving.py [--export-dir BASE/NAME[/VERSION]] [--requests 400] [--concurrency 1,16]

For each concurrency (default 1 and 16 client threads, one gRPC channel each, one text per request) it
measures, on loopback:

* in process: the SavedModel's `serving_default` called directly (tf.saved_model.load), from as many threads;
* the server without batching, then with batching (max_batch_size 32, batch_timeout_micros 2000), each in
  its own process (`python -m xlnet_tf.serving serve`) so the load generator does not share its GIL.

and prints requests/s, p50 and p99 latency, and the server's throughput as a ratio to in process. Without
--export-dir it builds a tiny random XLNet classifier with xlnet_tf.export (or, with --standin or when that
export cannot be served, the stand-in SavedModel of xlnet_tf.serving.testing). It is a benchmark, not a
test: nothing is asserted.
"""

from __future__ import annotations

import argparse
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time

import numpy as np

TEXTS = [
    "XLNet is a generalized autoregressive pretraining method.",
    "Le café « Zoë » sert une crème brûlée.",
    "a short one",
    "The model server batches concurrent requests along the first dimension before running them.",
]
BATCHING = """max_batch_size { value: 32 }
batch_timeout_micros { value: 2000 }
max_enqueued_batches { value: 1000 }
num_batch_threads { value: 2 }
"""


def build_tiny_export(work):
    """A random tiny XLNet classifier exported by xlnet_tf.export -> BASE/NAME."""
    import keras

    from xlnet_tf.benchmarks.run_xlnet_tf import doc_lines, export_random_classifier
    from xlnet_tf.config import XLNetConfig

    keras.utils.set_random_seed(0)
    config = XLNetConfig(n_token=1000, d_model=64, n_layer=2, n_head=4, d_head=16, d_inner=128)
    version = export_random_classifier(work, config, 64, 1000, os.path.join(work, "serving", "tiny"),
                                       corpus_lines=doc_lines()[:3000] + TEXTS * 3,
                                       label_names=("negative", "positive"))
    return os.path.dirname(version)


def build_standin(work):
    from xlnet_tf.serving.testing import build_standin as build

    base = os.path.join(work, "serving", "standin")
    build(os.path.join(base, "1"), "classifier")
    return base


def resolve(export_dir):
    """BASE/NAME or BASE/NAME/VERSION -> (base path, model name, version directory)."""
    path = os.path.abspath(export_dir)
    if os.path.exists(os.path.join(path, "saved_model.pb")):
        base = os.path.dirname(path)
        return base, os.path.basename(base), path
    versions = sorted(int(v) for v in os.listdir(path) if v.isdigit())
    if not versions:
        raise SystemExit(f"{path}: no saved_model.pb and no integer version directory")
    return path, os.path.basename(path), os.path.join(path, str(versions[-1]))


def request_inputs(signature_inputs, index):
    text = TEXTS[index % len(TEXTS)]
    names = set(signature_inputs)
    if names == {"text"}:
        return {"text": [text]}
    if names == {"text_a", "text_b"}:
        return {"text_a": [text], "text_b": [TEXTS[(index + 1) % len(TEXTS)]]}
    if names == {"question", "context"}:
        return {"question": ["What is it?"], "context": [text]}
    raise SystemExit(f"serving_default takes {sorted(names)}: not a text model this benchmark knows")


def measure(call, concurrency, requests):
    """Runs `call(index)` `requests` times from `concurrency` threads -> (requests/s, p50 ms, p99 ms, errors)."""
    latencies, errors = [], []
    lock = threading.Lock()
    per_thread = max(1, requests // concurrency)
    barrier = threading.Barrier(concurrency + 1)

    def worker(seed):
        own = []
        barrier.wait()
        for i in range(per_thread):
            start = time.perf_counter()
            try:
                call(seed * per_thread + i)
            except Exception as error:  # noqa: BLE001 - counted and shown
                with lock:
                    errors.append(repr(error))
                continue
            own.append(time.perf_counter() - start)
        with lock:
            latencies.extend(own)

    threads = [threading.Thread(target=worker, args=(n,)) for n in range(concurrency)]
    for thread in threads:
        thread.start()
    barrier.wait()
    started = time.perf_counter()
    for thread in threads:
        thread.join()
    elapsed = time.perf_counter() - started
    lat = np.array(latencies) * 1e3 if latencies else np.array([np.nan])
    return len(latencies) / elapsed, float(np.percentile(lat, 50)), float(np.percentile(lat, 99)), errors


def free_port():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def start_server(base, name, batching_file=None):
    port = free_port()
    command = [sys.executable, "-m", "xlnet_tf.serving", "serve", "--model-base-path", base, "--model-name", name,
               "--port", str(port), "--rest-api-port", "-1", "--poll-interval", "0"]
    if batching_file:
        command += ["--enable-batching", "--batching-parameters-file", batching_file]
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", PYTHONUNBUFFERED="1")
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
    lines = []
    reader = threading.Thread(target=lambda: lines.extend(iter(process.stdout.readline, "")), daemon=True)
    reader.start()
    deadline = time.monotonic() + 300
    while not any(line.startswith("serving gRPC") for line in lines):
        if process.poll() is not None or time.monotonic() > deadline:
            process.kill()
            raise RuntimeError("server did not start:\n" + "".join(lines[-30:]))
        time.sleep(0.1)
    return process, f"127.0.0.1:{port}", lines


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--export-dir", help="BASE/NAME (or BASE/NAME/VERSION) of an export; default: build one")
    parser.add_argument("--standin", action="store_true", help="build the stand-in model, not a tiny XLNet")
    parser.add_argument("--requests", type=int, default=400, help="requests per measurement")
    parser.add_argument("--concurrency", default="1,16", help="comma-separated client thread counts")
    args = parser.parse_args(argv)
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    levels = [int(c) for c in args.concurrency.split(",")]

    import tensorflow as tf
    import tensorflow_text  # noqa: F401

    from xlnet_tf.serving import Client

    work = tempfile.mkdtemp(prefix="xlnet-serving-bench-")
    try:
        if args.export_dir:
            base, name, version_dir = resolve(args.export_dir)
        else:
            base = build_standin(work) if args.standin else build_tiny_export(work)
            base, name, version_dir = resolve(base)
        batching_file = os.path.join(work, "batching.config")
        with open(batching_file, "w") as handle:
            handle.write(BATCHING)
        print(f"model {name}: {version_dir}")

        function = tf.saved_model.load(version_dir).signatures["serving_default"]
        signature_inputs = list(function.structured_input_signature[1])
        rows = []

        def in_process(i):
            return function(**{k: tf.constant(v) for k, v in request_inputs(signature_inputs, i).items()})

        for i in range(20):  # warm
            in_process(i)
        for concurrency in levels:
            rows.append(("in process", concurrency) + measure(in_process, concurrency, args.requests))
        baseline = {r[1]: r[2] for r in rows}

        for label, batching in (("server, no batching", None), ("server, batching", batching_file)):
            process, target, lines = start_server(base, name, batching)
            try:
                client = Client(target, name, timeout=60)
                (status,) = client.status()[-1:]
                if status["state"] != "AVAILABLE":
                    if args.export_dir or args.standin:
                        raise SystemExit(f"the server could not load {version_dir}: {status['error_message']}")
                    print(f"the server could not load the tiny export ({status['error_message'][:300]}); "
                          "using the stand-in model instead")
                    process.terminate()
                    process.wait(60)
                    return main(["--standin", "--requests", str(args.requests), "--concurrency", args.concurrency])
                for i in range(20):  # warm: every thread's first call, graph caches
                    client.predict(request_inputs(signature_inputs, i))
                for concurrency in levels:
                    clients = [Client(target, name, timeout=60) for _ in range(concurrency)]
                    local = threading.local()

                    def call(i, clients=clients, local=local):
                        if not hasattr(local, "client"):
                            local.client = clients[i % len(clients)]
                        return local.client.predict(request_inputs(signature_inputs, i))

                    rows.append((label, concurrency) + measure(call, concurrency, args.requests))
                    for c in clients:
                        c.close()
            finally:
                process.terminate()
                process.wait(60)
            stats = [line for line in lines if line.startswith("stopped")]
            if batching and stats:
                print(stats[-1].strip()[:400])

        print(f"\n{'':22s} {'clients':>7s} {'requests/s':>11s} {'p50 ms':>8s} {'p99 ms':>8s} "
              f"{'vs in process':>14s} {'errors':>6s}")
        for label, concurrency, rate, p50, p99, errors in rows:
            ratio = rate / baseline[concurrency] if baseline.get(concurrency) else float("nan")
            print(f"{label:22s} {concurrency:7d} {rate:11.1f} {p50:8.2f} {p99:8.2f} {ratio:13.2f}x {len(errors):6d}")
            if errors:
                print("   first error:", errors[0][:200])
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
