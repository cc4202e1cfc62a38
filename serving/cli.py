"""`xlnet-tf serve` and `xlnet-tf query`: argument definitions and entry points.

Importing this module is cheap (argparse only); TensorFlow and gRPC are imported when a command runs.
The main CLI wires them as:

    serve = commands.add_parser("serve", help=...); add_serve_arguments(serve); serve.set_defaults(run=serve_main)
    query = commands.add_parser("query", help=...); add_query_arguments(query); query.set_defaults(run=query_main)

`python -m xlnet_tf.serving serve|query ...` runs the same functions.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import signal
import sys
import threading

from xlnet_tf.errors import UserError

from .environment import apply_environment
from .options import ServerOptions, tf_serving_grpc_max_threads, with_session_parallelism


def _size(text):
    """'64MB', '8MiB', '1048576' -> bytes."""
    value = text.strip().upper().replace("IB", "B")
    for suffix, factor in (("GB", 1 << 30), ("MB", 1 << 20), ("KB", 1 << 10), ("B", 1)):
        if value.endswith(suffix):
            return int(float(value[: -len(suffix)]) * factor)
    return int(value)


def _flag_bool(text):
    """A boolean flag's value as TensorFlow Serving's command line spells it: true / false (also 1 / 0)."""
    value = str(text).strip().lower()
    if value in ("true", "1"):
        return True
    if value in ("false", "0"):
        return False
    raise argparse.ArgumentTypeError(f"expected true or false, got {text!r}")


def _positive_int(text):
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {value}")
    return value


class TFServingFlag:
    """One of tensorflow_model_server's flags (main.cc): its name, type and default there, and what it does
    in `xlnet-tf serve`. `apply(value, options)` writes a given value into a ServerOptions, as main.cc writes
    its flags into Server::Options; None: accepted with no effect here (`effect` says why), or refused when
    `refused` is set."""

    def __init__(self, name, kind, default, effect, apply=None, refused=False):
        self.name, self.kind, self.default, self.effect = name, kind, default, effect
        self.apply, self.refused = apply, refused

    def parse(self, text):
        if self.kind == "bool":
            return _flag_bool(text)
        if self.kind in ("int32", "int64"):
            return int(text)
        if self.kind == "float":
            return float(text)
        return text


_FIELDS = frozenset(field.name for field in dataclasses.fields(ServerOptions))


def _set(field, convert=None):
    """An `apply` that writes the flag's value (converted) into ServerOptions.`field`."""
    if field not in _FIELDS:
        raise AttributeError(f"ServerOptions has no field {field!r}")

    def apply(value, options):
        setattr(options, field, convert(value) if convert else value)
    return apply


def _turn_off(field):
    """An `apply` for a store_true flag that turns ServerOptions.`field` off when given."""
    set_false = _set(field)

    def apply(value, options):
        if value:
            set_false(False, options)
    return apply


def _rest_port(value, options):
    options.rest_api_port = None if value == 0 else value  # 0: no REST, as there


def _grpc_port(value, options):
    options.port = None if value == 0 else value  # 0: no TCP listener (a --grpc_socket_path only), as there


def _warmup_iterations(value, options):
    if value > 0:  # "used only if > 0", as there
        options.warmup_iterations = value


def _tags(value, options):
    options.saved_model_tags = tuple(tag.strip() for tag in value.split(",") if tag.strip())


