"""The model server's options: one object instead of long argument lists (`ServerOptions`).

Like TensorFlow Serving's `Server::Options` (server.h), it holds everything a server is built from, the models'
source included; field names follow it where it has the option; defaults are this server's (`xlnet-tf
serve`'s). `serving/cli.py` writes both command lines (ours and `tensorflow_model_server`'s) into one
(`server_options`); `server.serve_with` builds the server from it.
"""

from __future__ import annotations

import dataclasses
import os

from xlnet_tf.errors import UserError

DEFAULT_MAX_REQUEST_BYTES = 64 << 20  # gRPC's own default is 4 MiB
DEFAULT_MAX_REQUEST_ELEMENTS = 1 << 22  # a request's tensors together: 8,192 rows of 512 ids, or 4M texts
DEFAULT_MAX_RESPONSE_BYTES = (1 << 31) - 1  # like tensorflow_model_server (INT_MAX)
LEAST_GRPC_MAX_THREADS = 64  # xlnet-tf serve's default cap never goes below its default of earlier releases


def cpu_count():
    """Schedulable CPUs (TensorFlow Serving's port::NumSchedulableCPUs)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # pragma: no cover - not Linux
        return max(1, os.cpu_count() or 1)


def tf_serving_grpc_max_threads():
    """tensorflow_model_server's default --grpc_max_threads: 4 x schedulable CPUs."""
    return 4 * cpu_count()


def batching_grpc_threads(batching, models=1):
    """RPCs that batching needs handled at once for its batches to fill: a request holds its RPC's thread while
    it waits for its batch, so 2 x max_batch_size per model that batches (one batch filling while one runs, as
    TensorFlow Serving's batching guide advises)."""
    return 2 * batching.max_batch_size * max(1, models)


def default_grpc_max_threads(batching=None, models=1):
    """xlnet-tf serve's default cap on RPCs handled at once (`ServerOptions.grpc_max_threads` None): the most of
    64, tensorflow_model_server's 4 x CPUs and, with `batching` (a BatchingConfig applied to each of `models`),
    `batching_grpc_threads`. gRPC's threads start as requests come, so an unused cap costs nothing."""
    cap = max(LEAST_GRPC_MAX_THREADS, tf_serving_grpc_max_threads())
    return cap if batching is None else max(cap, batching_grpc_threads(batching, models))


