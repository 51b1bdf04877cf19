"""The narrowed-arithmetic CI step (``make test-other-arithmetic``) really runs on another arithmetic path.

NumPy ignores a name it does not dispatch on (with an ImportWarning nobody sees), and OpenBLAS an unknown
core, so a misspelt setting would rerun the same path and prove nothing. When the settings are present,
these tests check that they took effect; otherwise they skip.
"""

from __future__ import annotations

import ctypes
import os
from pathlib import Path

import numpy as np
import pytest

DISABLED_FEATURES = os.environ.get("NPY_DISABLE_CPU_FEATURES", "").replace(",", " ").split()
OPENBLAS_CORETYPE = os.environ.get("OPENBLAS_CORETYPE", "")


@pytest.mark.skipif(not DISABLED_FEATURES, reason="NPY_DISABLE_CPU_FEATURES is not set")
def test_numpy_dispatches_without_the_disabled_features() -> None:
    # NumPy's public report of its SIMD dispatch at run time: the targets it uses ("found") and those it
    # could dispatch to but does not here ("not found").
    simd = np.show_config(mode="dicts")["SIMD Extensions"]  # type: ignore[no-untyped-call]
    found, not_found = simd.get("found", []), simd.get("not found", [])  # a list left out when empty
    dispatched = {*found, *not_found}
    for feature in DISABLED_FEATURES:
        assert feature in dispatched, f"NumPy does not dispatch on {feature}: {sorted(dispatched)}"
        assert feature not in found, f"{feature} is still in use"


@pytest.mark.skipif(not OPENBLAS_CORETYPE, reason="OPENBLAS_CORETYPE is not set")
def test_openblas_runs_the_pinned_core() -> None:
    # NumPy's wheels bundle scipy-openblas, whose symbols carry a prefix and a 64-bit-integer suffix.
    (library,) = (Path(np.__file__).parent.parent / "numpy.libs").glob("libscipy_openblas*.so*")
    get_corename = ctypes.CDLL(str(library)).scipy_openblas_get_corename64_
    get_corename.restype = ctypes.c_char_p
    assert get_corename().decode().lower() == OPENBLAS_CORETYPE.lower()
