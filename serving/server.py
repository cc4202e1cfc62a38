"""The model server: gRPC + REST front ends over a ModelManager, optional batching, graceful stop."""

from __future__ import annotations

import logging
import os
import threading
from concurrent import futures

import grpc

from xlnet_tf import files
from xlnet_tf.errors import UserError

from .batching import BatchScheduler
from .config import ModelEntry, load_batching_config, load_model_config
from .core import ServerCore
from .grpc_api import add_services
from .manager import ModelManager, list_versions
from .monitoring import Metrics, load_monitoring_config
from .rest_api import RestServer

log = logging.getLogger("xlnet_tf.serving")

DEFAULT_MAX_REQUEST_BYTES = 64 << 20  # gRPC's own default is 4 MiB
DEFAULT_MAX_RESPONSE_BYTES = (1 << 31) - 1  # like tensorflow_model_server (INT_MAX)


def _address(host, port):
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


class ModelServer:
    """A running (after `start()`) TensorFlow-Serving-compatible server.

    Attributes once started: `port` and `rest_api_port` (the bound ports; None when REST is off),
    `grpc_target` ("host:port"), `rest_url` ("http://host:port"), `manager` (models and versions, with an
    event log in `manager.events`), `scheduler` (None without batching; counters in `batch_stats()`).
    """

    def __init__(self, entries, *, port=8500, rest_api_port=8501, host="127.0.0.1", batching=None,
                 poll_interval=1.0, max_request_bytes=DEFAULT_MAX_REQUEST_BYTES,
                 max_response_bytes=DEFAULT_MAX_RESPONSE_BYTES, grpc_max_workers=64, enable_warmup=True,
                 warmup_iterations=1, max_load_retries=5, drain_timeout=30.0, validate_utf8=True,
                 session_config=None, monitoring_path=None, tensor_content=False):
        self.entries = list(entries)
        self.host = host
        self.requested_port = port
        self.requested_rest_api_port = rest_api_port
        self.batching = batching
        self.max_request_bytes = int(max_request_bytes)
        self.max_response_bytes = int(max_response_bytes)
        self.grpc_max_workers = grpc_max_workers
        self.monitoring_path = monitoring_path
        self.tensor_content = tensor_content  # Predict outputs packed (True) or in typed fields (default)
        self.metrics = Metrics() if monitoring_path else None
        if monitoring_path and rest_api_port is None:
            raise UserError("monitoring (a Prometheus endpoint) needs the REST port: --rest-api-port must not be -1")
        self.manager = ModelManager(self.entries, poll_interval=poll_interval, enable_warmup=enable_warmup,
                                    warmup_iterations=warmup_iterations, max_load_retries=max_load_retries,
                                    drain_timeout=drain_timeout, session_config=session_config,
                                    validate_utf8=validate_utf8, metrics=self.metrics)
        self.scheduler = None
        self.core = None
        self.port = None
        self.rest_api_port = None
        self._grpc = None
        self._rest = None
        self._rest_thread = None
        self._started = False
        self._stopped = threading.Event()
        self._stop_lock = threading.Lock()

    # -- lifecycle ------------------------------------------------------------------------------------

    def start(self):
        """Loads the models found on disk, binds the ports, starts serving. Returns self."""
        if self._started:
            return self
        self._started = True
        self.manager.start()
        if self.batching is not None:
            self.scheduler = BatchScheduler(self.batching, self.metrics)
        self.core = ServerCore(self.manager, self.scheduler, self.metrics)
        options = [
            ("grpc.max_receive_message_length", self.max_request_bytes),
            ("grpc.max_send_message_length", self.max_response_bytes),
            ("grpc.so_reuseport", 0),
        ]
        self._grpc = grpc.server(futures.ThreadPoolExecutor(max_workers=self.grpc_max_workers,
                                                            thread_name_prefix="grpc"), options=options)
        add_services(self._grpc, self.core, self.tensor_content)
        try:
            self.port = self._grpc.add_insecure_port(_address(self.host, self.requested_port))
        except RuntimeError as error:
            self._abort_start()
            raise UserError(f"cannot listen for gRPC on {_address(self.host, self.requested_port)}: "
                            f"{error}") from None
        if not self.port:
            self._abort_start()
            raise UserError(f"cannot listen for gRPC on {_address(self.host, self.requested_port)}")
        if self.requested_rest_api_port is not None:
            try:
                self._rest = RestServer((self.host, self.requested_rest_api_port), self.core,
                                        self.max_request_bytes, self.monitoring_path)
            except OSError as error:
                self._abort_start()
                raise UserError(f"cannot listen for REST on {_address(self.host, self.requested_rest_api_port)}:"
                                f" {error}") from None
            self.rest_api_port = self._rest.server_address[1]
            self._rest_thread = threading.Thread(target=self._rest.serve_forever, kwargs={"poll_interval": 0.2},
                                                 name="rest", daemon=True)
            self._rest_thread.start()
        self._grpc.start()
        log.info("serving gRPC at %s%s; models: %s; batching: %s", self.grpc_target,
                 f", REST at {self.rest_url}" if self._rest else "", self.describe_models(),
                 self.batching if self.batching else "off")
        return self

    def _abort_start(self):
        if self._grpc is not None:
            self._grpc.stop(None)
        if self.scheduler is not None:
            self.scheduler.stop()
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
            if self._rest is not None:
                self._rest.stopping = True
                self._rest.shutdown()  # no new connections
            done = self._grpc.stop(grace)  # new RPCs refused now, running ones may finish within grace
            if self._rest is not None:
                self._rest.server_close()  # joins the request threads
            done.wait()
            running = self.manager.inflight()
            if running:
                log.warning("grace period of %.1fs over: %d requests still running were cancelled", grace, running)
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

    def describe_models(self):
        parts = []
        for name, model in self.manager.models.items():
            versions = [f"v{v}:{s.state}" for v, s in sorted(model.versions.items())]
            parts.append(f"{name} ({', '.join(versions) or 'no version yet'})")
        return "; ".join(parts)


