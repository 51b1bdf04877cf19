"""The one-call array field: every rejection, and exact conversion of what it accepts."""

from __future__ import annotations

import numpy as np
import pytest
from marshmallow import Schema, ValidationError

from service.protocols.declarations import arrays as arrays_module
from service.protocols.declarations.arrays import Array, array_json_schema


class Arrays(Schema):
    numbers = Array(min_rank=2, max_rank=3, shape="[..., n, d]")
    integers = Array(kind="integer", max_rank=2)
    flags = Array(kind="boolean", max_rank=2)


def messages(**data: object) -> dict[str, list[str]]:
    with pytest.raises(ValidationError) as caught:
        Arrays().load(data)
    result: dict[str, list[str]] = caught.value.messages  # type: ignore[assignment]
    return result


@pytest.mark.parametrize(
    ("field", "value", "says"),
    [
        ("numbers", [[1, 2], [3]], "ragged"),
        ("numbers", [[1, 2], 3], "ragged"),
        ("numbers", [[1, 2], [3, [4]]], "ragged"),
        ("numbers", [[1, "2"]], "string"),
        ("numbers", [[1, None]], "null"),
        ("numbers", [[1, True]], "boolean"),
        ("numbers", [[1, {"a": 1}]], "object"),
        ("numbers", [1, 2], "rank 2 to 3"),
        ("numbers", [[[[1]]]], "rank 4 or more"),
        ("numbers", 5, "a scalar"),
        ("numbers", "abc", "a scalar"),
        ("numbers", [[]], "empty dimension"),
        ("numbers", [], "empty dimension"),
        ("numbers", [[1.0, float("nan")]], "non-finite"),
        ("numbers", [[1.0, float("inf")]], "non-finite"),
        ("numbers", [[10**400]], "out of range"),
        ("integers", [1, 2.5], "fractional"),
        ("integers", [1, True], "boolean"),
        ("integers", [2**64], "out of range"),
        ("integers", [2.0**70], "out of range"),
        ("flags", [True, 1], "booleans"),
        ("flags", [[True], [False, True]], "ragged"),
        ("flags", [0, 1], "booleans"),
    ],
)
def test_rejections_name_the_problem(field: str, value: object, says: str) -> None:
    errors = messages(**{field: value})
    assert list(errors) == [field]
    assert says in errors[field][0]


def test_shape_hint_is_in_the_message() -> None:
    assert "[..., n, d]" in messages(numbers=[[1, 2], [3]])["numbers"][0]


def test_accepted_values_convert_exactly() -> None:
    loaded = Arrays().load(
        {"numbers": [[1, 2.5], [-3, 1e-300]], "integers": [[1, -100], [3.0, 4]], "flags": [True, False]}
    )
    assert loaded["numbers"].dtype == np.float64
    np.testing.assert_array_equal(loaded["numbers"], np.array([[1.0, 2.5], [-3.0, 1e-300]]))
    assert loaded["integers"].dtype == np.int64
    np.testing.assert_array_equal(loaded["integers"], [[1, -100], [3, 4]])
    assert loaded["flags"].dtype == np.bool_
    np.testing.assert_array_equal(loaded["flags"], [True, False])


def test_large_integers_survive_exactly() -> None:
    assert Arrays().load({"integers": [2**62 + 1]})["integers"][0] == 2**62 + 1


def test_json_schema_lists_each_allowed_rank() -> None:
    schema = array_json_schema(Arrays().fields["numbers"])  # type: ignore[arg-type]
    depths = []
    for variant in schema["anyOf"]:
        depth = 0
        while variant.get("type") == "array":
            variant, depth = variant["items"], depth + 1
        assert variant == {"type": "number"}
        depths.append(depth)
    assert depths == [2, 3]
    nullable = array_json_schema(Array(kind="integer", min_rank=1, max_rank=1, nullable=True))
    assert nullable == {"type": "array", "items": {"type": ["integer", "null"]}, "minItems": 1}


class Scalars(Schema):
    slopes = Array(min_rank=0, max_rank=2)


def test_a_field_that_allows_rank_0_takes_a_scalar_and_refuses_others_with_a_message() -> None:
    loaded = Scalars().load({"slopes": 0.25})["slopes"]
    assert loaded.shape == ()
    assert loaded.dtype == np.float64
    assert float(loaded) == 0.25
    for bad, says in (("abc", "string"), (None, "null"), (True, "boolean"), ({"a": 1}, "object")):
        with pytest.raises(ValidationError) as caught:
            Scalars().load({"slopes": bad})
        assert says in str(caught.value.messages)


# --- Large arrays: scanned and converted a block at a time -------------------------------------------------


@pytest.fixture
def blocks_of_4(monkeypatch: pytest.MonkeyPatch) -> None:
    """Blocks of 4 elements, so that small values take the path of large ones (65,536 elements a block)."""
    monkeypatch.setattr(arrays_module, "BLOCK_ELEMENTS", 4)


