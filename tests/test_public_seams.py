"""The service uses its libraries through their public names only.

A name with a leading underscore is a library's own business: any release may rename or drop it without
notice. This walks the syntax of every product file (``service/``, the gunicorn settings included, and
``deploy/``) and fails on an import of a private module or name of the libraries below, on an attribute
access or ``getattr`` of a name that one of them keeps private, and on a method that overrides one. It reads
the syntax tree, not the text, so neither a comment nor a string can hide or fake a use.

The only underscore names allowed are the two marshmallow documents as the way to write a custom field
("Custom Fields: implement ``_serialize`` and/or ``_deserialize``",
https://marshmallow.readthedocs.io/en/stable/custom_fields.html).
"""

from __future__ import annotations

import ast
import importlib
import pkgutil
import sys
from collections.abc import Iterator
from functools import lru_cache
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
LIBRARIES = (
    "flask",
    "werkzeug",
    "flask_smorest",
    "webargs",
    "marshmallow",
    "apispec",
    "gunicorn",
    "prometheus_client",
)
DOCUMENTED_EXTENSION_POINTS = frozenset({"_serialize", "_deserialize"})


def product_files() -> list[Path]:
    return [*sorted((ROOT / "service").rglob("*.py")), *sorted((ROOT / "deploy").rglob("*.py"))]


def _is_private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


@lru_cache(maxsize=1)
def library_private_names() -> frozenset[str]:
    """Every private name the libraries define at module level or on a class, importable here."""
    names: set[str] = set()
    for library in LIBRARIES:
        try:
            package = importlib.import_module(library)
        except ImportError:  # flask-smorest and webargs, no longer dependencies: nothing of them can be used
            continue
        modules = [package]
        for info in pkgutil.walk_packages(getattr(package, "__path__", []), prefix=f"{library}."):
            if info.name.endswith("__main__"):
                continue  # running it would start the library's command line
            try:
                modules.append(importlib.import_module(info.name))
            except Exception:  # an optional backend (gunicorn's eventlet worker, …) that is not installed
                continue
        for module in modules:
            for name, value in vars(module).items():
                if _is_private(name):
                    names.add(name)
                if isinstance(value, type) and value.__module__.split(".")[0] == library:
                    for klass in value.__mro__:
                        names.update(n for n in vars(klass) if _is_private(n))
    return frozenset(names - DOCUMENTED_EXTENSION_POINTS)


def _library_of(module: str | None) -> str | None:
    root = (module or "").split(".")[0]
    return root if root in LIBRARIES else None


# The project's own packages (and the client's generator, which make clients runs as a file, and a test
# imports so): everything else imported is the standard library's or a dependency's.
OWN_PACKAGES = frozenset({"service", "tests", "deploy", "bench", "attention_client", "_generate"})


def _is_dependency(module: str | None) -> bool:
    """Whether ``module`` (absolute) belongs to a dependency: NumPy, gevent, orjson, OpenTelemetry … as well
    as the libraries above. Their private modules and names are not imported either."""
    root = (module or "").split(".")[0]
    return bool(root) and root not in OWN_PACKAGES and root not in sys.stdlib_module_names


def offences(source: str, filename: str) -> Iterator[str]:
    """What ``source`` uses of the libraries' private names, one line each (``file:line: what``)."""
    tree = ast.parse(source, filename)
    private = library_private_names()
    library_bound: set[str] = set()  # names this file imported from the libraries (for base classes)
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and _library_of(node.module):
            library_bound.update(alias.asname or alias.name for alias in node.names)
        elif isinstance(node, ast.Import):
            library_bound.update(
                (alias.asname or alias.name).split(".")[0] for alias in node.names if _library_of(alias.name)
            )
    yield from _Walk(filename, private, library_bound).offences(tree)


