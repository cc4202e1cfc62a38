"""One gate for every request: what a request's tensors must be before anything is allocated for them or run.

Every front end (REST /v1, REST /v2, gRPC PredictionService, GRPCInferenceService) turns its wire format into
named numpy arrays and nothing more; the checks are here, so that a new front end inherits them all:

* while a front end decodes (tensors.py, v2_tensors.py, rest_json.py), nothing is built before its stated shape
  passes `tensors.wire_shape` (at most `MAX_RANK` dimensions, each a whole number >= 0, holding at most the
  request's element limit, a zero dim counted as one: `[0, 2**62]` is refused, not built) and integer values
  lie inside their dtype (`tensors.integers_in_range`: an int_val of -195884157 for DT_INT8 is refused, not
  wrapped);
* `checked_inputs` (run by `Servable.prepare`, the one step between every front end and a run, warmup
  included): the input names (TensorFlow Serving's checks and words), dtypes, UTF-8 text, then `check_inputs`:
  each input's rank and dims against the SignatureDef (a declared rank is enforced; an unknown one is at most
  `MAX_RANK`), and the whole request's elements and bytes against `Limits` (--max-request-elements,
  --max-request-bytes);
* `check_examples` (run by `ServerCore.infer`): every tf.Example of a Classify / Regress / MultiInference
  request against the features the export reads (its xlnet_export.json `example_features`: one bytes value of
  UTF-8 text each), before the first piece runs; the error names the Example's index in the request;
* `version_number`: a model version written as text (REST paths, the v2 protocol) -> int64, or INVALID_ARGUMENT.

Client errors are INVALID_ARGUMENT (400) or RESOURCE_EXHAUSTED (429), in TensorFlow Serving's words where it has
them; a fault of the server itself is INTERNAL (`errors.internal`: the traceback goes to the log, not to the
client).

TensorFlow Serving checks none of the shapes: its Session runs whatever the graph takes. TensorFlow's feed of a
string tensor of more than 32 dimensions crashes the process (a segfault, every request in flight lost), so a
request's rank is bounded whatever its signature says.
"""

from __future__ import annotations

import dataclasses
import re

import numpy as np

from . import errors
from .options import DEFAULT_MAX_REQUEST_BYTES, DEFAULT_MAX_REQUEST_ELEMENTS
from .tensors import DT, INT64_MAX, MAX_RANK, dtype_name, dtype_of, numpy_dtype, shape_of, shape_text, to_ndarray

_DIGITS = re.compile(r"[0-9]+")


@dataclasses.dataclass(frozen=True)
class Limits:
    """Whole-request limits: `elements` (all inputs' elements together) and `bytes` (their numeric bytes and the
    bytes of their strings)."""

    elements: int = DEFAULT_MAX_REQUEST_ELEMENTS
    bytes: int = DEFAULT_MAX_REQUEST_BYTES

    @classmethod
    def of(cls, options):
        """A ServerOptions' limits (the defaults without options)."""
        if options is None:
            return cls()
        return cls(elements=options.max_request_elements, bytes=options.max_request_bytes)


DEFAULT_LIMITS = Limits()


def checked_inputs(signature_name, signature, inputs, limits=DEFAULT_LIMITS, text_inputs=True):
    """A request's {alias: ndarray} against its SignatureDef and `limits`, before anything runs -> the arrays to
    feed (numbers cast to the signature's type; defaults filled in): the names (TensorFlow Serving's checks and
    words), each dtype exactly, with `text_inputs` DT_STRING inputs as UTF-8 unless their alias ends in `_bytes`
    (TensorFlow Serving's REST convention for binary strings), then `check_inputs` (shapes, totals)."""
    _check_names(signature, inputs)
    arrays = {}
    for alias in sorted(signature.inputs):
        if alias in inputs:
            arrays[alias] = _checked_dtype(signature_name, alias, signature.inputs[alias].dtype, inputs[alias],
                                           text_inputs)
        else:
            arrays[alias] = to_ndarray(signature.defaults[alias])
    check_inputs(signature_name, signature, {alias: arrays[alias] for alias in inputs}, limits)
    return arrays


def _checked_dtype(signature_name, alias, dtype, array, text):
    """One input's array of the signature's `dtype` (INVALID_ARGUMENT naming both otherwise); `text`: strings
    must be UTF-8 (unless the alias ends in `_bytes`)."""
    got = dtype_of(array)
    if got != dtype:
        raise errors.invalid_argument(
            f"input '{alias}' of signature {signature_name!r} expects {dtype_name(dtype)} but the "
            f"request has {dtype_name(got) if got is not None else array.dtype}")
    if dtype == DT.DT_STRING and text and not alias.endswith("_bytes"):
        for index, value in enumerate(array.reshape(-1).tolist()):
            try:
                value.decode("utf-8")
            except UnicodeDecodeError as error:
                raise errors.invalid_argument(
                    f"input '{alias}' element {index} is not valid UTF-8 ({error.reason} at byte "
                    f"{error.start}); text inputs must be UTF-8 (send binary data in an input "
                    "named *_bytes)") from None
    np_dtype = numpy_dtype(dtype)
    if np_dtype is not None and np_dtype is not np.object_ and array.dtype != np_dtype:
        array = array.astype(np_dtype)
    return array


