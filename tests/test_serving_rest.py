"""The REST front end under load and abuse (xlnet_tf.serving.rest_api), against a stand-in SavedModel.

Bounded workers (the excess answered 503 at once), rest_api_timeout_in_ms (504), rest_body_timeout (408 for
a client dripping its request), Content-Length abuse, deeply nested JSON, TensorFlow Serving's /v1 paths
(400 "Malformed request", percent-decoded names), Classify on an unknown model (404 whatever the body),
CORS, and a graceful stop. Every check prints its measured figure next to its bound (run with -s).
"""

from __future__ import annotations

import http.client
import json
import select
import socket
import threading
import time

import pytest

from xlnet_tf.serving import serve
from xlnet_tf.serving.testing import build_standin

THREADS = 2  # rest_api_num_threads
TIMEOUT_MS = 3000  # rest_api_timeout_in_ms: well above THREADS x SLOW_S, also on a loaded machine
BODY_TIMEOUT_S = 2.0  # rest_body_timeout
MAX_REQUEST_BYTES = 1 << 20
NAME, QUOTED = "my model", "my%20model"  # served under a name with a space: paths percent-encode it
PREDICT = f"/v1/models/{QUOTED}:predict"
AT_ONCE_S = 0.5  # answers that need no model run: within this
SLOW_S = 0.6  # what a request holding a worker sleeps; the stand-in's sleeps run one after another in
#                TensorFlow (gRPC too), so N of them end within N x SLOW_S: below TIMEOUT_MS
CORS = {"Access-Control-Allow-Origin": "*", "Access-Control-Allow-Methods": "POST, GET",
        "Access-Control-Allow-Headers": "Content-Type"}


def check(label, value, bound, ok):
    print(f"  CHECK {label}: {value} (bound: {bound}) -> {'ok' if ok else 'FAILED'}")
    assert ok, f"{label}: {value} (bound: {bound})"


@pytest.fixture(scope="module")
def model_base(tmp_path_factory):
    base = tmp_path_factory.mktemp("rest") / "clf"
    build_standin(base / "1", "classifier")
    return base


def _start(model_base, **options):
    fields = dict(model_base_path=str(model_base), model_name=NAME, port=0, rest_api_port=0,
                  rest_api_num_threads=THREADS, rest_api_timeout_in_ms=TIMEOUT_MS,
                  rest_body_timeout=BODY_TIMEOUT_S, max_request_bytes=MAX_REQUEST_BYTES)
    fields.update(options)
    return serve(**fields).start()


@pytest.fixture(scope="module")
def server(model_base):
    instance = _start(model_base, rest_api_enable_cors_support=True)
    try:
        yield instance
    finally:
        instance.stop(5)


# --- clients ----------------------------------------------------------------------------------------------


def _http(server, method, path, body=None, raw=None, headers=None, timeout=15):
    """-> (status, JSON body or raw bytes, headers, seconds)."""
    data = raw if raw is not None else (json.dumps(body).encode() if body is not None else None)
    connection = http.client.HTTPConnection("127.0.0.1", server.rest_api_port, timeout=timeout)
    began = time.monotonic()
    try:
        connection.request(method, path, body=data, headers=headers or {})
        response = connection.getresponse()
        payload = response.read()
        seconds = time.monotonic() - began
        try:
            payload = json.loads(payload) if payload else payload
        except ValueError:
            pass
        return response.status, payload, dict(response.getheaders()), seconds
    finally:
        connection.close()


def _good(server, label):
    status, body, _, seconds = _http(server, "POST", PREDICT, {"instances": ["ok"]})
    check(f"good request after {label}", f"HTTP {status} in {seconds:.3f}s", f"200 within {AT_ONCE_S}s",
          status == 200 and "predictions" in body and seconds <= AT_ONCE_S)


def _slow(server, seconds, path=PREDICT):
    return _http(server, "POST", path, {"signature_name": "slow", "instances": [seconds]})