def serve(model_base_path=None, model_name=None, model_config_file=None, port=8500, rest_api_port=8501,
          host="127.0.0.1", enable_batching=False, batching_parameters_file=None, *, batching_parameters=None,
          poll_interval=1.0, max_request_bytes=DEFAULT_MAX_REQUEST_BYTES, max_response_bytes=DEFAULT_MAX_RESPONSE_BYTES,
          grpc_max_workers=64, enable_warmup=True, warmup_iterations=1, max_load_retries=5, drain_timeout=30.0,
          validate_utf8=True, session_config=None, monitoring_config_file=None,
          enable_serialization_as_tensor_content=False) -> ModelServer:
    """A TensorFlow-Serving-compatible server for SavedModels (call `.start()` on it, or use `with`).

    Models: `model_base_path` (a directory of integer version directories, local or a URL such as
    gs://bucket/exports/name) with `model_name` (default: the base path's last component), or
    `model_config_file` (a ModelServerConfig text proto, local or a URL; its base paths likewise). Ports: 0
    picks a free port; `rest_api_port=None` turns REST off. Batching: `enable_batching` with
    `batching_parameters_file` (a BatchingParameters text proto) and/or `batching_parameters` (a dict of
    BatchingConfig fields overriding it). `poll_interval`: seconds between looks for new versions.
    `max_request_bytes`: largest request accepted (gRPC message or REST body), RESOURCE_EXHAUSTED above.
    `monitoring_config_file`: a MonitoringConfig text proto; with `prometheus_config { enable: true }` the REST
    port answers GET on its path (default /monitoring/prometheus/metrics) with Prometheus metrics.
    `enable_serialization_as_tensor_content`: Predict's numeric outputs in `tensor_content`, as TensorFlow
    Serving's flag of that name; by default they are in the typed fields (`float_val`, ...), as there.
    """
    if model_config_file:
        if model_base_path or model_name:
            raise UserError("give either --model-config-file or --model-base-path/--model-name, not both")
        entries = load_model_config(model_config_file)
    elif model_base_path:
        base = os.fspath(model_base_path)
        name = model_name or files.basename(base if files.is_remote(base) else os.path.normpath(base))
        entries = [ModelEntry(name=name, base_path=base)]
    else:
        raise UserError("nothing to serve: give --model-base-path (with --model-name) or --model-config-file")
    for entry in entries:
        if not files.isdir(entry.base_path):
            log.warning("model %s: base path %s does not exist (yet); its requests fail with "
                        "FAILED_PRECONDITION until a version appears", entry.name, entry.base_path)
        elif not list_versions(entry.base_path):
            log.warning("model %s: no integer version directory holding a saved_model.pb under %s yet", entry.name,
                        entry.base_path)
    batching = None
    if batching_parameters_file and not enable_batching:
        raise UserError("--batching-parameters-file needs --enable-batching")
    if enable_batching:
        batching = load_batching_config(batching_parameters_file, batching_parameters)
    if max_request_bytes <= 0:
        raise UserError("max_request_bytes must be positive")
    monitoring_path = load_monitoring_config(monitoring_config_file) if monitoring_config_file else None
    return ModelServer(entries, port=port, rest_api_port=rest_api_port, host=host, batching=batching,
                       poll_interval=poll_interval, max_request_bytes=max_request_bytes,
                       max_response_bytes=max_response_bytes, grpc_max_workers=grpc_max_workers,
                       enable_warmup=enable_warmup, warmup_iterations=warmup_iterations,
                       max_load_retries=max_load_retries, drain_timeout=drain_timeout,
                       validate_utf8=validate_utf8, session_config=session_config,
                       monitoring_path=monitoring_path, tensor_content=enable_serialization_as_tensor_content)
