"""Every private hook of a library the service relies on, in one place.

These are names a library may rename or drop in any release without notice. Each entry says where the
library still calls the hook (so overriding it still has an effect) and which of our files relies on it;
an upgrade that breaks one fails here with that file's name, instead of silently dropping a behaviour
(problem+json errors in the contract, the orjson body parser, gunicorn's own error answers).
"""

from __future__ import annotations

import importlib
import importlib.metadata
import inspect
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest


@dataclass(frozen=True)
class Hook:
    library: str  # the distribution, for its version in the message
    owner: str  # "module:Class" or "module"
    name: str
    parameters: tuple[str, ...]  # the leading parameter names we override or call with
    caller: str  # "module:Class.method" or "module:function" that must still call the hook
    call: str  # the text of that call in the caller's source
    relied_on_by: str

    def resolve_owner(self) -> Any:
        module_name, _, attribute = self.owner.partition(":")
        owner: Any = importlib.import_module(module_name)
        for part in filter(None, attribute.split(".")):
            owner = getattr(owner, part)
        return owner

    def resolve_caller(self) -> Callable[..., Any]:
        module_name, _, path = self.caller.partition(":")
        caller: Any = importlib.import_module(module_name)
        for part in path.split("."):
            caller = getattr(caller, part)
        return caller  # type: ignore[no-any-return]

    def fail(self, problem: str) -> None:
        version = importlib.metadata.version(self.library)
        pytest.fail(
            f"{self.library} {version}: {self.owner}.{self.name} {problem}. {self.relied_on_by} relies on "
            "it: adapt that code (or pin the library back) before upgrading."
        )


HOOKS = [
    Hook(
        library="flask-smorest",
        owner="flask_smorest:Api",
        name="_register_responses",
        parameters=("self",),
        caller="flask_smorest.spec:APISpecMixin._init_spec",
        call="self._register_responses()",
        relied_on_by="service/web/spec.py (error responses documented as problem+json)",
    ),
    Hook(
        library="flask-smorest",
        owner="flask_smorest:Api",
        name="_init_spec",
        parameters=("self",),
        caller="flask_smorest:Api.init_app",
        call="self._init_spec(",
        relied_on_by="service/web/spec.py (arrays as one shared schema component per kind and rank)",
    ),
    Hook(
        library="flask-smorest",
        owner="flask_smorest:Api",
        name="_register_pagination_header",
        parameters=("self",),
        caller="flask_smorest.spec:APISpecMixin._init_spec",
        call="self._register_pagination_header()",
        relied_on_by="service/web/spec.py (no unused PaginationMetadata component in the contract)",
    ),
    Hook(
        # Not a private method but a private layout: where arguments() notes its 422 response's name.
        library="flask-smorest",
        owner="flask_smorest.arguments:ArgumentsMixin",
        name="arguments",
        parameters=("self", "schema"),
        caller="flask_smorest.arguments:ArgumentsMixin.arguments",
        call='docs.setdefault("responses", {})[error_status_code]',
        relied_on_by="service/web/blueprint.py (the 422 named from service/web/statuses.py, on every Python)",
    ),
    Hook(
        library="flask-smorest",
        owner="flask_smorest.utils",
        name="prepare_response",
        parameters=("response", "spec", "content_type"),
        caller="flask_smorest.spec:APISpecMixin._register_responses",
        call="prepare_response(",
        relied_on_by="service/web/spec.py (error responses documented as problem+json)",
    ),
    Hook(
        library="webargs",
        owner="webargs.flaskparser:FlaskParser",
        name="_raw_load_json",
        parameters=("self", "req"),
        caller="webargs.core:Parser.load_json",
        call="self._raw_load_json(req)",
        relied_on_by="service/web/parsing.py (orjson parsing, the chunked-body limit)",
    ),
    Hook(
        library="webargs",
        owner="webargs.flaskparser:FlaskParser",
        name="_handle_invalid_json_error",
        parameters=("self", "error", "req"),
        caller="webargs.core:Parser.load_json",
        call="self._handle_invalid_json_error(exc, req)",
        relied_on_by="service/web/parsing.py (a 400 that quotes the JSON error)",
    ),
    Hook(
        library="webargs",
        owner="webargs.core:Parser",
        name="_on_validation_error",
        parameters=("self", "error", "req", "schema", "location"),
        caller="webargs.core:Parser.parse",
        call="self._on_validation_error(",
        relied_on_by="service/web/dispatch.py (a body's validation errors reported as webargs reports them)",
    ),
    Hook(
        library="flask-smorest",
        owner="flask_smorest.response:ResponseMixin",
        name="_prepare_response_content",
        parameters=("data",),
        caller="flask_smorest.response:ResponseMixin.response",
        call="self._prepare_response_content(result_dump)",
        relied_on_by="service/web/dispatch.py (answers written as flask-smorest's wrapper writes them)",
    ),
    Hook(
        library="marshmallow",
        owner="marshmallow:Schema",
        name="_invoke_load_processors",
        parameters=("self", "tag", "data"),
        caller="marshmallow.schema:Schema._do_load",
        call="self._invoke_load_processors(",
        relied_on_by="service/web/schemas.py (a valid body's post_load hooks, run as marshmallow runs them)",
    ),
    Hook(
        library="marshmallow",
        owner="marshmallow.fields:Field",
        name="_serialize",
        parameters=("self", "value", "attr", "obj"),
        caller="marshmallow.fields:Field.serialize",
        call="self._serialize(value, attr, obj, **kwargs)",
        relied_on_by="service/web/schemas.py (an answer's members written by their fields, as dump does)",
    ),
    Hook(
        library="prometheus-client",
        owner="prometheus_client.mmap_dict:MmapedDict",
        name="read_all_values_from_file",
        parameters=("filename",),
        caller="prometheus_client.multiprocess:MultiProcessCollector._read_metrics",
        call="MmapedDict.read_all_values_from_file(f)",
        relied_on_by="service/web/metrics.py (merging exited workers' samples into the archive files)",
    ),
    Hook(
        library="gunicorn",
        owner="gunicorn.util",
        name="write_error",
        parameters=("sock", "status_int", "reason", "mesg"),
        caller="gunicorn.workers.base:Worker.handle_error",
        call="util.write_error(client, status_int, reason, mesg)",
        relied_on_by="gunicorn.conf.py (gunicorn's own error answers as problem+json, patched in the master)",
    ),
    Hook(
        library="gunicorn",
        owner="gunicorn.util",
        name="write_nonblock",
        parameters=("sock", "data"),
        caller="gunicorn.util:write_error",
        call="write_nonblock(sock,",
        relied_on_by="gunicorn.conf.py (writes those problem+json answers)",
    ),
]


