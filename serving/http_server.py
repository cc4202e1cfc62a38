"""The REST server's HTTP/1.1 layer: one event-loop thread and a fixed pool of worker threads, answering each
complete request with a handler (a Request -> an Answer: rest_handler.RestHandler for TensorFlow Serving's
REST API). It knows nothing of models or JSON bodies; the request and answer framing is http_messages.py.

How a connection is served: the event loop (`serve_forever`) accepts connections and does all socket I/O
without blocking. It reads a request's line, headers and body and checks them; only a complete request
goes to a worker (`rest_api_num_threads` of them), which finds the model and runs it; the loop writes the
answer. One request per connection: every answer says `Connection: close` (a stop never waits on idle
keep-alive connections, and nothing is read past the request).

Limits (TensorFlow Serving's behaviour, where it has one, in brackets):

* Load: a complete request that finds all `rest_api_num_threads` workers busy is answered at once 503
  UNAVAILABLE with `Retry-After: 1`, never queued [tensorflow_model_server queues it in its executor's
  unbounded queue]. 503 rather than 429: it is what the server's own overload means in TensorFlow Serving's
  table (UNAVAILABLE; RESOURCE_EXHAUSTED/429 is a request too large or a client over its quota, RFC 6585),
  what RFC 9110 defines for "temporarily overloaded", what load balancers retry on another backend, and
  what `serving.Client` retries. A worker stays taken until its answer is written, and also, when a request
  was answered at its deadline, until its run really ends (a session run cannot be stopped), so the load
  stays bounded. Open connections are bounded too (`max_connections`, at least 64; beyond: 503 at once),
  and so are the request bytes held at once (`max_request_bytes` x workers; beyond: 503).
* Time: a request's deadline is `rest_api_timeout_in_ms` from when its body has been read. It is passed to
  the core (batch queue, session run, pieces of long runs) and, should the run go on, the loop answers at
  the deadline itself: 504 DEADLINE_EXCEEDED [the handler puts rest_api_timeout_in_ms in the session's
  RunOptions; ToHTTPStatusCode maps DEADLINE_EXCEEDED to GATEWAY_TO, 504]. Reading the request line,
  headers and body must end within `rest_body_timeout` seconds of the connection's accept, in total: a
  client dripping bytes is answered 408 and the connection closed [TensorFlow Serving sets no timeout:
  libevent's default read timeout, 50 s, closes the connection without an answer]; a connection that sent
  nothing is closed without an answer.
* Framing: a request line or headers over 64 KiB: 414 / 431; more than 100 headers: 431; not HTTP/1.x: 505;
  a method other than GET, POST, HEAD, PUT, DELETE, OPTIONS, PATCH: 501 [libevent, with the methods
  evhttp_server.cc allows; those others reach the handler: 400 "Malformed request" under /v1/].
  Content-Length negative, not a number, or given twice with different values: 400; a POST with neither
  Content-Length nor `Transfer-Encoding: chunked`: 400 [libevent: 400 for a bad Content-Length]; both: 400;
  another transfer coding: 501. A body larger than `max_request_bytes`: 429 RESOURCE_EXHAUSTED, answered as
  soon as the headers (or the chunks so far) say so, the body not read: `Expect: 100-continue` is answered
  with that 429 (the client sends nothing), otherwise what the client still sends is discarded, never kept,
  for at most LINGER_SECONDS, so that it can read the answer (closing a socket with unread data resets the
  connection and the client loses the answer), then the connection is closed. Nothing past Content-Length
  is ever parsed.

Stopping (`ModelServer.stop`): `stopping = True` and `shutdown()` make the loop refuse new requests (503
"the server is shutting down", also to connections still sending theirs) while the requests in progress
finish; `server_close()` waits for them (and their answers to be written), then closes the port and the
workers. `serve_forever` returns once the requests in progress are answered.
"""

from __future__ import annotations

import heapq
import itertools
import logging
import queue
import selectors
import socket
import threading
import time

