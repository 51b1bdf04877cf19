"""gunicorn settings for `make run`; every value can be overridden from the environment."""

from __future__ import annotations

import os

# One BLAS thread per worker: the workers already use the cores, and BLAS's own threads would
# oversubscribe them. This must be set before NumPy is first imported, which happens when the
# app module is loaded by each worker.
for _name in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_name, os.environ.get("BLAS_THREADS", "1"))

bind = f"{os.environ.get('HOST', '127.0.0.1')}:{os.environ.get('PORT', '8000')}"
workers = int(os.environ.get("WEB_CONCURRENCY", os.cpu_count() or 1))
# Two threads per worker make gunicorn use its gthread worker, which keeps connections alive
# (the sync worker closes each one) and lets a slow upload wait without holding a whole worker;
# NumPy releases the GIL in the arithmetic. Chosen by `make bench-tune`, see the README.
threads = int(os.environ.get("GUNICORN_THREADS", "2"))
timeout = int(os.environ.get("GUNICORN_TIMEOUT", "30"))
keepalive = int(os.environ.get("GUNICORN_KEEPALIVE", "5"))
accesslog = "-"
