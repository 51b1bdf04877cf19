"""The command line (``attention-service``, ``python -m service``) and the gunicorn settings it yields.

Each check runs in a fresh interpreter: loading the settings module configures the process that loads it
(BLAS threads, the metrics directory, gunicorn's error writer), as it must for gunicorn's master.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

# The settings gunicorn would run with, from the options given in argv (no server is started).
_RESOLVE = """
import json, sys
from service.server import cli
arguments = cli.parser().parse_args(sys.argv[1:])
overrides = cli.command_line_settings(arguments)
from service.server.application import AttentionServer
server = AttentionServer(arguments.app, overrides)
server.cfg.on_exit(None)  # removes the metrics directory the settings made
names = ("bind", "workers", "worker_class", "keepalive", "limit_request_line", "timeout")
print(json.dumps({name: server.cfg.settings[name].get() for name in names}))
"""


def environment(**variables: str) -> dict[str, str]:
    """This environment without the server's variables, plus ``variables``."""
    server = {"HOST", "PORT", "WEB_CONCURRENCY", "GUNICORN_CMD_ARGS", "GUNICORN_TIMEOUT"}
    server |= {"PROMETHEUS_MULTIPROC_DIR", "GUNICORN_WORKER_CLASS", "GUNICORN_KEEPALIVE"}
    clean = {key: value for key, value in os.environ.items() if key not in server}
    return clean | variables


def resolve(*argv: str, **variables: str) -> dict[str, object]:
    done = subprocess.run(
        [sys.executable, "-c", _RESOLVE, *argv],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=ROOT,
        env=environment(**variables),
    )
    assert done.returncode == 0, done.stderr
    settings: dict[str, object] = json.loads(done.stdout.splitlines()[-1])
    return settings


def test_the_defaults_are_the_settings_modules() -> None:
    settings = resolve("serve", WEB_CONCURRENCY="3")
    assert settings["bind"] == ["127.0.0.1:8000"]
    assert settings["workers"] == 3
    assert settings["worker_class"] == "service.server.worker.AdmittingGeventWorker"
    assert settings["keepalive"] == 75
    assert settings["timeout"] == 30


def test_the_environment_configures_the_server() -> None:
    settings = resolve(
        "serve",
        HOST="0.0.0.0",
        PORT="9001",
        WEB_CONCURRENCY="2",
        GUNICORN_KEEPALIVE="5",
        GUNICORN_TIMEOUT="7",
    )
    assert settings["bind"] == ["0.0.0.0:9001"]
    assert (settings["workers"], settings["keepalive"], settings["timeout"]) == (2, 5, 7)


def test_options_override_the_environment_and_gunicorn_cmd_args_reaches_any_other_setting() -> None:
    settings = resolve(
        "serve",
        "--host",
        "127.0.0.2",
        "--port",
        "9002",
        "--workers",
        "4",
        HOST="0.0.0.0",
        PORT="9001",
        WEB_CONCURRENCY="2",
        GUNICORN_CMD_ARGS="--limit-request-line 2048 --workers 3",
    )
    assert settings["bind"] == ["127.0.0.2:9002"]
    assert settings["workers"] == 4  # the option over GUNICORN_CMD_ARGS over WEB_CONCURRENCY
    assert settings["limit_request_line"] == 2048
    settings = resolve("serve", GUNICORN_CMD_ARGS="--workers 3", WEB_CONCURRENCY="2")
    assert settings["workers"] == 3
    settings = resolve("serve", "--bind", "unix:/tmp/attention.sock", "--bind", "fd://3", PORT="9003")
    assert settings["bind"] == ["unix:/tmp/attention.sock", "fd://3"]  # --bind replaces HOST and PORT


