"""Tensors on the wire: TensorProto <-> numpy, and TensorFlow Serving's REST JSON <-> numpy.

TensorProto decoding follows TensorFlow's rules: values come from `tensor_content` (little-endian bytes)
or the typed `*_val` field; a typed field with fewer values than the shape holds is filled with its last
value (an empty one with zeros). JSON follows TensorFlow Serving's REST API: DT_STRING values are JSON
strings (UTF-8) or `{"b64": "..."}` objects; outputs whose name ends in `_bytes` (and strings that are not
valid UTF-8) are written as `{"b64": ...}`; floats may be NaN / Infinity.
"""

from __future__ import annotations

import base64
import math

import numpy as np
from tensorflow.core.framework import tensor_pb2, tensor_shape_pb2, types_pb2

from .errors import invalid_argument, resource_exhausted

DT = types_pb2.DataType

_NUMPY = {
    DT.DT_FLOAT: np.float32, DT.DT_DOUBLE: np.float64, DT.DT_HALF: np.float16,
    DT.DT_INT8: np.int8, DT.DT_INT16: np.int16, DT.DT_INT32: np.int32, DT.DT_INT64: np.int64,
    DT.DT_UINT8: np.uint8, DT.DT_UINT16: np.uint16, DT.DT_UINT32: np.uint32, DT.DT_UINT64: np.uint64,
    DT.DT_BOOL: np.bool_, DT.DT_STRING: np.object_,
}
_FIELD = {
    DT.DT_FLOAT: "float_val", DT.DT_DOUBLE: "double_val", DT.DT_HALF: "half_val",
    DT.DT_INT8: "int_val", DT.DT_INT16: "int_val", DT.DT_INT32: "int_val", DT.DT_UINT8: "int_val",
    DT.DT_UINT16: "int_val", DT.DT_INT64: "int64_val", DT.DT_UINT32: "uint32_val",
    DT.DT_UINT64: "uint64_val", DT.DT_BOOL: "bool_val", DT.DT_STRING: "string_val",
}
_FROM_NUMPY = {np.dtype(v): k for k, v in _NUMPY.items() if v is not np.object_}
INTEGER_DTYPES = frozenset((DT.DT_INT8, DT.DT_INT16, DT.DT_INT32, DT.DT_INT64, DT.DT_UINT8, DT.DT_UINT16,
                            DT.DT_UINT32, DT.DT_UINT64))
MAX_RANK = 32  # TensorFlow's feed of a string tensor with more dimensions crashes the process (a segfault)
INT64_MAX = (1 << 63) - 1


def dtype_of(array):
    """The DataType enum of a numpy array's dtype (DT_STRING for bytes, str and object arrays), or None when
    TensorFlow has no such type."""
    if array.dtype == object or array.dtype.kind in "SU":
        return DT.DT_STRING
    return _FROM_NUMPY.get(array.dtype)


def dtype_name(dtype: int) -> str:
    try:
        return DT.Name(dtype)
    except ValueError:
        return f"dtype {dtype}"


def numpy_dtype(dtype: int):
    return _NUMPY.get(dtype)


def shape_of(proto_shape):
    """A TensorShapeProto as a list of ints (-1 for unknown dims), or None for unknown rank."""
    if proto_shape.unknown_rank:
        return None
    return [d.size for d in proto_shape.dim]


def shape_text(shape):
    """Dims as TensorFlow Serving prints a shape: "[2,3]"."""
    return "[" + ",".join(str(d) for d in shape) + "]"


def wire_shape(shape, where, max_elements=None):
    """The dims a request states for a tensor (TensorProto dims, a v2 `shape`, a JSON value's nesting; `where`
    names it: "input 'text'") -> a list of ints, checked before the tensor is built: INVALID_ARGUMENT for more
    than MAX_RANK dims or a dim that is not a whole number >= 0, RESOURCE_EXHAUSTED for a shape that could hold
    more than `max_elements` (zero dims counted as one: `[0, 2**62]` is refused, not built; None: any number, for
    shapes of values already in memory)."""
    if not isinstance(shape, (list, tuple)):
        raise invalid_argument(f"{where}: shape must be a list of whole numbers >= 0, got {str(shape)[:200]}")
    if len(shape) > MAX_RANK:
        raise invalid_argument(f"{where} has {len(shape)} dimensions; a request tensor has at most {MAX_RANK}")
    dims = []
    for dim in shape:
        if isinstance(dim, bool) or not isinstance(dim, (int, np.integer)) or dim < 0:
            raise invalid_argument(f"{where}: shape must be a list of whole numbers >= 0, got "
                                   f"{shape_text(shape)[:200]}")
        dims.append(int(dim))
    if max_elements is not None and math.prod(max(d, 1) for d in dims) > max_elements:
        raise resource_exhausted(f"{where} has shape {shape_text(dims)}, more than the {max_elements} elements a "
                                 "request may hold (--max-request-elements)")
    return dims


