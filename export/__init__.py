"""Export: SavedModels with built-in tokenization (installed as xlnet_tf.export).

``export_model(model_dir, export_base, version=None, max_seq_len=None, reusable=False)`` writes a fine-tuned
directory as ``export_base/<version>/`` for TensorFlow Serving (see ``xlnet_tf.export.exporter`` for the
signatures); ``xlnet_tf.export.ops`` holds the op allowlist and the SavedModel op walker;
``xlnet_tf.export.keras_layer.ReusableEncoderLayer`` wraps a reusable encoder export as a Keras layer.
Names are loaded lazily, so importing the package does not import TensorFlow.
"""

from xlnet_tf.lazy import lazy_getattr

_LAZY = {
    "export_model": "xlnet_tf.export.exporter",
    "next_version": "xlnet_tf.export.exporter",
    "disallowed_ops": "xlnet_tf.export.ops",
    "saved_model_ops": "xlnet_tf.export.ops",
    "ReusableEncoderLayer": "xlnet_tf.export.keras_layer",
}

__all__ = sorted(_LAZY)


__getattr__ = lazy_getattr(__name__, _LAZY)
