"""xlnet-tf serve and query: TensorFlow Serving's flags and the client's (both defined in xlnet_tf.serving.cli)."""

from __future__ import annotations

from xlnet_tf.commands.common import Command


def _add_serve_arguments(parser):
    from xlnet_tf.serving.cli import add_serve_arguments

    add_serve_arguments(parser)


def _serve(args):
    from xlnet_tf.serving.cli import serve_main

    return serve_main(args)


def _add_query_arguments(parser):
    from xlnet_tf.serving.cli import add_query_arguments

    add_query_arguments(parser)


def _query(args):
    from xlnet_tf.serving.cli import query_main

    return query_main(args)


SERVE = Command(
    "serve", "serve exported models over TensorFlow Serving's gRPC and REST APIs", _add_serve_arguments, _serve,
    input_paths=("model_config_file", "batching_parameters_file", "monitoring_config_file", "tfs_model_config_file",
                 "tfs_batching_parameters_file", "tfs_monitoring_config_file", "tfs_ssl_config_file"))

QUERY = Command("query", "query a TensorFlow-Serving-compatible server", _add_query_arguments, _query,
                input_paths=("ssl_ca_file", "ssl_cert_file", "ssl_key_file"))
