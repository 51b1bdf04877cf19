"""``python -m service.contract``: print the OpenAPI contract generated from the schemas."""

from __future__ import annotations

import sys

from service import create_app
from service.site.meta import ROUTES_EXTENSION
from service.site.spec import build_spec, spec_yaml


def render_contract() -> str:
    """The contract exactly as ``/openapi.yaml`` serves it and ``openapi.yaml`` commits it."""
    app = create_app()
    return spec_yaml(build_spec(app.extensions[ROUTES_EXTENSION]))


if __name__ == "__main__":
    sys.stdout.write(render_contract())
