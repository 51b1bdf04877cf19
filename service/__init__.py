"""The attention service: the core arithmetic of causal language models over HTTP (``create_app``)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from flask import Flask


def create_app(config: Mapping[str, Any] | None = None) -> Flask:
    """Build the app: settings from the environment, then ``config`` on top (tests pass overrides here)."""
    # Imported here, not above: `import service` (the console script, the gunicorn settings, the kernels used
    # as a library) must load neither Flask nor NumPy, which has to come after BLAS_THREADS is applied.
    from flask import Flask

    from service.settings import Settings
    from service.web.access_log import install_access_log
    from service.web.admission import install_admission
    from service.web.api_keys import install_api_keys
    from service.web.body import install_body_counting
    from service.web.cors import enable_cors
    from service.web.inference import install_inference_metrics
    from service.web.json_provider import OrjsonProvider
    from service.web.memory import install_memory_release
    from service.web.metrics import install_metrics
    from service.web.problems import register_error_handlers
    from service.web.request_clock import install_request_clock
    from service.web.request_id import install_request_ids
    from service.web.tracing import install_tracing

    app = Flask(__name__, static_folder=None)  # /static is served by service.site.pages
    app.json = OrjsonProvider(app)
    app.config.update(Settings.from_env().as_flask_config())
    if config is not None:
        app.config.update(config)

    from service.protocols.v1 import endpoint_routes
    from service.protocols.v2 import repository, statistics
    from service.protocols.v2 import routes as v2_routes
    from service.site import meta, pages

    # Order matters: the request id and clock come first, so even a 401 carries the id and is timed.
    install_request_clock(app)
    install_request_ids(app)
    install_tracing(app)  # the server span starts here, with the request id (OTEL_* variables; else nothing)
    install_body_counting(app)  # before the access log and metrics, which report the bytes read
    # Before admission: a client without a key is told so (401), whatever its body (not 413 for its size).
    install_api_keys(app)
    install_admission(app)  # after body counting: it gives each admitted body its deadline
    install_access_log(app)
    install_metrics(app)
    install_memory_release(app)
    install_inference_metrics(app)  # last: a model request's time starts with its view

    register_error_handlers(app)
    # In the contract's order: the /v1 computations (every endpoint module, by name), the probes and pages,
    # then /v2 and its Triton extensions (the model repository, the statistics).
    route_sets = [
        *endpoint_routes(),
        meta.routes,
        pages.routes,
        v2_routes,
        repository.routes,
        statistics.routes,
    ]
    for routes in route_sets:
        app.register_blueprint(routes.blueprint)
    app.extensions[meta.ROUTES_EXTENSION] = route_sets
    enable_cors(app)
    return app
