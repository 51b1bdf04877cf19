"""The pages over HTTP: / by content negotiation, /static with types and caching, /docs from local files."""

from __future__ import annotations

import fnmatch
import json
import posixpath
import re
import tomllib
from pathlib import Path

import pytest
from flask import Flask
from flask.testing import FlaskClient

from service.site.pages import STATIC_DIR, SWAGGER_UI_VERSION
from tests.problems import assert_problem

ROOT = Path(__file__).resolve().parents[2]
BROWSER_ACCEPT = "text/html,application/xhtml+xml,application/xml;q=0.9,image/avif,*/*;q=0.8"


@pytest.mark.parametrize("accept", [None, "*/*", "application/json", "application/json, text/html;q=0.5"])
def test_api_clients_still_get_the_json_index(client: FlaskClient, accept: str | None) -> None:
    response = client.get("/", headers={"Accept": accept} if accept else {})
    assert response.status_code == 200
    assert response.mimetype == "application/json"
    assert "Accept" in response.vary
    paths = {endpoint["path"] for endpoint in response.get_json()["endpoints"]}
    assert {"/v1/attention", "/docs", "/static/{filename}"} <= paths


@pytest.mark.parametrize("accept", [BROWSER_ACCEPT, "text/html"])
def test_browsers_get_the_playground(client: FlaskClient, accept: str) -> None:
    with client.get("/", headers={"Accept": accept}) as response:
        page = response.get_data(as_text=True)
    assert response.status_code == 200
    assert response.mimetype == "text/html"
    assert "Accept" in response.vary
    assert response.headers["Cache-Control"].startswith("no-cache")
    assert "default-src 'self'" in response.headers["Content-Security-Policy"]
    assert '<script type="module" src="/static/widgets.js"></script>' in page
    for widget in ("attention-heatmap", "softmax-temperature", "token-likelihood"):
        assert f"<{widget} " in page


def test_pages_reference_nothing_outside_this_origin() -> None:
    pages = [*STATIC_DIR.glob("*.html"), *(ROOT / "service" / "templates").glob("*.html")]
    assert pages
    for page in pages:
        for reference in re.findall(r'<\w[^>]*?\b(?:src|href)="([^"]*)"', page.read_text()):
            assert reference.startswith(("/", "#", "data:", "{{")), f"{page.name}: {reference}"


@pytest.mark.parametrize(
    ("name", "mimetype"),
    [("widgets.js", "text/javascript"), ("client.js", "text/javascript"), ("style.css", "text/css")],
)
def test_static_files_have_their_type_and_are_cached_briefly(
    client: FlaskClient, name: str, mimetype: str
) -> None:
    with client.get(f"/static/{name}", headers={"Origin": "https://teaching.example"}) as response:
        body = response.get_data()
    assert response.status_code == 200
    assert response.mimetype == mimetype
    assert response.headers["Cache-Control"] == "public, max-age=300"
    assert response.headers["X-Content-Type-Options"] == "nosniff"
    assert response.headers["Access-Control-Allow-Origin"] == "*"  # modules load cross-origin only with CORS
    assert body == (STATIC_DIR / name).read_bytes()


@pytest.mark.parametrize("name", ["missing.js", "index.txt", "widgets/missing.js", "widgets/base.txt"])
def test_anything_else_under_static_is_a_404_problem(client: FlaskClient, name: str) -> None:
    assert_problem(client.get(f"/static/{name}"), 404)


def test_no_way_out_of_the_static_folder(app: Flask) -> None:
    plain = FlaskClient(app)  # the contract checker would resolve the dots before the app sees them
    for name in ["../__init__.py", "..%2F__init__.py", "../api/pages.py"]:
        assert_problem(plain.get(f"/static/{name}"), 404)


def test_unchanged_files_are_revalidated_with_a_304(client: FlaskClient) -> None:
    first = client.get("/static/widgets.js")
    again = client.get("/static/widgets.js", headers={"If-None-Match": first.headers["ETag"]})
    assert again.status_code == 304
    assert again.get_data() == b""


