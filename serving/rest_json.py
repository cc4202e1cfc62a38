"""The REST API's JSON codec, as TensorFlow Serving's json_tensor.cc: request bodies -> tensors for a SignatureDef
(row format "instances", columnar "inputs", {"b64": ...} values) and outputs -> the response body.

Its errors are TensorFlow Serving's, to the byte: bodies are read as rapidjson 1.1.0 reads them ("JSON Parse
error: <rapidjson's message> at offset: <byte>"; see `load_json`), and messages that show a JSON value show it
as rapidjson's PrettyWriter writes it, cut at 256 bytes (`debug_string`). A body nested deeper than
MAX_JSON_DEPTH (e.g. 100000 '[') is 400 "JSON Parse error: ...", never a RecursionError.
"""

from __future__ import annotations

import base64
import binascii

import numpy as np
from google.protobuf import json_format

from . import errors
from .json_reader import debug_string, json_type, load_json
from .tensors import DT, ndarray_to_json, numpy_dtype, wire_shape


def message_to_dict(message):
    """A protobuf message -> its JSON value as the REST API answers it: proto field names, defaults printed."""
    try:
        return json_format.MessageToDict(message, always_print_fields_with_no_presence=True,
                                         preserving_proto_field_name=True)
    except TypeError:  # protobuf < 26
        return json_format.MessageToDict(message, including_default_value_fields=True,
                                         preserving_proto_field_name=True)


def request_object(body):
    """A request body -> its JSON object (load_json; then "JSON Value: ... Is not object")."""
    value = load_json(body)
    if not isinstance(value, dict):
        raise format_error(value, "Is not object")
    return value


def signature_name_of(body):
    """The body's "signature_name" ("" when absent): FillSignature, which refuses anything but a string."""
    name = body.get("signature_name", "")
    if not isinstance(name, str):
        raise errors.invalid_argument(f"JSON Value: {debug_string(body)} not formatted correctly. 'signature_name' "
                                      "key must be a string value.")
    return name


def format_error(value, *parts):
    """INVALID_ARGUMENT "JSON Value: <value as rapidjson writes it> <parts>" (json_tensor.cc FormatError)."""
    return errors.invalid_argument("JSON Value: " + debug_string(value) + " " + "".join(map(str, parts)))


# -- Predict bodies: TensorFlow Serving's FillPredictRequestFromJson --------------------------------------------


def is_b64(value):
    """{"b64": "<string>"}, and nothing else in the object (IsValBase64Object)."""
    return type(value) is dict and len(value) == 1 and type(value.get("b64")) is str


def _is_element_object(value):
    return type(value) is dict and not is_b64(value)


def _type_name(dtype):
    """TensorFlow's DataTypeString: DT_FLOAT -> "float"."""
    return DT.Name(dtype)[3:].lower() if dtype in DT.values() else f"unknown dtype enum ({dtype})"


def _type_error(value, dtype):
    return errors.invalid_argument(f"JSON Value: {debug_string(value)} Type: {json_type(value)} is not of "
                                   f"expected type: {_type_name(dtype)}")


# Each integer type's own range (TensorFlow Serving takes any int32 for int8, int16 and uint8 and lets TensorFlow
# wrap it; here a value outside its type is refused, as over gRPC).
_INT_RANGES = {DT.DT_INT32: (-(1 << 31), (1 << 31) - 1), DT.DT_INT16: (-(1 << 15), (1 << 15) - 1),
               DT.DT_INT8: (-(1 << 7), (1 << 7) - 1), DT.DT_UINT8: (0, (1 << 8) - 1),
               DT.DT_INT64: (-(1 << 63), (1 << 63) - 1), DT.DT_UINT32: (0, (1 << 32) - 1),
               DT.DT_UINT64: (0, (1 << 64) - 1)}


