"""The tests' tables of flat keywords, as the kernels take them: options gathered into their objects.

A table row such as ``{"scale": math.inf}`` or ``{"top_k": 0, "num_samples": 3}`` stays readable; these
build the :class:`AttentionOptions` or :class:`Truncation` from it where the call is made, so that a bad
option raises inside the test's ``pytest.raises`` as the call would.
"""

from __future__ import annotations

from typing import Any

from service.kernels import AttentionOptions, Truncation


def with_options(arguments: dict[str, Any]) -> dict[str, Any]:
    """Keywords for :func:`attention`: the option fields in one ``options``, the rest (dtype…) as given."""
    fields = AttentionOptions.__dataclass_fields__
    options = AttentionOptions(**{name: value for name, value in arguments.items() if name in fields})
    rest = {name: value for name, value in arguments.items() if name not in fields}
    return {"options": options, **rest}


def with_truncation(arguments: dict[str, Any]) -> dict[str, Any]:
    """Keywords for :func:`softmax` and :func:`sample`: top_k, top_p and min_p in one ``truncation``."""
    fields = Truncation.__dataclass_fields__
    truncation = Truncation(**{name: value for name, value in arguments.items() if name in fields})
    return {
        "truncation": truncation,
        **{name: value for name, value in arguments.items() if name not in fields},
    }
