"""The /v2 codec's tensor functions on their own: no copy when it can be avoided, exact bytes out."""

from __future__ import annotations

import numpy as np
import pytest
import yaml

from service.protocols.v2.models import MODELS
from service.protocols.v2.tensors import InputSpec, OutputTensor, decode_inputs, encode_outputs, split_body
from service.web.json_provider import dumps_bytes
from service.web.problems import Problem
from tests.conftest import CONTRACT_PATH

SPECS = {"x": InputSpec(("FP64", "FP32"), (-1,)), "m": InputSpec(("BOOL",), (-1,), required=False)}


def _binary(name: str, size: int, shape: list[int], datatype: str = "FP64") -> dict[str, object]:
    return {"name": name, "shape": shape, "datatype": datatype, "parameters": {"binary_data_size": size}}


def test_aligned_binary_inputs_are_views_of_the_body_and_unaligned_ones_are_copied() -> None:
    values = np.arange(6, dtype="<f8")
    for padding in (0, 3):
        data = memoryview(bytes(padding) + values.tobytes())[padding:]
        where = np.frombuffer(data, dtype=np.uint8)
        array = decode_inputs([_binary("x", 48, [2, 3])], data, SPECS)["x"]
        np.testing.assert_array_equal(array, values.reshape(2, 3))
        assert array.ctypes.data % 8 == 0  # the arithmetic always gets aligned rows
        assert np.shares_memory(array, where) == (where.ctypes.data % 8 == 0)


def test_bool_tensors_are_one_byte_each() -> None:
    data = memoryview(np.arange(6, dtype="<f8").tobytes() + bytes([1, 0, 1]))
    arrays = decode_inputs([_binary("x", 48, [6]), _binary("m", 3, [3], "BOOL")], data, SPECS)
    assert arrays["m"].tolist() == [True, False, True]


def test_fp32_json_data_becomes_float32() -> None:
    array = decode_inputs(
        [{"name": "x", "shape": [2], "datatype": "FP32", "data": [0.1, 2]}], memoryview(b""), SPECS
    )
    assert array["x"].dtype == np.float32
    assert array["x"][0] == np.float32(0.1)


def test_outputs_are_written_little_endian_from_the_arrays_and_nulls_in_json() -> None:
    weights = np.array([[0.25, 0.75], [1.0, 0.0]])
    scores = np.array([1.5, -np.inf])
    described, chunks = encode_outputs(
        [OutputTensor("weights", weights.T, binary=True), OutputTensor("scores", scores, binary=False)]
    )
    assert chunks == [np.ascontiguousarray(weights.T).astype("<f8").tobytes()]
    assert described[0] == {
        "name": "weights",
        "datatype": "FP64",
        "shape": [2, 2],
        "parameters": {"binary_data_size": 32},
    }
    assert dumps_bytes(described[1]) == b'{"name":"scores","datatype":"FP64","shape":[2],"data":[1.5,null]}'


def test_the_header_length_splits_the_body() -> None:
    header, binary = split_body(b'{"a": 1}xy', "8")
    assert (bytes(header), bytes(binary)) == (b'{"a": 1}', b"xy")
    header, binary = split_body(b'{"a": 1}', None)
    assert (bytes(header), bytes(binary)) == (b'{"a": 1}', b"")


# "²" (byte 0xB2 of a Latin-1 header) and an Arabic-Indic one are digits to str.isdigit, not to int():
# once a 500.
@pytest.mark.parametrize("header_length", ["0", "11", "-4", "0x4", "abc", "1" * 20, "²", "1²", "\u0661"])
def test_header_lengths_outside_the_body_or_not_numbers_are_refused(header_length: str) -> None:
    with pytest.raises(Problem) as refused:
        split_body(b'{"a": 1}xy', header_length)
    assert refused.value.status == 400
    assert list(refused.value.errors or {}) == ["Inference-Header-Content-Length"]


def test_every_v2_infer_operation_documents_both_bodies_the_header_and_its_errors() -> None:
    paths = yaml.safe_load(CONTRACT_PATH.read_text())["paths"]
    infer = [path for path in paths if path.startswith("/v2/") and path.endswith("/infer")]
    assert len(infer) == 2 * len(MODELS)  # every model, with and without /versions/1
    for path in infer:
        operation = paths[path]["post"]
        assert set(operation["requestBody"]["content"]) == {"application/json", "application/octet-stream"}
        assert set(operation["responses"]["200"]["content"]) == {
            "application/json",
            "application/octet-stream",
        }
        assert "Inference-Header-Content-Length" in operation["responses"]["200"]["headers"]
        assert any(p["name"] == "Inference-Header-Content-Length" for p in operation["parameters"])
        assert {"400", "413", "415", "422"} <= set(operation["responses"])


def test_nested_json_data_is_read_only_in_the_declared_shape() -> None:
    tensor = {"name": "x", "shape": [2, 3], "datatype": "FP64"}
    flat = decode_inputs([{**tensor, "data": [0, 1, 2, 3, 4, 5]}], memoryview(b""), SPECS)["x"]
    nested = decode_inputs([{**tensor, "data": [[0, 1, 2], [3, 4, 5]]}], memoryview(b""), SPECS)["x"]
    np.testing.assert_array_equal(flat, [[0, 1, 2], [3, 4, 5]])
    np.testing.assert_array_equal(nested, flat)
    with pytest.raises(Problem) as refused:
        decode_inputs([{**tensor, "data": [[0, 1], [2, 3], [4, 5]]}], memoryview(b""), SPECS)
    assert refused.value.status == 400
    assert list(refused.value.errors) == ["x"]
