"""XLNet on Keras 3 and TensorFlow 2.

Public names are loaded lazily so that `import xlnet_tf` (and the CLI's `--help`) stays fast and only
imports TensorFlow when a model, tokenizer or config is first used.
"""

from xlnet_tf.lazy import lazy_getattr

__version__ = "0.1.0"

_LAZY = {
    "XLNetConfig": "xlnet_tf.config",
    "RunOptions": "xlnet_tf.config",
    "XLNetModel": "xlnet_tf.model",
    "XLNetPretrainer": "xlnet_tf.model",
    "XLNetTokenizer": "xlnet_tf.tokenization",
}

__all__ = sorted(_LAZY) + ["__version__"]


__getattr__ = lazy_getattr(__name__, _LAZY)
