"""The import graph that import-linter checks (``make lint``) covers every module of the service.

grimp, which builds the graph, does not descend into a directory without ``__init__.py`` unless it is named
as a root package; a module it does not see is one no contract guards. So every module file under
``service/`` must be in the graph built from the configured roots.
"""

from __future__ import annotations

import tomllib
from pathlib import Path

import grimp

ROOT = Path(__file__).resolve().parents[1]
CONFIG = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def test_the_contracts_see_every_module_of_the_service() -> None:
    graph = grimp.build_graph(*CONFIG["root_packages"], cache_dir=None)
    files = {module_name(path) for path in (ROOT / "service").rglob("*.py")}
    assert len(files) > 50  # the walk found the service, not an empty directory
    assert sorted(files - graph.modules) == []


def test_the_contracts_include_the_layering_and_the_cycle_check() -> None:
    contracts = {contract["id"]: contract for contract in CONFIG["contracts"]}
    assert contracts["kernels-pure"]["source_modules"] == ["service.kernels"]
    assert {"service.requests", "service.web", "flask", "marshmallow"} <= set(
        contracts["kernels-pure"]["forbidden_modules"]
    )
    assert {"service.protocols", "service.web", "flask", "werkzeug"} <= set(
        contracts["requests-below-codecs"]["forbidden_modules"]
    )
    assert contracts["codecs-independent"]["type"] == "independence"
    assert contracts["codecs-independent"]["modules"] == ["service.protocols.v1", "service.protocols.v2"]
    assert (contracts["no-cycles"]["type"], contracts["no-cycles"]["ancestors"]) == (
        "acyclic_siblings",
        ["service"],
    )
