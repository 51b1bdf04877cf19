"""gunicorn's documented "Custom Application" serving the service (``attention-service serve``: cli.py).

Apart from the command line because importing gunicorn's config module reads ``WEB_CONCURRENCY`` (with a bare
``int()``): the command imports this only once the settings module has checked it.
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from typing import Any

import gunicorn.util
from gunicorn.app.base import BaseApplication

from service.server import DEFAULT_APP, PROG, SETTINGS_MODULE


class AttentionServer(BaseApplication):  # type: ignore[misc]  # gunicorn has no type hints
    """gunicorn serving ``app`` (``module:callable`` as gunicorn takes it) with the service's settings."""

    def __init__(self, app: str = DEFAULT_APP, overrides: Mapping[str, Any] | None = None) -> None:
        self.app_uri = app
        self.overrides = dict(overrides or {})
        super().__init__(prog=PROG)

    def load_config(self) -> None:
        settings = vars(importlib.import_module(SETTINGS_MODULE))
        from_environment = self.cfg.parser().parse_args(self.cfg.get_cmd_args_from_env())
        chosen = {name: value for name, value in settings.items() if name in self.cfg.settings}
        chosen |= {name: value for name, value in vars(from_environment).items() if value is not None}
        chosen |= self.overrides
        for name, value in chosen.items():
            if name in self.cfg.settings:
                self.cfg.set(name, value)
        self.cfg.set("default_proc_name", self.app_uri)

    def load(self) -> Any:
        return gunicorn.util.import_app(self.app_uri)
