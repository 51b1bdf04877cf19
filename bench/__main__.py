"""``python -m bench [--smoke] [--markdown FILE] [--overhead | --worst-cases]``: see bench/run.py,
bench/overhead.py and bench/worst_cases.py."""

from __future__ import annotations

import sys

if "--overhead" in sys.argv[1:]:
    # In-process only: needs neither gunicorn nor the Python client that the full run imports.
    from bench.overhead import main as overhead

    raise SystemExit(overhead(smoke="--smoke" in sys.argv[1:]))
if "--worst-cases" in sys.argv[1:]:
    # In-process only, like --overhead: each endpoint's most expensive accepted body, in CPU seconds.
    from bench.worst_cases import main as worst_cases

    raise SystemExit(worst_cases(smoke="--smoke" in sys.argv[1:]))

from bench.run import main  # bench/__init__.py has set the BLAS threads

raise SystemExit(main())