_NO_EFFECT = "accepted; no effect here"
# Every flag of tensorflow_model_server 2.21 (main.cc), in its order. README's table is generated from this.
TF_SERVING_FLAGS = (
    TFServingFlag("port", "int32", "8500", "gRPC port (0: none there, only --grpc_socket_path; `--port 0` without "
                  "TensorFlow Serving's spellings picks a free port)", _grpc_port),
    TFServingFlag("grpc_socket_path", "string", "", "also serve gRPC on this unix socket (TLS too with "
                  "--ssl_config_file)", _set("grpc_socket_path")),
    TFServingFlag("rest_api_port", "int32", "0", "REST port; 0: no REST", _rest_port),
    TFServingFlag("rest_api_num_threads", "int32", "4 x CPUs", "REST requests handled at once; more are answered "
                  "at once with an error", _set("rest_api_num_threads")),
    TFServingFlag("rest_api_timeout_in_ms", "int32", "30000", "a REST request's deadline", _set("rest_api_timeout_in_ms")),
    TFServingFlag("rest_api_enable_cors_support", "bool", "false", "CORS headers on REST responses",
                  _set("rest_api_enable_cors_support")),
    TFServingFlag("enable_batching", "bool", "false", "server-side batching", _set("enable_batching")),
    TFServingFlag("allow_version_labels_for_unavailable_models", "bool", "false",
                  "a new label may name a version that is not available yet", _set(
                      "allow_version_labels_for_unavailable_models")),
    TFServingFlag("batching_parameters_file", "string", "", "BatchingParameters text proto",
                  _set("batching_parameters_file")),
    TFServingFlag("enable_per_model_batching_parameters", "bool", "false", "refused: per-model batching files "
                  "are not read", refused=True),
    TFServingFlag("model_config_file", "string", "", "ModelServerConfig text proto (model_config_list)",
                  _set("model_config_file")),
    TFServingFlag("model_config_file_poll_wait_seconds", "int32", "0", "re-read --model_config_file this often "
                  "and apply it as HandleReloadConfigRequest does; 0: never",
                  _set("model_config_file_poll_wait_seconds", float)),
    TFServingFlag("model_name", "string", "default", "name of the --model_base_path model", _set("model_name")),
    TFServingFlag("model_base_path", "string", "", "directory of integer version directories", _set(
        "model_base_path")),
    TFServingFlag("num_load_threads", "int32", "0", _NO_EFFECT + ": versions load one at a time (serially, as "
                  "0 does there)"),
    TFServingFlag("num_unload_threads", "int32", "0", _NO_EFFECT + ": a retired version is closed off the "
                  "request path"),
    TFServingFlag("max_num_load_retries", "int32", "5", "retries of a failed load whose files did not change",
                  _set("max_load_retries")),
    TFServingFlag("load_retry_interval_micros", "int64", "60000000", "the least time between those retries",
                  _set("load_retry_interval", lambda micros: max(0, micros) / 1e6)),
    TFServingFlag("file_system_poll_wait_seconds", "int32", "1", "seconds between looks for new versions (0: "
                  "only at start)", _set("poll_interval", float)),
    TFServingFlag("flush_filesystem_caches", "bool", "true", _NO_EFFECT + ": no file system cache is kept"),
    TFServingFlag("tensorflow_session_parallelism", "int64", "0", "intra- and inter-op threads of each Session "
                  "(0: TensorFlow's choice)", _set("tensorflow_session_parallelism")),
    TFServingFlag("tensorflow_intra_op_parallelism", "int64", "0", "intra-op threads of each Session",
                  _set("tensorflow_intra_op_parallelism")),
    TFServingFlag("tensorflow_inter_op_parallelism", "int64", "0", "inter-op threads of each Session",
                  _set("tensorflow_inter_op_parallelism")),
    TFServingFlag("use_alts_credentials", "bool", "false", "refused when true: Google ALTS is not available "
                  "here (use --ssl_config_file)", refused=True),
    TFServingFlag("ssl_config_file", "string", "", "SSLConfig text proto: TLS on gRPC, mTLS with client_verify",
                  _set("ssl_config_file")),
    TFServingFlag("platform_config_file", "string", "", "refused: only TensorFlow SavedModels are served",
                  refused=True),
    TFServingFlag("per_process_gpu_memory_fraction", "float", "0", _NO_EFFECT + ": TensorFlow's own GPU "
                  "allocator settings apply"),
    TFServingFlag("saved_model_tags", "string", "serve", "comma-separated tags of the MetaGraphDef to load",
                  _tags),
    TFServingFlag("grpc_channel_arguments", "string", "", "name=value,... passed to the gRPC server",
                  _set("grpc_channel_arguments")),
    TFServingFlag("grpc_max_threads", "int32", "4 x CPUs", "RPCs handled at once; more are refused at once "
                  "with RESOURCE_EXHAUSTED. Default here: 4 x CPUs with TensorFlow Serving's spellings, as there; "
                  "with ours (--grpc-max-workers), the most of 64, 4 x CPUs and, with batching, 2 x max_batch_size "
                  "x models", _set("grpc_max_threads")),
    TFServingFlag("enable_model_warmup", "bool", "true", "replay assets.extra/tf_serving_warmup_requests",
                  _set("enable_warmup")),
    TFServingFlag("num_request_iterations_for_warmup", "int32", "0", "times each warmup request is replayed "
                  "(used if > 0; else once)", _warmup_iterations),
    TFServingFlag("version", "bool", "false", "print the versions and exit"),
    TFServingFlag("monitoring_config_file", "string", "", "MonitoringConfig text proto (Prometheus on the REST "
                  "port)", _set("monitoring_config_file")),
    TFServingFlag("remove_unused_fields_from_bundle_metagraph", "bool", "true", _NO_EFFECT + ": the Session "
                  "keeps the graph it needs"),
    TFServingFlag("prefer_tflite_model", "bool", "false", "refused when true: TensorFlow Lite models are not "
                  "served", refused=True),
    TFServingFlag("num_tflite_pools", "int32", "CPUs", _NO_EFFECT + " (TensorFlow Lite)"),
    TFServingFlag("num_tflite_interpreters_per_pool", "int32", "1", _NO_EFFECT + " (TensorFlow Lite)"),
    TFServingFlag("enable_signature_method_name_check", "bool", "false", _NO_EFFECT + ": Classify and Regress "
                  "always check the method name of their signature, Predict never"),
    TFServingFlag("xla_cpu_compilation_enabled", "bool", "false", _NO_EFFECT + ": exports hold no XLA "
                  "clusters"),
    TFServingFlag("xla_gpu_compilation_enabled", "bool", "false", _NO_EFFECT + ": exports hold no XLA "
                  "clusters"),
    TFServingFlag("enable_profiler", "bool", "true", _NO_EFFECT + ": no profiler service"),
    TFServingFlag("thread_pool_factory_config_file", "string", "", "refused: custom thread pools are not "
                  "supported", refused=True),
    TFServingFlag("mixed_precision", "string", "", "bfloat16: TensorFlow's oneDNN bfloat16 rewrite on every "
                  "Session (refused on a CPU where it changes nothing); another value is ignored with a warning, "
                  "as there", _set("mixed_precision")),
    TFServingFlag("skip_initialize_tpu", "bool", "false", _NO_EFFECT + ": no TPU is initialised"),
    TFServingFlag("enable_grpc_healthcheck_service", "bool", "false", "grpc.health.v1.Health: SERVING for \"\", "
                  "ModelService and PredictionService", _set("enable_grpc_healthcheck_service")),
    TFServingFlag("enable_serialization_as_tensor_content", "bool", "false", "Predict's numbers packed in "
                  "tensor_content (default: the typed fields, float_val, ...)", _set("tensor_content")),
)
_TF_FLAGS = {flag.name: flag for flag in TF_SERVING_FLAGS}


