"""Readiness: a compute slot is free and a tiny attention computation is right (/readyz, /v2's ready
routes)."""

from __future__ import annotations

import numpy as np
from flask import current_app

from service.kernels import attention
from service.web.admission import admission_of
from service.web.problems import Problem

# The course's worked example: one query over two keys; softmax([0, 1/√2]) weighs the values.
_READY_QUERY = np.array([0.0, 1.0])
_READY_KEYS = np.array([[1.0, 0.0], [0.0, 1.0]])
_READY_VALUES = np.array([[6.0, 0.0], [0.0, 3.0]])
_READY_WEIGHTS = np.array([1.0, np.exp(2**-0.5)]) / (1.0 + np.exp(2**-0.5))


def self_check() -> None:
    """Raise a 503 problem unless a compute slot is free and a tiny attention computation is right.

    A worker whose slots are all taken says it is not ready, so a balancer sends new work elsewhere; it is
    ready again as soon as a computation ends.
    """
    admission = admission_of(current_app)
    if admission is not None and not admission.has_free_slot():
        raise Problem(
            503,
            f"Every compute slot of this worker is busy ({admission.busy_slots} of "
            f"{admission.limits.compute_slots}, COMPUTE_SLOTS); it is ready again when one frees.",
            slug="not-ready",
            headers={"Retry-After": "1"},
        )
    result = attention(_READY_QUERY, _READY_KEYS, _READY_VALUES, include={"weights"})
    if result.weights is None or not np.allclose(result.weights, _READY_WEIGHTS, rtol=1e-12, atol=0.0):
        raise Problem(503, "The self-check computation gave a wrong answer.", slug="not-ready")