from . import errors
from .deadline import Deadline
from .http_messages import (METHODS, Answer, Chunked, HttpError, Request, encode_answer, framing, head_end,
                            parse_head, path_of)

log = logging.getLogger("xlnet_tf.serving")

LINGER_SECONDS = 2.0  # how long unread bytes are discarded after an early answer, before closing
CONNECTIONS_PER_THREAD = 16  # open connections at most: max(MIN_CONNECTIONS, this x rest_api_num_threads)
MIN_CONNECTIONS = 64
RETRY_AFTER_SECONDS = 1
BACKLOG = 1024
READ_CHUNK = 256 << 10

READ, RUN, WRITE, LINGER, CLOSED = "read", "run", "write", "linger", "closed"


class _Conn:
    """One client connection and where it stands: READ (its request), RUN (a worker has it), WRITE (the
    answer), LINGER (answered early: unread bytes are discarded until the client closes), CLOSED."""

    __slots__ = ("sock", "address", "state", "events", "head", "method", "target", "path", "version",
                 "headers", "body", "filled", "chunked", "received_any", "unclean", "reserved", "timers",
                 "request", "worker_running", "answered", "holds_slot", "out", "linger_left")

    def __init__(self, sock, address):
        self.sock, self.address = sock, address
        self.state = READ
        self.events = 0
        self.head = bytearray()  # request line and headers, until they are complete (None after)
        self.method = self.target = self.path = None
        self.version = (1, 0)
        self.headers = {}
        self.body = None  # bytearray of Content-Length bytes
        self.filled = 0
        self.chunked = None
        self.received_any = False
        self.unclean = False  # bytes of the client's still unread: linger before closing
        self.reserved = 0  # request bytes counted against the server's budget
        self.timers = {}
        self.request = None
        self.worker_running = False
        self.answered = False
        self.holds_slot = False
        self.out = None  # [memoryview, ...] still to send
        self.linger_left = 0


_LISTENER, _WAKE = object(), object()


