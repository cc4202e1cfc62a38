"""The request gate on its own (serving/gate.py and the decoders' shape checks in serving/tensors.py): no server, no
model. Each case prints what it got and what it must be; tests/test_serving_hostile.py sends the same abuse to a
served export over every API."""

from __future__ import annotations

import numpy as np
import pytest
from tensorflow.core.example import example_pb2
from tensorflow.core.framework import tensor_pb2, tensor_shape_pb2
from tensorflow.core.protobuf import meta_graph_pb2

from xlnet_tf.serving import gate, tensors, v2_tensors
from xlnet_tf.serving.errors import ServingError

DT = tensors.DT


def refused(what, call, code, *words):
    """Calls `call`, which must raise ServingError `code` whose message holds every one of `words`."""
    with pytest.raises(ServingError) as caught:
        call()
    error = caught.value
    print(f"  {what}: {error.code.name} {error.message[:150]} (expected: {code} naming {words})")
    assert error.code.name == code and all(word in error.message for word in words), error.message


def tensor_info(dtype, shape):
    info = meta_graph_pb2.TensorInfo(name="x:0", dtype=dtype)
    if shape is None:
        info.tensor_shape.unknown_rank = True
    else:
        info.tensor_shape.CopyFrom(tensor_shape_pb2.TensorShapeProto(
            dim=[tensor_shape_pb2.TensorShapeProto.Dim(size=d) for d in shape]))
    return info


def signature(**inputs):
    sig = meta_graph_pb2.SignatureDef(method_name="tensorflow/serving/predict")
    for alias, (dtype, shape) in inputs.items():
        sig.inputs[alias].CopyFrom(tensor_info(dtype, shape))
    return sig


def strings(shape):
    array = np.empty(int(np.prod(shape)), dtype=object)
    array[:] = [b"a"] * array.size
    return array.reshape(shape)


def test_wire_shapes_are_checked_before_anything_is_built():
    refused("33 dims", lambda: tensors.wire_shape([1] * 33, "input 'text'", 100), "INVALID_ARGUMENT", "33", "32",
            "input 'text'")
    refused("65 dims", lambda: tensors.wire_shape([1] * 65, "input 'text'", 100), "INVALID_ARGUMENT", "65")
    refused("a negative dim", lambda: tensors.wire_shape([2, -1], "input 'x'", 100), "INVALID_ARGUMENT", "[2,-1]")
    refused("a dim that is not a number", lambda: tensors.wire_shape([2, "3"], "input 'x'", 100), "INVALID_ARGUMENT",
            "whole numbers")
    refused("a product that overflows int64", lambda: tensors.wire_shape([2 ** 62, 4], "input 'x'", 1 << 22),
            "RESOURCE_EXHAUSTED", "--max-request-elements")
    refused("a zero beside a huge dim", lambda: tensors.wire_shape([0, 2 ** 62], "input 'x'", 1 << 22),
            "RESOURCE_EXHAUSTED", "[0,4611686018427387904]")
    dims = tensors.wire_shape([1] * 31 + [0], "input 'x'", 10)
    print(f"  32 dims, 31 of 1 and a 0: rank {len(dims)} (expected: accepted, rank 32)")
    assert len(dims) == 32