def _leaf(value, dtype):
    """One JSON value of a tensor -> its value (AddValueToTensor / JsonDecodeBase64Object), or their error."""
    kind = type(value)
    if kind is dict:
        if dtype != DT.DT_STRING:
            raise _type_error(value, dtype)
        if not is_b64(value):
            raise errors.invalid_argument(f"JSON Value: {debug_string(value)} not formatted correctly for base64 "
                                          "data")
        try:
            return base64.b64decode(value["b64"], validate=True)
        except (binascii.Error, ValueError):
            raise errors.invalid_argument("Unable to base64 decode") from None
    if dtype in (DT.DT_FLOAT, DT.DT_DOUBLE):
        if kind is int or kind is float:
            return value
    elif dtype in _INT_RANGES:
        low, high = _INT_RANGES[dtype]
        if kind is int and low <= value <= high:
            return value
    elif dtype == DT.DT_STRING:
        if kind is str:
            return value.encode("utf-8", "surrogatepass")
    elif dtype == DT.DT_BOOL:
        if kind is bool:
            return value
    else:
        raise errors.ServingError("UNIMPLEMENTED", f"Conversion of JSON Value: {debug_string(value)} to type: "
                                  f"{_type_name(dtype)}")
    raise _type_error(value, dtype)


def _dense_shape(value):
    """GetDenseTensorShape: the sizes of the first elements' lists, down to the first non-list."""
    shape = []
    while type(value) is list:
        shape.append(len(value))
        if not value:
            break
        value = value[0]
    return shape


def _fill(value, shape, dtype, leaves):
    """FillTensorProto: every value at the tensor's rank, every list of its level's size."""
    rank, stack = len(shape), [(value, 0)]
    while stack:
        node, level = stack.pop()
        if type(node) is not list:
            if level != rank:
                raise errors.invalid_argument(f"JSON Value: {debug_string(node)} found at incorrect level: "
                                              f"{level + 1} in the JSON DOM. Expected at level: {rank}")
            leaves.append(_leaf(node, dtype))
            continue
        if level >= rank:
            raise errors.invalid_argument(f"Encountered list at unexpected level: {level} expected < {rank}")
        if len(node) != shape[level]:
            raise errors.invalid_argument(f"Encountered list at unexpected size: {len(node)} at level: {level} "
                                          f"expected size: {shape[level]}")
        stack.extend((child, level + 1) for child in reversed(node))


def _array(leaves, shape, dtype, name):
    wire_shape(shape, f"input '{name}'")  # a JSON value nested deeper than a tensor's rank may be
    np_dtype = numpy_dtype(dtype)
    if dtype == DT.DT_STRING:
        flat = np.empty(len(leaves), dtype=object)
        flat[:] = leaves
        return flat.reshape(shape)
    return np.array(leaves, dtype=np_dtype).reshape(shape)


def _shape_text(shape):
    return "[" + ",".join(map(str, shape)) + "]"


def _status_text(error):
    return f"{error.code.name}: {error.message}"


class _Instances:
    """AddInstanceItem's state: each input's values, and the size and shape of its first instance."""

    def __init__(self, infos):
        self.infos, self.leaves, self.shapes, self.sizes = infos, {}, {}, {}

    def add(self, item, name):
        if name not in self.infos:
            raise errors.invalid_argument(f"JSON object: does not have named input: {name}")
        shape, leaves = _dense_shape(item), []
        _fill(item, shape, self.infos[name].dtype, leaves)
        self.leaves.setdefault(name, []).extend(leaves)
        if name not in self.sizes:
            self.sizes[name], self.shapes[name] = len(leaves), shape
        elif self.sizes[name] != len(leaves):
            raise errors.invalid_argument(f"Expecting tensor size: {self.sizes[name]} but got: {len(leaves)}")
        elif self.shapes[name] != shape:
            raise errors.invalid_argument(f"Expecting shape {_shape_text(self.shapes[name])} but got: "
                                          f"{_shape_text(shape)}")