def _exchange(port, payload, drip=b"", limit=15.0):
    """Sends `payload` on a raw socket, then `drip` one byte a second until an answer comes; reads until the
    server closes. -> {status, headers, body, answered (s after connecting), closed (s, None if not)}."""
    sock = socket.create_connection(("127.0.0.1", port), timeout=limit)
    began = time.monotonic()
    data, answered, closed = b"", None, None
    try:
        sock.sendall(payload)
        next_drip = began + 1.0
        while time.monotonic() - began < limit:
            wait = max(0.0, next_drip - time.monotonic()) if drip and answered is None else 0.5
            readable, _, _ = select.select([sock], [], [], wait)
            if readable:
                try:
                    chunk = sock.recv(65536)
                except ConnectionResetError:
                    chunk = b""
                if answered is None and chunk:
                    answered = time.monotonic() - began
                if not chunk:
                    closed = time.monotonic() - began
                    break
                data += chunk
            elif drip and answered is None:
                try:
                    sock.send(drip[:1])
                except OSError:
                    pass
                drip, next_drip = drip[1:], next_drip + 1.0
    finally:
        sock.close()
    head, _, body = data.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    status = int(lines[0].split()[1]) if lines[0].startswith("HTTP/") else None
    headers = dict(line.split(": ", 1) for line in lines[1:] if ": " in line)
    try:
        body = json.loads(body)
    except ValueError:
        pass
    return {"status": status, "headers": headers, "body": body, "answered": answered, "closed": closed}


def _post_head(length_header, path=PREDICT):
    return (f"POST {path} HTTP/1.1\r\nHost: test\r\nContent-Type: application/json\r\n{length_header}"
            "\r\n").encode()


# --- load ------------------------------------------------------------------------------------------------