class HttpServer:
    """An HTTP/1.1 server on `address` (host, port; port 0: any free port) whose workers answer each complete
    request with `handler(request)` (a Request -> an Answer), configured by `options` (a ServerOptions:
    rest_api_num_threads, rest_api_timeout_in_ms, rest_body_timeout, max_request_bytes).
    `on_answer(request, answer, seconds)`, when given, is called in the loop for every answer to a complete
    request (the request counts); `cors_headers` go with every answer whose `cors` is true, the HTTP
    layer's own errors included.

    `serve_forever()` runs the event loop (in the caller's thread); `shutdown()` asks it to refuse new
    requests and return once the requests in progress are answered; `server_close()` waits for that and
    frees the port and the worker threads. See the module docstring for limits and statuses.
    """

    def __init__(self, address, handler, options, on_answer=None, cors_headers=()):
        self.handler = handler
        self.on_answer = on_answer
        self.cors_headers = tuple(cors_headers)
        self.options = options
        self.max_request_bytes = options.max_request_bytes
        self.num_threads = max(1, int(options.rest_api_num_threads))
        self.timeout = options.rest_api_timeout_in_ms / 1000.0
        self.body_timeout = float(options.rest_body_timeout)
        self.max_connections = max(MIN_CONNECTIONS, CONNECTIONS_PER_THREAD * self.num_threads)
        self.byte_budget = self.num_threads * self.max_request_bytes
        self.stopping = False  # set by ModelServer.stop: new requests are refused (503)
        host, port = address
        family = socket.AF_INET6 if ":" in (host or "") else socket.AF_INET
        self.socket = socket.socket(family, socket.SOCK_STREAM)
        try:
            self.socket.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            self.socket.bind((host, port))
            self.socket.listen(BACKLOG)
            self.socket.setblocking(False)
        except OSError:
            self.socket.close()
            raise
        self.server_address = self.socket.getsockname()[:2]
        self._wake_r, self._wake_w = socket.socketpair()
        self._wake_r.setblocking(False)
        self._wake_w.setblocking(False)
        self._selector = selectors.DefaultSelector()
        self._conns = set()
        self._timers = []  # heap of (at, seq, conn, kind)
        self._seq = itertools.count()
        self._busy = 0  # workers taken (RUN, or writing what a worker answered)
        self._reserved = 0  # request bytes held (declared Content-Length of requests being read or run)
        self._scratch = bytearray(64 << 10)
        self._jobs = queue.SimpleQueue()
        self._finished = queue.SimpleQueue()
        self._shutdown_requested = False
        self._draining = False
        self._abort = False
        self._closing = False
        self._closed = False
        self._running = False
        self._lock = threading.Lock()
        self._loop_done = threading.Event()
        self._accept_paused_until = None
        self.rejected = 0  # requests answered 503 because every worker was busy (or too many connections)
        self._workers = [threading.Thread(target=self._work, name=f"rest-worker-{i}", daemon=True)
                         for i in range(self.num_threads)]
        for worker in self._workers:
            worker.start()

    def fileno(self):
        return self.socket.fileno()

    # -- lifecycle ----------------------------------------------------------------------------------------

    def serve_forever(self, poll_interval=0.5):
        """Runs the event loop until `shutdown()` (or `stopping`) and the requests in progress are answered."""
        with self._lock:
            if self._closing or self._running:
                return
            self._running = True
            self._loop_done.clear()
        try:
            self._loop(max(0.01, poll_interval))
        except Exception:  # noqa: BLE001 - the loop must not die silently
            log.exception("REST event loop failed")
            raise
        finally:
            for conn in list(self._conns):
                self._close(conn)
            for key in list(self._selector.get_map().values()):
                self._selector.unregister(key.fileobj)
            with self._lock:
                self._running = False
            self._loop_done.set()

    def shutdown(self):
        """Refuse new requests from now on (503); serve_forever returns once those in progress are answered.
        Returns at once (`server_close` waits)."""
        self._shutdown_requested = True
        self._wake()

    def server_close(self, timeout=None):
        """Waits (up to `timeout` seconds, None: as long as they take) for the requests in progress to be
        answered, then closes the port and stops the worker threads."""
        self._shutdown_requested = True
        self._wake()
        with self._lock:
            self._closing = True  # serve_forever does not start from now on
            running = self._running
        if running and not self._loop_done.wait(timeout):
            log.warning("REST: requests still running after %.1fs; closing their connections", timeout)
            self._abort = True
            self._wake()
            self._loop_done.wait(5.0)
        with self._lock:
            if self._closed:
                return
            self._closed = True
        self.socket.close()
        for _ in self._workers:
            self._jobs.put(None)
        for worker in self._workers:
            worker.join(1.0 if timeout is not None else None)
        self._selector.close()
        self._wake_r.close()
        self._wake_w.close()

    def _wake(self):
        try:
            self._wake_w.send(b"x")
        except OSError:  # full (the loop is awake anyway) or closed
            pass

    # -- the event loop -----------------------------------------------------------------------------------

    def _loop(self, poll_interval):
        self._selector.register(self.socket, selectors.EVENT_READ, _LISTENER)
        self._selector.register(self._wake_r, selectors.EVENT_READ, _WAKE)
        while True:
            if (self.stopping or self._shutdown_requested) and not self._draining:
                self._begin_drain()
            if self._abort or (self._draining and not any(c.holds_slot or c.worker_running for c in self._conns)):
                return
            now = time.monotonic()
            timeout = poll_interval
            if self._timers:
                timeout = min(timeout, max(0.0, self._timers[0][0] - now))
            if self._accept_paused_until is not None:
                if now >= self._accept_paused_until:
                    self._accept_paused_until = None
                    self._selector.register(self.socket, selectors.EVENT_READ, _LISTENER)
                else:
                    timeout = min(timeout, self._accept_paused_until - now)
            for key, mask in self._selector.select(timeout):
                if key.data is _LISTENER:
                    self._accept()
                elif key.data is _WAKE:
                    try:
                        while self._wake_r.recv(4096):
                            pass
                    except OSError:
                        pass
                else:
                    conn = key.data
                    if mask & selectors.EVENT_READ and conn.state in (READ, LINGER):
                        self._on_readable(conn)
                    if mask & selectors.EVENT_WRITE and conn.state == WRITE:
                        self._send(conn)
            self._collect()
            self._fire_timers(time.monotonic())

    def _set_events(self, conn, events):
        if conn.events == events:
            return
        if not events:
            self._selector.unregister(conn.sock)
        elif not conn.events:
            self._selector.register(conn.sock, events, conn)
        else:
            self._selector.modify(conn.sock, events, conn)
        conn.events = events

    def _set_timer(self, conn, kind, at):
        conn.timers[kind] = at
        heapq.heappush(self._timers, (at, next(self._seq), conn, kind))

    def _fire_timers(self, now):
        while self._timers and self._timers[0][0] <= now:
            at, _, conn, kind = heapq.heappop(self._timers)
            if conn.state == CLOSED or conn.timers.get(kind) != at:
                continue
            del conn.timers[kind]
            if kind == "read" and conn.state == READ:
                if not conn.received_any:
                    self._close(conn)  # nothing asked: nothing to answer
                else:
                    self._http_error(conn, HttpError(
                        408, f"the request was not received within rest_body_timeout={self.body_timeout:g}s "
                             "(request line, headers and body)"))
            elif kind == "deadline" and conn.worker_running and not conn.answered:
                self._answer(conn, Answer.error(errors.ServingError(
                    "DEADLINE_EXCEEDED", "Deadline exceeded: the request did not finish within "
                                         f"rest_api_timeout_in_ms={self.options.rest_api_timeout_in_ms}")))
            elif kind in ("write", "linger"):
                self._close(conn)

    def _begin_drain(self):
        self._draining = True
        for conn in list(self._conns):
            if conn.state == READ:
                if conn.received_any:
                    self._http_error(conn, HttpError(503, "the server is shutting down"))
                else:
                    self._close(conn)

    def _accept(self):
        for _ in range(256):
            try:
                sock, address = self.socket.accept()
            except (BlockingIOError, InterruptedError):
                return
            except ConnectionAbortedError:
                continue
            except OSError as error:  # out of file descriptors: stop accepting for a moment
                log.warning("REST: cannot accept a connection: %s", error)
                self._selector.unregister(self.socket)
                self._accept_paused_until = time.monotonic() + 0.1
                return
            sock.setblocking(False)
            try:
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            except OSError:
                pass
            conn = _Conn(sock, address)
            self._conns.add(conn)
            if self._draining:
                self._http_error(conn, HttpError(503, "the server is shutting down"))
            elif len(self._conns) > self.max_connections:
                self.rejected += 1
                self._http_error(conn, self._busy_error(f"{self.max_connections} connections are open"))
            else:
                self._set_events(conn, selectors.EVENT_READ)
                self._set_timer(conn, "read", time.monotonic() + self.body_timeout)

    def _busy_error(self, why):
        return HttpError(503, f"the server is busy ({why}); retry later",
                         headers=[("Retry-After", str(RETRY_AFTER_SECONDS))])

    # -- reading a request --------------------------------------------------------------------------------

    def _on_readable(self, conn):
        sock = conn.sock
        try:
            if conn.state == LINGER:
                count = sock.recv_into(self._scratch)
                conn.linger_left -= count
                if not count or conn.linger_left <= 0:
                    self._close(conn)
                return
            if conn.body is not None:
                want = min(len(conn.body) - conn.filled, READ_CHUNK)
                count = sock.recv_into(memoryview(conn.body)[conn.filled:conn.filled + want], want)
                data = None
            else:
                data = sock.recv(READ_CHUNK)
                count = len(data)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            self._close(conn)
            return
        if not count:  # the client closed (or half-closed) before its request was complete
            if conn.received_any:
                self._http_error(conn, HttpError(400, "the connection was closed before the request was "
                                                 "complete"), unclean=False)
            else:
                self._close(conn)
            return
        conn.received_any = True
        try:
            if conn.body is not None:
                conn.filled += count
            elif conn.chunked is not None:
                conn.chunked.feed(data)
            else:
                conn.head += data
                self._read_head(conn)
            if conn.state == READ and self._complete(conn):
                self._dispatch(conn)
        except (HttpError, errors.ServingError) as error:
            self._http_error(conn, error)

    def _read_head(self, conn):
        head = conn.head
        end = head_end(head)
        if end is None:
            return
        rest = head[end.end():]
        conn.method, conn.target, conn.version, conn.headers = parse_head(bytes(head[:end.start()]))
        conn.path = path_of(conn.target)
        conn.head = None
        if conn.method not in METHODS:
            raise HttpError(501, f"method {conn.method[:20]} is not supported")
        length, chunked = framing(conn.method, conn.headers)
        conn.linger_left = self.max_request_bytes if chunked else length - len(rest)  # were an answer early
        if length is not None and length > self.max_request_bytes:
            raise errors.resource_exhausted(f"request of {length} bytes is larger than the limit of "
                                            f"{self.max_request_bytes} bytes (max_request_bytes)")
        reserve = self.max_request_bytes if chunked else length
        if reserve and self._reserved + reserve > self.byte_budget:
            self.rejected += 1
            raise self._busy_error(f"{self._reserved} request bytes are held")
        conn.reserved = reserve
        self._reserved += reserve
        expect = ",".join(conn.headers.get("expect", ())).lower()
        if "100-continue" in expect and conn.version >= (1, 1) and (chunked or length) and not rest:
            try:
                conn.sock.send(b"HTTP/1.1 100 Continue\r\n\r\n")
            except OSError:
                pass
        if chunked:
            conn.chunked = Chunked(self.max_request_bytes)
            conn.chunked.feed(rest)
        else:
            conn.body = bytearray(length)
            taken = min(len(rest), length)
            conn.body[:taken] = rest[:taken]
            conn.filled = taken
            conn.unclean = len(rest) > length  # bytes past Content-Length: dropped, never parsed

    def _complete(self, conn):
        if conn.head is not None:
            return False
        if conn.chunked is not None:
            if not conn.chunked.done:
                return False
            conn.unclean = conn.chunked.extra
            body = conn.chunked.body
        else:
            if conn.filled < len(conn.body):
                return False
            body = conn.body
        now = time.monotonic()
        conn.timers.pop("read", None)
        conn.request = Request(conn.method, conn.target, conn.path, conn.headers, body, now,
                               Deadline.after(self.timeout))
        conn.body = conn.chunked = None
        return True

    def _dispatch(self, conn):
        """A complete request: to a free worker, or 503 at once."""
        request = conn.request
        if self._draining or self.stopping:
            self._http_error(conn, HttpError(503, "the server is shutting down"), unclean=conn.unclean,
                             count="UNAVAILABLE")
            return
        if self._busy >= self.num_threads:
            self.rejected += 1
            self._http_error(conn, self._busy_error(f"all {self.num_threads} REST worker threads are handling "
                                                    "requests (rest_api_num_threads)"),
                             unclean=conn.unclean, count="UNAVAILABLE")
            return
        self._busy += 1
        conn.holds_slot = conn.worker_running = True
        conn.state = RUN
        self._set_events(conn, 0)
        self._set_timer(conn, "deadline", request.deadline.at)
        self._jobs.put((conn, request))

    def _collect(self):
        """Answers of the workers that finished."""
        while True:
            try:
                conn, answer = self._finished.get_nowait()
            except queue.Empty:
                return
            conn.worker_running = False
            conn.timers.pop("deadline", None)
            conn.request.body = None
            if conn.state == RUN and not conn.answered:
                self._answer(conn, answer)
            self._release(conn)

    # -- answering ----------------------------------------------------------------------------------------

    def _http_error(self, conn, error, unclean=True, count=None):
        """An answer from the HTTP layer; by default the request's bytes may not all have been read."""
        if isinstance(error, errors.ServingError):
            answer = Answer.error(error)
        else:
            answer = Answer.json(error.status, {"error": error.message}, headers=error.headers, code=None)
        if count is not None:
            answer.code = count
        conn.unclean = conn.unclean or unclean
        self._answer(conn, answer)

    def _answer(self, conn, answer):
        if conn.answered or conn.state == CLOSED:
            return
        conn.answered = True
        conn.timers.pop("read", None)
        request = conn.request
        now = time.monotonic()
        if request is not None and self.on_answer is not None:  # a complete request, given to a worker or not
            self.on_answer(request, answer, now - request.received)
        if request is not None:
            log.debug("rest %s %s %s -> %d", conn.address[0] if conn.address else "", request.method,
                      request.target, answer.status)
        extra = self.cors_headers if answer.cors else ()
        conn.out = encode_answer(answer, extra, head_only=conn.method == "HEAD")
        conn.state = WRITE
        self._send(conn)

    def _send(self, conn):
        """Writes what it can of the answer; the rest when the socket is writable (a client that reads
        nothing for rest_body_timeout seconds is dropped)."""
        try:
            while conn.out:
                sent = conn.sock.send(conn.out[0])
                if sent < len(conn.out[0]):
                    conn.out[0] = conn.out[0][sent:]
                    break
                conn.out.pop(0)
        except (BlockingIOError, InterruptedError):
            pass
        except OSError:
            self._close(conn)
            return
        if conn.out:
            self._set_events(conn, selectors.EVENT_WRITE)
            at = time.monotonic() + self.body_timeout
            if at - conn.timers.get("write", 0.0) > 0.5:  # progress moves the timer (not every send)
                self._set_timer(conn, "write", at)
            return
        conn.out = None
        if conn.unclean:  # the client may still be sending: read and drop it, so that it gets the answer
            try:
                conn.sock.shutdown(socket.SHUT_WR)
            except OSError:
                self._close(conn)
                return
            conn.state = LINGER
            conn.timers.pop("write", None)
            conn.linger_left = max(conn.linger_left, 0) + (64 << 10)
            self._set_events(conn, selectors.EVENT_READ)
            self._set_timer(conn, "linger", time.monotonic() + LINGER_SECONDS)
            self._release(conn)
        else:
            self._close(conn)

    def _close(self, conn):
        if conn.state == CLOSED:
            return
        if conn.events:
            try:
                self._selector.unregister(conn.sock)
            except (KeyError, ValueError):
                pass
            conn.events = 0
        try:
            conn.sock.close()
        except OSError:
            pass
        conn.state = CLOSED
        conn.timers.clear()
        conn.out = None
        self._conns.discard(conn)
        self._release(conn)

    def _release(self, conn):
        """Frees the connection's worker slot and request bytes once it is answered and its worker is done."""
        if conn.worker_running or conn.state not in (LINGER, CLOSED):
            return
        if conn.holds_slot:
            conn.holds_slot = False
            self._busy -= 1
        if conn.reserved:
            self._reserved -= conn.reserved
            conn.reserved = 0

    # -- the workers --------------------------------------------------------------------------------------

    def _work(self):
        while True:
            job = self._jobs.get()
            if job is None:
                return
            conn, request = job
            try:
                answer = self.handler(request)
            except BaseException as error:  # noqa: BLE001 - a worker answers whatever happens
                answer = Answer.error(errors.internal(error, "REST request"))
            self._finished.put((conn, answer))
            self._wake()