def tf_serving_flag_table():
    """serving/README.md's compatibility table (Markdown), from TF_SERVING_FLAGS."""
    lines = ["| `tensorflow_model_server` flag | type | default there | here |", "|---|---|---|---|"]
    for flag in TF_SERVING_FLAGS:
        lines.append(f"| `--{flag.name}` | {flag.kind} | {flag.default} | {flag.effect} |")
    return "\n".join(lines)


def add_serve_arguments(parser):
    models = parser.add_argument_group("models (one of)")
    models.add_argument("--model-base-path",
                        help="BASE/NAME: directory of integer version directories, local or a URL (gs://...); "
                             "a version is loaded once its saved_model.pb exists (default with neither this nor "
                             "--model-config-file: $MODEL_BASE_PATH/$MODEL_NAME, as TensorFlow Serving's Docker "
                             "image)")
    models.add_argument("--model-name", help="name clients use (default: the base path's last component)")
    models.add_argument("--model-config-file",
                        help="ModelServerConfig text proto (model_config_list), local or a URL (gs://...)")
    parser.add_argument("--port", type=int, default=None, help="gRPC port (default 8500; 0: any free port)")
    parser.add_argument("--rest-api-port", type=int, default=None,
                        help="REST port (default 8501; 0: any free port, -1: no REST)")
    parser.add_argument("--host", default=None,
                        help="address to bind (default: 127.0.0.1, loopback only; 0.0.0.0, as TensorFlow Serving, "
                             "when the command line uses its spellings)")
    parser.add_argument("--enable-batching", action="store_true", default=None, help="server-side batching")
    parser.add_argument("--batching-parameters-file", help="BatchingParameters text proto, local or a URL")
    parser.add_argument("--poll-interval", type=float, default=None,
                        help="seconds between looks for new model versions (default 1; TF Serving: "
                             "file_system_poll_wait_seconds)")
    parser.add_argument("--max-request-bytes", type=_size, default=None,
                        help="largest request accepted (gRPC message / REST body; default 64MB), and the most "
                             "bytes its tensors may hold once decoded")
    parser.add_argument("--max-request-elements", type=_positive_int, default=None,
                        help="the most elements a request's tensors may hold together (default 4194304: 8192 rows "
                             "of 512 ids, or 4M texts); more is refused with RESOURCE_EXHAUSTED")
    parser.add_argument("--grace-period", type=float, default=30.0,
                        help="seconds running requests get to finish on SIGTERM/SIGINT")
    parser.add_argument("--drain-timeout", type=float, default=None,
                        help="at shutdown, seconds the requests still running after the grace period get before "
                             "their versions are closed (default 30)")
    parser.add_argument("--no-warmup", action="store_true",
                        help="do not replay assets.extra/tf_serving_warmup_requests when loading")
    parser.add_argument("--allow-non-utf8", action="store_true",
                        help="pass string inputs that are not UTF-8 to the model instead of refusing them")
    parser.add_argument("--grpc-max-workers", type=_positive_int, default=None,
                        help="gRPC requests handled at once; more are refused at once with RESOURCE_EXHAUSTED "
                             "(the same as --grpc_max_threads). Default: the most of 64, 4 x CPUs and, with "
                             "batching, 2 x max_batch_size x models (a request waiting for its batch holds one); "
                             "4 x CPUs, tensorflow_model_server's, when the command line uses its spellings")
    parser.add_argument("--rest-body-timeout", type=float, default=None,
                        help="seconds a REST client gets to send its request line, headers and body (default 30)")
    parser.add_argument("--enable-reload-config", "--enable_reload_config", dest="enable_reload_config",
                        nargs="?", const=True, default=None, type=_flag_bool, metavar="true|false",
                        help="answer ModelService.HandleReloadConfigRequest (default true, as TensorFlow "
                             "Serving; false refuses it with PERMISSION_DENIED)")
    parser.add_argument("--enable-serialization-as-tensor-content", dest="tensor_content_ours", nargs="?",
                        const=True, default=None, type=_flag_bool, metavar="true|false",
                        help="the same as --enable_serialization_as_tensor_content")
    parser.add_argument("--monitoring-config-file",
                        help="MonitoringConfig text proto (TensorFlow Serving's); prometheus_config { enable: true } "
                             "serves Prometheus metrics on the REST port at its path (default "
                             "/monitoring/prometheus/metrics)")
    parser.add_argument("--request-log-max-file-bytes", type=_size, default=None, help="request logs (a model's "
                        "logging_config): a file is closed and the next begun past this size (default 128MB)")
    parser.add_argument("--request-log-max-file-seconds", type=float, default=None, help="request logs: a file is "
                        "closed and the next begun once it is this many seconds old, idle or not (default 600)")
    tf_serving = parser.add_argument_group(
        "tensorflow_model_server's flags", "TensorFlow Serving's spellings, meanings and defaults "
        "(--flag=value or --flag value; booleans as =true|false); see serving/README.md")
    for flag in TF_SERVING_FLAGS:
        if flag.name == "port":
            continue  # one --port: the same spelling in both command lines
        kwargs = dict(dest=f"tfs_{flag.name}", default=None, type=flag.parse, metavar=flag.kind.upper(),
                      help=f"{flag.effect} (default there: {flag.default})")
        if flag.kind == "bool":
            kwargs.update(nargs="?", const=True, metavar="true|false")
        tf_serving.add_argument(f"--{flag.name}", **kwargs)
    return parser


