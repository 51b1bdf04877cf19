"""POST /v1/<name> for every declared model: one route each, made from its declaration.

Every /v1 computation travels the same way, so it is written once: the JSON body is loaded through the
model's request schema into its typed request (service.protocols.v1.parsing), computed in a compute slot
(service.web.admission.run_admitted), and the answer is built from the result with the computation.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from flask.globals import request_ctx

from service.protocols.declarations.errors import COMPUTE_ERRORS
from service.protocols.declarations.model import ModelDeclaration, declared_models
from service.protocols.v1.examples import example_response
from service.protocols.v1.parsing import load_json_body
from service.web.admission import answered, run_admitted
from service.web.routes import Routes


def model_routes(model: ModelDeclaration) -> Routes:
    """The route set of ``model``: ``POST /v1/<name>``, documented by its declaration."""
    routes = Routes(model.route_name, __name__, url_prefix="/v1", description=model.topic)
    routes.post(
        f"/{model.name}",
        endpoint=model.route_name,
        operation_id=model.operation_id,
        summary=model.summary,
        description=model.description or None,
        request=model.request_schema,
        request_example=dict(model.example),
        response=model.response,
        response_example=example_response(model),
        errors=COMPUTE_ERRORS,
    )(_view(model))
    return routes


def _view(model: ModelDeclaration) -> Callable[[], dict[str, Any]]:
    schema, answer = model.request_schema, model.answer

    def view() -> dict[str, Any]:
        # The request itself, not the ``flask.request`` proxy, which finds the context again on each of the
        # dozen attributes that parsing reads.
        typed = load_json_body(request_ctx.request, schema)
        return run_admitted(answered(typed, lambda result: answer(result, typed)))

    view.__name__ = f"{model.route_name}_view"
    return view


def endpoint_routes() -> list[Routes]:
    """The routes of every /v1 model, in the order of the models' names."""
    return [model_routes(model) for model in declared_models().values()]
