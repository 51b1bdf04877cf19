"""The docs against what they describe: the defaults in docs/operations.md are the ones the code uses.

`service/settings.py` and `service/server/gunicorn_settings.py` are the sources of every default; the
configuration table in docs/operations.md is the one place that states them, and docker-compose.yml repeats
them as `${NAME:-default}`. Rather than a second copy of each default here, every check asks the code
itself: setting a variable to its documented default must change nothing, for `Settings.from_env` and for a
fresh run of the gunicorn settings module.
"""

from __future__ import annotations

import doctest
import json
import os
import re
import subprocess
import sys
import tomllib
from dataclasses import fields
from pathlib import Path

import numpy as np
import pytest
import yaml

import service.kernels
from service import create_app
from service.server.connection_metrics import CLOSE_REASONS
from service.settings import Settings, derived_limits
from tests.tolerance import assert_json_close

ROOT = Path(__file__).resolve().parents[1]
OPERATIONS = ROOT / "docs" / "operations.md"
GUNICORN_SETTINGS = "service.server.gunicorn_settings"
GUNICORN_CONF = ROOT / "service" / "server" / "gunicorn_settings.py"
# Defaults that are worked out when the server starts, so the table says how rather than what.
COMPUTED = {
    "WEB_CONCURRENCY": "cores available",
    "PROMETHEUS_MULTIPROC_DIR": "a fresh temporary directory",
}
# Set from BLAS_THREADS by the gunicorn settings, so a run starts without them for BLAS_THREADS to count.
BLAS_VARIABLES = ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS")


def operations_section(title: str) -> str:
    """The text of docs/operations.md's ``## title`` section, up to the next one."""
    text = OPERATIONS.read_text(encoding="utf-8")
    return text.split(f"\n## {title}\n", 1)[1].split("\n## ", 1)[0]


def documented_defaults() -> dict[str, str | None]:
    """docs/operations.md's configuration table: variable -> its default as written (None when computed).

    A default in backticks is taken literally; "(none…)" is the empty value; anything else must be one of
    COMPUTED.
    """
    table = operations_section("Configuration")
    defaults: dict[str, str | None] = {}
    for name, cell in re.findall(r"^\| `([A-Z0-9_]+)` \| ([^|]*) \|", table, re.MULTILINE):
        literal = re.fullmatch(r"`([^`]*)`(?: \(.*\))?", cell.strip())
        if literal:
            defaults[name] = literal.group(1)
        elif cell.strip().startswith("(none"):
            defaults[name] = ""
        else:
            assert cell.strip().startswith(COMPUTED.get(name, "\0")), (
                f"{name}: default {cell!r} is not a value"
            )
            defaults[name] = None
    assert len(defaults) >= 20, f"the configuration table was not found in {OPERATIONS}"
    return defaults


def gunicorn_conf_variables() -> set[str]:
    source = GUNICORN_CONF.read_text(encoding="utf-8")
    # Read with os.environ.get or service/server/environment.py (_env.whole("GUNICORN_TIMEOUT", …)).
    return set(re.findall(r"(?:os\.environ\.get|_env\.\w+)\(\s*[\"']([A-Z0-9_]+)[\"']", source))


# Runs the gunicorn settings module once with none of the documented variables set, then once per variable
# set to its documented default, in a fresh interpreter (it changes os.environ and patches gunicorn), and
# prints which runs ended with different settings or environment.
_PROBE = """
import json, os, runpy, sys
documented = json.loads(sys.argv[1])
base = {k: v for k, v in os.environ.items() if k not in documented and k not in sys.argv[2].split(",")}

def run(extra):
    os.environ.clear()
    os.environ.update(base, **extra)
    names = runpy.run_module(sys.argv[3])
    names["on_exit"](None)  # removes the metrics directory the run made
    plain = (int, float, str, bool, type(None))
    settings = {k: v for k, v in names.items() if not k.startswith("_") and isinstance(v, plain)}
    environ = {k: v for k, v in os.environ.items() if k != "PROMETHEUS_MULTIPROC_DIR"}
    return {"settings": settings, "environ": environ}

default = run({})
print(json.dumps({name: run({name: value}) for name, value in documented.items()}
                 | {"<none set>": default}))
"""