def _from_instances(rows, infos):
    names = sorted(infos)
    if type(rows[0]) is not dict and len(infos) > 1:
        raise errors.invalid_argument("instances is a plain list, but expecting list of objects as multiple input "
                                      "tensors required as per tensorinfo_map")
    objects, state = _is_element_object(rows[0]), _Instances(infos)
    for index, row in enumerate(rows):
        if objects:
            if not _is_element_object(row):
                raise errors.invalid_argument(f"Expecting object but got list at item {index} of input list")
            for key, item in row.items():
                try:
                    state.add(item, key)
                except errors.ServingError as error:
                    raise errors.invalid_argument(f"Failed to process element: {index} key: {key} of 'instances' "
                                                  f"list. Error: {_status_text(error)}") from None
            if set(row) != set(names):
                raise errors.invalid_argument(f"Failed to process element: {index} of 'instances' list. JSON object: "
                                              f"{debug_string(row)} keys must be equal to: {','.join(names)}")
        else:
            if _is_element_object(row):
                raise errors.invalid_argument(f"Expecting value/list but got object at item {index} of input list")
            try:
                state.add(row, names[0])
            except errors.ServingError as error:
                raise errors.invalid_argument(f"Failed to process element: {index} of 'instances' list. Error: "
                                              f"{_status_text(error)}") from None
    return {name: _array(state.leaves[name], [len(rows)] + state.shapes[name], infos[name].dtype, name)
            for name in state.leaves}


def _column(value, info, name):
    shape, leaves = _dense_shape(value), []
    _fill(value, shape, info.dtype, leaves)
    return _array(leaves, shape, info.dtype, name)


def parse_predict_body(body, signature, signature_name=""):
    """A Predict body (a JSON object) -> ({alias: ndarray}, row_format) for this SignatureDef, with TensorFlow
    Serving's rules and messages ("instances": a list of rows, "inputs": columns)."""
    infos = signature.inputs
    if not infos:
        raise errors.invalid_argument(f"Failed to get input map for signature: {signature_name or 'DEFAULT'}")
    if "instances" in body:
        if "inputs" in body:
            raise format_error(body, "Not formatted correctly expecting only one of 'inputs' or 'instances' keys "
                               "to exist ")
        rows = body["instances"]
        if type(rows) is not list:
            raise format_error(body, "Expecting 'instances' to be an list/array")
        if not rows:
            raise format_error(body, "No values in 'instances' array")
        return _from_instances(rows, infos), True
    if "inputs" not in body:
        raise errors.invalid_argument("Missing 'inputs' or 'instances' key")
    value = body["inputs"]
    if not _is_element_object(value):
        if len(infos) > 1:
            raise errors.invalid_argument("inputs is a plain value/list, but expecting an object as multiple input "
                                          "tensors required as per tensorinfo_map")
        name = sorted(infos)[0]
        return {name: _column(value, infos[name], name)}, False
    arrays = {}
    for name in sorted(infos):
        if name not in value:
            raise errors.invalid_argument(f"Missing named input: {name} in 'inputs' object.")
        arrays[name] = _column(value[name], infos[name], name)
    return arrays, False


def format_outputs(outputs, row_format):
    """{alias: ndarray} -> the JSON response body."""
    if row_format:
        if len(outputs) == 1:
            (alias, value), = outputs.items()
            return {"predictions": ndarray_to_json(value, alias)}
        sizes = {alias: (np.shape(v)[0] if np.ndim(v) else None) for alias, v in outputs.items()}
        batch = set(sizes.values())
        if len(batch) != 1 or None in batch:
            raise errors.invalid_argument(
                "Tensors of a row-format ('instances') response must share dim 0; sizes: "
                + ", ".join(f"{a}={s}" for a, s in sorted(sizes.items())) + ". Use 'inputs' instead.")
        columns = {alias: ndarray_to_json(value, alias) for alias, value in outputs.items()}
        rows = batch.pop()
        return {"predictions": [{alias: columns[alias][i] for alias in columns} for i in range(rows)]}
    if len(outputs) == 1:
        (alias, value), = outputs.items()
        return {"outputs": ndarray_to_json(value, alias)}
    return {"outputs": {alias: ndarray_to_json(value, alias) for alias, value in outputs.items()}}