@dataclasses.dataclass
class ServerOptions:
    """Which models a ModelServer serves, how it listens, bounds its load and serves them.

    Models (read by `server.serve_with`): `model_base_path` with `model_name`, or `model_config_file`;
    `enable_batching` with `batching_parameters_file` and/or `batching_parameters`; `monitoring_config_file`.

    Listening: `host`, `port` (gRPC; 0 any free port, None none: `grpc_socket_path` only), `rest_api_port`
    (0 any free port, None no REST), `grpc_socket_path` (also serve gRPC on a unix socket), `ssl_config_file` (TensorFlow Serving's SSLConfig
    text proto: TLS, and mTLS with client_verify, on every gRPC listener), `grpc_channel_arguments`
    (TensorFlow Serving's "name=value,..." list), `enable_reload_config` (ModelService.HandleReloadConfigRequest
    answered; False refuses it with PERMISSION_DENIED), `enable_grpc_healthcheck_service` (grpc.health.v1).

    Load and time limits: `grpc_max_threads` (RPCs handled at once; more are refused with RESOURCE_EXHAUSTED;
    None: `default_grpc_max_threads` of the batching and the models, set when the ModelServer is made),
    `rest_api_num_threads` (REST requests handled at once; more answered 503 at once),
    `rest_api_timeout_in_ms` (a REST request's deadline, 504 past it), `rest_body_timeout` (seconds to receive a
    REST request's line, headers and body in all: 408 past it), `max_request_bytes` / `max_response_bytes` (a
    request's message or body, and the bytes its tensors hold once decoded), `max_request_elements` (the elements
    its tensors hold together; serving/gate.py), `drain_timeout`.

    Serving them: `batching` (a BatchingConfig, None without batching; set from the batching fields above),
    `poll_interval` (seconds between looks for new versions), `model_config_file_poll_wait_seconds` (re-read the
    model config file this often; 0 never), `enable_warmup`, `warmup_iterations`, `max_load_retries`,
    `load_retry_interval` (seconds), `saved_model_tags`, `session_config` (a tf.compat.v1.ConfigProto or None; the
    `tensorflow_*_parallelism` fields set its thread pools, see `with_session_parallelism`), `validate_utf8`,
    `allow_version_labels_for_unavailable_models`, `mixed_precision` ("bfloat16": TensorFlow's oneDNN bfloat16
    rewrite on every Session, see serving/precision.py; "": off).

    Responses: `tensor_content` (Predict's numeric outputs packed, TensorFlow Serving's
    --enable_serialization_as_tensor_content; default the typed fields), `monitoring_path` (Prometheus
    metrics on the REST port at this path; None: off; set from `monitoring_config_file`).

    Request logs (models with a `logging_config`): `request_log_max_file_bytes`, `request_log_max_file_seconds`
    (file rotation), `request_log_queue_size` / `request_log_queue_bytes` (what may wait for the writer).

    Vertex AI: `vertex` (environment.VertexRoutes from the $AIP_* variables: its health and predict routes).
    """

    host: str = "127.0.0.1"
    port: int | None = 8500  # gRPC's TCP port: 8500 unless given; 0: any free port; None: none (socket only)
    rest_api_port: int | None = 8501  # REST's port: 8501 unless given; 0: any free port; None: no REST
    grpc_socket_path: str | None = None
    ssl_config_file: str | None = None
    grpc_channel_arguments: str = ""
    enable_reload_config: bool = True
    enable_grpc_healthcheck_service: bool = False
    grpc_max_threads: int | None = None
    rest_api_num_threads: int = dataclasses.field(default_factory=lambda: 4 * cpu_count())
    rest_api_timeout_in_ms: int = 30000
    rest_body_timeout: float = 30.0
    rest_api_enable_cors_support: bool = False
    max_request_bytes: int = DEFAULT_MAX_REQUEST_BYTES
    max_response_bytes: int = DEFAULT_MAX_RESPONSE_BYTES
    drain_timeout: float = 30.0
    batching: object = None
    poll_interval: float = 1.0
    model_config_file_poll_wait_seconds: float = 0.0
    enable_warmup: bool = True
    warmup_iterations: int = 1
    max_load_retries: int = 5
    load_retry_interval: float = 0.0
    saved_model_tags: tuple = ("serve",)
    session_config: object = None
    validate_utf8: bool = True
    allow_version_labels_for_unavailable_models: bool = False
    mixed_precision: str = ""
    tensor_content: bool = False
    monitoring_path: str | None = None
    vertex: object = None  # environment.VertexRoutes: Vertex AI's health and predict routes on the REST port
    # The models and the files read when the server is built (serve()'s own arguments); added last, so that
    # the fields above keep their positions.
    model_base_path: str | None = None  # a directory of integer version directories, local or a URL (gs://...)
    model_name: str | None = None  # None: the base path's last component
    model_config_file: str | None = None  # a ModelServerConfig text proto (instead of model_base_path)
    enable_batching: bool = False
    batching_parameters_file: str | None = None  # a BatchingParameters text proto; needs enable_batching
    batching_parameters: dict | None = None  # BatchingConfig fields overriding the file's
    monitoring_config_file: str | None = None  # a MonitoringConfig text proto -> monitoring_path
    # TensorFlow Serving's: each Session's intra- and inter-op threads (0: TensorFlow's choice), or each pool's
    tensorflow_session_parallelism: int = 0
    tensorflow_intra_op_parallelism: int = 0
    tensorflow_inter_op_parallelism: int = 0
    # Request logs (a model's logging_config, serving/request_log.py): a file is closed and the next begun past
    # this size or age; the queue between requests and the writer holds at most this many records and bytes.
    request_log_max_file_bytes: int = 128 << 20
    request_log_max_file_seconds: float = 600.0
    request_log_queue_size: int = 1024
    request_log_queue_bytes: int = 256 << 20
    # A request's tensors together hold at most this many elements (serving/gate.py; RESOURCE_EXHAUSTED beyond).
    max_request_elements: int = DEFAULT_MAX_REQUEST_ELEMENTS

    def replace(self, **changes) -> "ServerOptions":
        return dataclasses.replace(self, **changes)


def with_session_parallelism(options):
    """`options` with its `tensorflow_*_parallelism` fields in `session_config` (a copy, its other settings
    kept), by TensorFlow Serving's rule: session parallelism for both pools, or intra / inter separately, not
    all three. Unchanged when all three are 0; applying it twice changes nothing more."""
    session, intra, inter = (options.tensorflow_session_parallelism, options.tensorflow_intra_op_parallelism,
                             options.tensorflow_inter_op_parallelism)
    if not (session or intra or inter):
        return options
    if session > 0 and intra > 0 and inter > 0:
        raise UserError("Either configure --tensorflow_session_parallelism or (--tensorflow_intra_op_parallelism, "
                        "--tensorflow_inter_op_parallelism) separately. You cannot configure all.")
    import tensorflow as tf  # here: `xlnet-tf query` and --help import this module without TensorFlow

    if intra > 0 or inter > 0:
        session = 0
    config = tf.compat.v1.ConfigProto()
    if options.session_config is not None:
        config.CopyFrom(options.session_config)
    config.intra_op_parallelism_threads = intra or session
    config.inter_op_parallelism_threads = inter or session
    return options.replace(session_config=config)
