"""The "serving" task group (`xlnet-tf benchmark --tasks serving`): `xlnet-tf serve` with batching against the
export's `serving_default` called in process on batches, on one-sentence requests of SST-2 lengths.

    xlnet-tf benchmark --tasks serving [--model-size base|tiny] [--serving-seconds 60] [--output-dir DIR]
    python benchmarks/serving.py [the same options]     # a thin entry to the same command

One case ("serving-throughput", implementation xlnet-tf-savedmodel) measures, in one worker process:

* the model: a random-weight XLNet classifier of the case's size exported by xlnet_tf.export (the lengths
  tasks' export: max_seq_len = seq_len, a SentencePiece model of EXPORT_VOCAB pieces), or an existing export
  (`serving` parameter export_dir; the tests use xlnet_tf.serving.testing's stand-in);
* the texts: `texts` sentences whose piece counts (by the export's `tokenize` signature) are drawn from SST-2
  train's length histogram (`common.sample_lengths`), each the longest run of words of CPython's documentation
  from its own start with at most that many pieces (`length_texts`);
* in process: `serving_default` (tf.saved_model.load in this process) on consecutive batches of `batch_size`
  texts, at least one pass over them and at least `seconds`: examples/s, and every text's answer (label_id);
* served: `python -m xlnet_tf.serving serve` in its own process with batching on (BATCHING), for each client
  count (1, 8, 32 by default) closed-loop clients (a thread and a gRPC channel each, one text per request,
  after one untimed request each) for `seconds`: requests/s, p50 / p99 latency, and wrong answers (a label_id
  that differs from the in-process answer for the same text);
* overload: a second server with a small --grpc_max_threads and a bounded queue (OVERLOAD_BATCHING) receives,
  open-loop, `overload` x the requests/s measured at the largest client count, for `overload_seconds`, from
  enough sender threads that the schedule holds (their send lag is reported): accepted requests/s and p99,
  rejections (RESOURCE_EXHAUSTED: gRPC's concurrent-RPC limit or the batching queue full) and their p99, wrong
  answers among the accepted.

Both servers are started together and load while the in-process model does (nothing is timed until all
three are ready); each then waits idle until its turn, so a measurement never shares the CPU with a load.
"""

from __future__ import annotations

import ast
import itertools
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time

import numpy as np

# Server-side batching of the throughput runs (TensorFlow Serving's BatchingParameters), for `batch_size` B:
# * max_batch_size B (32): the largest client count and the in-process batch, so that at 32 clients the server
#   can run the batches the in-process baseline runs;
# * batch_timeout_micros 10000: the top of TensorFlow Serving's suggested 1-10 ms range for CPUs, so that more of
#   the closed-loop clients' re-sends (Python threads) gather into one batch; at most ~1% of a base-size batch on
#   a CPU, and at most 10 ms added to a lone request. Re-sends that come later run in the next batch (the
#   servers' `batch_stats` in the results show the batch sizes);
# * num_batch_threads 1: on a CPU one batch already runs on every core (TensorFlow's intra-op pool); a second
#   batch at once would only split the cores, doubling each batch's latency for no more throughput;
# * max_enqueued_batches 100: closed-loop clients never fill it (at most one request per client is waiting).
BATCHING = {"batch_timeout_micros": 10000, "num_batch_threads": 1, "max_enqueued_batches": 100}
# The overload server: the same, but a queue of one batch, with --grpc_max_threads 2 B (one batch running and
# one waiting: the least that keeps every batch full): whatever arrives beyond them is refused at once.
OVERLOAD_BATCHING = {**BATCHING, "max_enqueued_batches": 1}
PARAMETERS = {  # the serving case's parameters (`Case.serving`), these by default
    "clients": (1, 8, 32), "seconds": 60.0, "texts": 256, "overload": 4.0, "overload_seconds": 60.0,
    "overload_max_threads": 0,  # 0: 2 x batch_size
    "overload_max_enqueued_batches": OVERLOAD_BATCHING["max_enqueued_batches"], "timeout": 600.0, "export_dir": "",
}
LABEL_NAMES = ("negative", "positive")
GRPC_LIMIT = "Concurrent RPC limit"  # gRPC's message when --grpc_max_threads RPCs are running already


