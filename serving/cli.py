"""`xlnet-tf serve` and `xlnet-tf query`: argument definitions and entry points.

Importing this module is cheap (argparse only); TensorFlow and gRPC are imported when a command runs.
The main CLI wires them as:

    serve = commands.add_parser("serve", help=...); add_serve_arguments(serve); serve.set_defaults(run=serve_main)
    query = commands.add_parser("query", help=...); add_query_arguments(query); query.set_defaults(run=query_main)

`python -m xlnet_tf.serving serve|query ...` runs the same functions.
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
import threading

from xlnet_tf.errors import UserError


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


def add_serve_arguments(parser):
    models = parser.add_argument_group("models (one of)")
    models.add_argument("--model-base-path",
                        help="BASE/NAME: directory of integer version directories, local or a URL (gs://...); "
                             "a version is loaded once its saved_model.pb exists")
    models.add_argument("--model-name", help="name clients use (default: the base path's last component)")
    models.add_argument("--model-config-file",
                        help="ModelServerConfig text proto (model_config_list), local or a URL (gs://...)")
    parser.add_argument("--port", type=int, default=8500, help="gRPC port (0: any free port)")
    parser.add_argument("--rest-api-port", type=int, default=8501,
                        help="REST port (0: any free port, -1: no REST)")
    parser.add_argument("--host", default="127.0.0.1", help="address to bind (default: loopback only)")
    parser.add_argument("--enable-batching", action="store_true", help="server-side batching")
    parser.add_argument("--batching-parameters-file", help="BatchingParameters text proto, local or a URL")
    parser.add_argument("--poll-interval", type=float, default=1.0,
                        help="seconds between looks for new model versions (TF Serving: file_system_poll_wait_seconds)")
    parser.add_argument("--max-request-bytes", type=_size, default="64MB",
                        help="largest request accepted (gRPC message / REST body); e.g. 64MB")
    parser.add_argument("--grace-period", type=float, default=30.0,
                        help="seconds running requests get to finish on SIGTERM/SIGINT")
    parser.add_argument("--drain-timeout", type=float, default=30.0,
                        help="at shutdown, seconds the requests still running after the grace period get before "
                             "their versions are closed (a version retired while serving waits for its last "
                             "request, however long)")
    parser.add_argument("--no-warmup", action="store_true",
                        help="do not replay assets.extra/tf_serving_warmup_requests when loading")
    parser.add_argument("--allow-non-utf8", action="store_true",
                        help="pass string inputs that are not UTF-8 to the model instead of refusing them")
    parser.add_argument("--grpc-max-workers", type=int, default=64, help="gRPC handler threads")
    parser.add_argument("--enable_serialization_as_tensor_content", "--enable-serialization-as-tensor-content",
                        dest="tensor_content", nargs="?", const=True, default=False, type=_flag_bool,
                        metavar="true|false",
                        help="Predict's numeric outputs packed in tensor_content (TensorFlow Serving's flag and "
                             "default: off, the typed fields float_val, int64_val, ...)")
    parser.add_argument("--monitoring-config-file",
                        help="MonitoringConfig text proto (TensorFlow Serving's); prometheus_config { enable: true } "
                             "serves Prometheus metrics on the REST port at its path (default "
                             "/monitoring/prometheus/metrics)")
    return parser


def serve_main(args):
    """Runs the server until SIGTERM / SIGINT, then stops gracefully; returns 0."""
    import logging

    from .server import serve

    server = serve(
        model_base_path=args.model_base_path, model_name=args.model_name,
        model_config_file=args.model_config_file, port=args.port,
        rest_api_port=None if args.rest_api_port < 0 else args.rest_api_port, host=args.host,
        enable_batching=args.enable_batching, batching_parameters_file=args.batching_parameters_file,
        poll_interval=args.poll_interval, max_request_bytes=args.max_request_bytes,
        drain_timeout=args.drain_timeout, enable_warmup=not args.no_warmup,
        validate_utf8=not args.allow_non_utf8, grpc_max_workers=args.grpc_max_workers,
        monitoring_config_file=args.monitoring_config_file,
        enable_serialization_as_tensor_content=args.tensor_content)
    stop = threading.Event()
    received = []

    def on_signal(number, _frame):
        received.append(signal.Signals(number).name)
        stop.set()

    previous = {s: signal.signal(s, on_signal) for s in (signal.SIGTERM, signal.SIGINT)}
    try:
        server.start()
        rest = f" REST {server.rest_url}" if server.rest_url else ""
        print(f"serving gRPC {server.grpc_target}{rest} models: {server.describe_models()}", flush=True)
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
    parser.add_argument("--text", action="append", help="text to classify (repeat for a batch)")
    parser.add_argument("--text-b", action="append", help="second text of a pair (one per --text)")
    parser.add_argument("--question", action="append", help="question (repeat; one --context each)")
    parser.add_argument("--context", action="append", help="context paragraph of the question")
    parser.add_argument("--json", action="store_true", help="print JSON")
    parser.add_argument("--timeout", type=float, default=10.0, help="seconds per call")
    parser.add_argument("--retries", type=int, default=3, help="retries on UNAVAILABLE")
    return parser


def _format_classification(index, text, row):
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


def query_main(args, out=None):
    """Queries a server; prints readable results (JSON with --json). 0 on success, 1 on a server error."""
    from .client import Client
    from .errors import ServingError

    out = out or sys.stdout
    if args.question or args.context:
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
    client = Client(args.server, args.model, version=args.version, timeout=args.timeout, retries=args.retries)
    try:
        if args.question:
            rows = client.answer(args.question, args.context, signature_name=args.signature or "serving_default")
            lines = [_format_answer(i, q, r) for i, (q, r) in enumerate(zip(args.question, rows))]
        else:
            if args.api == "regress":
                rows = client.regress(args.text, args.text_b, signature_name=args.signature)
            else:
                rows = client.classify(args.text, args.text_b, signature_name=args.signature, api=args.api)
            lines = [_format_classification(i, t, r) for i, (t, r) in enumerate(zip(args.text, rows))]
    except ServingError as error:
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
    parser = argparse.ArgumentParser(prog="python -m xlnet_tf.serving")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    add_serve_arguments(commands.add_parser("serve", help="serve SavedModels over gRPC and REST"))
    add_query_arguments(commands.add_parser("query", help="query a model server"))
    return parser


def main(argv=None):
    import logging

    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    run = serve_main if args.command == "serve" else query_main
    try:
        return run(args) or 0
    except (UserError, FileNotFoundError) as error:
        print(f"xlnet-tf {args.command}: error: {error}", file=sys.stderr)
        return 2
