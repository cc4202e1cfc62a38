"""Serving: TensorFlow-Serving-compatible client and server (installed as xlnet_tf.serving)."""

from xlnet_tf.lazy import lazy_getattr

# Public names are loaded lazily: `import xlnet_tf.serving.cli` stays cheap (no TensorFlow, no gRPC).

_LAZY = {
    "serve": "xlnet_tf.serving.server",
    "ModelServer": "xlnet_tf.serving.server",
    "ServerOptions": "xlnet_tf.serving.options",
    "Client": "xlnet_tf.serving.client",
    "ServingError": "xlnet_tf.serving.errors",
    "Unavailable": "xlnet_tf.serving.client",
    "BatchingConfig": "xlnet_tf.serving.config",
    "load_model_config": "xlnet_tf.serving.config",
    "load_batching_config": "xlnet_tf.serving.config",
    "add_serve_arguments": "xlnet_tf.serving.cli",
    "serve_main": "xlnet_tf.serving.cli",
    "add_query_arguments": "xlnet_tf.serving.cli",
    "query_main": "xlnet_tf.serving.cli",
}

__all__ = sorted(_LAZY)


__getattr__ = lazy_getattr(__name__, _LAZY)
