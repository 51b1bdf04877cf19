"""The server installs as a wheel into a fresh virtual environment outside the clone and starts by name.

The wheel is built from a copy of the package's sources (pyproject.toml and what it names), installed with
the runtime lock's packages into a new venv in a temporary directory, and ``attention-service serve`` is
started there, away from this checkout (no ``PYTHONPATH``, another working directory), so every file it
serves must have come from the wheel. Slow (a venv, the lock's packages from pip's cache or the index, and a
wheel build: about half a minute here), so it runs with the gunicorn tests.
"""

from __future__ import annotations

import json
import math
import os
import re
import shutil
import signal
import subprocess
import sys
import time
import tomllib
import venv
from pathlib import Path

import httpx
import pytest

pytestmark = pytest.mark.gunicorn

ROOT = Path(__file__).resolve().parents[2]
# The sources a wheel is built from (pyproject.toml's readme and license-files name the other two).
SOURCES = ("pyproject.toml", "README.md", "LICENSE", "service")
START_SECONDS = 60.0
STOP_SECONDS = 30.0
LISTENING = re.compile(r"Listening at: http://127\.0\.0\.1:(\d+)")  # gunicorn's master, on stderr
SEED = {"query": [0, 1], "key": [[1, 0], [0, 1]], "value": [[6, 0], [0, 3]]}


def seed_reference() -> tuple[list[float], list[float]]:
    """The worked example by hand: scores q·k / √2 = [0, 1/√2], their softmax, the weighted values."""
    scores = [0.0, 1 / math.sqrt(2)]
    total = sum(math.exp(score) for score in scores)
    weights = [math.exp(score) / total for score in scores]
    output = [weights[0] * 6.0, weights[1] * 3.0]
    return weights, output


def run(command: list[str], *, timeout: float, cwd: Path) -> str:
    done = subprocess.run(command, capture_output=True, text=True, timeout=timeout, cwd=cwd, env=clean_env())
    assert done.returncode == 0, f"{' '.join(command)}\n{done.stdout[-2000:]}\n{done.stderr[-4000:]}"
    return done.stdout


def clean_env() -> dict[str, str]:
    """This environment without what would lead back to the checkout or its venv."""
    drop = {"PYTHONPATH", "VIRTUAL_ENV", "PROMETHEUS_MULTIPROC_DIR"}
    return {key: value for key, value in os.environ.items() if key not in drop}


def test_the_wheel_installs_and_the_console_script_serves_the_worked_example(tmp_path: Path) -> None:
    source = tmp_path / "src"
    source.mkdir()
    for name in SOURCES:
        origin = ROOT / name
        if origin.is_dir():
            shutil.copytree(origin, source / name, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
        else:
            shutil.copy2(origin, source / name)
    wheels = tmp_path / "wheels"
    run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "--quiet",
            "--wheel-dir",
            str(wheels),
            str(source),
        ],
        timeout=300,
        cwd=tmp_path,
    )
    (wheel,) = wheels.glob("attention_service-*.whl")

    environment = tmp_path / "venv"
    venv.create(environment, with_pip=True)
    python = str(environment / "bin" / "python")
    pip = [python, "-m", "pip", "install", "--quiet", "--disable-pip-version-check"]
    run([*pip, "-r", str(ROOT / "requirements.lock")], timeout=300, cwd=tmp_path)
    # No index: the wheel's own dependencies must be met by the lock's packages just installed.
    run([*pip, "--no-index", str(wheel)], timeout=120, cwd=tmp_path)
    installed = run(
        [python, "-c", "import service, os; print(os.path.dirname(service.__file__))"],
        timeout=60,
        cwd=tmp_path,
    )
    assert Path(installed.strip()).is_relative_to(environment)  # the wheel's copy, not this checkout's

    script = environment / "bin" / "attention-service"
    assert script.is_file()
    version = run([str(script), "--version"], timeout=60, cwd=tmp_path)
    assert version.split() == ["attention-service", tomllib_version()]

    errors = tmp_path / "stderr.log"  # a file, not a pipe: nobody has to read it while the server runs
    with errors.open("w") as stderr:
        server = subprocess.Popen(
            # Port 0: the system picks a free one as gunicorn binds it, so no other server can take it first.
            [str(script), "serve", "--host", "127.0.0.1", "--port", "0", "--workers", "1"],
            cwd=tmp_path,
            env=clean_env(),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,  # the access log
            stderr=stderr,
        )
    try:
        deadline = time.monotonic() + START_SECONDS
        while not (listening := LISTENING.search(errors.read_text())):
            assert server.poll() is None, (
                f"the server exited ({server.returncode}): {errors.read_text()[-2000:]}"
            )
            assert time.monotonic() < deadline, f"no address logged within {START_SECONDS:.0f} s"
            time.sleep(0.1)
        with httpx.Client(base_url=f"http://127.0.0.1:{listening[1]}", timeout=10) as client:
            while True:
                assert server.poll() is None, f"the server exited ({server.returncode})"
                assert time.monotonic() < deadline, f"no /readyz within {START_SECONDS:.0f} s"
                try:
                    if client.get("/readyz").status_code == 200:
                        break
                except httpx.TransportError:
                    pass
                time.sleep(0.1)

            answer = client.post("/v1/attention", json=SEED)
            assert answer.status_code == 200, answer.text
            weights, output = seed_reference()
            assert answer.json()["weights"] == pytest.approx(weights, rel=1e-12)
            assert answer.json()["output"] == pytest.approx(output, rel=1e-12)
            assert answer.json()["weights"] == pytest.approx(
                [0.3302, 0.6698], abs=5e-5
            )  # the figures
            assert answer.json()["output"] == pytest.approx([1.9814, 2.0093], abs=5e-5)

            # What the package ships besides code: the playground, the widgets, the JS client, /docs' page.
            for path in ("/static/client.js", "/static/widgets/base.js", "/docs", "/openapi.json"):
                assert client.get(path, headers={"Accept": "text/html"}).status_code == 200, path
            page = client.get("/", headers={"Accept": "text/html"})
            assert page.status_code == 200
            assert page.headers["Content-Type"].startswith("text/html")
            assert json.loads(client.get("/openapi.json").text)["info"]["version"] == tomllib_version()
    finally:
        server.send_signal(signal.SIGTERM)
        try:
            status = server.wait(timeout=STOP_SECONDS)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()
            raise
    log = errors.read_text()
    assert status == 0, log[-4000:]
    assert "Booting worker" in log  # gunicorn's master, started by the console script


def tomllib_version() -> str:
    version: str = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    return version