def run(case) -> dict:
    """Measures a "serving-throughput" case (see the module docstring) -> its result dict."""
    import keras

    from xlnet_tf.benchmarks.common import Unsupported

    if case.implementation != "xlnet-tf-savedmodel":
        raise Unsupported(f"{case.task} is measured for xlnet-tf-savedmodel, not {case.implementation}")
    if case.precision != "float32" or case.xla:
        raise Unsupported("the serving task is measured in float32 without XLA")
    params = {**PARAMETERS, **dict(case.serving)}
    keras.utils.set_random_seed(0)
    work = tempfile.mkdtemp(prefix="xlnet-tf-bench-serving-")
    try:
        if params["export_dir"]:
            base, name, version = resolve(params["export_dir"])
            model = version
        else:
            from xlnet_tf.benchmarks.xlnet_parts import EXPORT_VOCAB, export_random_classifier, xlnet_config

            began = time.perf_counter()
            version = export_random_classifier(work, xlnet_config(case), case.seq_len, EXPORT_VOCAB,
                                               os.path.join(work, "export", "classifier"), label_names=LABEL_NAMES)
            base, name, version = resolve(os.path.dirname(version))
            model = f"random XLNet classifier, exported in {time.perf_counter() - began:.0f} s"
        return {"export": model, **measure_export(base, name, version, case, params, work)}
    finally:
        shutil.rmtree(work, ignore_errors=True)


def batching_text(max_batch_size, batch_timeout_micros, num_batch_threads, max_enqueued_batches):
    """BatchingParameters in protobuf text format."""
    return (f"max_batch_size {{ value: {max_batch_size} }}\nbatch_timeout_micros {{ value: {batch_timeout_micros} }}\n"
            f"num_batch_threads {{ value: {num_batch_threads} }}\n"
            f"max_enqueued_batches {{ value: {max_enqueued_batches} }}\n")


def measure_export(base, name, version, case, params, work):
    """Texts, in process, served at each client count, overload (module docstring) of the export at BASE/VERSION."""
    import tensorflow as tf
    import tensorflow_text  # noqa: F401 - the export's ops

    batch, clients = case.batch_size, tuple(int(c) for c in params["clients"])
    throughput = {"max_batch_size": batch, **BATCHING}
    overload = {"max_batch_size": batch, **OVERLOAD_BATCHING,
                "max_enqueued_batches": int(params["overload_max_enqueued_batches"])}
    threads = {"throughput": max(4 * (os.cpu_count() or 1), 4 * max(clients)),
               "overload": int(params["overload_max_threads"]) or 2 * batch}
    servers = {}
    try:
        for key, settings in (("throughput", throughput), ("overload", overload)):
            path = os.path.join(work, f"batching-{key}.config")
            with open(path, "w", encoding="utf-8") as handle:
                handle.write(batching_text(**settings))
            servers[key] = launch_server(base, name, path, [f"--grpc_max_threads={threads[key]}"])
        loaded = tf.saved_model.load(version)
        function = loaded.signatures["serving_default"]
        tokenize = loaded.signatures["tokenize"] if "tokenize" in loaded.signatures else None
        texts, pieces, targets = length_texts(tokenize, int(params["texts"]), case.seq_len)
        for key, server in servers.items():
            wait_ready(*server, name, params["timeout"])
        load = {"before": _load_average()}
        local = in_process(function, texts, batch, float(params["seconds"]))
        expected = local.pop("answers")
        target = servers["throughput"][1]
        served, start = [], 0
        for count in clients:
            measured = closed_loop(target, name, texts, expected, count, float(params["seconds"]), params["timeout"],
                                   start)
            start += measured["requests"] + count
            measured["vs_in_process"] = measured["requests_per_s"] / local["examples_per_s"]
            served.append(measured)
        stats = {"throughput": stop_server(*servers.pop("throughput")[::2])}
        if not served[-1]["requests"]:
            raise RuntimeError(f"no request answered at {clients[-1]} clients: {served[-1]['first_error']}")
        rate = float(params["overload"]) * served[-1]["requests_per_s"]
        overloaded = open_loop(servers["overload"][1], name, texts, expected, rate,
                               float(params["overload_seconds"]), 2 * threads["overload"] + 16, params["timeout"],
                               start)
        overloaded.update(factor=float(params["overload"]), of_clients=clients[-1])
        stats["overload"] = stop_server(*servers.pop("overload")[::2])
        load["after"] = _load_average()
    finally:
        for process, _, _ in servers.values():
            process.kill()
            process.wait(60)
    return {
        "texts": {"count": len(texts), "split": "train", **_spread(pieces, "pieces"),
                  "target_mean": float(np.mean(targets)), "counted_by": "tokenize" if tokenize else "words"},
        "batching": throughput, "overload_batching": overload, "grpc_max_threads": threads,
        "in_process": local, "served": served, "overload": overloaded, "batch_stats": stats, "load_average": load,
        "note": "serving_default in process (tf.saved_model.load) vs python -m xlnet_tf.serving serve (batching, "
                "gRPC on loopback, its own process), one text per request",
    }


