"""The error responses every compute endpoint documents."""

from __future__ import annotations

# 408: the body did not arrive in time; 503: overloaded (no compute slot or memory soon enough, with
# Retry-After); 504: the computation outlived COMPUTE_DEADLINE_SECONDS (service/web/admission.py). 422
# is documented with the request body; the optional API-key requirement is the contract's rule for /v1/*.
COMPUTE_ERRORS = (400, 401, 408, 413, 415, 503, 504)
