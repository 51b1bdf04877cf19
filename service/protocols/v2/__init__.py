"""/v2: the Open Inference Protocol codec (tensors ⇄ arrays, parameters ⇄ options, binary framing)."""

from __future__ import annotations

from service.protocols.v2.views import routes

__all__ = ["routes"]
