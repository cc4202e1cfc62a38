"""Label ids every feature builder and head agree on (no TensorFlow: the readers import it too)."""

IGNORE = -100  # the label id of positions that are not scored (transformers' ignore_index)
