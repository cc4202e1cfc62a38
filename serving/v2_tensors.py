"""The Open Inference Protocol's ("v2": KServe, Triton, their clients) tensors over this server's signatures: the
datatype names and TensorFlow's DataType, a signature's inputs and outputs as tensor metadata, request tensors
(JSON data, typed gRPC contents, raw little-endian bytes) -> numpy, and outputs -> response tensors. Both front
ends (v2_rest.py, v2_grpc.py) use it; the messages are tritonclient's generated protos (`inference.*`).

BYTES elements are TensorFlow strings. Raw BYTES (the binary-data extension over REST, `raw_input_contents` and
`raw_output_contents` over gRPC) hold each element as a 4-byte little-endian length and its bytes, as
tritonclient writes and reads them; JSON BYTES are strings (UTF-8). A request's `parameters` may name the
signature to run (`signature_name`, a string; default serving_default)."""

from __future__ import annotations

import math
import struct

import numpy as np

from . import errors
from .methods import DEFAULT_SIGNATURE
from .tensors import DT, INTEGER_DTYPES, dtype_of, integers_in_range, shape_of, wire_shape

SIGNATURE_PARAMETER = "signature_name"
PLATFORM = "tensorflow_savedmodel"
EXTENSIONS = ("binary_tensor_data",)  # the server metadata's list (REST's binary-data extension)

DATATYPES = {
    DT.DT_BOOL: "BOOL", DT.DT_UINT8: "UINT8", DT.DT_UINT16: "UINT16", DT.DT_UINT32: "UINT32",
    DT.DT_UINT64: "UINT64", DT.DT_INT8: "INT8", DT.DT_INT16: "INT16", DT.DT_INT32: "INT32", DT.DT_INT64: "INT64",
    DT.DT_HALF: "FP16", DT.DT_FLOAT: "FP32", DT.DT_DOUBLE: "FP64", DT.DT_STRING: "BYTES",
}
DATATYPE_DTYPES = {name: dtype for dtype, name in DATATYPES.items()}
_NUMPY = {"BOOL": np.bool_, "UINT8": np.uint8, "UINT16": np.uint16, "UINT32": np.uint32, "UINT64": np.uint64,
          "INT8": np.int8, "INT16": np.int16, "INT32": np.int32, "INT64": np.int64, "FP16": np.float16,
          "FP32": np.float32, "FP64": np.float64, "BYTES": np.object_}
# The typed field of gRPC's InferTensorContents that holds each datatype.
CONTENTS_FIELD = {"BOOL": "bool_contents", "UINT8": "uint_contents", "UINT16": "uint_contents",
                  "UINT32": "uint_contents", "UINT64": "uint64_contents", "INT8": "int_contents",
                  "INT16": "int_contents", "INT32": "int_contents", "INT64": "int64_contents",
                  "FP32": "fp32_contents", "FP64": "fp64_contents", "BYTES": "bytes_contents"}


def datatype_of(dtype: int) -> str:
    """A TensorFlow DataType -> its v2 datatype name (INVALID_ARGUMENT for a type the protocol lacks)."""
    name = DATATYPES.get(dtype)
    if name is None:
        raise errors.invalid_argument(f"DataType {DT.Name(dtype)} has no Open Inference Protocol datatype")
    return name


def parameters_of(value, where):
    """A request's, input's or output's `parameters` -> a dict ({} when absent); INVALID_ARGUMENT naming `where`
    when it is not an object."""
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise errors.invalid_argument(f"{where}: 'parameters' must be an object, got {str(value)[:100]}")
    return value


def signature_name(parameters) -> str:
    """The signature a request runs: its `signature_name` parameter, else serving_default."""
    value = parameters.get(SIGNATURE_PARAMETER, DEFAULT_SIGNATURE) if parameters else DEFAULT_SIGNATURE
    if not isinstance(value, str) or not value:
        raise errors.invalid_argument(f"parameter '{SIGNATURE_PARAMETER}' must be a non-empty string, got {value!r}")
    return value


def tensor_metadata(tensor_infos):
    """{alias: TensorInfo} -> [(name, datatype, shape)] in alias order (-1: a dimension of any size; [-1] for a
    tensor of unknown rank)."""
    out = []
    for alias in sorted(tensor_infos):
        info = tensor_infos[alias]
        shape = shape_of(info.tensor_shape)
        out.append((alias, datatype_of(info.dtype), [-1] if shape is None else shape))
    return out


def _element_count(shape, name, max_elements):
    """The elements of a stated `shape` (tensors.wire_shape: whole numbers >= 0, at most MAX_RANK of them, within
    the request's element limit)."""
    return math.prod(wire_shape(shape, f"input '{name}'", max_elements))


def check_datatype(name, datatype, tensor_infos):
    """The request's datatype for input `name` must be the signature's (INVALID_ARGUMENT naming both)."""
    info = tensor_infos.get(name)
    if info is None:
        known = ", ".join(sorted(tensor_infos))
        raise errors.invalid_argument(f"unexpected inference input '{name}' (the signature's inputs: {known})")
    expected = datatype_of(info.dtype)
    if datatype != expected:
        raise errors.invalid_argument(f"unexpected datatype {datatype} for inference input '{name}', expecting "
                                      f"{expected}")