def test_the_settings_module_sets_blas_threads_before_anything_loads_numpy() -> None:
    # Forked workers keep the thread count OpenBLAS read when NumPy was first loaded: in the master, that
    # must come after BLAS_THREADS is applied (on main before #20 it came first, and each worker ran as many
    # BLAS threads as cores).
    script = (
        "import os, sys\n"
        "import service.server.cli, service.server.gunicorn_settings as settings\n"
        "assert 'numpy' not in sys.modules and 'flask' not in sys.modules, 'loaded before the settings'\n"
        "print(os.environ['OPENBLAS_NUM_THREADS'], os.environ['OMP_NUM_THREADS'])\n"
        "settings.on_exit(None)\n"
    )
    variables = {"BLAS_THREADS": "1"}
    env = {k: v for k, v in environment(**variables).items() if not k.endswith("_NUM_THREADS")}
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=60, cwd=ROOT, env=env
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["1", "1"]


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        (["serve", "--port", "70000"], "must be a TCP port"),
        (["serve", "--workers", "0"], "must be at least 1"),
        (["serve", "--port", "eighty"], "invalid port value"),
        (["serve", "--host", "a b"], "must be a host name or an IP address"),
        # --bind had silently won over them
        (
            ["serve", "--port", "9003", "--bind", "unix:/tmp/a.sock"],
            "argument --bind: not allowed with --port",
        ),
        (["serve", "--bind", "127.0.0.1:9", "--host", "::1"], "argument --bind: not allowed with --host"),
        ([], "required: COMMAND"),
    ],
)
def test_bad_options_are_refused_before_anything_starts(argv: list[str], says: str) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "service", *argv],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=ROOT,
        env=environment(),
    )
    assert done.returncode == 2
    assert says in done.stderr, done.stderr


def test_version() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "service", "--version"], capture_output=True, text=True, timeout=60, cwd=ROOT
    )
    from service.identity import API_VERSION

    assert done.stdout.split() == ["attention-service", API_VERSION]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port


def refusal(tmp_path: Path, *argv: str, **variables: str) -> str:
    """``serve`` with ``variables`` (one worker, a free loopback port, its temporary files in ``tmp_path``),
    which must refuse to start: exit 2 with one line on stderr, which this returns, before listening, and
    leaving no metrics directory behind. A server that starts instead is stopped (its whole process group)."""
    variables = {"PORT": str(free_port()), "WEB_CONCURRENCY": "1", "TMPDIR": str(tmp_path)} | variables
    started = subprocess.Popen(
        [sys.executable, "-m", "service", "serve", *argv],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=ROOT,
        env=environment(**variables),
        start_new_session=True,
    )
    try:
        _, stderr = started.communicate(timeout=30)
    except subprocess.TimeoutExpired:
        os.killpg(started.pid, signal.SIGKILL)
        _, stderr = started.communicate(timeout=30)
        pytest.fail(f"the server started: {stderr[-2000:]}")
    assert started.returncode == 2, stderr[-3000:]
    assert len(stderr.strip().splitlines()) == 1, stderr[-3000:]
    assert "Listening" not in stderr
    assert list(tmp_path.glob("attention-metrics-*")) == [], "a metrics directory was left behind"
    return stderr.strip()


@pytest.mark.parametrize(
    ("variables", "says"),
    [
        ({"MAX_BODY_BYTES": "abc"}, "MAX_BODY_BYTES must be a whole number, got 'abc'"),
        ({"MEMORY_BUDGET_BYTES": ""}, "MEMORY_BUDGET_BYTES must be a whole number"),
        ({"COMPUTE_QUEUE_SECONDS": "nan"}, "COMPUTE_QUEUE_SECONDS must be a positive number of seconds"),
        ({"OTEL_TRACES_EXPORTER": "bogus"}, "OTEL_TRACES_EXPORTER names bogus"),
        (
            {"OTEL_TRACES_EXPORTER": "console", "OTEL_PROPAGATORS": "tracecontext,bogus"},
            "OTEL_PROPAGATORS is 'tracecontext,bogus'",
        ),
        ({"MEMORY_BUDGET_BYTES": "1"}, "MEMORY_BUDGET_BYTES must be at least 4,194,304 (4 MiB)"),
        (
            {"MEMORY_BUDGET_BYTES": str(32 << 20), "MAX_BODY_BYTES": str(32 << 20)},
            "MAX_BODY_BYTES (33,554,432)",
        ),
        ({"MAX_WORK_ELEMENTS": "1000000000", "MAX_ANSWER_BYTES": "100000000000"}, "MAX_WORK_ELEMENTS (1,000"),
        ({"COMPUTE_SLOTS": str(10**20)}, "COMPUTE_SLOTS must be at most 1,024"),
        (
            {"GUNICORN_WORKER_CLASS": "bogus.Cls"},
            "GUNICORN_WORKER_CLASS: the worker class 'bogus.Cls' cannot",
        ),
        ({"GUNICORN_WORKER_CLASS": "service.server.worker.Nope"}, "has no attribute 'Nope'"),
    ],
)
def test_a_bad_app_setting_is_one_line_from_the_master(
    tmp_path: Path, variables: dict[str, str], says: str
) -> None:
    # Each worker read them as it booted: a traceback per worker, then "Worker failed to boot", exit 3 (the
    # worker class: a traceback from the master, or a master that ran without workers).
    line = refusal(tmp_path, **variables)
    assert line.startswith("attention-service serve: error: ")
    assert says in line