# Our own flags, beside TF_SERVING_FLAGS: (argparse dest, apply, last). A given value (not None) is applied before
# TensorFlow Serving's flags, which win where both set one option; with `last`, after them, winning over them.
OUR_FLAGS = (
    ("model_base_path", _set("model_base_path"), False), ("model_name", _set("model_name"), False),
    ("model_config_file", _set("model_config_file"), False), ("port", _set("port"), False),
    ("host", _set("host"), False), ("enable_batching", _set("enable_batching"), False),
    ("batching_parameters_file", _set("batching_parameters_file"), False),
    ("poll_interval", _set("poll_interval"), False), ("max_request_bytes", _set("max_request_bytes"), False),
    ("max_request_elements", _set("max_request_elements"), False),
    ("drain_timeout", _set("drain_timeout"), False), ("grpc_max_workers", _set("grpc_max_threads"), False),
    ("rest_body_timeout", _set("rest_body_timeout"), False),
    ("enable_reload_config", _set("enable_reload_config"), False),
    ("tensor_content_ours", _set("tensor_content"), False),
    ("monitoring_config_file", _set("monitoring_config_file"), False),
    ("request_log_max_file_bytes", _set("request_log_max_file_bytes"), False),
    ("request_log_max_file_seconds", _set("request_log_max_file_seconds"), False),
    ("rest_api_port", _set("rest_api_port", lambda port: None if port < 0 else port), True),  # -1: no REST
    ("no_warmup", _turn_off("enable_warmup"), True), ("allow_non_utf8", _turn_off("validate_utf8"), True),
)


