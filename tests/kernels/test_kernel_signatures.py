"""The kernels' public functions stay small enough to read: options travel as objects, not as long lists."""

from __future__ import annotations

import inspect

import pytest

import service.kernels

# Every parameter counts (positional, keyword-only, defaulted): past eight, a call can no longer be read
# without the signature beside it, and the options belong in an object (AttentionOptions, Truncation…).
MAX_PARAMETERS = 8

PUBLIC_FUNCTIONS = sorted(
    name for name in service.kernels.__all__ if inspect.isfunction(getattr(service.kernels, name))
)


def test_the_kernels_export_functions_to_check() -> None:
    assert {"attention", "multi_head_attention", "softmax", "sample"} <= set(PUBLIC_FUNCTIONS)


@pytest.mark.parametrize("name", PUBLIC_FUNCTIONS)
def test_no_public_kernel_function_takes_more_than_eight_parameters(name: str) -> None:
    parameters = inspect.signature(getattr(service.kernels, name)).parameters
    assert len(parameters) <= MAX_PARAMETERS, f"{name} takes {len(parameters)}: {', '.join(parameters)}"
