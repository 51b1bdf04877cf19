"""``python -m service.contract``: print the OpenAPI contract generated from the schemas."""

from __future__ import annotations

import sys

from service import create_app
from service.web.spec import spec_yaml


def render_contract() -> str:
    """The contract exactly as ``/openapi.yaml`` serves it and ``openapi.yaml`` commits it."""
    app = create_app()
    with app.app_context():
        return spec_yaml(app.extensions["attention_api"])


if __name__ == "__main__":
    sys.stdout.write(render_contract())
