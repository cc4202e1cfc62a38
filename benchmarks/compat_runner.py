"""Runs requests against exported SavedModels in whatever TensorFlow this interpreter has, for `make compat`.

    python compat_runner.py REQUESTS.json RESULTS.json

Run by path with another virtualenv's python (TensorFlow 2.12 and TF Text 2.12, as TensorFlow Serving 2.12 links):
it imports only ``tensorflow`` and ``tensorflow_text`` (never xlnet_tf) and only what TensorFlow 2.12 has, so the
same file also runs under the project's TensorFlow. ``REQUESTS.json``: ``{"exports": {name: dir}, "requests":
[{"key", "export", "signature", "inputs": {name: {"dtype", "data"}}}]}``; dtype ``example`` is a list of
``{feature: text}`` made into serialized ``tf.Example`` s here; ``"modes"``, optional: which of the two below (default
both). Each export is loaded twice, as TensorFlow Serving loads it (a TF1 Session: ``loader.load``, restore and init
ops, tensors by SignatureDef name; mode "session") and as a TensorFlow 2 program does (``tf.saved_model.load``,
``.signatures``; mode "function"). ``RESULTS.json``: the runtime's versions, each export's load error per mode (None: loaded) and each
request's outputs per mode (``{name: {"dtype", "shape", "data"}}``, or ``{"error": text}``).
"""

import json
import sys
import time
import traceback

MODES = ("session", "function")


def error_text(error):
    """An exception as ``Type: message`` (the message's first 2000 characters)."""
    return f"{type(error).__name__}: {str(error)[:2000]}"


def as_tensor_value(tf, spec):
    """A request input (``{"dtype", "data"}``) -> a numpy array."""
    import numpy as np

    if spec["dtype"] == "example":
        examples = []
        for row in spec["data"]:
            features = {name: tf.train.Feature(bytes_list=tf.train.BytesList(value=[text.encode("utf-8")]))
                        for name, text in row.items()}
            examples.append(tf.train.Example(features=tf.train.Features(feature=features)).SerializeToString())
        return np.array(examples, dtype=object)
    if spec["dtype"] == "string":
        def encode(value):
            return [encode(v) for v in value] if isinstance(value, list) else value.encode("utf-8")
        array = np.array(encode(spec["data"]), dtype=object)
        return array.reshape(spec["shape"]) if "shape" in spec else array
    array = np.array(spec["data"], dtype=spec["dtype"])
    return array.reshape(spec["shape"]) if "shape" in spec else array


def as_json(array):
    """An output array -> ``{"dtype", "shape", "data"}`` (strings decoded as UTF-8, flat data)."""
    import numpy as np

    array = np.asarray(array)
    if array.dtype == object or array.dtype.kind == "S":
        data = [s.decode("utf-8", errors="replace") for s in array.reshape(-1)]
        return {"dtype": "string", "shape": list(array.shape), "data": data}
    return {"dtype": array.dtype.name, "shape": list(array.shape), "data": array.reshape(-1).tolist()}


class SessionModel:
    """A SavedModel in a TF1 Session, run by SignatureDef tensor names (TensorFlow Serving's way)."""

    def __init__(self, tf, path):
        self.session = tf.compat.v1.Session(graph=tf.Graph())
        with self.session.graph.as_default():
            self.meta = tf.compat.v1.saved_model.loader.load(self.session, ["serve"], path)

    def run(self, signature, inputs):
        sig = self.meta.signature_def[signature]
        fetches = {name: info.name for name, info in sig.outputs.items()}
        return self.session.run(fetches, {sig.inputs[name].name: value for name, value in inputs.items()})


class FunctionModel:
    """A SavedModel loaded by ``tf.saved_model.load``, run through its ``signatures``."""

    def __init__(self, tf, path):
        self.tf = tf
        self.loaded = tf.saved_model.load(path)

    def run(self, signature, inputs):
        outputs = self.loaded.signatures[signature](**{k: self.tf.constant(v) for k, v in inputs.items()})
        return {name: value.numpy() for name, value in outputs.items()}


def main(argv):
    """Loads every export in both modes, runs every request, writes the results file."""
    requests_path, results_path = argv
    with open(requests_path, encoding="utf-8") as f:
        job = json.load(f)
    import numpy as np
    import tensorflow as tf
    import tensorflow_text

    results = {"runtime": {"tensorflow": tf.__version__, "tensorflow_text": tensorflow_text.__version__,
                           "numpy": np.__version__, "python": sys.version.split()[0]},
               "loads": {}, "load_seconds": {}, "request_seconds": {}, "outputs": {}}
    models = {}
    for name, path in job["exports"].items():
        results["loads"][name], results["load_seconds"][name] = {}, {}
        for mode, model_class in zip(MODES, (SessionModel, FunctionModel)):
            start = time.perf_counter()
            try:
                models[name, mode] = model_class(tf, path)
                results["loads"][name][mode] = None
            except Exception as error:  # noqa: BLE001 - what a runtime cannot load is the finding
                results["loads"][name][mode] = error_text(error)
                traceback.print_exc()
            results["load_seconds"][name][mode] = round(time.perf_counter() - start, 2)
    for request in job["requests"]:
        inputs = {k: as_tensor_value(tf, spec) for k, spec in request["inputs"].items()}
        answers = results["outputs"].setdefault(request["key"], {})
        for mode in request.get("modes", MODES):
            model = models.get((request["export"], mode))
            if model is None:
                answers[mode] = {"error": "not loaded"}
                continue
            start = time.perf_counter()
            try:
                answers[mode] = {k: as_json(v) for k, v in model.run(request["signature"], inputs).items()}
            except Exception as error:  # noqa: BLE001
                answers[mode] = {"error": error_text(error)}
            results["request_seconds"][request["key"] + "@" + mode] = round(time.perf_counter() - start, 2)
    results["modules"] = sorted(m for m in sys.modules if m.split(".")[0] == "xlnet_tf")
    with open(results_path, "w", encoding="utf-8") as f:
        json.dump(results, f)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