def server_options(args, environ=None) -> ServerOptions:
    """The ServerOptions of a parsed `serve` command line (ours and/or tensorflow_model_server's).

    With any flag in TensorFlow Serving's spelling, its defaults apply where they differ from ours: every
    interface (0.0.0.0), no REST unless --rest_api_port, --grpc_max_threads 4 x CPUs, --port=0 meaning no gRPC
    port, and --model_config_file winning over --model_base_path. With no model flag, $MODEL_NAME (default
    "model") under $MODEL_BASE_PATH (default /models) is served when either is set, as TensorFlow Serving's
    Docker image does (it passes --port=8500 --rest_api_port=8501 too); Vertex AI's $AIP_* variables set the
    model, the REST port and two routes (environment.py).
    """
    environ = os.environ if environ is None else environ
    given = {name: getattr(args, f"tfs_{name}") for name in _TF_FLAGS if getattr(args, f"tfs_{name}", None) is not None}
    tf_style = bool(given)
    if args.port is not None and tf_style:
        given["port"] = args.port
    options = ServerOptions()
    if tf_style:
        options.host, options.rest_api_port, options.grpc_max_threads = "0.0.0.0", None, tf_serving_grpc_max_threads()
    ours = [(getattr(args, dest), apply, last) for dest, apply, last in OUR_FLAGS
            if getattr(args, dest, None) is not None]
    for value, apply, last in ours:
        if not last:
            apply(value, options)
    for flag_name, value in given.items():
        flag = _TF_FLAGS[flag_name]
        if flag.refused and value not in (False, "", 0):
            raise UserError(f"--{flag_name}: not supported by xlnet-tf serve ({flag.effect})")
        if flag.apply is not None:
            flag.apply(value, options)
    for value, apply, last in ours:
        if last:
            apply(value, options)
    options = with_session_parallelism(options)
    apply_environment(options, environ)  # TensorFlow Serving's Docker image's variables, or Vertex AI's
    if options.model_config_file and tf_style:  # ignored when --model_config_file is set, as there
        options.model_base_path = options.model_name = None
    if options.port is None and not options.grpc_socket_path:
        raise UserError("--port=0 turns the gRPC port off: give --grpc_socket_path as well (at least one of them "
                        "must be set, as in TensorFlow Serving)")
    return options