def integers_in_range(values, dtype, where):
    """`values` (Python ints) as an array of integer DataType `dtype`; INVALID_ARGUMENT when one lies outside the
    type's range (nothing is wrapped)."""
    np_dtype = np.dtype(_NUMPY[dtype])
    info = np.iinfo(np_dtype)
    for value in values:
        if not info.min <= value <= info.max:
            raise invalid_argument(f"{where}: value {value} is outside the range of {dtype_name(dtype)} "
                                   f"[{info.min}, {info.max}]")
    return np.asarray(values, dtype=np_dtype)


def to_ndarray(proto, max_elements=1 << 62, where="a request tensor") -> np.ndarray:
    """TensorProto -> numpy (object arrays of bytes for DT_STRING), checked before anything is allocated
    (`wire_shape`: a small message can declare a huge shape with one value, which fills it) and refusing
    integer values outside their dtype."""
    if proto.tensor_shape.unknown_rank:
        raise invalid_argument(f"{where} has an unknown rank")
    shape = wire_shape([d.size for d in proto.tensor_shape.dim], where, max_elements)
    count = math.prod(shape)
    dtype = proto.dtype
    if dtype not in _NUMPY:
        import tensorflow as tf  # rare dtypes (bfloat16, complex...): TensorFlow's own decoder

        try:
            return tf.make_ndarray(proto)
        except Exception as error:  # noqa: BLE001 - the request is what is wrong
            raise invalid_argument(f"{where}: cannot decode a {dtype_name(dtype)} tensor: {error}") from None
    if dtype == DT.DT_STRING:
        values = proto.string_val
        if len(values) != count:
            raise invalid_argument(f"{where}: a DT_STRING tensor of shape {shape_text(shape)} has {len(values)} "
                                   "values")
        array = np.empty(count, dtype=object)
        array[:] = list(values)
        return array.reshape(shape)
    np_dtype = np.dtype(_NUMPY[dtype]).newbyteorder("<")
    if proto.tensor_content:
        if len(proto.tensor_content) != count * np_dtype.itemsize:
            raise invalid_argument(f"{where}: tensor_content has {len(proto.tensor_content)} bytes for a "
                                   f"{dtype_name(dtype)} tensor of shape {shape_text(shape)}")
        return np.frombuffer(proto.tensor_content, dtype=np_dtype).astype(np_dtype.newbyteorder("="))\
            .reshape(shape)
    values = getattr(proto, _FIELD[dtype])
    if len(values) > count:
        raise invalid_argument(f"{where}: a {dtype_name(dtype)} tensor of shape {shape_text(shape)} has "
                               f"{len(values)} values")
    if dtype == DT.DT_HALF:  # bit patterns in an int32 field
        flat = integers_in_range(values, DT.DT_UINT16, f"{where} (half_val)").view(np.float16)
    elif dtype in INTEGER_DTYPES:
        flat = integers_in_range(values, dtype, where)
    else:
        flat = np.asarray(values, dtype=_NUMPY[dtype])
    if flat.size == count:
        return flat.reshape(shape)
    filled = np.zeros(count, dtype=_NUMPY[dtype])
    if flat.size:
        filled[:flat.size] = flat
        filled[flat.size:] = flat[-1]
    return filled.reshape(shape)


