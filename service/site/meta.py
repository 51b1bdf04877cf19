"""Probes (/livez, /readyz, /healthz), /metrics, the contract, and / (the JSON index, or the playground
for browsers)."""

from __future__ import annotations

from typing import Any

from flask import Response, current_app, request

from service.identity import API_TITLE, API_VERSION
from service.site.pages import STATIC_DIR, send_page
from service.site.schemas import HealthSchema, IndexSchema
from service.site.spec import build_spec, spec_yaml
from service.web.json_provider import dumps_bytes
from service.web.metrics import exposition
from service.web.readiness import self_check
from service.web.routes import Routes

routes = Routes("meta", __name__, description="Probes, metrics, the contract and the index.")

YAML_MIMETYPE = "application/yaml"
METRICS_MIMETYPE = "text/plain"
# app.extensions[ROUTES_EXTENSION]: every Routes the app serves, in order (the contract documents them).
ROUTES_EXTENSION = "attention_routes"
HTTP_METHODS = frozenset({"get", "put", "post", "delete", "options", "head", "patch", "trace"})


def _alive() -> dict[str, str]:
    return {"status": "ok"}


@routes.get("/livez", operation_id="livez", response=HealthSchema)
def livez() -> dict[str, str]:
    """Liveness: the process is up and answering (restart it when this fails)."""
    return _alive()


@routes.get("/healthz", operation_id="healthz", response=HealthSchema)
def healthz() -> dict[str, str]:
    """Liveness, the older name: the same as /livez."""
    return _alive()


@routes.get("/readyz", operation_id="readyz", response=HealthSchema, errors=(503,))
def readyz() -> dict[str, str]:
    """Readiness: a tiny attention computation succeeds and is right (send traffic when this passes)."""
    self_check()
    return {"status": "ok"}


@routes.get(
    "/metrics",
    operation_id="metrics",
    responses={
        "200": {
            "description": "Prometheus metrics of every worker, in the text exposition format "
            "(OpenMetrics when the Accept header asks for it).",
            "content": {METRICS_MIMETYPE: {"schema": {"type": "string"}}},
        }
    },
)
def metrics() -> Response:
    """Prometheus metrics: requests, latency, body sizes and work sizes per endpoint."""
    return exposition(request.headers.get("Accept"))


@routes.get(
    "/openapi.yaml",
    operation_id="openapiYaml",
    responses={"200": {"description": "This contract.", "content": {YAML_MIMETYPE: {"schema": {}}}}},
)
def openapi_yaml() -> Response:
    """The OpenAPI 3.1 contract as YAML, byte for byte the committed openapi.yaml."""
    return Response(_contract()["yaml"], mimetype=YAML_MIMETYPE)


@routes.get(
    "/openapi.json",
    operation_id="openapiJson",
    responses={"200": {"description": "This contract.", "content": {"application/json": {"schema": {}}}}},
)
def openapi_json() -> Response:
    """The OpenAPI 3.1 contract as JSON."""
    return Response(_contract()["json"], mimetype="application/json")


@routes.get(
    "/",
    operation_id="index",
    responses={
        "200": {
            "description": "The index as JSON; browsers asking for text/html get the playground page.",
            "content": {
                "application/json": {"schema": IndexSchema},
                "text/html": {"schema": {"type": "string"}},
            },
        }
    },
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
        contract = build_spec(current_app.extensions[ROUTES_EXTENSION])
        spec = contract.to_dict()
        # A path item also holds shared "parameters"; only its HTTP methods are operations.
        endpoints = [
            {"method": method.upper(), "path": path, "summary": operation.get("summary", "")}
            for path, operations in spec["paths"].items()
            for method, operation in operations.items()
            if method in HTTP_METHODS
        ]
        cache.update(yaml=spec_yaml(contract), json=dumps_bytes(spec), endpoints=endpoints)
    return cache
