"""``python -m bench [--smoke] [--markdown FILE] [--overhead]``: see bench/run.py and bench/overhead.py."""

from __future__ import annotations

import sys

if "--overhead" in sys.argv[1:]:
    # In-process only: needs neither gunicorn nor the Python client that the full run imports.
    from bench.overhead import main as overhead

    raise SystemExit(overhead(smoke="--smoke" in sys.argv[1:]))

from bench.run import main  # bench/__init__.py has set the BLAS threads

raise SystemExit(main())