def test_docs_page_loads_the_pinned_swagger_ui_from_this_service(client: FlaskClient) -> None:
    response = client.get("/docs")
    assert response.status_code == 200
    assert response.mimetype == "text/html"
    page = response.get_data(as_text=True)
    bundle = f"/docs/swagger-ui/{SWAGGER_UI_VERSION}/swagger-ui-bundle.js"
    assert f'src="{bundle}"' in page
    with client.get(bundle) as asset:
        assert asset.status_code == 200
        assert asset.mimetype == "text/javascript"
        assert asset.headers["Cache-Control"] == "public, max-age=31536000, immutable"
    assert int(SWAGGER_UI_VERSION.split(".")[0]) >= 5  # Swagger UI reads OpenAPI 3.1 from version 5 on


def test_docs_point_at_this_contract_without_an_external_validator(client: FlaskClient) -> None:
    with client.get("/static/docs.js") as response:
        script = response.get_data(as_text=True)
    assert 'url: "/openapi.json"' in script
    assert 'validatorUrl: "none"' in script


def test_another_swagger_ui_version_is_a_404_problem(client: FlaskClient) -> None:
    assert_problem(client.get("/docs/swagger-ui/4.0.0/swagger-ui-bundle.js"), 404)


def _glob_matches(path: str, pattern: str) -> bool:
    """setuptools' package-data globs: ``*`` stays within one folder (fnmatch alone would cross ``/``)."""
    parts, pattern_parts = path.split("/"), pattern.split("/")
    return len(parts) == len(pattern_parts) and all(map(fnmatch.fnmatch, parts, pattern_parts))


def test_every_served_file_is_package_data() -> None:
    patterns = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"][
        "service"
    ]
    served = [*STATIC_DIR.rglob("*"), *(ROOT / "service" / "templates").rglob("*")]
    files = [path for path in served if path.is_file()]
    assert STATIC_DIR / "widgets" / "base.js" in files
    for path in files:
        relative = path.relative_to(ROOT / "service").as_posix()
        assert any(_glob_matches(relative, pattern) for pattern in patterns), relative


def test_every_module_the_widgets_import_is_served_as_javascript(client: FlaskClient) -> None:
    """widgets.js is an entry: the browser fetches each module it imports, from wherever the page is."""
    seen: set[str] = set()
    todo = ["widgets.js"]
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        with client.get(f"/static/{name}", headers={"Origin": "https://teaching.example"}) as response:
            source = response.get_data(as_text=True)
        assert response.status_code == 200, name
        assert response.mimetype == "text/javascript", name
        assert response.headers["Access-Control-Allow-Origin"] == "*", name
        for target in re.findall(r'^(?:import|export)\b[^;]*?\bfrom "(\.{1,2}/[^"]+)"', source, re.MULTILINE):
            todo.append(posixpath.normpath(posixpath.join(posixpath.dirname(name), target)))
    widgets = {f"widgets/{path.name}" for path in (STATIC_DIR / "widgets").glob("*.js")}
    assert {"widgets.js", "client.js"} | widgets <= seen


def test_html_under_static_carries_the_page_policy(client: FlaskClient) -> None:
    response = client.get("/static/index.html")
    assert response.status_code == 200
    assert "default-src 'self'" in response.headers["Content-Security-Policy"]


def test_shipped_js_and_css_lines_fit_the_formatters_width() -> None:
    """Biome formats code to its line width but leaves comments and template strings (the CSS) as written."""
    width = json.loads((ROOT / "biome.json").read_text())["formatter"]["lineWidth"]
    files = [*STATIC_DIR.rglob("*.js"), *STATIC_DIR.rglob("*.css")]
    assert len(files) >= 8
    long = [
        f"{path.relative_to(ROOT)}:{number} ({len(line)})"
        for path in files
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        if len(line) > width
    ]
    assert long == []