def _load_average():
    """The machine's 1-minute load average (other processes sharing the cores show here), or None."""
    try:
        return os.getloadavg()[0]
    except OSError:
        return None


def _spread(values, what):
    values = np.asarray(values, np.float64)
    return {f"{what}_mean": float(values.mean()), f"{what}_p50": float(np.percentile(values, 50)),
            f"{what}_p90": float(np.percentile(values, 90)), f"{what}_p99": float(np.percentile(values, 99)),
            f"{what}_max": float(values.max())}


def _percentiles(seconds):
    """p50 / p99 (ms) of durations in seconds; None for none."""
    if not len(seconds):
        return {"p50_ms": None, "p99_ms": None}
    ms = np.asarray(seconds) * 1e3
    return {"p50_ms": float(np.percentile(ms, 50)), "p99_ms": float(np.percentile(ms, 99))}


def length_texts(tokenize, count, max_seq_len, seed=0):
    """`count` texts of SST-2 train sentence lengths -> (texts, their pieces int [count], the drawn lengths).

    The lengths are `sample_lengths(count, max_seq_len)` less the special tokens; text i is the longest run of
    words of CPython's documentation from word 997 i on with at most that many pieces (counted by the export's
    `tokenize` signature; without one, words are counted), found for all texts at once by bisection on the
    word count: a word is at least one piece, so pieces grow with words and a text of n pieces has at most n
    words. A first word longer than its length is kept alone (one such text is longer than drawn)."""
    import tensorflow as tf

    from xlnet_tf.benchmarks.common import SPECIAL_TOKENS, sample_lengths
    from xlnet_tf.benchmarks.xlnet_parts import doc_lines

    targets = np.maximum(sample_lengths(count, max_seq_len, seed) - SPECIAL_TOKENS, 1)
    words = " ".join(doc_lines()).split()
    span = int(targets.max())
    starts = (np.arange(count) * 997) % (len(words) - span)

    def texts_of(lengths):
        return [" ".join(words[s:s + n]) for s, n in zip(starts, lengths)]

    def pieces(texts):
        if tokenize is None:
            return np.array([len(t.split()) for t in texts])
        return tokenize(text=tf.constant(texts))["num_tokens"].numpy()

    low, high = np.ones(count, np.int64), targets.astype(np.int64)  # the answer lies in [low, high]
    while np.any(low < high):
        middle = (low + high + 1) // 2
        fits = pieces(texts_of(middle)) <= targets
        low, high = np.where(fits, middle, low), np.where(fits, high, middle - 1)
    texts = texts_of(low)
    return texts, pieces(texts), targets


def _answer(outputs):
    """The label of a one-text answer (label_id, else label)."""
    return (outputs["label_id"] if "label_id" in outputs else outputs["label"]).reshape(-1)[0].item()


def in_process(function, texts, batch_size, seconds):
    """`function(text=...)` on consecutive batches of `batch_size` texts (after one untimed batch), at least one
    pass and at least `seconds` -> examples_per_s, per-batch p50 / p99 ms, and every text's answer."""
    import tensorflow as tf

    batches = [texts[i:i + batch_size] for i in range(0, len(texts), batch_size)]
    function(text=tf.constant(batches[0]))
    answers, latencies, examples = [None] * len(texts), [], 0
    began = time.perf_counter()
    k = 0
    while k < len(batches) or time.perf_counter() - began < seconds:
        index = k % len(batches)
        start = time.perf_counter()
        outputs = function(text=tf.constant(batches[index]))
        labels = (outputs["label_id"] if "label_id" in outputs else outputs["label"]).numpy()
        latencies.append(time.perf_counter() - start)
        if k < len(batches):
            answers[index * batch_size:index * batch_size + len(labels)] = labels.tolist()
        examples += len(batches[index])
        k += 1
    elapsed = time.perf_counter() - began
    return {"batch_size": batch_size, "batches": k, "examples": examples, "seconds": elapsed,
            "examples_per_s": examples / elapsed, **_percentiles(latencies), "answers": answers}


def _clients(target, name, count, timeout):
    """`count` clients, one gRPC channel each, connected; no retries (a refusal is counted, not hidden)."""
    import grpc

    from xlnet_tf.serving import Client

    made = [Client(target, name, timeout=timeout, retries=0) for _ in range(count)]
    for client in made:
        grpc.channel_ready_future(client.channel).result(timeout=60)
    return made


