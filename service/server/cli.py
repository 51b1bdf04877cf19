"""``attention-service serve`` (also ``python -m service serve``): gunicorn with the service's settings.

The one way the server starts: ``make run``, the image, compose, the Kubernetes manifests and the tools in
deploy/ all run this. It is gunicorn's documented "Custom Application" (a subclass of
``gunicorn.app.base.BaseApplication``) whose configuration is, in rising precedence:

1. the settings module :mod:`service.server.gunicorn_settings`, which reads the environment variables of
   docs/operations.md (``HOST``, ``PORT``, ``WEB_CONCURRENCY``, ``GUNICORN_*``, …);
2. ``GUNICORN_CMD_ARGS``, gunicorn's own variable for any of its settings that the table does not name;
3. this command's options. ``--host``, ``--port`` and ``--workers`` are ``HOST``, ``PORT`` and
   ``WEB_CONCURRENCY`` given on the command line: they are put in the environment before the settings
   module reads it, so the module stays the one place that turns them into gunicorn's settings
   (:func:`command_line_settings`).

Every setting is checked here, in the process that becomes gunicorn's master, before the port is bound or a
worker forked: a bad one is one line naming it (``attention-service serve: error: …``) and exit status 2, as
for a bad option (:func:`main`), instead of a traceback, or workers that fail to boot (or crash) one after
another.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from service.identity import API_VERSION
from service.server import DEFAULT_APP, PROG, SETTINGS_MODULE
from service.settings import SettingError

if TYPE_CHECKING:
    from service.server.application import AttentionServer


def worker_count(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, not {value}")
    return value


def port(text: str) -> int:
    value = int(text)
    if not 0 <= value <= 65535:
        raise argparse.ArgumentTypeError(f"must be a TCP port (0-65535), not {value}")
    return value


def host(text: str) -> str:
    """``--host`` as ``HOST`` takes it (service/server/environment.py): a name, an IPv4 or IPv6 address."""
    from service.server.environment import bind_host

    try:
        bind_host("--host", text)
    except SettingError as error:
        raise argparse.ArgumentTypeError(str(error).removeprefix("--host ")) from None
    return text


class _CommandParser(argparse.ArgumentParser):
    """A command's parser: ``--bind`` is refused beside ``--host`` or ``--port`` (argparse's groups cannot say
    "this one or any of those"), where it had silently won over them."""

    def parse_known_args(  # type: ignore[override]  # typeshed's overloads; this passes them through
        self, args: Sequence[str] | None = None, namespace: argparse.Namespace | None = None
    ) -> tuple[argparse.Namespace, list[str]]:
        arguments, rest = super().parse_known_args(args, namespace)
        given = [f"--{name}" for name in ("host", "port") if getattr(arguments, name, None) is not None]
        if getattr(arguments, "bind", None) and given:
            self.error(
                f"argument --bind: not allowed with {' or '.join(given)} (--bind takes HOST:PORT itself)"
            )
        return arguments, rest


def parser() -> argparse.ArgumentParser:
    top = argparse.ArgumentParser(
        prog=PROG, description="The attention service: masked attention, softmax and likelihood over HTTP."
    )
    top.add_argument("--version", action="version", version=f"%(prog)s {API_VERSION}")
    commands = top.add_subparsers(
        dest="command", required=True, metavar="COMMAND", parser_class=_CommandParser
    )
    serve = commands.add_parser(
        "serve",
        help="serve the API with gunicorn",
        description=(
            "Serve the API with gunicorn and the settings of docs/operations.md, read from the environment; "
            "these options override HOST, PORT and WEB_CONCURRENCY. Stop it with SIGTERM or Ctrl-C."
        ),
    )
    serve.add_argument(
        "--host", type=host, help="address to bind (HOST, default 127.0.0.1; 0.0.0.0: every interface)"
    )
    serve.add_argument("--port", type=port, help="port to bind (PORT, default 8000)")
    serve.add_argument(
        "--workers", type=worker_count, help="worker processes (WEB_CONCURRENCY, default the cores available)"
    )
    serve.add_argument(
        "--bind",
        action="append",
        metavar="ADDRESS",
        help="gunicorn bind address instead of --host and --port (HOST:PORT, unix:PATH, fd://N); repeatable",
    )
    serve.add_argument("--app", default=DEFAULT_APP, help=f"the WSGI app, module:callable ({DEFAULT_APP})")
    return top


def command_line_settings(arguments: argparse.Namespace) -> dict[str, Any]:
    """The gunicorn settings the options set, which override every other source.

    ``--host``, ``--port`` and ``--workers`` are first written to the environment as ``HOST``, ``PORT`` and
    ``WEB_CONCURRENCY``, so the settings module turns them into ``bind`` and ``workers`` as it does the
    variables (and anything else that reads them sees the same values).
    """
    given = {"HOST": arguments.host, "PORT": arguments.port, "WEB_CONCURRENCY": arguments.workers}
    for variable, value in given.items():
        if value is not None:
            os.environ[variable] = str(value)  # argparse has checked it
    settings = importlib.import_module(SETTINGS_MODULE)
    chosen: dict[str, Any] = {}
    if arguments.bind:
        chosen["bind"] = arguments.bind
    elif arguments.host is not None or arguments.port is not None:
        chosen["bind"] = [settings.bind]
    if arguments.workers is not None:
        chosen["workers"] = settings.workers
    return chosen


def check_app_settings() -> None:
    """The app's settings as each worker will read them (service/settings.py, the ``OTEL_*`` variables):
    a bad one raises :class:`SettingError` here, once, instead of failing every worker's boot.

    Called after the gunicorn settings module has applied ``BLAS_THREADS``: the tracing module loads NumPy.
    """
    from service.settings import Settings
    from service.web.tracing import check_propagators, exporters_from, forget_empty_variables

    try:
        Settings.from_env()
        if exporters_from(os.environ):
            # as install_tracing does in each worker, which inherits both the variables and the loaded API
            forget_empty_variables(os.environ)
            check_propagators()
    except SettingError:
        raise
    except ValueError as error:  # the tracing variables' own errors, each already one line naming them
        raise SettingError(str(error)) from None


def check_server(server: AttentionServer) -> None:
    """What gunicorn itself only finds in a worker, or after binding: its worker class, and TLS."""
    import gunicorn.util

    from service.server.tls import check_tls

    uri = server.cfg.worker_class_str
    try:
        # Loads the class. A missing class is an AttributeError in gunicorn's property, which its Config then
        # answers with the setting's text instead: load it again to raise that error.
        if not isinstance(server.cfg.worker_class, type):
            gunicorn.util.load_class(uri)
    except Exception as error:
        # gunicorn's own error for a module that cannot be imported holds the import's traceback
        reason = str(error.__cause__ or error.__context__ or error).strip().splitlines()[-1]
        raise SettingError(
            f"GUNICORN_WORKER_CLASS: the worker class {uri!r} cannot be loaded: {reason}"
        ) from None
    check_tls(server.cfg)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; ``serve`` returns when gunicorn's master stops (2 at once for a bad setting)."""
    arguments = parser().parse_args(argv)
    try:
        overrides = command_line_settings(arguments)
        check_app_settings()
        # Only now: gunicorn's config module reads WEB_CONCURRENCY as it is imported (int(), a traceback)
        from service.server.application import AttentionServer

        server = AttentionServer(arguments.app, overrides)
        check_server(server)
    except SettingError as error:
        print(f"{PROG} {arguments.command}: error: {error}", file=sys.stderr)
        return 2
    server.run()
    return 0