def print_version(out=None):
    import tensorflow as tf

    from xlnet_tf import __version__

    print(f"TensorFlow ModelServer: xlnet-tf serve {__version__} (tensorflow_model_server's APIs and flags)\n"
          f"TensorFlow Library: {tf.__version__}", file=out or sys.stdout)


def build_server(args, environ=None):
    """The ModelServer of a parsed `serve` command line, not started. Logs one warning when batching is on and
    the gRPC cap is below what its batches need (ModelServer.grpc_threads_short), naming the flag to set."""
    import logging

    from .server import serve_with

    server = serve_with(server_options(args, environ))
    wanted = server.grpc_threads_short()
    if wanted:
        flag = "--grpc-max-workers" if args.grpc_max_workers is not None else "--grpc_max_threads"
        given = args.grpc_max_workers is not None or getattr(args, "tfs_grpc_max_threads", None) is not None
        cap, batching = server.options.grpc_max_threads, server.options.batching
        models = len(server.entries)
        logging.getLogger("xlnet_tf.serving").warning(
            "%s is %d%s while batching makes batches of up to %d (max_batch_size) for %d model%s: each request "
            "waiting for its batch holds one of those %d, so batches stay small and the excess is refused with "
            "RESOURCE_EXHAUSTED; set %s=%d (2 x max_batch_size x models) or more", flag, cap,
            "" if given else " (4 x CPUs, TensorFlow Serving's default)", batching.max_batch_size, models,
            "" if models == 1 else "s", cap, flag, wanted)
    return server


def serve_main(args):
    """Runs the server until SIGTERM / SIGINT, then stops gracefully; returns 0."""
    import logging

    if getattr(args, "tfs_version", None):
        print_version()
        return 0
    server = build_server(args)
    stop = threading.Event()
    received = []

    def on_signal(number, _frame):
        received.append(signal.Signals(number).name)
        stop.set()

    previous = {s: signal.signal(s, on_signal) for s in (signal.SIGTERM, signal.SIGINT)}
    try:
        server.start(console_line=False)  # the line below is the console's start line (once)
        rest = f" REST {server.rest_url}" if server.rest_url else ""
        socket = f" unix:{server.socket_path}" if server.socket_path else ""
        print(f"serving gRPC {server.grpc_target or ''}{socket}{rest} models: {server.describe_models()}", flush=True)
        while not stop.wait(0.5):
            pass
        logging.getLogger("xlnet_tf.serving").info("%s received: stopping gracefully", received[0])
        server.stop(args.grace_period)
        stats = server.batch_stats()
        print(f"stopped ({received[0]})" + (f"; batching: {stats}" if stats else ""), flush=True)
    finally:
        server.stop(0)
        for number, handler in previous.items():
            signal.signal(number, handler)
    return 0


def add_query_arguments(parser):
    parser.add_argument("--server", default="localhost:8500", help="HOST:PORT of the gRPC API")
    parser.add_argument("--model", required=True, help="model name")
    parser.add_argument("--version", type=int, help="model version (default: the latest)")
    parser.add_argument("--signature", help="signature name (default: serving_default with --api predict, "
                                              "classification / regression with --api classify / regress)")
    parser.add_argument("--api", default="predict", choices=("predict", "classify", "regress"),
                        help="predict: Predict on raw text; classify / regress: TensorFlow Serving's Classify / "
                             "Regress on tf.Examples holding the text (features text, or text_a and text_b)")
    parser.add_argument("--text", action="append", help="text to classify, tag or continue (repeat for a batch)")
    parser.add_argument("--text-b", action="append", help="second text of a pair (one per --text)")
    parser.add_argument("--question", action="append", help="question (repeat; one --context each)")
    parser.add_argument("--context", action="append", help="context paragraph of the question")
    generation = parser.add_argument_group("a language model's export (generate)")
    generation.add_argument("--max-new-tokens", type=int, help="tokens per prompt at most (default: the export's cap)")
    generation.add_argument("--temperature", type=float, default=0.0, help="0: greedy; > 0: sampling")
    generation.add_argument("--top-k", type=int, default=0, help="sample among the k most likely tokens (0: all)")
    generation.add_argument("--top-p", type=float, default=1.0, help="sample among the most likely tokens whose "
                            "probability reaches p")
    generation.add_argument("--seed", type=int, default=0, help="sampling seed (prompt i: seed + i)")
    parser.add_argument("--metadata", action="store_true",
                        help="print the model's signatures (GetModelMetadata) and, from xlnet-tf serve, its export "
                             "record (task, precision, max_seq_len, labels) instead of querying it")
    parser.add_argument("--json", action="store_true", help="print JSON")
    parser.add_argument("--ssl-ca-file", help="PEM file of the CA that signed the server's certificate: TLS (the "
                                              "server runs with --ssl_config_file)")
    parser.add_argument("--ssl-cert-file", help="PEM client certificate (chain), for a server with client_verify "
                                                "(mTLS); with --ssl-key-file")
    parser.add_argument("--ssl-key-file", help="PEM private key of --ssl-cert-file")
    parser.add_argument("--ssl-target-name", help="the name the server's certificate must carry, when it differs "
                                                  "from --server's host (e.g. a unix:PATH server)")
    parser.add_argument("--timeout", type=float, default=10.0, help="seconds per call")
    parser.add_argument("--retries", type=int, default=3, help="retries on UNAVAILABLE")
    return parser