def test_tensor_protos_decode_only_what_they_may_hold():
    deep = tensor_pb2.TensorProto(dtype=DT.DT_STRING, string_val=[b"a"])
    for _ in range(40):
        deep.tensor_shape.dim.add(size=1)
    refused("a DT_STRING tensor of 40 dims", lambda: tensors.to_ndarrays({"text": deep}, 1 << 22, 1 << 26),
            "INVALID_ARGUMENT", "input 'text'", "40")
    huge = tensor_pb2.TensorProto(dtype=DT.DT_STRING)
    huge.tensor_shape.dim.add(size=0)
    huge.tensor_shape.dim.add(size=2 ** 62)
    refused("dims [0, 2**62]", lambda: tensors.to_ndarrays({"text": huge}, 1 << 22, 1 << 26), "RESOURCE_EXHAUSTED",
            "input 'text'")
    small = tensor_pb2.TensorProto(dtype=DT.DT_FLOAT, float_val=[1.0])
    small.tensor_shape.dim.add(size=3_000_000)  # 12 MB each once filled: two fit the elements, not the bytes
    refused("inputs that only together exceed the bytes", lambda: tensors.to_ndarrays(
        {"a": small, "b": small}, 1 << 23, 16 << 20), "RESOURCE_EXHAUSTED", "max_request_bytes")
    refused("inputs that only together exceed the elements", lambda: tensors.to_ndarrays(
        {"a": small, "b": small}, 5_000_000, 1 << 30), "RESOURCE_EXHAUSTED", "--max-request-elements")
    int8 = tensor_pb2.TensorProto(dtype=DT.DT_INT8, int_val=[5, -195884157])
    int8.tensor_shape.dim.add(size=2)
    refused("an int_val outside DT_INT8", lambda: tensors.to_ndarrays({"x": int8}, 100, 1000), "INVALID_ARGUMENT",
            "-195884157", "DT_INT8", "[-128, 127]")
    half = tensor_pb2.TensorProto(dtype=DT.DT_HALF, half_val=[70000])
    half.tensor_shape.dim.add(size=1)
    refused("a half_val that is not a float16 bit pattern", lambda: tensors.to_ndarray(half), "INVALID_ARGUMENT",
            "70000")
    filled = tensors.to_ndarrays({"x": tensor_pb2.TensorProto(
        dtype=DT.DT_INT32, int_val=[7], tensor_shape=tensor_shape_pb2.TensorShapeProto(
            dim=[tensor_shape_pb2.TensorShapeProto.Dim(size=3)]))}, 100, 1000)["x"]
    print(f"  one int_val for 3 elements: {filled.tolist()} (expected: [7, 7, 7], TensorFlow's fill rule)")
    assert filled.tolist() == [7, 7, 7]


def test_v2_data_is_checked_as_it_is_decoded():
    refused("v2 shape of 65 ones", lambda: v2_tensors.from_data(["a"], "BYTES", [1] * 65, "text", 1 << 22),
            "INVALID_ARGUMENT", "65")
    refused("v2 shape whose product overflows", lambda: v2_tensors.from_data(
        [], "BYTES", [4611686018427387904, 4], "text", 1 << 22), "RESOURCE_EXHAUSTED", "input 'text'")
    refused("INT8 data outside its range", lambda: v2_tensors.from_data([1, 300], "INT8", [2], "x", 100),
            "INVALID_ARGUMENT", "300", "DT_INT8")
    refused("INT32 data that is not whole", lambda: v2_tensors.from_data([1.5], "INT32", [1], "x", 100),
            "INVALID_ARGUMENT", "whole numbers")
    refused("raw bytes for a huge shape", lambda: v2_tensors.from_raw(b"", "FP32", [0, 2 ** 62], "x", 1 << 22),
            "RESOURCE_EXHAUSTED", "input 'x'")
    refused("parameters that are not an object", lambda: v2_tensors.parameters_of(5, "output 'label'"),
            "INVALID_ARGUMENT", "output 'label'", "parameters")
    print(f"  absent parameters: {v2_tensors.parameters_of(None, 'x')} (expected: {{}})")
    assert v2_tensors.parameters_of(None, "x") == {}


