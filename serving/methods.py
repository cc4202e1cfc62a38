"""Names every part of the server shares: TensorFlow Serving's signature method names and the default
signature (below servable.py and inference.py, which both use them)."""

PREDICT_METHOD = "tensorflow/serving/predict"
CLASSIFY_METHOD = "tensorflow/serving/classify"
REGRESS_METHOD = "tensorflow/serving/regress"
DEFAULT_SIGNATURE = "serving_default"