@pytest.mark.parametrize("hook", HOOKS, ids=lambda hook: f"{hook.owner}.{hook.name}")
def test_private_hook_is_still_there_and_still_called(hook: Hook) -> None:
    owner = hook.resolve_owner()
    function = getattr(owner, hook.name, None)
    if not callable(function):
        hook.fail("is gone")
    names = tuple(inspect.signature(function).parameters)
    if names[: len(hook.parameters)] != hook.parameters:
        hook.fail(f"now takes ({', '.join(names)}), not ({', '.join(hook.parameters)}, ...)")
    try:
        source = inspect.getsource(hook.resolve_caller())
    except (AttributeError, ImportError):
        hook.fail(f"has lost its caller {hook.caller}")
    if hook.call not in source:
        hook.fail(f"is no longer called by {hook.caller} (as {hook.call!r})")


def test_our_overrides_are_the_hooks_listed_here() -> None:
    """A new override of a private name must be added to HOOKS, so it is checked on every upgrade."""
    from service.web.parsing import OrjsonParser
    from service.web.spec import Api

    listed = {(hook.owner.rsplit(":", 1)[-1], hook.name) for hook in HOOKS}
    for ours, theirs in ((Api, "Api"), (OrjsonParser, "FlaskParser")):
        private = {
            name
            for name, value in vars(ours).items()
            if name.startswith("_") and not name.startswith("__") and callable(value)
        }
        assert private <= {name for owner, name in listed if owner == theirs}, (ours, private)


def test_the_gunicorn_patch_is_the_one_listed_here() -> None:
    # Loading gunicorn.conf.py here would set PROMETHEUS_MULTIPROC_DIR for the whole test run; the deploy
    # tests check its effect (problem+json from gunicorn itself) against a real server.
    from pathlib import Path

    config = (Path(__file__).resolve().parent.parent / "gunicorn.conf.py").read_text()
    patched = {line.split("=")[0].strip() for line in config.splitlines() if line.startswith("gunicorn.")}
    assert patched <= {f"{hook.owner}.{hook.name}" for hook in HOOKS}, patched
