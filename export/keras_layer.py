"""``ReusableEncoderLayer``: an exported reusable encoder as a trainable Keras 3 layer.

Only ``tensorflow``, ``tensorflow_text`` and ``keras`` are used here (nothing else from ``xlnet_tf``), so
this file can be copied next to code that does not install the package.

``keras.layers.TFSMLayer`` also loads the SavedModel, but it names its weights after the restored
``tf.Variable``s (``.../embeddings:0``), which Keras optimizers reject as slot-variable names; this layer
wraps the same variables under clean names, so the encoder fine-tunes with any Keras optimizer.
"""

import keras
import tensorflow as tf


@keras.saving.register_keras_serializable(package="xlnet_tf")
class ReusableEncoderLayer(keras.layers.Layer):
    """A reusable XLNet encoder SavedModel (``export_model(..., reusable=True)``) as a Keras layer.

    Call with a dict of int32 ``input_ids`` / ``segment_ids`` / ``padding_mask`` ``[B, T]`` (1 = real
    token; XLNet's layout is left-padded with ``<cls>`` last, e.g. from the SavedModel's ``text_inputs``);
    returns a dict with ``sequence_output`` ``[B, T, d_model]`` and ``pooled_output`` ``[B, d_model]``
    (the last position's state). The encoder's weights are this layer's weights (trainable unless
    ``trainable=False``) and are the SavedModel's variables themselves: training updates them in place.
    """

    def __init__(self, path, trainable=True, **kwargs):
        super().__init__(trainable=trainable, **kwargs)
        import tensorflow_text  # noqa: F401  registers the SentencePiece / NormalizeUTF8 ops the graph uses

        self.saved_model_path = str(path)
        self.saved_model = tf.saved_model.load(self.saved_model_path)
        self.encoder_weights = [
            keras.Variable(v, trainable=trainable, name=v.name.split(":")[0].replace("/", "_"))
            for v in self.saved_model.trainable_variables
        ]
        self.built = True

    def call(self, inputs, training=False):
        inputs = {k: tf.cast(inputs[k], tf.int32) for k in ("input_ids", "segment_ids", "padding_mask")}
        return self.saved_model(inputs, training=bool(training))

    def get_config(self):
        config = super().get_config()
        config.update(path=self.saved_model_path)
        return config
