"""The benchmark suite: ``python -m bench`` (``make bench``), ``python -m bench --smoke`` for CI."""