def check_inputs(signature_name, signature, arrays, limits=DEFAULT_LIMITS):
    """Each array of `arrays` ({alias: ndarray}, names and dtypes already checked) against its TensorInfo's shape,
    and all of them against `limits`; INVALID_ARGUMENT / RESOURCE_EXHAUSTED naming the input."""
    elements = size = 0
    for alias in sorted(arrays):
        array = arrays[alias]
        where = f"input '{alias}' of signature '{signature_name}'"
        declared = shape_of(signature.inputs[alias].tensor_shape)
        if declared is None:
            if array.ndim > MAX_RANK:
                raise errors.invalid_argument(f"{where} has {array.ndim} dimensions; a request tensor has at most "
                                              f"{MAX_RANK}")
        elif array.ndim != len(declared) or any(want >= 0 and got != want
                                                 for got, want in zip(array.shape, declared)):
            raise errors.invalid_argument(
                f"{where} has shape {shape_text(array.shape)}; the signature takes "
                f"{shape_text(declared)} (rank {len(declared)}; -1: any size)")
        elements += array.size
        size += sum(len(v) for v in array.reshape(-1).tolist()) if array.dtype == object else array.nbytes
    if elements > limits.elements:
        raise errors.resource_exhausted(f"the request's inputs hold {elements} elements, more than the limit of "
                                        f"{limits.elements} (--max-request-elements)")
    if size > limits.bytes:
        raise errors.resource_exhausted(f"the request's inputs hold {size} bytes, more than the limit of "
                                        f"{limits.bytes} (--max-request-bytes)")


def check_examples(serialized, feature_names):
    """Serialized tf.Examples (object ndarray [N] of bytes) against `feature_names`, the bytes features an export's
    classification / regression signature reads (one value of UTF-8 text each): INVALID_ARGUMENT naming the first
    bad Example by its index in the request, in the words of TensorFlow's ParseExample."""
    from google.protobuf.message import DecodeError
    from tensorflow.core.example import example_pb2

    for index, data in enumerate(serialized.tolist()):
        try:
            features = example_pb2.Example.FromString(data).features.feature
        except DecodeError:
            raise errors.invalid_argument(f"Name: <unknown>, Key: {feature_names[0]}, Index: {index}.  Can't parse "
                                          "serialized Example.") from None
        for name in feature_names:
            problem = _text_feature_problem(features, name)
            if problem:
                raise errors.invalid_argument(f"Name: <unknown>, Key: {name}, Index: {index}.  {problem}")


def _text_feature_problem(features, name):
    """What is wrong with feature `name` as one value of UTF-8 text ("" when nothing is)."""
    if name not in features:
        return f"Feature: {name} (data type: string) is required but could not be found."
    feature = features[name]
    kind = feature.WhichOneof("kind")
    if kind not in (None, "bytes_list"):
        return f"Data types don't match. Data type: {kind[:-5]} but expected type: string"
    values = feature.bytes_list.value
    if len(values) != 1:
        return f"Number of bytes values != expected.  Values size: {len(values)} but output shape: []"
    try:
        values[0].decode("utf-8")
    except UnicodeDecodeError:
        return f"feature '{name}' is not valid UTF-8 text"
    return ""


def version_number(text, what="version"):
    """A version written as text -> int (TensorFlow Serving's words for one that is not a number in int64)."""
    digits = text.lstrip("0") or "0"
    if not _DIGITS.fullmatch(text) or len(digits) > 19 or int(digits) > INT64_MAX:
        raise errors.invalid_argument(f"Failed to convert {what}: {text[:64]}{'...' if len(text) > 64 else ''} "
                                      "to numeric.")
    return int(digits)


def _check_names(signature, inputs):
    """TensorFlow Serving's checks of a request's input names, in its order and words (predict_util.cc
    VerifyRequestInputsSize, then TensorFlow's saved_model GetInputValues)."""
    sent, expected = sorted(inputs), sorted(signature.inputs)
    defaults = sorted(signature.defaults) if hasattr(signature, "defaults") else []
    if len(sent) > len(expected) or (len(sent) < len(expected) and not defaults):
        raise errors.invalid_argument(
            f"input size does not match signature: {len(sent)}!={len(expected)} len({{{','.join(sent)}}}) != "
            f"len({{{','.join(expected)}}}). Sent extra: {{{','.join(sorted(set(sent) - set(expected)))}}}. "
            f"Missing but required: {{{','.join(sorted(set(expected) - set(sent)))}}}.")
    for alias in expected:
        if alias not in inputs and alias not in defaults:
            raise errors.invalid_argument(
                f"Signature input alias: {alias}(feed name: {signature.inputs[alias].name}) not found in request and "
                f"no default value provided. Inputs expected to be in the request {{{','.join(sent)}}}, or default "
                f"input alias set: {','.join(defaults)}")
    used = [alias for alias in sent if alias in signature.inputs]
    if sent and len(used) != len(sent):
        raise errors.invalid_argument(f"Inputs contains invalid name. Used request inputs: {','.join(used)}, request "
                                      f"input: {','.join(sent)}")
