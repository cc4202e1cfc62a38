"""Names every part of the server shares: TensorFlow Serving's signature method names and the default
signature (below servable.py and inference.py, which both use them)."""

PREDICT_METHOD = "tensorflow/serving/predict"
CLASSIFY_METHOD = "tensorflow/serving/classify"
REGRESS_METHOD = "tensorflow/serving/regress"
DEFAULT_SIGNATURE = "serving_default"
# GetModelMetadata's fields: TensorFlow Serving's one, and this server's addition (assets.extra/xlnet_export.json
# of an xlnet-tf export as a google.protobuf.Struct: its task, precision, max_seq_len, labels, ...).
SIGNATURE_DEF_FIELD = "signature_def"
EXPORT_METADATA_FIELD = "xlnet_export"
EXPORT_METADATA_FILE = "assets.extra/xlnet_export.json"