def from_data(data, datatype, shape, name, max_elements) -> np.ndarray:
    """JSON `data` (nested or flat, row-major) or a typed gRPC contents list -> an array of `shape` (at most
    `max_elements`; integers inside their datatype)."""
    count = _element_count(shape, name, max_elements)
    flat = list(_flatten(data))
    if len(flat) != count:
        raise errors.invalid_argument(f"input '{name}': shape {list(shape)} holds {count} elements, data has "
                                      f"{len(flat)}")
    if datatype == "BYTES":
        values = [_as_bytes(value, name) for value in flat]
        array = np.empty(count, np.object_)
        array[:] = values
        return array.reshape(shape)
    if any(isinstance(value, (str, bytes, list, dict)) or value is None for value in flat):
        raise errors.invalid_argument(f"input '{name}': {datatype} data must be numbers")
    dtype = DATATYPE_DTYPES.get(datatype)
    if dtype in INTEGER_DTYPES:
        if any(not isinstance(value, (int, np.integer)) for value in flat):
            raise errors.invalid_argument(f"input '{name}': {datatype} data must be whole numbers")
        return integers_in_range(flat, dtype, f"input '{name}'").reshape(shape)
    try:
        return np.asarray(flat, _NUMPY[datatype]).reshape(shape)
    except (OverflowError, ValueError, TypeError) as error:
        raise errors.invalid_argument(f"input '{name}': {error}") from None


def _flatten(data):
    if isinstance(data, (list, tuple)):
        for item in data:
            yield from _flatten(item)
    else:
        yield data


def _as_bytes(value, name):
    if isinstance(value, bytes):
        return value
    if isinstance(value, str):
        return value.encode("utf-8")
    raise errors.invalid_argument(f"input '{name}': BYTES data must be strings, got {value!r}")


def from_raw(raw: bytes, datatype, shape, name, max_elements) -> np.ndarray:
    """Raw little-endian bytes (BYTES: length-prefixed elements) -> an array of `shape` (at most `max_elements`)."""
    count = _element_count(shape, name, max_elements)
    if datatype == "BYTES":
        values, offset = [], 0
        while offset < len(raw):
            if offset + 4 > len(raw):
                raise errors.invalid_argument(f"input '{name}': raw BYTES data ends inside an element's length")
            (size,) = struct.unpack_from("<I", raw, offset)
            offset += 4
            if offset + size > len(raw):
                raise errors.invalid_argument(f"input '{name}': raw BYTES element of {size} bytes runs past the "
                                              f"data ({len(raw)} bytes)")
            values.append(bytes(raw[offset:offset + size]))
            offset += size
        if len(values) != count:
            raise errors.invalid_argument(f"input '{name}': shape {list(shape)} holds {count} elements, raw data "
                                          f"has {len(values)}")
        array = np.empty(count, np.object_)
        array[:] = values
        return array.reshape(shape)
    dtype = np.dtype(_NUMPY[datatype]).newbyteorder("<")
    if len(raw) != count * dtype.itemsize:
        raise errors.invalid_argument(f"input '{name}': shape {list(shape)} of {datatype} takes "
                                      f"{count * dtype.itemsize} bytes, raw data has {len(raw)}")
    return np.frombuffer(raw, dtype).astype(dtype.newbyteorder("="), copy=True).reshape(shape)


def to_raw(array: np.ndarray) -> bytes:
    """An output array -> raw little-endian bytes (BYTES: length-prefixed elements)."""
    if dtype_of(array) == DT.DT_STRING:
        parts = []
        for value in array.reshape(-1):
            value = value if isinstance(value, bytes) else str(value).encode("utf-8")
            parts += [struct.pack("<I", len(value)), value]
        return b"".join(parts)
    return np.ascontiguousarray(array, array.dtype.newbyteorder("<")).tobytes()


def output_datatype(array: np.ndarray) -> str:
    """An output array's v2 datatype name."""
    dtype = dtype_of(array)
    if dtype is None:
        raise errors.ServingError("INTERNAL", f"output of numpy type {array.dtype} has no v2 datatype")
    return datatype_of(dtype)


def to_data(array: np.ndarray):
    """An output array -> flat JSON data (BYTES: UTF-8 strings; INVALID_ARGUMENT for bytes that are not UTF-8,
    which need the binary-data extension)."""
    flat = array.reshape(-1)
    if dtype_of(array) != DT.DT_STRING:
        return flat.tolist()
    out = []
    for value in flat:
        try:
            out.append(value.decode("utf-8") if isinstance(value, bytes) else str(value))
        except UnicodeDecodeError:
            raise errors.invalid_argument("an output holds bytes that are not UTF-8: request it with the binary "
                                          "data extension (parameters: {\"binary_data\": true})") from None
    return out
