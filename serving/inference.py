"""TensorFlow Serving's inference API on tf.Examples: Classify, Regress and MultiInference.

What the front ends share (the checks and wording are TensorFlow Serving's, from classifier.cc, regressor.cc,
multi_inference_helper.cc and util.cc):

* `serialized_examples(input)`: an `Input` proto -> the string tensor the signature is fed: each Example's
  bytes, with `example_list_with_context` the context's bytes followed by the example's (parsed as one
  Example, that is a merge in which the example's features win).
* `signature_io(method, name, signature)`: the input alias and output aliases of a classify / regress
  signature, after its structural checks (one input `inputs`; outputs `classes` and / or `scores`, or exactly
  `outputs`). Like TensorFlow Serving's default (`--enable_signature_method_name_check=false`), the
  signature's method name is not required to match.
* `classification_result` / `regression_result`: the signature's outputs -> the result proto, after the
  output checks (shapes, dtypes, batch sizes).
* `classify_regress_task` / `check_tasks(tasks, signatures)`: a Classify / Regress request's signature, or a
  MultiInference request's tasks, checked against the model's signatures.
"""

from __future__ import annotations

import base64
import binascii

import numpy as np

from . import errors
from .json_reader import json_type
from .methods import CLASSIFY_METHOD, DEFAULT_SIGNATURE, REGRESS_METHOD
from .rest_json import format_error, is_b64, signature_name_of

INPUTS = "inputs"
CLASSES, SCORES, OUTPUTS = "classes", "scores", "outputs"
METHODS = (CLASSIFY_METHOD, REGRESS_METHOD)


def serialized_examples(input_proto):
    """An `Input` (example_list or example_list_with_context) -> object ndarray [N] of serialized Examples."""
    kind = input_proto.WhichOneof("kind")
    if kind == "example_list":
        serialized = [example.SerializeToString() for example in input_proto.example_list.examples]
    elif kind == "example_list_with_context":
        listed = input_proto.example_list_with_context
        context = listed.context.SerializeToString()
        serialized = [context + example.SerializeToString() for example in listed.examples]
    else:
        serialized = []
    if not serialized:
        raise errors.invalid_argument("Input is empty.")
    array = np.empty(len(serialized), dtype=object)
    array[:] = serialized
    return array


def signature_io(method, name, signature):
    """(input alias, output aliases) of the classify / regress signature `name`, or INVALID_ARGUMENT."""
    if method == CLASSIFY_METHOD:
        if len(signature.inputs) != 1:
            raise errors.invalid_argument("Expected one input Tensor.")
        if len(signature.outputs) not in (1, 2):
            raise errors.invalid_argument(f"Expected one or two output Tensors, found {len(signature.outputs)}")
        if INPUTS not in signature.inputs:
            raise errors.invalid_argument(f"No classification inputs found in SignatureDef: {name}")
        outputs = tuple(alias for alias in (CLASSES, SCORES) if alias in signature.outputs)
        if not outputs:
            raise errors.invalid_argument('Expected classification signature outputs to contain at least one of '
                                          f'"classes" or "scores". Signature was: {name}')
        return INPUTS, outputs
    if len(signature.inputs) != 1:
        raise errors.invalid_argument("Expected one input Tensor.")
    if len(signature.outputs) != 1:
        raise errors.invalid_argument("Expected one output Tensor.")
    if INPUTS not in signature.inputs:
        raise errors.invalid_argument(f"No regression inputs found in SignatureDef: {name}")
    if OUTPUTS not in signature.outputs:
        raise errors.invalid_argument(f"No regression outputs found in SignatureDef: {name}")
    return INPUTS, (OUTPUTS,)


def _shape(array):
    return "[" + ",".join(str(d) for d in array.shape) + "]"


