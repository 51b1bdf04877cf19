"""The array types of the results (the result classes themselves are generated, in ``_models.py``).

Where the service's JSON would hold null, the arrays hold IEEE values: -inf for a hidden score, NaN for
the log-probability of an unscored position or an empty row's log-sum-exp; ranks of unscored positions
are 0. Arrays answered as binary tensors are read-only views of the answer's bytes (copy one to change it).
"""

from __future__ import annotations

from typing import Any

import numpy as np
from numpy.typing import NDArray

FloatArray = NDArray[np.floating[Any]]
IntArray = NDArray[np.integer[Any]]
BoolArray = NDArray[np.bool_]