def test_inputs_are_checked_against_the_signature():
    sig = signature(text=(DT.DT_STRING, [-1]), x=(DT.DT_FLOAT, [-1, 1]), any=(DT.DT_FLOAT, None))
    good = {"text": strings([2]), "x": np.zeros((2, 1), np.float32), "any": np.zeros((2, 3), np.float32)}
    arrays = gate.checked_inputs("s", sig, good)
    print(f"  declared shapes met: {sorted((a, v.shape) for a, v in arrays.items())} (expected: accepted)")
    refused("rank 2 text for [-1]", lambda: gate.checked_inputs("s", sig, {**good, "text": strings([2, 2])}),
            "INVALID_ARGUMENT", "input 'text'", "[2,2]", "[-1]")
    refused("rank 0 text for [-1]", lambda: gate.checked_inputs("s", sig, {**good, "text": strings([])}),
            "INVALID_ARGUMENT", "input 'text'", "[]")
    refused("[2,3] for [-1,1]", lambda: gate.checked_inputs("s", sig, {**good, "x": np.zeros((2, 3), np.float32)}),
            "INVALID_ARGUMENT", "input 'x'", "[-1,1]")
    refused("rank 33 for an unknown rank", lambda: gate.checked_inputs(
        "s", sig, {**good, "any": np.zeros([1] * 33, np.float32)}), "INVALID_ARGUMENT", "input 'any'", "33")
    limits = gate.Limits(elements=5, bytes=1000)
    refused("more elements than the request may hold", lambda: gate.checked_inputs("s", sig, good, limits),
            "RESOURCE_EXHAUSTED", "--max-request-elements")
    big_text = {**good, "text": np.array([b"x" * 600, b"y" * 600], dtype=object)}
    refused("more string bytes than the request may hold", lambda: gate.checked_inputs(
        "s", sig, big_text, gate.Limits(elements=100, bytes=1000)), "RESOURCE_EXHAUSTED", "--max-request-bytes")


def _example(**features):
    example = example_pb2.Example()
    for name, value in features.items():
        if isinstance(value, int):
            example.features.feature[name].int64_list.value.append(value)
        else:
            example.features.feature[name].bytes_list.value.extend(value)
    return example.SerializeToString()


@pytest.mark.parametrize("bad, words", [
    (_example(other=[b"x"]), ("Index: 4", "required but could not be found")),
    (_example(text=5), ("Index: 4", "Data types don't match", "int64")),
    (_example(text=[b"a", b"b"]), ("Index: 4", "Values size: 2")),
    (_example(text=[b"\xff"]), ("Index: 4", "UTF-8")),
    (b"\xff\xff\xff", ("Index: 4", "Can't parse")),
], ids=["missing", "int64", "two values", "not UTF-8", "not an Example"])
def test_every_example_is_checked_with_its_index_in_the_request(bad, words):
    examples = np.array([_example(text=[b"fine"])] * 4 + [bad] + [_example(text=[b"fine"])], dtype=object)
    refused("the fifth Example bad", lambda: gate.check_examples(examples, ["text"]), "INVALID_ARGUMENT", *words)


def test_versions_as_text():
    for text, want in (("7", 7), ("0007", 7), ("9223372036854775807", 2 ** 63 - 1)):
        got = gate.version_number(text)
        print(f"  version {text!r}: {got} (expected: {want})")
        assert got == want
    for text in ("9223372036854775808", "1" * 5000, "-1", "1.5", "²", ""):
        refused(f"version {text[:20]!r} ({len(text)} characters)", lambda: gate.version_number(text),
                "INVALID_ARGUMENT", "Failed to convert version")


def test_version_directories_are_numbers_that_fit_int64():
    """A base path's children named by digits that do not fit int64 (or thousands of them, beyond Python's int()
    limit; an object store takes such names) are not versions: the poller lists the others instead of failing."""
    from xlnet_tf import files
    from xlnet_tf.serving.manager import list_versions

    base = "ram://gate-versions/model"
    names = ["1", "0007", "9223372036854775807", "9223372036854775808", "9" * 5000, "0" * 5000 + "1", "²"]
    for name in names:
        files.write_bytes(files.join(base, name, "saved_model.pb"), b"x")
    found = sorted(list_versions(base))
    want = [1, 7, 2 ** 63 - 1]
    print(f"  versions listed among {len(names)} numeric-looking names: {found} (expected: {want})")
    assert found == want
