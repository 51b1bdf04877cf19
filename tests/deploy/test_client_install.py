"""The Python client installs into a fresh virtual environment with its own dependencies only, and works.

Slow (a venv and a pip install, about half a minute), so it runs with the gunicorn tests.
"""

from __future__ import annotations

import json
import subprocess
import sys
import venv
from pathlib import Path

import pytest

from deploy.launch import serving

pytestmark = pytest.mark.gunicorn

CLIENT = Path(__file__).resolve().parent.parent.parent / "client"
SERVER_PACKAGES = {"flask", "marshmallow", "werkzeug", "flask-smorest", "gunicorn", "orjson", "scipy"}

CALL = """
import json, sys
import numpy as np
from attention_client import Client
with Client(sys.argv[1]) as service:
    result = service.attention(np.array([0.0, 1.0]), np.eye(2), np.array([[6.0, 0.0], [0.0, 3.0]]))
print(json.dumps({"weights": result.weights.tolist(), "typed": __import__("attention_client").__file__}))
"""


def test_the_client_installs_alone_and_answers(tmp_path: Path) -> None:
    environment = tmp_path / "venv"
    venv.create(environment, with_pip=True)
    python = environment / "bin" / "python"
    install = subprocess.run(
        [str(python), "-m", "pip", "install", "--quiet", "--disable-pip-version-check", str(CLIENT)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert install.returncode == 0, install.stderr
    listed = subprocess.run(
        [str(python), "-m", "pip", "list", "--format=json"],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    installed = {package["name"].lower() for package in json.loads(listed.stdout)}
    assert {"attention-client", "httpx", "numpy"} <= installed
    assert not installed & SERVER_PACKAGES, installed & SERVER_PACKAGES
    typed = Path(
        subprocess.run(
            [
                str(python),
                "-c",
                "import attention_client, os; print(os.path.dirname(attention_client.__file__))",
            ],
            capture_output=True,
            text=True,
            timeout=60,
            check=True,
        ).stdout.strip()
    )
    assert (typed / "py.typed").is_file()
    assert str(typed).startswith(str(environment))  # the installed copy, not this checkout's

    with serving(workers=1, keep_stdout=False) as server:
        answer = subprocess.run(
            [str(python), "-c", CALL, server.base_url], capture_output=True, text=True, timeout=60, check=True
        )
    weights = json.loads(answer.stdout)["weights"]
    assert weights == pytest.approx([0.3302384506733431, 0.6697615493266569], rel=1e-12)
    assert sys.executable != str(python)
