"""Serving: TensorFlow-Serving-compatible client and server (installed as xlnet_tf.serving)."""
