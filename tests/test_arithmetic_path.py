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
from numpy._core._multiarray_umath import __cpu_dispatch__, __cpu_features__

DISABLED_FEATURES = os.environ.get("NPY_DISABLE_CPU_FEATURES", "").replace(",", " ").split()
OPENBLAS_CORETYPE = os.environ.get("OPENBLAS_CORETYPE", "")


@pytest.mark.skipif(not DISABLED_FEATURES, reason="NPY_DISABLE_CPU_FEATURES is not set")
def test_numpy_dispatches_without_the_disabled_features() -> None:
    for feature in DISABLED_FEATURES:
        assert feature in __cpu_dispatch__, f"NumPy does not dispatch on {feature}: {__cpu_dispatch__}"
        assert __cpu_features__[feature] is False, f"{feature} is still in use"


@pytest.mark.skipif(not OPENBLAS_CORETYPE, reason="OPENBLAS_CORETYPE is not set")
def test_openblas_runs_the_pinned_core() -> None:
    # NumPy's wheels bundle scipy-openblas, whose symbols carry a prefix and a 64-bit-integer suffix.
    (library,) = (Path(np.__file__).parent.parent / "numpy.libs").glob("libscipy_openblas*.so*")
    get_corename = ctypes.CDLL(str(library)).scipy_openblas_get_corename64_
    get_corename.restype = ctypes.c_char_p
    assert get_corename().decode().lower() == OPENBLAS_CORETYPE.lower()