def _call(client, text):
    """One request -> (answer or None, error code name or None, error message)."""
    from xlnet_tf.serving import ServingError

    try:
        return _answer(client.predict({"text": [text]})), None, ""
    except ServingError as error:
        return None, error.code.name, error.message


def closed_loop(target, name, texts, expected, clients, seconds, timeout, start=0):
    """`clients` threads, one client each, each sending its next text as soon as its answer came, for `seconds`
    after one untimed request each (texts in order from `start`, shared) -> requests, requests_per_s (answered
    requests over the time from the start to the last answer), p50 / p99 ms, wrong_answers, errors {code: n}."""
    pool = _clients(target, name, clients, timeout)
    lock, counter = threading.Lock(), itertools.count(start)
    window = {}

    def begin():
        window["start"] = time.perf_counter()
        window["end"] = window["start"] + seconds

    barrier = threading.Barrier(clients, action=begin)
    records = [[] for _ in range(clients)]

    def worker(n):
        def next_text():
            with lock:
                return next(counter) % len(texts)

        _call(pool[n], texts[next_text()])  # untimed: the channel's first call
        barrier.wait()
        while time.perf_counter() < window["end"]:
            index = next_text()
            began = time.perf_counter()
            answer, code, message = _call(pool[n], texts[index])
            records[n].append((began, time.perf_counter(), index, answer, code, message))

    _run_threads(worker, clients, pool)
    done = [r for own in records for r in own]
    ok = [r for r in done if r[4] is None]
    errors = {}
    for record in done:
        if record[4] is not None:
            errors[record[4]] = errors.get(record[4], 0) + 1
    span = max((r[1] for r in ok), default=window["start"]) - window["start"]
    return {"clients": clients, "requests": len(ok), "seconds": span,
            "requests_per_s": len(ok) / span if span > 0 else 0.0, **_percentiles([r[1] - r[0] for r in ok]),
            "wrong_answers": sum(r[3] != expected[r[2]] for r in ok), "errors": errors,
            "first_error": next((f"{r[4]}: {r[5]}"[:300] for r in done if r[4]), None)}


def _run_threads(worker, count, pool):
    """Runs worker(0..count-1) in threads until all return, then closes the clients of `pool`."""
    workers = [threading.Thread(target=worker, args=(n,)) for n in range(count)]
    for thread in workers:
        thread.start()
    for thread in workers:
        thread.join()
    for client in pool:
        client.close()


def open_loop(target, name, texts, expected, rate, seconds, threads, timeout, start=0):
    """Requests k = 0, 1, ... sent at start + k / rate (open loop: whatever the answers) for `seconds`, by
    `threads` sender threads (one client each; a free thread takes the next request and waits for its time),
    texts in order from `start`. Latency: from the send to the answer or refusal; send lag: how late a request
    left against its schedule (large when there were too few threads to hold it).
    -> target_rate, sent, accepted (requests/s, p50 / p99, wrong answers), rejected (RESOURCE_EXHAUSTED: by
    gRPC's concurrent-RPC limit or the batching queue; p50 / p99), other_errors {code: n}, send lag p99 / max."""
    total = max(1, int(round(rate * seconds)))
    pool = _clients(target, name, threads, timeout)
    lock, state, window = threading.Lock(), {"next": 0}, {}
    barrier = threading.Barrier(threads, action=lambda: window.update(start=time.perf_counter() + 0.05))
    records = [[] for _ in range(threads)]

    def worker(n):
        barrier.wait()
        while True:
            with lock:
                k = state["next"]
                state["next"] += 1
            if k >= total:
                return
            due = window["start"] + k / rate
            delay = due - time.perf_counter()
            if delay > 0:
                time.sleep(delay)
            index = (start + k) % len(texts)
            sent = time.perf_counter()
            answer, code, message = _call(pool[n], texts[index])
            records[n].append((due, sent, time.perf_counter(), index, answer, code, message))

    _run_threads(worker, threads, pool)
    done = [r for own in records for r in own]
    ok = [r for r in done if r[5] is None]
    refused = [r for r in done if r[5] == "RESOURCE_EXHAUSTED"]
    others = {}
    for record in done:
        if record[5] not in (None, "RESOURCE_EXHAUSTED"):
            others[record[5]] = others.get(record[5], 0) + 1
    span = max((r[2] for r in ok), default=window["start"]) - window["start"]
    accepted = _percentiles([r[2] - r[1] for r in ok])
    rejected = _percentiles([r[2] - r[1] for r in refused])
    lag = np.maximum([r[1] - r[0] for r in done], 0.0) * 1e3
    return {
        "target_rate": rate, "seconds": seconds, "threads": threads, "sent": len(done),
        "accepted": len(ok), "accepted_per_s": len(ok) / span if span > 0 else 0.0,
        "accepted_p50_ms": accepted["p50_ms"], "accepted_p99_ms": accepted["p99_ms"],
        "wrong_answers": sum(r[4] != expected[r[3]] for r in ok),
        "rejected": len(refused), "rejected_grpc_limit": sum(GRPC_LIMIT in r[6] for r in refused),
        "rejected_queue_full": sum("queue" in r[6] and "full" in r[6] for r in refused),
        "rejected_p50_ms": rejected["p50_ms"], "rejected_p99_ms": rejected["p99_ms"],
        "other_errors": others, "first_other_error": next(
            (f"{r[5]}: {r[6]}"[:300] for r in done if r[5] not in (None, "RESOURCE_EXHAUSTED")), None),
        "send_lag_p99_ms": float(np.percentile(lag, 99)), "send_lag_max_ms": float(lag.max()),
    }


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