def classification_result(outputs, batch):
    """{"classes" [B, C] strings and / or "scores" [B, C] float32} -> ClassificationResult (one
    Classifications per example, one Class per column)."""
    from tensorflow_serving.apis import classification_pb2

    classes, scores = outputs.get(CLASSES), outputs.get(SCORES)
    if classes is not None:
        if classes.ndim != 2:
            raise errors.invalid_argument(f"Expected Tensor shape: [batch_size num_classes] but got {_shape(classes)}")
        if classes.dtype != object:
            raise errors.invalid_argument(f"Expected classes Tensor of DT_STRING. Got: {classes.dtype}")
        if classes.shape[0] != batch:
            raise errors.invalid_argument(f"Expected classes output batch size of {batch}. Got: {classes.shape[0]}")
    if scores is not None:
        if scores.ndim != 2:
            raise errors.invalid_argument(f"Expected Tensor shape: [batch_size num_classes] but got {_shape(scores)}")
        if scores.dtype != np.float32:
            raise errors.invalid_argument(f"Expected scores Tensor of DT_FLOAT. Got: {scores.dtype}")
        if scores.shape[0] != batch:
            raise errors.invalid_argument(f"Expected scores output batch size of {batch}. Got: {scores.shape[0]}")
    if classes is not None and scores is not None and classes.shape[1] != scores.shape[1]:
        raise errors.invalid_argument(f"Tensors class and score should match in dim_size(1). Got "
                                      f"{classes.shape[1]} vs. {scores.shape[1]}")
    result = classification_pb2.ClassificationResult()
    columns = (classes if classes is not None else scores).shape[1]
    for row in range(batch):
        classifications = result.classifications.add()
        for column in range(columns):
            entry = classifications.classes.add()
            if classes is not None:
                label = classes[row, column]
                entry.label = label.decode("utf-8", "replace") if isinstance(label, bytes) else str(label)
            if scores is not None:
                entry.score = float(scores[row, column])
    return result


def regression_result(outputs, batch):
    """{"outputs" [B] or [B, 1] float32} -> RegressionResult (one Regression per example)."""
    from tensorflow_serving.apis import regression_pb2

    values = outputs[OUTPUTS]
    if not (values.ndim == 1 or (values.ndim == 2 and values.shape[1] == 1)):
        raise errors.invalid_argument("Expected output Tensor shape to be either [batch_size] or [batch_size, 1] "
                                      f"but got {_shape(values)}")
    if values.shape[0] != batch:
        raise errors.invalid_argument(f"Input batch size did not match output batch size: {batch} vs. "
                                      f"{values.shape[0]}")
    if values.dtype != np.float32:
        raise errors.invalid_argument(f"Expected output Tensor of DT_FLOAT.  Got: {values.dtype}")
    result = regression_pb2.RegressionResult()
    for value in values.reshape(-1).tolist():
        result.regressions.add().value = value
    return result


RESULTS = {CLASSIFY_METHOD: classification_result, REGRESS_METHOD: regression_result}


def classify_regress_task(method, signature_name, signatures):
    """Classify / Regress: (method, signature name, input alias, output aliases) of its signature, or
    TensorFlow Serving's INVALID_ARGUMENT (GetClassificationSignatureDef / GetRegressionSignatureDef)."""
    name = signature_name or DEFAULT_SIGNATURE
    if name not in signatures:
        raise errors.invalid_argument(f"No signature was found with the name: {name}")
    return (method, name) + signature_io(method, name, signatures[name])


def check_tasks(tasks, signatures):
    """A MultiInference request's tasks, on the model its first task names -> [(method, signature name, input
    alias, output aliases)], with TensorFlow Serving's checks, task by task, in its order (multi_inference.cc):
    one model, no signature twice, a signature of the model, classify / regress methods only."""
    name, checked, seen = "", [], set()
    for task in tasks:
        if not task.model_spec.name:
            raise errors.invalid_argument("Found ModelSpec with an empty model name.")
        if name and task.model_spec.name != name:
            raise errors.invalid_argument("All ModelSpecs in a MultiInferenceRequest must access the same model "
                                          "name.")
        name = task.model_spec.name
        signature_name = task.model_spec.signature_name or DEFAULT_SIGNATURE
        if signature_name in seen:
            raise errors.invalid_argument(f"Duplicate evaluation of signature: {signature_name}")
        seen.add(signature_name)
        if signature_name not in signatures:
            raise errors.invalid_argument(f"Requested signature not found in model graph: {signature_name}")
        if task.method_name not in METHODS:
            raise errors.ServingError("UNIMPLEMENTED", f"Unsupported signature method_name: {task.method_name}")
        checked.append((task.method_name, signature_name)
                       + signature_io(task.method_name, signature_name, signatures[signature_name]))
    return checked