class _Walk(ast.NodeVisitor):
    """The offences in one file. An attribute of ``self`` or ``cls`` is the class's own business unless the
    class derives from a library class (then it may be the library's private state)."""

    def __init__(self, filename: str, private: frozenset[str], library_bound: set[str]) -> None:
        self.filename = filename
        self.private = private
        self.library_bound = library_bound
        self.classes: list[bool] = []  # for each enclosing class: does it derive from a library class?
        self.found: list[str] = []

    def offences(self, tree: ast.AST) -> list[str]:
        self.visit(tree)
        return self.found

    def note(self, node: ast.AST, what: str) -> None:
        self.found.append(f"{self.filename}:{getattr(node, 'lineno', 0)}: {what}")

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        if node.level == 0 and _is_dependency(node.module):
            assert node.module is not None
            if any(_is_private(part) for part in node.module.split(".")):
                self.note(node, f"imports from the private module {node.module}")
            for alias in node.names:
                if _is_private(alias.name):
                    self.note(node, f"imports the private name {node.module}.{alias.name}")

    def visit_Import(self, node: ast.Import) -> None:
        for alias in node.names:
            if _is_dependency(alias.name) and any(_is_private(p) for p in alias.name.split(".")):
                self.note(node, f"imports the private module {alias.name}")

    def visit_ClassDef(self, node: ast.ClassDef) -> None:
        derives = _subclasses_a_library_class(node, self.library_bound)
        if derives:
            for item in node.body:
                if isinstance(item, ast.FunctionDef | ast.AsyncFunctionDef) and item.name in self.private:
                    self.note(item, f"{node.name} overrides the private hook {item.name}")
        self.classes.append(derives)
        self.generic_visit(node)
        self.classes.pop()

    def visit_Attribute(self, node: ast.Attribute) -> None:
        if node.attr in self.private:
            own = isinstance(node.value, ast.Name) and node.value.id in ("self", "cls")
            if not own or (self.classes and self.classes[-1]):
                self.note(node, f"uses the private attribute .{node.attr}")
        self.generic_visit(node)

    def visit_Call(self, node: ast.Call) -> None:
        if (
            isinstance(node.func, ast.Name)
            and node.func.id in ("getattr", "setattr", "hasattr", "delattr")
            and len(node.args) >= 2
            and isinstance(node.args[1], ast.Constant)
            and node.args[1].value in self.private
        ):
            self.note(node, f"{node.func.id} of the private name {node.args[1].value!r}")
        self.generic_visit(node)


def _subclasses_a_library_class(node: ast.ClassDef, library_bound: set[str]) -> bool:
    for base in node.bases:
        root = base
        while isinstance(root, ast.Attribute):
            root = root.value
        if isinstance(root, ast.Name) and root.id in library_bound:
            return True
    return False


def test_the_library_private_names_are_known() -> None:
    # The walk below is only as good as this set: it must hold the names the service once used.
    names = library_private_names()
    assert {"_get_current_object", "_hooks", "_declared_fields", "_prepare_response_obj"} <= names
    assert "_CHECK_ATTRIBUTE" in names


@pytest.mark.parametrize(
    ("source", "found"),
    [
        ("from flask.ctx import _AppCtxGlobals\n", "private name flask.ctx._AppCtxGlobals"),
        ("import werkzeug._internal\n", "private module werkzeug._internal"),
        ("from numpy._core._multiarray_umath import x\n", "private module numpy._core._multiarray_umath"),
        ("from gevent.hub import _get_hub\n", "private name gevent.hub._get_hub"),
        (
            "from flask import request\nrequest._get_current_object()\n",
            "private attribute ._get_current_object",
        ),
        ("x = getattr(schema, '_hooks')\n", "getattr of the private name '_hooks'"),
        (
            "import flask.json.provider as fp\n"
            "class P(fp.JSONProvider):\n"
            "    def _prepare_response_obj(self, args, kwargs): ...\n",
            "overrides the private hook _prepare_response_obj",
        ),
    ],
)
def test_the_walk_finds_each_kind_of_use(source: str, found: str) -> None:
    assert any(found in line for line in offences(source, "example.py"))


def test_comments_strings_and_documented_extension_points_are_not_uses() -> None:
    source = (
        "# request._get_current_object() was used here once\n"
        "NOTE = 'schema._hooks'\n"
        "from marshmallow import fields\n"
        "class F(fields.Field):\n"
        "    def _deserialize(self, value, attr, data, **kwargs):\n"
        "        return super()._deserialize(value, attr, data, **kwargs)\n"
    )
    assert list(offences(source, "example.py")) == []


def test_the_product_uses_no_private_library_name() -> None:
    found = [
        line for path in product_files() for line in offences(path.read_text(), str(path.relative_to(ROOT)))
    ]
    assert found == [], "\n".join(found)


def test_no_file_imports_a_private_module_or_name_of_any_dependency() -> None:
    """Every dependency, not only those whose private names are listed, and the tests, benchmarks and the
    client too: a private import (a test once read NumPy's CPU features from numpy._core) breaks with any
    release, as the project's rule says."""
    paths = [
        *product_files(),
        *sorted((ROOT / "tests").rglob("*.py")),
        *sorted((ROOT / "bench").rglob("*.py")),
    ]
    paths += sorted((ROOT / "client").rglob("*.py"))
    found = [
        line
        for path in paths
        for line in offences(path.read_text(), str(path.relative_to(ROOT)))
        if "imports" in line
    ]
    assert found == [], "\n".join(found)
