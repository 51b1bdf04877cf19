"""The benchmark suite: ``python -m bench`` (``make bench``), ``python -m bench --smoke`` for CI.

The floor is measured in this process with the BLAS threads a gunicorn worker gets (gunicorn_settings.py
sets them the same way), and they must be set before NumPy is first imported: here, since every entry
point (``bench``, ``bench.tune``) imports this package first.
"""

from __future__ import annotations

import os

for _name in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_name, os.environ.get("BLAS_THREADS", "1"))