def to_ndarrays(tensors, max_elements, max_bytes, what="input"):
    """{alias: TensorProto} -> {alias: ndarray} (`to_ndarray`), every stated shape checked before the first is
    decoded: together they may hold at most `max_elements` elements and `max_bytes` numeric bytes
    (RESOURCE_EXHAUSTED; a message of a few bytes per input can declare huge shapes, which the fill rule fills)."""
    elements = size = 0
    for alias, proto in tensors.items():
        where = f"{what} '{alias}'"
        if proto.tensor_shape.unknown_rank:
            raise invalid_argument(f"{where} has an unknown rank")
        shape = wire_shape([d.size for d in proto.tensor_shape.dim], where)
        count = math.prod(max(d, 1) for d in shape)
        elements += count
        if proto.dtype != DT.DT_STRING:
            itemsize = np.dtype(_NUMPY[proto.dtype]).itemsize if proto.dtype in _NUMPY else 16
            size += count * itemsize
            if count * itemsize > max_bytes or size > max_bytes:
                raise resource_exhausted(f"{where}: a {dtype_name(proto.dtype)} tensor of shape {shape_text(shape)} "
                                         f"would decode to {count * itemsize} bytes; the request's tensors may "
                                         f"hold {max_bytes} bytes (max_request_bytes)")
        if elements > max_elements:
            raise resource_exhausted(f"the request's tensors would hold more than {max_elements} elements "
                                     f"(--max-request-elements); {where} has shape {shape_text(shape)}")
    return {alias: to_ndarray(proto, max_elements, f"{what} '{alias}'") for alias, proto in tensors.items()}


def _as_bytes(value):
    if isinstance(value, bytes):
        return value
    if isinstance(value, str):
        return value.encode("utf-8")
    if isinstance(value, (bytearray, memoryview, np.bytes_)):
        return bytes(value)
    if isinstance(value, np.str_):
        return str(value).encode("utf-8")
    raise TypeError(f"expected str or bytes, got {type(value).__name__}")


def from_ndarray(value, dtype: int | None = None, *, tensor_content=True):
    """numpy (or nested lists / str / bytes) -> TensorProto. Strings become DT_STRING (`string_val`).

    Numbers go to `tensor_content` (little-endian bytes, as `tf.make_tensor_proto` sends them), or with
    `tensor_content=False` to the typed field (`float_val`, `int_val`, `int64_val`, ...; float16 as its bit
    patterns in `half_val`), as TensorFlow's `Tensor::AsProtoField` writes them: what TensorFlow Serving's
    Predict returns unless it runs with --enable_serialization_as_tensor_content."""
    array = value if isinstance(value, np.ndarray) else np.asarray(value, dtype=object if _stringy(value) else None)
    proto = tensor_pb2.TensorProto()
    proto.tensor_shape.CopyFrom(tensor_shape_pb2.TensorShapeProto(
        dim=[tensor_shape_pb2.TensorShapeProto.Dim(size=int(s)) for s in array.shape]))
    if array.dtype == object or array.dtype.kind in "SU":
        proto.dtype = DT.DT_STRING
        proto.string_val.extend(_as_bytes(v) for v in array.reshape(-1).tolist())
        return proto
    if dtype is None:
        if array.dtype not in _FROM_NUMPY:
            raise TypeError(f"unsupported numpy dtype {array.dtype}")
        dtype = _FROM_NUMPY[array.dtype]
    proto.dtype = dtype
    if not tensor_content:
        flat = np.ascontiguousarray(array, dtype=_NUMPY[dtype]).reshape(-1)
        if dtype == DT.DT_HALF:
            flat = flat.view(np.uint16)
        getattr(proto, _FIELD[dtype]).extend(flat.tolist())
        return proto
    target = np.dtype(_NUMPY[dtype]).newbyteorder("<")
    proto.tensor_content = np.ascontiguousarray(array, dtype=target).tobytes()
    return proto


def _stringy(value):
    while isinstance(value, (list, tuple)) and value:
        value = value[0]
    return isinstance(value, (str, bytes, np.str_, np.bytes_))


# --- JSON ----------------------------------------------------------------------------------------------


def ndarray_to_json(array: np.ndarray, name: str):
    """numpy -> JSON-ready nested lists; strings as UTF-8 text, or {"b64": ...} (name *_bytes or binary)."""
    if array.dtype == object or array.dtype.kind in "SU":
        binary = name.endswith("_bytes")

        def encode(v):
            v = _as_bytes(v)
            if not binary:
                try:
                    return v.decode("utf-8")
                except UnicodeDecodeError:
                    pass
            return {"b64": base64.b64encode(v).decode("ascii")}

        flat = [encode(v) for v in array.reshape(-1).tolist()]
        if array.ndim == 0:
            return flat[0]
        out = np.empty(len(flat), dtype=object)
        out[:] = flat
        return out.reshape(array.shape).tolist()
    if array.dtype == np.float16:
        array = array.astype(np.float32)
    return array.tolist()
