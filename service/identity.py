"""The service's name and version, as the contract's ``info``, the index and /v2's server metadata say."""

from __future__ import annotations

API_TITLE = "Attention service"
API_VERSION = "1.0.0"
