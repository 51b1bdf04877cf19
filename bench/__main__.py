"""``python -m bench [--smoke] [--markdown FILE]``: see bench/run.py."""

from __future__ import annotations

import os

# The floor is measured in this process with the BLAS threads a worker gets (gunicorn.conf.py sets
# them the same way), and they must be set before NumPy is first imported.
for _name in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_name, os.environ.get("BLAS_THREADS", "1"))

from bench.run import main  # noqa: E402

raise SystemExit(main())