def test_every_setting_and_every_gunicorn_variable_is_in_the_table_and_nothing_else() -> None:
    documented = set(documented_defaults())
    settings = {setting.name.upper() for setting in fields(Settings)}
    gunicorn = gunicorn_conf_variables()
    assert settings - documented == set(), "Settings fields missing from docs/operations.md"
    assert gunicorn - documented == set(), "gunicorn settings' variables missing from docs/operations.md"
    assert documented - settings - gunicorn == set(), "documented variables nothing reads"


@pytest.mark.parametrize("setting", [setting.name.upper() for setting in fields(Settings)])
def test_documented_default_is_what_settings_uses(setting: str) -> None:
    documented = documented_defaults()[setting]
    assert documented is not None, f"{setting}: Settings has a fixed default, the table must state it"
    assert Settings.from_env({setting: documented}) == Settings.from_env({}), (
        f"{setting}={documented!r} (docs/operations.md) is not the default of Settings"
    )


def test_documented_defaults_are_what_the_gunicorn_settings_use() -> None:
    literal = {
        name: value
        for name, value in documented_defaults().items()
        if name in gunicorn_conf_variables() and value is not None
    }
    assert {"HOST", "PORT", "GUNICORN_TIMEOUT", "BLAS_THREADS"} <= set(literal)
    probe = subprocess.run(
        [sys.executable, "-c", _PROBE, json.dumps(literal), ",".join(BLAS_VARIABLES), GUNICORN_SETTINGS],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
        cwd=ROOT,
        env={k: v for k, v in os.environ.items() if k != "PROMETHEUS_MULTIPROC_DIR"},
    )
    runs = json.loads(probe.stdout.splitlines()[-1])
    unset = runs.pop("<none set>")
    assert unset["settings"]["timeout"] == int(literal["GUNICORN_TIMEOUT"])  # the probe reads real settings
    for name, run in runs.items():
        run["environ"].pop(name)
        assert run == unset, (
            f"{name}={literal[name]!r} (docs/operations.md) is not the gunicorn settings' default"
        )


def documented_tracing_variables() -> set[str]:
    """The ``OTEL_*`` variables docs/operations.md's Tracing table names in its first column."""
    table = operations_section("Tracing")
    names = {
        name
        for cell in re.findall(r"^\| ([^|]*) \|", table, re.MULTILINE)
        for name in re.findall(r"`(OTEL_[A-Z0-9_]+)`", cell)
    }
    assert len(names) >= 8, f"the tracing table was not found in {OPERATIONS}"
    return names


def test_compose_defaults_are_the_documented_ones() -> None:
    documented = documented_defaults()
    tracing = documented_tracing_variables()
    compose = (ROOT / "docker-compose.yml").read_text(encoding="utf-8")
    environment = re.findall(r"^\s+([A-Z0-9_]+): \$\{\1:-([^}]*)\}", compose, re.MULTILINE)
    assert len(environment) >= 15
    derived = {name.upper() for name in derived_limits(Settings().memory_budget_bytes)}
    for name, default in environment:
        if name in tracing:  # OpenTelemetry's own: passed through, empty (unset) unless the operator sets it
            assert default == "", f"docker-compose.yml: {name} defaults to {default!r}"
            continue
        if name in derived:  # empty: derived from MEMORY_BUDGET_BYTES, so that lowering the budget lowers it
            assert default == "", f"docker-compose.yml pins {name} to {default!r}, which the budget derives"
            continue
        assert name in documented, f"docker-compose.yml sets {name}, which docs/operations.md does not list"
        if documented[name] is not None:
            assert default == documented[name], f"docker-compose.yml: {name} defaults to {default!r}"
    # Under compose, a setting takes effect only if the file passes it into the container.
    missing = {setting.name.upper() for setting in fields(Settings)} - {name for name, _ in environment}
    assert not missing, f"docker-compose.yml does not pass {sorted(missing)}: setting them would do nothing"


