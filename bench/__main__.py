"""``python -m bench [--smoke] [--markdown FILE]``: see bench/run.py."""

from __future__ import annotations

from bench.run import main  # bench/__init__.py has set the BLAS threads

raise SystemExit(main())
