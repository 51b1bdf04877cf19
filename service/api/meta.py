"""GET /healthz, /openapi.yaml, /openapi.json and / (the JSON index, or the playground for browsers)."""

from __future__ import annotations

from typing import Any

from flask import Response, current_app, request

from service.api.pages import STATIC_DIR, send_page
from service.api.schemas.meta import HealthSchema, IndexSchema
from service.web.blueprint import Blueprint
from service.web.json_provider import dumps_bytes
from service.web.spec import API_TITLE, API_VERSION, Api, spec_yaml

blp = Blueprint("meta", __name__, description="Health, the contract and the index.")

YAML_MIMETYPE = "application/yaml"
HTTP_METHODS = frozenset({"get", "put", "post", "delete", "options", "head", "patch", "trace"})


@blp.route("/healthz", methods=["GET"])
@blp.response(200, HealthSchema)
def healthz() -> dict[str, str]:
    """Liveness: the process is up and answering."""
    return {"status": "ok"}


@blp.route("/openapi.yaml", methods=["GET"])
@blp.doc(responses={"200": {"description": "This contract.", "content": {YAML_MIMETYPE: {"schema": {}}}}})
def openapi_yaml() -> Response:
    """The OpenAPI 3.1 contract as YAML, byte for byte the committed ``openapi.yaml``."""
    return Response(_contract()["yaml"], mimetype=YAML_MIMETYPE)


@blp.route("/openapi.json", methods=["GET"])
@blp.doc(
    responses={"200": {"description": "This contract.", "content": {"application/json": {"schema": {}}}}}
)
def openapi_json() -> Response:
    """The OpenAPI 3.1 contract as JSON."""
    return Response(_contract()["json"], mimetype="application/json")


@blp.route("/", methods=["GET"])
@blp.response(200, IndexSchema)
@blp.doc(
    responses={
        "200": {
            "description": "The index as JSON; browsers asking for text/html get the playground page.",
            "content": {
                "application/json": {"schema": IndexSchema},
                "text/html": {"schema": {"type": "string"}},
            },
        }
    }
)
def index() -> Any:
    """The index of the endpoints, or the playground when the client prefers HTML (a browser)."""
    # JSON first: clients that send no Accept header, or */*, keep getting the index.
    if request.accept_mimetypes.best_match(["application/json", "text/html"]) == "text/html":
        page = send_page(STATIC_DIR, "index.html")
        page.vary.add("Accept")
        return page
    index = Response(
        dumps_bytes({"name": API_TITLE, "version": API_VERSION, "endpoints": _contract()["endpoints"]}),
        mimetype="application/json",
    )
    index.vary.add("Accept")
    return index


def _contract() -> dict[str, Any]:
    """The contract in every form served, built once per app on first use."""
    cache: dict[str, Any] = current_app.extensions.setdefault("contract", {})
    if not cache:
        api: Api = current_app.extensions["attention_api"]
        spec = api.spec.to_dict()
        # A path item also holds shared "parameters"; only its HTTP methods are operations.
        endpoints = [
            {"method": method.upper(), "path": path, "summary": operation.get("summary", "")}
            for path, operations in spec["paths"].items()
            for method, operation in operations.items()
            if method in HTTP_METHODS
        ]
        cache.update(yaml=spec_yaml(api), json=dumps_bytes(spec), endpoints=endpoints)
    return cache
