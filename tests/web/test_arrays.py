"""The one-call array field: every rejection, and exact conversion of what it accepts."""

from __future__ import annotations

import numpy as np
import pytest
from marshmallow import Schema, ValidationError

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