@pytest.mark.usefixtures("blocks_of_4")
@pytest.mark.parametrize(
    ("field", "value", "says"),
    [
        ("numbers", [[1, 2], [3, 4], [5, 6], [7]], "ragged"),  # the short row in the last block
        ("numbers", [[1, 2], [3, 4], [5], [6]], "ragged"),  # a whole block of shorter rows (would broadcast)
        ("numbers", [[1, 2], [3, 4], [5, 6], [7, 8], [9]], "ragged"),
        ("numbers", [[1, 2], [3, 4], [5, 6], [7, 8, 9]], "ragged"),  # a longer one
        ("numbers", [[1, 2], [3, 4], [5, 6], 7], "ragged"),
        ("numbers", [[1, 2], [3, 4], [5, 6], [7, [8]]], "ragged"),
        ("numbers", [[1, 2, 3, 4, 5], [1, 2, 3, 4]], "ragged"),  # rows larger than a block, one short
        ("numbers", [[[1, 2, 3], [4, 5, 6]], [[1, 2, 3], [4, 5]]], "ragged"),
        ("numbers", [[1, 2], [3, 4], [5, 6], [7, "8"]], "string"),  # in the last block of the scan
        ("numbers", [[1, 2], [3, 4], [5, 6], [7, None]], "null"),
        ("numbers", [[1, 2], [3, 4], [5, 6], [7, float("nan")]], "non-finite"),
        ("numbers", [[1, 2], [3, 4], [5, 6], [7, 10**400]], "out of range"),
        # raggedness is reported first, as by one np.asarray call, wherever the number out of range is
        ("numbers", [[10**400, 2], [3, 4], [5, 6], [7]], "ragged"),
        ("numbers", [[[10**400, 2], [3, 4]], [[5, 6], [7, 8]], [[1, 2], [3]]], "ragged"),
        ("integers", [[2**64, 1], [1, 2], [3, 4], [5]], "ragged"),
        ("integers", [1, 2, 3, 4, 5, 2**64], "out of range"),
        ("integers", [1, 2, 3, 4, 5, 6.5], "fractional"),
        ("flags", [True, False, True, False, 1], "booleans"),
        ("flags", [[True, False], [True, False], [True, False], [True]], "ragged"),
    ],
)
def test_rejections_in_blocks_name_the_problem(field: str, value: object, says: str) -> None:
    errors = messages(**{field: value})
    assert list(errors) == [field]
    assert says in errors[field][0]


@pytest.mark.usefixtures("blocks_of_4")
@pytest.mark.parametrize(
    "shape",
    [(9, 1), (9, 2), (2, 9), (1, 9), (3, 5), (3, 2, 2), (2, 3, 5), (5, 1, 1), (1, 1, 9), (4, 1)],
)
def test_values_in_blocks_convert_exactly_as_one_call(shape: tuple[int, ...]) -> None:
    values = np.random.default_rng(sum(shape)).normal(size=shape)
    loaded = Arrays().load({"numbers": values.tolist()})["numbers"]
    assert loaded.dtype == np.float64
    np.testing.assert_array_equal(loaded, np.asarray(values.tolist(), dtype=np.float64))
    flat = list(range(-4, 7))
    np.testing.assert_array_equal(Arrays().load({"integers": flat})["integers"], np.array(flat, np.int64))


@pytest.mark.usefixtures("blocks_of_4")
def test_no_conversion_call_takes_more_than_a_block(monkeypatch: pytest.MonkeyPatch) -> None:
    sizes: list[int] = []
    asarray = np.asarray

    def counting(value: object, *args: object, **kwargs: object) -> np.ndarray:
        array = asarray(value, *args, **kwargs)  # type: ignore[call-overload]
        sizes.append(array.size)
        return array

    monkeypatch.setattr(arrays_module.np, "asarray", counting)
    values = np.arange(2 * 3 * 5, dtype=np.float64).reshape(2, 3, 5)
    np.testing.assert_array_equal(Arrays().load({"numbers": values.tolist()})["numbers"], values)
    assert sizes == [4, 1] * 6  # entries of 15 and rows of 5 are larger than a block: row by row, in blocks
    sizes.clear()
    Arrays().load({"numbers": np.ones((10, 2)).tolist()})
    assert sizes == [2] * 10  # a row of 2 is 3 things to walk, its list too: one row per call
    sizes.clear()
    Arrays().load({"numbers": np.ones((8, 1)).tolist()})
    assert sizes == [2] * 4  # a row of 1 is 2: two rows per call
    sizes.clear()
    # Nested one deep per dimension (a /v2 tensor [n, 1, …, 1]): each number comes with its lists, and
    # 65,536 such rows nested 31 deep took one 0.6 s call
    Arrays().load({"numbers": np.ones((6, 1, 1)).tolist()})
    assert sizes == [1] * 6  # 3 a row: one row per call
