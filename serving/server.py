"""The model server: gRPC + REST front ends over a ModelManager, optional batching, graceful stop."""

from __future__ import annotations

import errno
import logging
import os
import socket
import threading
from concurrent import futures

import grpc

from xlnet_tf import files
from xlnet_tf.console import FILE_ONLY
from xlnet_tf.errors import Spelling, UserError

from .batching import BatchScheduler
from .config import ConfigFilePoller, ModelEntry, load_batching_config, load_model_config
from .core import ServerCore
from .grpc_api import add_services, grpc_server_arguments
from .health import add_health_service
from .manager import ModelManager
from .monitoring import Metrics, load_monitoring_config
from .options import ServerOptions, batching_grpc_threads, default_grpc_max_threads, with_session_parallelism
from .request_log import RequestLogger
from .rest_api import RestServer
from .security import server_credentials
from .v2_grpc import add_inference_service
from .v2_rest import SERVER_NAME, server_version

log = logging.getLogger("xlnet_tf.serving")


def _address(host, port):
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


GRPC_PORT = Spelling("port=", "--port", hint=False)
REST_PORT = Spelling("rest_api_port=", "--rest-api-port", hint=False)


def port_in_use(host, port):
    """Whether something already listens on `host`:`port` (a trial bind of each of its addresses fails with
    EADDRINUSE; SO_REUSEADDR, as gRPC and the REST server bind, so that a port left in TIME_WAIT is free).
    False for port 0 (any free port) and for what a trial bind cannot judge (the real bind reports that)."""
    if not port:
        return False
    try:
        addresses = socket.getaddrinfo(host or None, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except (OSError, UnicodeError):
        return False
    for family, kind, proto, _, address in addresses:
        try:
            with socket.socket(family, kind, proto) as trial:
                trial.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                trial.bind(address)
        except OSError as error:
            if error.errno == errno.EADDRINUSE:
                return True
    return False


def in_use_error(host, port, flag):
    """The UserError of a port that something else listens on, naming the flag (`GRPC_PORT`, `REST_PORT`)."""
    return UserError(f"{_address(host, port)} is in use (another server?): pick another ", flag)


class ModelServer:
    """A running (after `start()`) TensorFlow-Serving-compatible server for `entries` (ModelEntry list),
    configured by `options` (a ServerOptions; keyword arguments override its fields; `serve_with` reads its model
    fields, this only re-reads `model_config_file` as it says). `grpc_max_threads` None:
    the default for its batching and models (options.default_grpc_max_threads), in `self.options` from here on.

    Attributes once started: `port` and `rest_api_port` (the bound ports; None when REST is off),
    `grpc_target` ("host:port"), `rest_url` ("http://host:port"), `manager` (models and versions, with an
    event log in `manager.events`), `scheduler` (None without batching; counters in `batch_stats()`),
    `request_log` (the RequestLogger of the models' logging_config: request_log.py; stopped after the front ends).
    """

    def __init__(self, entries, options=None, **changes):
        options = (options or ServerOptions()).replace(**changes)
        self.entries = list(entries)
        if options.grpc_max_threads is None:
            options = options.replace(grpc_max_threads=default_grpc_max_threads(options.batching, len(self.entries)))
        self.options = options
        self.model_config_file = options.model_config_file  # re-read every model_config_file_poll_wait_seconds
        self.host = options.host
        self.metrics = Metrics() if options.monitoring_path else None
        if options.monitoring_path and options.rest_api_port is None:
            raise UserError("monitoring (a Prometheus endpoint) needs the REST port: --rest-api-port must not be -1")
        self.manager = ModelManager(self.entries, options, metrics=self.metrics)
        self.request_log = None
        self.scheduler = None
        self.core = None
        self.port = None
        self.rest_api_port = None
        self.socket_path = None
        self.health = None
        self._grpc = None
        self._rest = None
        self._rest_thread = None
        self._config_poller = None
        self._started = False
        self._stopped = threading.Event()
        self._stop_lock = threading.Lock()

    # -- lifecycle ------------------------------------------------------------------------------------

    def start(self, console_line=True):
        """Checks the ports, loads the models found on disk, binds the ports, starts serving. Returns self.
        `console_line` False: the "serving gRPC at" record is for the log file only (`console.FILE_ONLY`), for a
        caller that prints its own start line (`xlnet-tf serve`)."""
        if self._started:
            return self
        self._started = True
        options = self.options
        # The certificates and the ports are checked first: a bad --ssl_config_file or a port in use fails before
        # any model loads.
        try:
            credentials = server_credentials(options.ssl_config_file) if options.ssl_config_file else None
            for port, flag in ((options.port, GRPC_PORT), (options.rest_api_port, REST_PORT)):
                if port is not None and port_in_use(self.host, port):
                    raise in_use_error(self.host, port, flag)
        except BaseException:
            self._stopped.set()  # nothing started: stop() has nothing to do
            raise
        self.manager.start()
        if options.batching is not None:
            self.scheduler = BatchScheduler(options.batching, self.metrics)
        self.request_log = RequestLogger(options, self.metrics, self.entries)
        self.core = ServerCore(self.manager, self.scheduler, self.metrics, options, self.request_log)
        self._grpc = grpc.server(
            futures.ThreadPoolExecutor(max_workers=options.grpc_max_threads, thread_name_prefix="grpc"),
            options=grpc_server_arguments(options), maximum_concurrent_rpcs=options.grpc_max_threads)
        add_services(self._grpc, self.core, options)
        add_inference_service(self._grpc, self.core, SERVER_NAME, server_version())  # the Open Inference Protocol
        if options.enable_grpc_healthcheck_service:
            self.health = add_health_service(self._grpc)
        if options.port is not None:
            self.port = self._listen(_address(self.host, options.port), credentials, options.port)
        if options.grpc_socket_path:
            self.socket_path = os.path.abspath(options.grpc_socket_path)
            self._listen(f"unix:{self.socket_path}", credentials)
        if options.rest_api_port is not None:
            try:
                self._rest = RestServer((self.host, options.rest_api_port), self.core, options)
            except OSError as error:
                self._abort_start()
                if error.errno == errno.EADDRINUSE:
                    raise in_use_error(self.host, options.rest_api_port, REST_PORT) from None
                raise UserError(f"cannot listen for REST on {_address(self.host, options.rest_api_port)}:"
                                f" {error}") from None
            self.rest_api_port = self._rest.server_address[1]
            self._rest_thread = threading.Thread(target=self._rest.serve_forever, kwargs={"poll_interval": 0.2},
                                                 name="rest", daemon=True)
            self._rest_thread.start()
        self._grpc.start()
        if self.model_config_file and options.model_config_file_poll_wait_seconds > 0:
            self._config_poller = ConfigFilePoller(self.model_config_file, options.model_config_file_poll_wait_seconds,
                                                   self.core.reload_entries)
            self._config_poller.start()
        log.info("serving gRPC at %s%s; models: %s; batching: %s", self.grpc_target,
                 f", REST at {self.rest_url}" if self._rest else "", self.describe_models(),
                 options.batching if options.batching else "off", extra=None if console_line else FILE_ONLY)
        return self

    def _listen(self, address, credentials, port=None):
        """Binds a gRPC listener (TLS with `credentials`) -> its port (`port`: the TCP port asked for, None for a
        unix socket)."""
        try:
            if credentials is None:
                bound = self._grpc.add_insecure_port(address)
            else:
                bound = self._grpc.add_secure_port(address, credentials)
        except RuntimeError as error:
            self._abort_start()
            if port_in_use(self.host, port):  # taken since start() looked
                raise in_use_error(self.host, port, GRPC_PORT) from None
            raise UserError(f"cannot listen for gRPC on {address}: {error}") from None
        if not bound and not address.startswith("unix:"):
            self._abort_start()
            raise UserError(f"cannot listen for gRPC on {address}")
        return bound

    def _abort_start(self):
        if self._grpc is not None:
            self._grpc.stop(None)
        if self.scheduler is not None:
            self.scheduler.stop()
        if self.request_log is not None:
            self.request_log.stop(self.options.drain_timeout)
        self.manager.stop()
        self._stopped.set()

    def stop(self, grace=10.0):
        """Graceful stop: refuse new requests, let running ones finish (up to `grace` s), unload models."""
        with self._stop_lock:
            if self._stopped.is_set():
                return
            if not self._started:
                self._stopped.set()
                return
            log.info("stopping (grace %.1fs)", grace)
            if self._config_poller is not None:
                self._config_poller.stop()
            if self.health is not None:
                self.health.enter_graceful_shutdown()
            if self._rest is not None:
                self._rest.stopping = True
                self._rest.shutdown()  # no new connections
            done = self._grpc.stop(grace)  # new RPCs refused now, running ones may finish within grace
            if self._rest is not None:
                self._rest.server_close(grace)  # waits for the requests in progress, up to the grace period
            done.wait()
            running = self.manager.inflight()
            if running:
                log.warning("grace period of %.1fs over: %d requests still running were cancelled", grace, running)
            if self.request_log is not None:
                self.request_log.stop(self.options.drain_timeout)  # what the front ends accepted is queued by now
            if self.scheduler is not None:
                self.scheduler.stop()
            self.manager.stop()
            self._stopped.set()
            log.info("stopped")

    def wait(self, timeout=None):
        """Blocks until the server has stopped (or timeout); returns whether it has."""
        return self._stopped.wait(timeout)

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()

    # -- introspection --------------------------------------------------------------------------------

    @property
    def grpc_target(self):
        return _address(self.host, self.port) if self.port else None

    @property
    def rest_url(self):
        return f"http://{_address(self.host, self.rest_api_port)}" if self.rest_api_port else None

    def batch_stats(self):
        """Counters of server-side batching (None when batching is off): batches, merged_batches, ..."""
        return self.scheduler.stats.as_dict() if self.scheduler else None

    def grpc_threads_short(self):
        """The cap batching needs (options.batching_grpc_threads) when `grpc_max_threads` is below it, else None:
        requests past the cap are refused with RESOURCE_EXHAUSTED while batches could still take them."""
        if self.options.batching is None:
            return None
        wanted = batching_grpc_threads(self.options.batching, len(self.entries))
        return wanted if self.options.grpc_max_threads < wanted else None

    def describe_models(self):
        parts = []
        for name, model in self.manager.models.items():
            versions = [f"v{v}:{s.state}" for v, s in sorted(model.versions.items())]
            parts.append(f"{name} ({', '.join(versions) or 'no version yet'})")
        return "; ".join(parts)


def serve(model_base_path=None, model_name=None, model_config_file=None, port=..., rest_api_port=...,
          host=None, enable_batching=False, batching_parameters_file=None, *, batching_parameters=None,
          options=None, monitoring_config_file=None, enable_serialization_as_tensor_content=None,
          **fields) -> ModelServer:
    """A TensorFlow-Serving-compatible server for SavedModels (call `.start()` on it, or use `with`).

    Models: `model_base_path` (a directory of integer version directories, local or a URL such as
    gs://bucket/exports/name) with `model_name` (default: the base path's last component), or
    `model_config_file` (a ModelServerConfig text proto, local or a URL; its base paths likewise). Ports: 0
    picks a free port; `rest_api_port=None` turns REST off, `port=None` the gRPC TCP port (serving on
    `grpc_socket_path` only). Batching: `enable_batching` with
    `batching_parameters_file` (a BatchingParameters text proto) and/or `batching_parameters` (a dict of
    BatchingConfig fields overriding it). `monitoring_config_file`: a MonitoringConfig text proto; with
    `prometheus_config { enable: true }` the REST port answers GET on its path (default
    /monitoring/prometheus/metrics) with Prometheus metrics. `enable_serialization_as_tensor_content`:
    Predict's numeric outputs in `tensor_content`, as TensorFlow Serving's flag of that name; by default they
    are in the typed fields (`float_val`, ...), as there. Everything else is a ServerOptions field, given in
    `options` and/or as a keyword (`poll_interval`, `max_request_bytes`, `grpc_max_threads`, ...).
    `grpc_max_threads` unset: the most of 64, 4 x CPUs and, with batching, 2 x max_batch_size x models (a
    request holds its RPC's thread while it waits for its batch).

    Each argument above sets the ServerOptions field of its name (`enable_serialization_as_tensor_content`:
    `tensor_content`); one left at its default (None, False; `...` for the ports) keeps the value in `options`.
    The server is `serve_with` of the result.
    """
    if "grpc_max_workers" in fields:  # the earlier name of grpc_max_threads
        fields["grpc_max_threads"] = fields.pop("grpc_max_workers")
    given = {"model_base_path": model_base_path, "model_name": model_name, "model_config_file": model_config_file,
             "host": host, "batching_parameters_file": batching_parameters_file,
             "batching_parameters": batching_parameters, "monitoring_config_file": monitoring_config_file,
             "tensor_content": enable_serialization_as_tensor_content}
    fields.update({name: value for name, value in given.items() if value is not None})
    if enable_batching:
        fields["enable_batching"] = True
    for name, value in (("port", port), ("rest_api_port", rest_api_port)):
        if value is not ...:  # None: off
            fields[name] = value
    return serve_with((options or ServerOptions()).replace(**fields))


def serve_with(options) -> ModelServer:
    """The ModelServer (not started) of a ServerOptions: its models from `model_config_file` or
    `model_base_path` / `model_name`, its batching from `enable_batching` and the batching files, its metrics
    path from `monitoring_config_file`, its Session threads from the `tensorflow_*_parallelism` fields."""
    if options.model_config_file:
        if options.model_base_path or options.model_name:
            raise UserError("give either --model-config-file or --model-base-path/--model-name, not both")
        entries = load_model_config(options.model_config_file)
    elif options.model_base_path:
        base = os.fspath(options.model_base_path)
        name = options.model_name or files.basename(base if files.is_remote(base) else os.path.normpath(base))
        # Vertex AI's $AIP_STORAGE_URI may be a SavedModel itself: then it is version 1.
        entries = [ModelEntry(name=name, base_path=base, saved_model_at_base=options.vertex is not None)]
    else:
        raise UserError("nothing to serve: give --model-base-path (with --model-name) or --model-config-file")
    if options.batching_parameters_file and not options.enable_batching:
        raise UserError("--batching-parameters-file needs --enable-batching")
    if options.enable_batching:
        options = options.replace(batching=load_batching_config(options.batching_parameters_file,
                                                                options.batching_parameters))
    if options.monitoring_config_file:
        options = options.replace(monitoring_path=load_monitoring_config(options.monitoring_config_file))
    options = with_session_parallelism(options)
    check_options(options)
    if options.mixed_precision:
        options = _mixed_precision(options)
    return ModelServer(entries, options)


def _mixed_precision(options):
    """--mixed_precision as TensorFlow Serving takes it: bfloat16 turns TensorFlow's bfloat16 rewrite on (refused
    where it would not change anything); another value is ignored with a warning, as there."""
    from .precision import bfloat16_rewrite_applies, with_bfloat16_rewrite

    if options.mixed_precision != "bfloat16":
        log.warning("%s auto mixed precision is not supported. Valid option: bfloat16", options.mixed_precision)
        return options.replace(mixed_precision="")
    if not bfloat16_rewrite_applies():
        from xlnet_tf.hardware import cpu_flags

        flags = cpu_flags() or frozenset()
        present = ", ".join(sorted(f for f in flags if f.startswith(("avx512", "amx")))) or "no AVX-512 or AMX"
        raise UserError("--mixed_precision=bfloat16: TensorFlow's automatic mixed-precision rewrite "
                        "(auto_mixed_precision_onednn_bfloat16) changes nothing on this CPU (its oneDNN has no "
                        f"bfloat16 here; /proc/cpuinfo: {present}), so the models would run in float32; serve "
                        "without the flag")
    log.info("Running inference with bfloat16 auto mixed precision")
    return options.replace(session_config=with_bfloat16_rewrite(options.session_config))


def check_options(options):
    """UserError for options no server can run with (naming the option)."""
    if options.max_request_bytes <= 0:
        raise UserError("max_request_bytes must be positive")
    if options.grpc_max_threads is not None and options.grpc_max_threads < 1:
        raise UserError(f"grpc_max_threads must be >= 1, got {options.grpc_max_threads}")
    if options.rest_api_num_threads < 1:
        raise UserError(f"rest_api_num_threads must be >= 1, got {options.rest_api_num_threads}")
    if options.port and options.rest_api_port == options.port:
        raise UserError(f"the REST port must differ from the gRPC port ({options.port}), as in TensorFlow Serving")
    if options.port is None and not options.grpc_socket_path:
        raise UserError("no gRPC listener: give a port or a grpc_socket_path")
    for name in ("request_log_max_file_bytes", "request_log_max_file_seconds", "request_log_queue_size",
                 "request_log_queue_bytes"):
        if getattr(options, name) <= 0:
            raise UserError(f"{name} must be positive, got {getattr(options, name)}")
    if options.rest_api_timeout_in_ms <= 0:
        raise UserError(f"rest_api_timeout_in_ms must be positive, got {options.rest_api_timeout_in_ms}")
