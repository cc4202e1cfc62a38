"""Export: SavedModels with built-in tokenization (installed as xlnet_tf.export)."""