def resolve(export_dir):
    """BASE/NAME or BASE/NAME/VERSION -> (base path, model name, version directory)."""
    path = os.path.abspath(export_dir)
    if os.path.exists(os.path.join(path, "saved_model.pb")):
        base = os.path.dirname(path)
        return base, os.path.basename(base), path
    versions = sorted(int(v) for v in os.listdir(path) if v.isdigit())
    if not versions:
        raise ValueError(f"{path}: no saved_model.pb and no integer version directory")
    return path, os.path.basename(path), os.path.join(path, str(versions[-1]))


def free_port():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def launch_server(base, name, batching_file=None, flags=()):
    """Starts `python -m xlnet_tf.serving serve` on a free loopback port (no REST; batching from
    `batching_file` when given; `flags`: more of its flags) -> (process, target, its output lines so far)."""
    port = free_port()
    command = [sys.executable, "-m", "xlnet_tf.serving", "serve", "--model-base-path", base, "--model-name", name,
               "--host", "127.0.0.1", "--port", str(port), "--rest-api-port", "-1", "--poll-interval", "0"]
    if batching_file:
        command += ["--enable_batching=true", f"--batching_parameters_file={batching_file}"]
    command += list(flags)
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", PYTHONUNBUFFERED="1")
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
    lines = []
    threading.Thread(target=lambda: lines.extend(iter(process.stdout.readline, "")), daemon=True).start()
    return process, f"127.0.0.1:{port}", lines


def wait_ready(process, target, lines, name=None, timeout=300):
    """Waits for a launched server to listen and, given the model's `name`, for a version of it to be
    AVAILABLE; RuntimeError (with the server's last output) otherwise."""
    deadline = time.monotonic() + timeout

    def fail(why):
        process.kill()
        raise RuntimeError(f"server {why}:\n" + "".join(lines[-30:]))

    while not any(line.startswith("serving gRPC") for line in lines):
        if process.poll() is not None or time.monotonic() > deadline:
            fail("did not start")
        time.sleep(0.1)
    if name is None:
        return
    from xlnet_tf.serving import Client

    with Client(target, name, timeout=60) as client:
        while True:
            states = client.status()
            if any(s["state"] == "AVAILABLE" for s in states):
                return
            if any(s["error_message"] for s in states) or time.monotonic() > deadline:
                fail(f"could not load {name}: {states}")
            time.sleep(0.2)


def start_server(base, name, batching_file=None, flags=()):
    """`launch_server`, then waits for it to listen -> (process, target, lines)."""
    process, target, lines = launch_server(base, name, batching_file, flags)
    wait_ready(process, target, lines)
    return process, target, lines


def stop_server(process, lines):
    """SIGTERM (a graceful stop), then the server's batching counters from its last line (None without)."""
    process.terminate()
    process.wait(120)
    for line in reversed(lines):
        if line.startswith("stopped") and "batching: " in line:
            return ast.literal_eval(line.split("batching: ", 1)[1].strip())
    return None


def main(argv=None):
    """`xlnet-tf benchmark --tasks serving --implementations xlnet-tf-savedmodel` with `argv`'s options, run as
    that command (its own process: the benchmarks sit below the command line and do not import it)."""
    return subprocess.call([sys.executable, "-m", "xlnet_tf.cli", "benchmark", "--tasks", "serving",
                            "--implementations", "xlnet-tf-savedmodel", *(sys.argv[1:] if argv is None else argv)])


if __name__ == "__main__":
    sys.exit(main())
