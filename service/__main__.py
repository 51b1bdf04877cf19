"""``python -m service serve``: the same command as the ``attention-service`` console script."""

from __future__ import annotations

from service.server.cli import main

raise SystemExit(main())