def test_the_readme_stays_short_and_links_the_docs() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert len(readme.encode()) < 15_000
    for page in ("docs/operations.md", "docs/performance.md", "docs/design.md"):
        assert f"]({page}" in readme
        assert (ROOT / page).is_file()


def test_relative_links_in_the_docs_lead_somewhere() -> None:
    for page in [ROOT / "README.md", *(ROOT / "docs").glob("*.md")]:
        text = page.read_text(encoding="utf-8")
        for target in re.findall(r"\]\((?!https?:|#|mailto:)([^)#\s]+)(?:#[^)]*)?\)", text):
            assert (page.parent / target).exists(), (
                f"{page.relative_to(ROOT)} links to {target}, which is missing"
            )


def test_the_curl_examples_in_docs_layers_are_the_services_answers() -> None:
    # Each example: "$ curl ... localhost:8000<path> ... -d '<body>'" then the answer on the next line.
    text = (ROOT / "docs" / "layers.md").read_text(encoding="utf-8")
    example = r"\$ curl [^\n]*localhost:8000(\S+)[^\n]*\n\s+-d '([^\n]+)'\n\s+(\{[^\n]+\})\n"
    examples = re.findall(example, text)
    assert len(examples) == 7
    client = create_app({"TESTING": True}).test_client()
    for path, body, answer in examples:
        # within a stated tolerance: the last bits differ between CPUs (one machine gave ...723015 for a
        # documented ...723016)
        assert_json_close(client.post(path, json=json.loads(body)).get_json(), json.loads(answer), where=path)


def test_the_python_examples_in_docs_layers_are_the_kernels_answers() -> None:
    # Each ```python block with ">>>" prompts is run as a doctest, with NumPy and the kernels' public names.
    text = (ROOT / "docs" / "layers.md").read_text(encoding="utf-8")
    blocks = [block for block in re.findall(r"```python\n(.*?)```", text, flags=re.S) if ">>>" in block]
    assert len(blocks) == 1
    names = {name: getattr(service.kernels, name) for name in service.kernels.__all__}
    runner = doctest.DocTestRunner(optionflags=doctest.NORMALIZE_WHITESPACE)
    for index, block in enumerate(blocks):
        test = doctest.DocTestParser().get_doctest(block, {"np": np, **names}, f"layers.md[{index}]", None, 0)
        runner.run(test)
    assert runner.summarize(verbose=False).failed == 0


def test_docs_widgets_lists_every_widget_and_every_client_function() -> None:
    # A widget or client function added without a line in docs/widgets.md fails here, and so does a line
    # left behind for one that was removed.
    static = ROOT / "service" / "static"
    widgets = ROOT / "docs" / "widgets.md"
    text = widgets.read_text(encoding="utf-8")
    tags = {
        match
        for module in (static / "widgets").glob("*.js")
        for match in re.findall(r'static tag = "([a-z-]+)"', module.read_text(encoding="utf-8"))
    }
    assert tags >= {"attention-heatmap", "softmax-temperature", "token-likelihood", "text-generation"}
    assert set(re.findall(r"^\| `<([a-z-]+)>` \|", text, flags=re.MULTILINE)) == tags
    functions = set(
        re.findall(r"^export function (\w+)\(body, options\)", (static / "models.js").read_text(), re.M)
    )
    assert set(re.findall(r"^\| `(\w+)\(body, options\)` \|", text, flags=re.MULTILINE)) == functions


# Where the docs list the /v2 models, each as a list of names in backticks.
V2_MODEL_LISTS = {
    "README.md": r"can call the same models \(([^)]*)\)",
    "docs/tensors.md": r"is a `/v2` model of the same name: ([^.]*)\.",
}