TLS = ROOT / "deploy" / "test-tls"


@pytest.mark.parametrize(
    ("options", "says"),
    [
        (f"--certfile {TLS / 'certificate.pem'}", "no --keyfile"),
        (f"--keyfile {TLS / 'key.pem'}", "keyfile="),
        (f"--certfile {TLS / 'certificate.pem'} --keyfile {TLS / 'key.pem'} --ciphers BOGUS", "No cipher"),
        (f"--certfile {TLS / 'key.pem'} --keyfile {TLS / 'certificate.pem'}", "certfile="),
    ],
)
def test_a_bad_tls_setting_is_one_line_from_the_master(tmp_path: Path, options: str, says: str) -> None:
    # gunicorn built the context only in each worker's run(): every worker crashed as it booted and the
    # master started another, for ever (11 boots in 3 s), listening all the while.
    line = refusal(tmp_path, GUNICORN_CMD_ARGS=options)
    assert "TLS cannot be set up" in line
    assert says in line


@pytest.mark.parametrize(
    ("variables", "says"),
    [
        # 0 workers, or 0 connections a worker: a server that listened and never answered
        ({"WEB_CONCURRENCY": "0"}, "WEB_CONCURRENCY must be at least 1, not 0"),
        ({"GUNICORN_WORKER_CONNECTIONS": "0"}, "GUNICORN_WORKER_CONNECTIONS must be at least 1, not 0"),
        # bare int() in the settings module or in gunicorn's: tracebacks
        ({"WEB_CONCURRENCY": "abc"}, "WEB_CONCURRENCY must be a whole number, got 'abc'"),
        ({"GUNICORN_TIMEOUT": "1.5"}, "GUNICORN_TIMEOUT must be a whole number, got '1.5'"),
        ({"GUNICORN_KEEPALIVE": "abc"}, "GUNICORN_KEEPALIVE must be a whole number, got 'abc'"),
        ({"GUNICORN_THREADS": "0"}, "GUNICORN_THREADS must be at least 1, not 0"),
        ({"GUNICORN_MAX_REQUESTS": "-1"}, "GUNICORN_MAX_REQUESTS must be at least 0, not -1"),
        # an OverflowError traceback from bind()
        ({"PORT": "99999"}, "PORT must be a TCP port (0-65535), not 99999"),
        ({"PORT": "-1"}, "PORT must be a TCP port (0-65535), not -1"),
        ({"PORT": "http"}, "PORT must be a TCP port (0-65535), got 'http'"),
        ({"HOST": "a:b"}, "HOST must be a host name or an IP address"),
        # tracebacks from the master, or from every worker as it booted
        ({"GUNICORN_WORKER_TMP_DIR": "/nonexistent"}, "GUNICORN_WORKER_TMP_DIR must be a directory"),
        (
            {"PROMETHEUS_MULTIPROC_DIR": str(ROOT / "README.md")},
            "PROMETHEUS_MULTIPROC_DIR must be a directory",
        ),
        # gunicorn logged at info instead, saying nothing
        ({"GUNICORN_LOG_LEVEL": "bogus"}, "GUNICORN_LOG_LEVEL must be one of debug, info, warning"),
    ],
)
def test_a_bad_server_setting_is_one_line_from_the_master(
    tmp_path: Path, variables: dict[str, str], says: str
) -> None:
    line = refusal(tmp_path, **variables)
    assert line.startswith(f"attention-service serve: error: {says}"), line


