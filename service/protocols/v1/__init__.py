"""/v1: the JSON API. One module per endpoint (its route and view), the worked examples, and the JSON body's
way to the typed request (parsing.py).

An endpoint module is found, not listed: :func:`endpoint_routes` collects the ``routes`` of every module here
that has one, by module name, so a new endpoint is one new module (and its declaration).
"""

from __future__ import annotations

import importlib
import pkgutil

from service.web.routes import Routes


def endpoint_routes() -> list[Routes]:
    """The routes of every /v1 endpoint module, in the order of the modules' names."""
    found: list[Routes] = []
    for info in sorted(pkgutil.iter_modules(__path__), key=lambda info: info.name):
        routes = getattr(importlib.import_module(f"{__name__}.{info.name}"), "routes", None)
        if isinstance(routes, Routes):
            found.append(routes)
    return found
