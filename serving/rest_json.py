"""The REST API's JSON codec: request bodies -> tensors for a SignatureDef (TensorFlow Serving's json_tensor
rules: row format "instances", columnar "inputs", {"b64": ...} values) and outputs -> the response body,
with the JSON limit of the REST server:

* JSON: a body nested deeper than MAX_JSON_DEPTH (e.g. 100000 '['), not UTF-8, or with a number of more
  digits than Python converts: 400 "JSON Parse error: ...", never a RecursionError.
"""

from __future__ import annotations

import json

import numpy as np
from google.protobuf import json_format

from . import errors
from .tensors import json_to_ndarray, ndarray_to_json, shape_of

MAX_JSON_DEPTH = 100  # arrays/objects nested in a body: a tensor has at most 64 dimensions


def message_to_dict(message):
    """A protobuf message -> its JSON value as the REST API answers it: proto field names, defaults printed."""
    try:
        return json_format.MessageToDict(message, always_print_fields_with_no_presence=True,
                                         preserving_proto_field_name=True)
    except TypeError:  # protobuf < 26
        return json_format.MessageToDict(message, including_default_value_fields=True,
                                         preserving_proto_field_name=True)


def _is_b64(value):
    return isinstance(value, dict) and set(value) == {"b64"}


def parse_predict_body(body, signature):
    """JSON body -> ({alias: ndarray}, row_format) for this SignatureDef (TF Serving's json_tensor rules)."""
    if not isinstance(body, dict):
        raise errors.invalid_argument("the request body must be a JSON object")
    has_instances, has_inputs = "instances" in body, "inputs" in body
    if has_instances == has_inputs:
        raise errors.invalid_argument("Missing 'inputs' or 'instances' key" if not has_instances else
                                      "a request can have either 'instances' or 'inputs', not both")
    specs = signature.inputs
    names = sorted(specs)
    if has_instances:
        rows = body["instances"]
        if not isinstance(rows, list):
            raise errors.invalid_argument("'instances' must be a list")
        named = bool(rows) and isinstance(rows[0], dict) and not _is_b64(rows[0])
        if named:
            columns = {}
            for index, row in enumerate(rows):
                if not isinstance(row, dict) or _is_b64(row):
                    raise errors.invalid_argument(f"Expecting object but got list at item {index} of input list")
                for key in row:
                    if key not in specs:
                        raise errors.invalid_argument(f"JSON object has an input not in the signature: {key} "
                                                      f"(inputs: {', '.join(names)})")
                for name in names:
                    if name not in row:
                        raise errors.invalid_argument(f"Missing named input: {name} in item {index} of "
                                                      "'instances' (every instance needs every input)")
                    columns.setdefault(name, []).append(row[name])
            if not rows:
                columns = {}
        else:
            if len(names) != 1:
                if not rows:  # an empty batch: every input empty
                    columns = {name: [] for name in names}
                else:
                    raise errors.invalid_argument(
                        f"the signature has {len(names)} inputs ({', '.join(names)}): each instance must be "
                        "an object naming them")
            else:
                columns = {names[0]: rows}
        arrays = {}
        for name, value in columns.items():
            arrays[name] = _column(value, specs[name], name)
        if not rows and not arrays:
            arrays = {name: _column([], specs[name], name) for name in names}
        return arrays, True
    value = body["inputs"]
    if isinstance(value, dict) and not _is_b64(value):
        arrays = {}
        for name, column in value.items():
            if name not in specs:
                raise errors.invalid_argument(f"input {name!r} is not in the signature (inputs: {', '.join(names)})")
            arrays[name] = _column(column, specs[name], name)
        return arrays, False
    if len(names) != 1:
        raise errors.invalid_argument(f"the signature has {len(names)} inputs ({', '.join(names)}): 'inputs' "
                                      "must be an object naming them")
    return {names[0]: _column(value, specs[names[0]], names[0])}, False


def _column(value, info, name):
    array = json_to_ndarray(value, info.dtype, name)
    if array.size == 0 and array.ndim == 1:  # [] -> [0, fixed dims...] from the signature's shape
        shape = shape_of(info.tensor_shape)
        if shape and len(shape) > 1:
            array = array.reshape([0] + [max(s, 0) for s in shape[1:]])
    return array


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


def load_json(body):
    """A request body -> its JSON value; INVALID_ARGUMENT "JSON Parse error: ..." for anything that is not JSON
    nested at most MAX_JSON_DEPTH deep (never a RecursionError)."""
    too_deep = f"JSON Parse error: arrays and objects nested more than {MAX_JSON_DEPTH} deep"
    try:
        value = json.loads(body)
    except RecursionError:
        raise errors.invalid_argument(too_deep) from None
    except ValueError as error:  # JSONDecodeError, UnicodeDecodeError, an integer of too many digits
        raise errors.invalid_argument(f"JSON Parse error: {error}") from None
    if body.count(b"[") + body.count(b"{") > MAX_JSON_DEPTH:  # only then can it nest that deep
        stack = [(value, 1)]
        while stack:
            node, depth = stack.pop()
            if depth > MAX_JSON_DEPTH:
                raise errors.invalid_argument(too_deep)
            for child in node.values() if type(node) is dict else node:
                if type(child) is list or type(child) is dict:
                    stack.append((child, depth + 1))
    return value