# -- REST: TensorFlow Serving's JSON for :classify / :regress (json_tensor.cc) ----------------------------------


def _feature_values(name, value):
    """One JSON feature value (a scalar or a flat list) -> (kind "bytes" / "int64" / "float", values), with
    AddValueToFeature's checks in its order."""
    kind, values = None, []
    for element in value if isinstance(value, list) else [value]:
        if isinstance(element, str):
            element_kind, element = "bytes", element.encode("utf-8", "surrogatepass")
        elif element is None or isinstance(element, list) or (isinstance(element, dict) and not is_b64(element)):
            raise errors.invalid_argument(f"Feature: {name} has element with unexpected JSON type: "
                                          f"{json_type(element)}")
        elif isinstance(element, dict):
            element_kind = "bytes"
        elif isinstance(element, bool):
            element_kind, element = "int64", int(element)
        else:
            element_kind = "float" if isinstance(element, float) else "int64"
        if kind is not None and element_kind != kind:
            raise errors.invalid_argument(f"Unexpected element type in feature: {name} expecting type: {kind}")
        if isinstance(element, dict):
            try:
                element = base64.b64decode(element["b64"], validate=True)
            except (binascii.Error, ValueError):
                raise errors.invalid_argument("Unable to base64 decode") from None
        elif element_kind == "int64" and element >= 2**63:
            raise errors.invalid_argument(f"Feature: {name} has uint64_t element. Only int64_t is supported.")
        kind = element_kind
        values.append(element)
    return kind, values


def example_from_json(value, example=None):
    """A JSON object {feature: value or [values]} -> tf.train.Example (strings and {"b64": ...} -> bytes_list,
    integers and booleans -> int64_list, other numbers -> float_list), filled into `example` when given."""
    from tensorflow.core.example import example_pb2

    if not isinstance(value, dict):
        raise errors.invalid_argument(f"Example must be JSON object but got JSON {json_type(value)}")
    example = example_pb2.Example() if example is None else example
    features = example.features.feature
    for name, item in value.items():
        kind, values = _feature_values(name, item)
        feature = features[name]
        if kind is not None:
            getattr(feature, f"{kind}_list").value.extend(values)
    return example


def input_from_json(body):
    """A :classify / :regress body (a JSON object: rest_json.request_object) -> (signature name, Input proto):
    {"signature_name"?, "context"?, "examples": [...]} (with "context": example_list_with_context), with
    FillClassifyRegressRequestFromJson's checks, in its order, and its words (it says "classify" for both)."""
    from tensorflow_serving.apis import input_pb2

    signature_name = signature_name_of(body)
    request = input_pb2.Input()
    if "context" in body:
        listed = request.example_list_with_context
        listed.context.CopyFrom(example_from_json(body["context"]))
    else:
        listed = request.example_list
    if "examples" not in body:
        raise format_error(body, "When method is classify, key 'examples' is expected and was not found")
    examples = body["examples"]
    if not isinstance(examples, list):
        raise format_error(body, "Expecting 'examples' value to be an list/array")
    if not examples:
        raise format_error(body, "'examples' value is an empty array")
    for example in examples:
        example_from_json(example, listed.examples.add())
    return signature_name, request


def _json_float(value):
    """A float32 as TensorFlow Serving writes it: its shortest decimal form."""
    return float(str(np.float32(value)))


def result_to_json(method, result):
    """A ClassificationResult -> [[[label, score], ...] per example]; a RegressionResult -> [value, ...]."""
    if method == CLASSIFY_METHOD:
        return [[[entry.label, _json_float(entry.score)] for entry in classifications.classes]
                for classifications in result.classifications]
    return [_json_float(regression.value) for regression in result.regressions]