def _format_classification(index, text, row):
    if "labels" in row:  # multi-label
        scores = ", ".join(f"{p:.3f}" for p in row["scores"])
        return f"[{index}] {text!r}: {', '.join(row['labels']) or 'no label'}  scores [{scores}]"
    if "prediction" in row:
        return f"[{index}] {text!r}: prediction {row['prediction']:.6g}"
    probabilities = row.get("probabilities") or []
    best = max(probabilities) if probabilities else None
    confidence = f" p={best:.3f}" if best is not None else ""
    listed = ", ".join(f"{p:.3f}" for p in probabilities)
    return f"[{index}] {text!r}: {row.get('label')} (id {row.get('label_id')}){confidence}  probabilities [{listed}]"


def _format_answer(index, question, row):
    span = f" chars {row['start']}-{row['end']}" if "start" in row else ""
    extra = "".join(f" {k}={row[k]:.3f}" for k in ("score", "no_answer_probability") if k in row)
    return f"[{index}] {question!r}: {row['answer']!r}{span}{extra}"


def _format_entities(index, text, row):
    tagged = " ".join(f"{w}/{t}" for w, t in zip(row["words"], row["tags"]))
    found = "; ".join(f"{e['type']} {e['text']!r} (bytes {e['start']}-{e['end']})" for e in row["entities"])
    return f"[{index}] {text!r}: {found or 'no entities'}\n    {tagged}"


def _format_generation(index, text, row):
    return f"[{index}] {text!r} -> {row['text']!r} ({row['finish_reason']}, {len(row['tokens'])} tokens)"


def _print_metadata(client, args, out):
    """`query --metadata`: the signatures and the export record (None from TensorFlow Serving's binary)."""
    metadata = client.metadata()
    record = client.export_metadata()
    if args.json:
        print(json.dumps({**metadata, "xlnet_export": record}, ensure_ascii=False), file=out)
        return 0
    print(f"{metadata['model']} version {metadata['version']}:", file=out)
    if record is None:
        print("  export record: not offered (not xlnet-tf serve, or not an xlnet-tf export)", file=out)
    else:
        facts = ", ".join(f"{key} {record.get(key)}" for key in ("task", "precision", "max_seq_len", "kind"))
        print(f"  export: {facts}; labels {record.get('label_names')}", file=out)
    for name, signature in metadata["signatures"].items():
        inputs = ", ".join(f"{alias} {info['dtype']} {info['shape']}" for alias, info in signature["inputs"].items())
        outputs = ", ".join(f"{alias} {info['dtype']} {info['shape']}" for alias, info in signature["outputs"].items())
        print(f"  signature {name} ({signature['method_name']}): ({inputs}) -> ({outputs})", file=out)
    return 0