def test_an_empty_server_variable_means_its_default() -> None:
    # compose passes unset variables empty: HOST= had bound every interface (":8000"), WEB_CONCURRENCY= and
    # GUNICORN_KEEPALIVE= were tracebacks
    empty = dict.fromkeys(["HOST", "PORT", "WEB_CONCURRENCY", "GUNICORN_KEEPALIVE", "GUNICORN_TIMEOUT"], "")
    settings = resolve("serve", **empty, GUNICORN_WORKER_CLASS=" ")
    assert settings["bind"] == ["127.0.0.1:8000"]
    assert settings["keepalive"] == 75
    assert settings["timeout"] == 30
    assert settings["worker_class"] == "service.server.worker.AdmittingGeventWorker"
    assert isinstance(settings["workers"], int)
    assert settings["workers"] >= 1


def test_an_ipv6_host_is_put_in_brackets() -> None:
    # HOST=:: was "'' is not a valid port number": gunicorn splits an address at its first colon
    assert resolve("serve", HOST="::")["bind"] == ["[::]:8000"]
    assert resolve("serve", HOST="[::1]", PORT="9004")["bind"] == ["[::1]:9004"]
    assert resolve("serve", "--host", "::1", "--port", "9005")["bind"] == ["[::1]:9005"]


BLAS = ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS")


def blas_threads(**variables: str) -> list[str]:
    """The three libraries' thread counts once the settings module has run with ``variables``."""
    script = (
        "import os, service.server.gunicorn_settings as settings\n"
        f"print(*(os.environ[name] for name in {BLAS!r}))\n"
    )
    env = {k: v for k, v in environment(**variables).items() if k not in BLAS and k != "BLAS_THREADS"}
    done = subprocess.run(
        [sys.executable, "-c", script],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=ROOT,
        env=env | variables,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.split()


def test_blas_threads_when_given_sets_all_three_libraries() -> None:
    # OPENBLAS_NUM_THREADS=1 already set had kept OpenBLAS at 1 thread while OMP_NUM_THREADS became 2
    assert blas_threads(BLAS_THREADS="2", OPENBLAS_NUM_THREADS="1") == ["2", "2", "2"]
    assert blas_threads(BLAS_THREADS="3") == ["3", "3", "3"]
    # not given (or empty): each library's own variable is kept, the others are 1
    assert blas_threads(OPENBLAS_NUM_THREADS="4") == ["4", "1", "1"]
    assert blas_threads(BLAS_THREADS="", MKL_NUM_THREADS="2") == ["1", "1", "2"]


@pytest.mark.parametrize(
    ("raw", "says"),
    [("0", "at least 1, not 0"), ("-1", "at least 1, not -1"), ("abc", "a whole number, got 'abc'")],
)
def test_a_bad_blas_threads_is_refused(tmp_path: Path, raw: str, says: str) -> None:
    # passed through: OpenBLAS read 0 and -1 as "every core"
    assert (
        refusal(tmp_path, BLAS_THREADS=raw) == f"attention-service serve: error: BLAS_THREADS must be {says}"
    )


def test_ctrl_c_stops_the_server_quietly(tmp_path: Path) -> None:
    """SIGINT to the whole process group, as a terminal's Ctrl-C sends it, with two workers: each also gets
    the master's SIGQUIT, and gevent's worker began a second stop whose sys.exit(0) printed a traceback."""
    variables = {"PORT": str(free_port()), "WEB_CONCURRENCY": "2", "TMPDIR": str(tmp_path)}
    server = subprocess.Popen(
        [sys.executable, "-m", "service", "serve"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        cwd=ROOT,
        env=environment(**variables),
        start_new_session=True,
    )
    lines: list[str] = []
    both_serve = threading.Event()

    def read() -> None:
        assert server.stderr is not None
        for line in server.stderr:
            lines.append(line)
            if sum("Worker serving" in seen for seen in lines) >= 2:
                both_serve.set()

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    try:
        assert both_serve.wait(60), "".join(lines)
        os.killpg(server.pid, signal.SIGINT)
        server.wait(timeout=60)
    finally:
        if server.poll() is None:
            os.killpg(server.pid, signal.SIGKILL)
            server.wait(timeout=30)
    reader.join(30)
    assert server.stderr is not None
    server.stderr.close()
    stderr = "".join(lines)
    assert server.returncode == 0, stderr
    assert "Traceback" not in stderr, stderr
    assert "SystemExit" not in stderr, stderr
    assert "Shutting down: Master" in stderr
