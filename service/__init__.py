"""The attention service: masked attention, softmax with temperature and log-likelihood over HTTP."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from flask import Flask

from service.settings import Settings
from service.web.access_log import install_access_log
from service.web.admission import install_admission
from service.web.api_keys import SCHEME_NAME, SECURITY_SCHEME, install_api_keys
from service.web.body import install_body_counting
from service.web.cors import enable_cors
from service.web.json_provider import OrjsonProvider
from service.web.memory import install_memory_release
from service.web.metrics import install_metrics
from service.web.problems import register_error_handlers
from service.web.request_clock import install_request_clock
from service.web.request_id import install_request_ids
from service.web.spec import SPEC_CONFIG, Api


def create_app(config: Mapping[str, Any] | None = None) -> Flask:
    """Build the app: settings from the environment, then ``config`` on top (tests pass overrides here)."""
    app = Flask(__name__, static_folder=None)  # /static is served by service.api.pages
    app.json = OrjsonProvider(app)
    app.config.update(Settings.from_env().as_flask_config())
    app.config.update(SPEC_CONFIG)
    if config is not None:
        app.config.update(config)

    from service.api import attention, likelihood, meta, multihead, pages, positions, sample, softmax
    from service.api.v2 import blp as v2_blueprint

    # Order matters: the request id and clock come first, so even a 401 carries the id and is timed.
    install_request_clock(app)
    install_request_ids(app)
    install_body_counting(app)  # before the access log and metrics, which report the bytes read
    install_admission(app)  # after body counting: it gives each admitted body its deadline
    install_access_log(app)
    install_metrics(app)
    install_memory_release(app)
    install_api_keys(app)

    api = Api(app)
    api.spec.components.security_scheme(SCHEME_NAME, SECURITY_SCHEME)
    app.extensions["attention_api"] = api
    register_error_handlers(app)  # after Api, which installs its own JSON error handler
    api.register_blueprint(attention.blp)
    api.register_blueprint(softmax.blp)
    api.register_blueprint(likelihood.blp)
    api.register_blueprint(multihead.blp)
    api.register_blueprint(positions.blp)
    api.register_blueprint(sample.blp)
    api.register_blueprint(meta.blp)
    api.register_blueprint(pages.blp)
    api.register_blueprint(v2_blueprint)
    enable_cors(app)
    return app