def server_surface() -> tuple[set[str], set[str]]:
    """The server's /v1 computations (paths) and /v2 models (names), read from the app itself.

    The models come from the repository index when the server has one (Triton's, issue #20), else from the
    infer routes, so a model added to /v2 is listed here without anyone writing it in this file.
    """
    app = create_app({"TESTING": True})
    rules = list(app.url_map.iter_rules())
    computations = {
        rule.rule for rule in rules if rule.rule.startswith("/v1/") and "POST" in (rule.methods or ())
    }
    if any(rule.rule == "/v2/repository/index" for rule in rules):
        index = app.test_client().post("/v2/repository/index", json={})
        models = {entry["name"] for entry in index.get_json()}
    else:
        models = {m[1] for rule in rules if (m := re.fullmatch(r"/v2/models/([^/<]+)/infer", rule.rule))}
    assert len(computations) >= 6, computations
    assert len(models) >= 4, models
    return computations, models


@pytest.mark.parametrize("page", list(V2_MODEL_LISTS))
def test_the_docs_list_every_v2_model_and_no_other(page: str) -> None:
    _, models = server_surface()
    text = (ROOT / page).read_text(encoding="utf-8")
    (listed,) = re.findall(V2_MODEL_LISTS[page], text)
    assert set(re.findall(r"`([a-z0-9-]+)`", listed)) == models, (
        f"{page}: the /v2 models are {sorted(models)}"
    )


def _words(text: str) -> str:
    """Lower-case letters only: "multi-head attention", "multiHeadAttention" and "/v1/multi-head-attention"
    all become "multiheadattention"."""
    return re.sub(r"[^a-z0-9]", "", text.lower())


def test_the_readme_names_every_v1_computation() -> None:
    computations, _ = server_surface()
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert {path for path in computations if f"{path}`" not in readme} == set()


def test_the_package_and_contract_descriptions_name_every_computation_and_model() -> None:
    computations, models = server_surface()
    names = {path.removeprefix("/v1/") for path in computations} | models
    description = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["description"]
    contract = yaml.safe_load((ROOT / "openapi.yaml").read_text())["info"]["description"]
    for text in (description, contract):
        assert {name for name in names if _words(name) not in _words(text)} == set(), text
    for path in computations:
        assert f"POST {path}" in contract
    assert "(/v2)" in description


def test_the_api_keys_row_names_every_path_that_needs_a_key() -> None:
    # The contract declares a 401 on exactly the operations API_KEYS protects (service/web/api_keys.py).
    spec = yaml.safe_load((ROOT / "openapi.yaml").read_text())
    protected = {
        path
        for path, item in spec["paths"].items()
        for method, operation in item.items()
        if method in {"get", "post"} and "401" in operation["responses"]
    }
    table = operations_section("Configuration")
    (row,) = re.findall(r"^\| `API_KEYS` \|[^\n]*", table, re.MULTILINE)
    for path in protected:
        if path.startswith("/v1/"):
            assert "`/v1/*`" in row
        else:
            general = re.sub(
                r"^/v2/models/[^/]+(/versions/1)?/infer$", "/v2/models/{model}[/versions/1]/infer", path
            )
            assert general in row, path


def test_the_changelog_starts_with_unreleased_then_the_current_version() -> None:
    changelog = (ROOT / "CHANGELOG.md").read_text(encoding="utf-8")
    version = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    headings = re.findall(r"^## \[([^\]]+)\]", changelog, re.MULTILINE)
    assert headings[:2] == ["Unreleased", version]
    assert "Keep a Changelog" in changelog
    assert "](CHANGELOG.md)" in (ROOT / "README.md").read_text(encoding="utf-8")


def test_the_connection_close_reasons_are_the_ones_the_worker_counts() -> None:
    section = operations_section("Metrics").split("### Connection metrics", 1)[1].split("\n### ", 1)[0]
    documented = re.findall(r"^\| `(\w+)` \| (?!counter|gauge)", section, flags=re.MULTILINE)
    assert documented == ["reason", *CLOSE_REASONS]  # the table's head, then its rows