def test_overload_excess_answered_503_at_once_accepted_ones_served(server):
    """4N concurrent requests that each hold a worker for 1 s: N run, the rest are answered 503 at once."""
    total = 4 * THREADS
    print(f"\n{total} concurrent requests holding a worker {SLOW_S}s each, rest_api_num_threads={THREADS}")
    barrier = threading.Barrier(total)
    results = [None] * total

    def client(index):
        barrier.wait(10)
        results[index] = _slow(server, SLOW_S)

    threads = [threading.Thread(target=client, args=(i,)) for i in range(total)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    accepted = [r for r in results if r and r[0] == 200]
    rejected = [r for r in results if r and r[0] == 503]
    print(f"  statuses and seconds: {[(r[0], round(r[3], 3)) if r else None for r in results]}")
    check("requests run (HTTP 200)", len(accepted), f"== rest_api_num_threads {THREADS}", len(accepted) == THREADS)
    check("requests refused (HTTP 503)", len(rejected), f"== {total - THREADS}", len(rejected) == total - THREADS)
    slowest = max(r[3] for r in rejected)
    check("slowest 503 answer", f"{slowest:.3f}s", f"<= {AT_ONCE_S}s", slowest <= AT_ONCE_S)
    check("503 answers: JSON error and Retry-After", [(r[1].get("error", "")[:40], r[2].get("Retry-After"))
                                                      for r in rejected[:1]], "an error, Retry-After: 1",
          all("busy" in r[1]["error"] and r[2].get("Retry-After") == "1" for r in rejected))
    outputs = [[row["elapsed"] for row in r[1]["predictions"]] for r in accepted]  # rows: {elapsed, slept}
    times = [r[3] for r in accepted]
    check("accepted answers (the slow signature's output; seconds)", f"{outputs}; {[f'{t:.2f}' for t in times]}",
          f"[{SLOW_S}] each; >= {SLOW_S}s", all(abs(o[0] - SLOW_S) < 1e-6 for o in outputs) and min(times) >= SLOW_S)
    _good(server, "the overload")


def test_rest_api_timeout_answers_504_on_time(server):
    """A run longer than rest_api_timeout_in_ms is answered DEADLINE_EXCEEDED (504, as TensorFlow Serving maps
    it) at the deadline, although the session run itself cannot be cut short."""
    print(f"\nrest_api_timeout_in_ms={TIMEOUT_MS}, a run of {TIMEOUT_MS / 1000 + 0.5:.1f}s")
    status, body, _, seconds = _slow(server, TIMEOUT_MS / 1000 + 0.5)
    bound = TIMEOUT_MS / 1000 + 0.5
    check("status", status, "504", status == 504 and "Deadline exceeded" in body.get("error", ""))
    check("answered after", f"{seconds:.3f}s", f">= {TIMEOUT_MS / 1000}s and <= {bound}s",
          TIMEOUT_MS / 1000 - 0.05 <= seconds <= bound)
    _good(server, "a deadline")  # one worker is still held by the abandoned run: the other serves
    time.sleep(0.6)  # that run ends


# --- abuse ------------------------------------------------------------------------------------------------


def test_content_length_abuse_answered_at_once(server):
    port = server.rest_api_port
    print("\nContent-Length abuse on raw sockets (no body sent unless said)")
    cases = [
        ("negative Content-Length", _post_head("Content-Length: -5\r\n"), 400),
        ("missing Content-Length (POST)", _post_head(""), 400),
        ("non-numeric Content-Length", _post_head("Content-Length: 12abc\r\n"), 400),
        ("two different Content-Lengths", _post_head("Content-Length: 5\r\nContent-Length: 6\r\n"), 400),
        (f"Content-Length 10**12 > max_request_bytes {MAX_REQUEST_BYTES}", _post_head("Content-Length: "
                                                                                       f"{10 ** 12}\r\n"), 429),
        ("Content-Length of 40 digits", _post_head(f"Content-Length: {'9' * 40}\r\n"), 429),
    ]
    for label, payload, expected in cases:
        answer = _exchange(port, payload)
        check(f"{label}: status", answer["status"], expected,
              answer["status"] == expected and "error" in answer["body"])
        closed = answer["closed"] and round(answer["closed"], 3)
        check(f"{label}: answered, then closed", f"{answer['answered']:.3f}s, closed at {closed}s",
              f"<= {AT_ONCE_S}s, closed", answer["answered"] <= AT_ONCE_S and answer["closed"] is not None)
        _good(server, label)
    # A client sending a real oversized body still reads its answer (what it sends is discarded, not kept).
    status, body, _, seconds = _http(server, "POST", PREDICT, raw=b"z" * (2 * MAX_REQUEST_BYTES))
    check("2x max_request_bytes body sent in full: status", f"HTTP {status} in {seconds:.3f}s",
          f"429 within {AT_ONCE_S}s", status == 429 and "max_request_bytes" in body["error"] and seconds <= AT_ONCE_S)
    _good(server, "an oversized body")
    # Nothing past Content-Length is read: a request followed by garbage is answered as the request alone.
    body = json.dumps({"instances": ["ok"]}).encode()
    answer = _exchange(port, _post_head(f"Content-Length: {len(body)}\r\n") + body + b"GARBAGE" * 100)
    check("bytes past Content-Length ignored", answer["status"], 200, answer["status"] == 200)
    chunked = b"".join(b"%x\r\n%s\r\n" % (len(body[i:i + 5]), body[i:i + 5]) for i in range(0, len(body), 5))
    for label, payload, expected in [
            ("a chunked body", _post_head("Transfer-Encoding: chunked\r\n") + chunked + b"0\r\n\r\n", 200),
            ("a chunk of 2x max_request_bytes (size line only)",
             _post_head("Transfer-Encoding: chunked\r\n") + b"%x\r\n" % (2 * MAX_REQUEST_BYTES), 429),
            ("Content-Length and Transfer-Encoding", _post_head("Content-Length: 3\r\nTransfer-Encoding: "
                                                                "chunked\r\n") + b"abc", 400),
            ("Expect: 100-continue, Content-Length 10**12", _post_head(f"Expect: 100-continue\r\nContent-Length: "
                                                                       f"{10 ** 12}\r\n"), 429),
            ("method FOO", b"FOO /v1/models/x HTTP/1.1\r\n\r\n", 501)]:
        answer = _exchange(port, payload)
        check(f"{label}: status", f"{answer['status']} in {answer['answered']:.3f}s", f"{expected} within {AT_ONCE_S}s",
              answer["status"] == expected and answer["answered"] <= AT_ONCE_S)


def test_dripping_clients_cut_off_without_holding_workers(server):
    """Clients sending one byte a second are answered 408 at rest_body_timeout (in total, not per byte), and
    while more of them drip than there are workers, other requests are served at once."""
    port = server.rest_api_port
    print(f"\n{THREADS + 1} clients dripping one byte a second, rest_body_timeout={BODY_TIMEOUT_S}s")
    body_drip = _post_head("Content-Length: 30\r\n") + b'{"instances": '
    drips = [("body dripped", body_drip, b'["a", "b", "c"]}' + b" " * 20)] * THREADS
    drips.append(("request line dripped", b"PO", b"ST " + PREDICT.encode() + b" HTTP/1.1\r\n"))
    answers = [None] * len(drips)

    def dripper(index, payload, drip):
        answers[index] = _exchange(port, payload, drip)

    threads = [threading.Thread(target=dripper, args=(i, p, d)) for i, (_, p, d) in enumerate(drips)]
    for thread in threads:
        thread.start()
    time.sleep(0.5)
    _good(server, f"{len(drips)} dripping clients connected (they hold no worker)")
    for thread in threads:
        thread.join(20)
    bound = BODY_TIMEOUT_S + 0.5
    for (label, _, _), answer in zip(drips, answers):
        check(f"{label}: status", answer["status"], 408, answer["status"] == 408 and "rest_body_timeout"
              in answer["body"]["error"])
        check(f"{label}: answered after", f"{answer['answered']:.2f}s", f">= {BODY_TIMEOUT_S - 0.1}s, <= {bound}s",
              BODY_TIMEOUT_S - 0.1 <= answer["answered"] <= bound)
        check(f"{label}: connection closed after", answer["closed"] and f"{answer['closed']:.2f}s",
              f"<= {bound + 2.5}s (answer + linger)", answer["closed"] is not None and answer["closed"] <= bound + 2.5)
    _good(server, "the dripping clients")


def test_deeply_nested_json_is_400_quickly(server):
    print("\ndeeply nested JSON bodies")
    deep_valid = b'{"instances": ' + b"[" * 500 + b'"a"' + b"]" * 500 + b"}"
    cases = [("100000 '['", b"[" * 100000), ("100000 '{\"a\":'", b'{"a":' * 100000),
             ("valid JSON 500 deep", deep_valid), ("integer of 5000 digits", b'{"instances": [' + b"7" * 5000 + b"]}")]
    for label, raw in cases:
        for path in (PREDICT, f"/v1/models/{QUOTED}:classify"):
            status, body, _, seconds = _http(server, "POST", path, raw=raw)
            check(f"{label} to {path.rsplit(':', 1)[1]}", f"HTTP {status} in {seconds:.3f}s "
                  f"({str(body.get('error', ''))[:60]})", f"400 within {AT_ONCE_S}s",
                  status == 400 and "JSON Parse error" in body.get("error", "") and seconds <= AT_ONCE_S)
        _good(server, label)


# --- paths, names, CORS ----------------------------------------------------------------------------------


def test_paths_follow_tensorflow_serving(server):
    print("\n/v1 paths (TensorFlow Serving's regexes), percent-decoded names")
    malformed = [("POST", f"/v1/models/{QUOTED}:PREDICT"), ("POST", f"/v1/models/{QUOTED}/versions/abc:predict"),
                 ("POST", f"/v1/models/{QUOTED}/versions/1/labels/x:predict"), ("GET", "/v1/foo"),
                 ("GET", f"/v1/models/{QUOTED}/"), ("GET", f"/v1/models/{QUOTED}:predict"),
                 ("POST", f"/v1/models/{QUOTED}/metadata"), ("PUT", f"/v1/models/{QUOTED}"),
                 ("DELETE", f"/v1/models/{QUOTED}")]
    for method, path in malformed:
        status, body, _, _ = _http(server, method, path, raw=b"{}")
        check(f"{method} {path}", f"HTTP {status} {body.get('error', '')!r}", "400 'Malformed request: ...'",
              status == 400 and body.get("error") == f"Malformed request: {method} {path}")
    for method, path, expected, words in [
            ("GET", "/v1/models", 400, "Missing model name"),
            ("GET", f"/v1/models/{QUOTED}/versions/99999999999999999999", 400, "Failed to convert version"),
            ("POST", "/v1/models/my+model:predict", 404, "my+model"),  # '+' is not a space in a path
            ("GET", "/v3/models/x", 404, "Not found"), ("GET", "/", 404, "Not found"),
            ("GET", "/v1", 404, "Not found")]:
        status, body, _, _ = _http(server, method, path, {"instances": ["a"]} if method == "POST" else None)
        check(f"{method} {path}", f"HTTP {status} {body.get('error', '')[:70]!r}", f"{expected} naming {words!r}",
              status == expected and words in body.get("error", ""))
    for method, path, body in [("POST", PREDICT, {"instances": ["ok"]}),
                               ("POST", f"/v1/models/{QUOTED}/versions/1:predict", {"instances": ["ok"]}),
                               ("POST", f"/V1/MODELS/{QUOTED}:predict", {"instances": ["ok"]}),  # (?i)
                               ("POST", "/v1/models/my%20mode%6C:predict?x=1", {"instances": ["ok"]}),
                               ("GET", f"/v1/models/{QUOTED}", None),
                               ("GET", f"/v1/models/{QUOTED}/versions/1/metadata", None)]:
        status, answer, _, _ = _http(server, method, path, body)
        status_of = answer.get("model_version_status", [{}])[0].get("state")
        served = "predictions" if "predictions" in answer else status_of or answer.get("model_spec", {}).get("name")
        check(f"{method} {path}", f"HTTP {status} {served!r}", f"200 for model {NAME!r}",
              status == 200 and served in ("predictions", "AVAILABLE", NAME))


def test_classify_regress_unknown_model_is_404_whatever_the_body(server):
    print("\n:classify / :regress on an unknown model: the model is looked up before the body is parsed")
    for verb in ("classify", "regress"):
        for label, raw in [("empty body", b""), ("no examples", b'{"examples": []}'), ("bad JSON", b"{bad"),
                           ("examples not objects", b'{"examples": [1, 2]}')]:
            status, body, _, _ = _http(server, "POST", f"/v1/models/nope:{verb}", raw=raw)
            check(f"{verb} nope, {label}", f"HTTP {status} {body.get('error', '')[:60]!r}", "404",
                  status == 404 and "nope" in body.get("error", ""))
        status, body, _, _ = _http(server, "POST", f"/v1/models/{QUOTED}:{verb}", raw=b"")
        check(f"{verb} on the served model, empty body", f"HTTP {status}", "400 (the body is the problem there)",
              status == 400 and "JSON Parse error" in body.get("error", ""))
    status, body, _, _ = _http(server, "POST", f"/v1/models/{QUOTED}:classify",
                               {"signature_name": "classification", "examples": [{"text": "a fine film"}]})
    check("classify on the served model", f"HTTP {status} {body.get('results', '')}", "200, [[label, score]...]",
          status == 200 and body["results"][0][0][0] in ("negative", "positive"))


def test_cors_headers_and_preflight(server):
    print("\nrest_api_enable_cors_support=True")
    status, body, headers, _ = _http(server, "OPTIONS", PREDICT, headers={"Origin": "https://app.example",
                                                                         "Access-Control-Request-Method": "POST"})
    check("preflight with an Origin", f"HTTP {status} {[headers.get(k) for k in CORS]}", f"200 {list(CORS.values())}",
          status == 200 and all(headers.get(k) == v for k, v in CORS.items()))
    status, body, headers, _ = _http(server, "OPTIONS", PREDICT)
    check("preflight without an Origin", f"HTTP {status} {body.get('error', '')!r}", "400 (FAILED_PRECONDITION)",
          status == 400 and "Origin header is missing" in body["error"] and headers.get("Access-Control-Allow-Origin"))
    for label, method, path, body in [("predict", "POST", PREDICT, {"instances": ["ok"]}),
                                      ("an error answer", "POST", "/v1/models/nope:predict", {"instances": ["a"]})]:
        status, _, headers, _ = _http(server, method, path, body)
        check(f"CORS headers on {label}", f"HTTP {status} {headers.get('Access-Control-Allow-Origin')}", "'*'",
              all(headers.get(k) == v for k, v in CORS.items()))


def test_without_cors_and_graceful_stop(model_base):
    """CORS off: no CORS headers (preflight still answered, as TensorFlow Serving does). Stop: a request in
    progress finishes, a new one is refused 503 meanwhile, and stop() returns once it is answered."""
    print("\nrest_api_enable_cors_support=False, then a graceful stop")
    instance = _start(model_base)
    try:
        status, _, headers, _ = _http(instance, "POST", PREDICT, {"instances": ["ok"]})
        cors = sorted(k for k in headers if k.startswith("Access-Control"))
        check("CORS headers on predict", cors, "none", status == 200 and not cors)
        status, _, headers, _ = _http(instance, "OPTIONS", PREDICT, headers={"Origin": "http://a.example"})
        check("preflight", f"HTTP {status}", "200, no CORS headers",
              status == 200 and not any(k.startswith("Access-Control") for k in headers))
        slow, stopped = {}, {}

        def request_in_progress():
            slow["answer"] = _slow(instance, SLOW_S)
            slow["at"] = time.monotonic()

        in_flight = threading.Thread(target=request_in_progress)
        in_flight.start()
        time.sleep(0.3)

        def stop():
            instance.stop(10)
            stopped["at"] = time.monotonic()

        stopper = threading.Thread(target=stop)
        stopper.start()
        time.sleep(0.2)
        try:
            status, body, _, seconds = _http(instance, "POST", PREDICT, {"instances": ["ok"]}, timeout=5)
            late = f"HTTP {status} in {seconds:.3f}s"
            ok = status == 503 and "shutting down" in body["error"] and seconds <= AT_ONCE_S
        except OSError as error:  # the port already closed: refused is also fine for a stopping server
            late, ok = f"{type(error).__name__}", isinstance(error, (ConnectionRefusedError, ConnectionResetError))
        check("a new request while stopping", late, f"503 within {AT_ONCE_S}s (or refused)", ok)
        in_flight.join(10)
        stopper.join(15)
        status, body, _, seconds = slow["answer"]
        check("the request in progress at stop", f"HTTP {status} {body.get('predictions')} in {seconds:.2f}s",
              f"200 [{{elapsed: {SLOW_S}, ...}}]",
              status == 200 and abs(body["predictions"][0]["elapsed"] - SLOW_S) < 1e-6)
        lead = stopped["at"] - slow["at"]
        check("stop() returned, after that answer came", f"{lead:+.3f}s", ">= -0.02s (it waited for it)",
              lead >= -0.02)
    finally:
        instance.stop(5)
