"""The typed core passes mypy under the project's configuration (pyproject.toml ``[tool.mypy]``):
``server/`` and ``session/`` strict, with the engine's wire modules."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
TYPED = ["server", "session", "engine/protocol.py", "engine/interface.py", "engine/errors.py"]

pytestmark = pytest.mark.slow


def test_the_strict_modules_pass_mypy(tmp_path: Path) -> None:
    run = subprocess.run([sys.executable, "-m", "mypy", "--cache-dir", str(tmp_path / "cache"), *TYPED],
                         cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-2000:]
    assert "Success: no issues found" in run.stdout


def test_server_is_in_the_strict_set() -> None:
    import tomllib

    overrides = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["mypy"]["overrides"]
    strict = {m for o in overrides if o.get("strict") for m in o["module"]}
    assert {"server.*", "session.*"} <= strict
