"""/v1: the JSON API. One route per declared model (views.py, made from the model's declaration), the
worked examples' answers (examples.py), and the JSON body's way to the typed request (parsing.py)."""

from __future__ import annotations

from service.protocols.v1.views import endpoint_routes

__all__ = ["endpoint_routes"]