def query_main(args, out=None):
    """Queries a server; prints readable results (JSON with --json). 0 on success, 1 on a server error."""
    from .client import Client, Unavailable
    from .errors import ServingError

    out = out or sys.stdout
    if args.metadata:
        if args.text or args.text_b or args.question or args.context:
            raise UserError("--metadata takes no --text, --text-b, --question or --context")
    elif args.question or args.context:
        if not args.question or not args.context or len(args.question) != len(args.context):
            raise UserError("give one --context for each --question")
        if args.text or args.text_b:
            raise UserError("give either --text or --question/--context")
        if args.api != "predict":
            raise UserError(f"--api {args.api} takes --text (and --text-b), not --question/--context")
    elif not args.text:
        raise UserError("nothing to ask: give --text (classification) or --question with --context (QA)")
    if args.text_b and len(args.text_b) != len(args.text):
        raise UserError("give one --text-b for each --text")
    try:
        client = Client(args.server, args.model, version=args.version, timeout=args.timeout, retries=args.retries,
                        ssl_ca_file=args.ssl_ca_file, ssl_cert_file=args.ssl_cert_file,
                        ssl_key_file=args.ssl_key_file, ssl_target_name=args.ssl_target_name)
    except ValueError as error:
        raise UserError(str(error)) from None
    try:
        if args.metadata:
            return _print_metadata(client, args, out)
        if args.question:
            rows = client.answer(args.question, args.context, signature_name=args.signature or "serving_default")
            lines = [_format_answer(i, q, r) for i, (q, r) in enumerate(zip(args.question, rows))]
        else:
            outputs = client.signature_outputs(args.signature or "serving_default") if args.api == "predict" else ()
            formatted = _format_classification
            if args.api == "regress":
                rows = client.regress(args.text, args.text_b, signature_name=args.signature)
            elif "finish_reason" in outputs:  # a language model's export: generate
                if args.text_b:
                    raise UserError("a language model takes --text (the prompts) only")
                rows = client.generate(args.text, temperature=args.temperature, top_k=args.top_k, top_p=args.top_p,
                                       seed=args.seed, **({"max_new_tokens": args.max_new_tokens}
                                                          if args.max_new_tokens else {}),
                                       signature_name=args.signature or "generate")
                formatted = _format_generation
            elif "entity_type" in outputs:  # a token-classification export
                if args.text_b:
                    raise UserError("a token-classification model takes --text only")
                rows, formatted = client.tag(args.text, signature_name=args.signature), _format_entities
            else:
                rows = client.classify(args.text, args.text_b, signature_name=args.signature, api=args.api)
            lines = [formatted(i, t, r) for i, (t, r) in enumerate(zip(args.text, rows))]
    except ServingError as error:
        if isinstance(error, Unavailable) and error.no_server:
            raise UserError(error.advice(args.server, args.model, args.retries)) from None
        print(f"xlnet-tf query: error: {error}", file=sys.stderr)
        return 1
    except ValueError as error:
        raise UserError(str(error)) from None
    finally:
        client.close()
    if args.json:
        print(json.dumps({"model": args.model, "version": client.last_version, "results": rows},
                         ensure_ascii=False), file=out)
    else:
        print(f"{args.model} version {client.last_version}:", file=out)
        for line in lines:
            print(line, file=out)
    return 0


def build_parser():
    from xlnet_tf.arguments import Parser

    parser = Parser(prog="python -m xlnet_tf.serving")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    add_serve_arguments(commands.add_parser("serve", help="serve SavedModels over gRPC and REST"))
    add_query_arguments(commands.add_parser("query", help="query a model server"))
    return parser


def main(argv=None):
    from xlnet_tf.arguments import leaf_parser, option_strings
    from xlnet_tf.console import configure

    parser = build_parser()
    args = parser.parse_args(argv)
    configure()  # INFO and above to the console, without the records meant for a log file only
    run = serve_main if args.command == "serve" else query_main
    try:
        return run(args) or 0
    except (UserError, FileNotFoundError) as error:
        flags = option_strings(leaf_parser(parser, args))
        print(f"xlnet-tf {args.command}: error: {error.for_command(flags) if isinstance(error, UserError) else error}",
              file=sys.stderr)
        return 2
