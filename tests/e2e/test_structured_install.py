"""Structured outputs as a user installs tokenwire (issue 20 item 5), against real server processes:

- a fresh virtual environment (no system site packages) built with pip alone, as docs/engine.md
  says (``pip install torch==2.13.0``, then ``pip install ".[engine]"``), holds xgrammar 0.2.9 and
  serves ``response_format`` and ``tool_choice: "required"`` from the installed package;
- a server that cannot import xgrammar says so once at startup and answers every structured-output
  request (OpenAI, Anthropic) with a 400 that says how to install it, never a 500, while plain
  requests are served.

The fresh environment takes a few minutes the first time (torch and triton are large wheels; pip
reuses its cache and the machine's local wheels afterwards), so it is one test, bounded by its own
timeout. pip runs with ``--no-compile``: what it installs and resolves is the same, only the
byte-compilation of every installed module (some 40 % of the install's CPU time, torch and triton
being thousands of modules) is left to the imports the server does make."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest

from engine.local.params import XGRAMMAR_MISSING
from tests.e2e.client_support import serve_args
from tests.support.server_proc import ServerProcess

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
PIP = ("-m", "pip", "--disable-pip-version-check", "-q")
INSTALL = ("install", "--no-compile")  # no .pyc for modules nothing here imports (see the docstring)
USER = [{"role": "user", "content": "Answer with JSON."}]
WEATHER_SCHEMA: dict[str, Any] = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}
TOOLS = [{"type": "function", "function": {"name": "get_weather", "parameters": WEATHER_SCHEMA}}]
JSON_MODE = {"messages": USER, "response_format": {"type": "json_object"}, "max_tokens": 48, "temperature": 0}
REQUIRED = {"messages": USER, "tools": TOOLS, "tool_choice": "required", "max_tokens": 64, "temperature": 0}
HIDE_XGRAMMAR = "import sys\nsys.modules['xgrammar'] = None\n"
# run the CLI from the installed package, not from the repository the server process starts in
INSTALLED_ONLY = "import sys\nsys.path[:] = [p for p in sys.path if p not in ('', '.')]\n"


def run(*args: str | Path, cwd: Path, timeout: float = 600) -> str:
    out = subprocess.run([str(a) for a in args], cwd=cwd, capture_output=True, text=True, timeout=timeout)
    assert out.returncode == 0, f"{args}: {out.stderr[-3000:]}"
    return out.stdout


def project_copy(dst: Path) -> Path:
    """The files a source install reads, copied, so pip's build never writes into the repository."""
    for name in ("pyproject.toml", "README.md"):
        shutil.copy2(ROOT / name, dst / name)
    for package in ("server", "session", "engine", "client_sdk"):
        shutil.copytree(ROOT / package, dst / package, ignore=shutil.ignore_patterns("__pycache__"))
    return dst


@pytest.mark.timeout(1500)
def test_pip_install_engine_extra_gives_working_structured_outputs(asset: Callable[[str], Path],
                                                                    tmp_path: Path) -> None:
    src = tmp_path / "src"
    src.mkdir()
    project_copy(src)
    run(getattr(sys, "_base_executable", sys.executable), "-m", "venv", tmp_path / "venv", cwd=tmp_path)
    python = tmp_path / "venv/bin/python"
    run(python, *PIP, *INSTALL, "torch==2.13.0", cwd=tmp_path)  # the CPU build first, as documented
    run(python, *PIP, *INSTALL, f"{src}[engine]", cwd=tmp_path)
    versions = json.loads(run(python, "-I", "-c", (
        "import importlib.metadata as m, json\n"
        "print(json.dumps({d: m.version(d) for d in ('xgrammar', 'triton', 'torch', 'tokenwire')}))"), cwd=tmp_path))
    assert versions["xgrammar"] == "0.2.9" and versions["tokenwire"] == "0.1.0"
    assert versions["triton"], versions  # xgrammar's requirement on Linux x86_64, never loaded by the CPU engine

    with ServerProcess(serve_args(asset("tiny-qwen3")), python=str(python), preamble=INSTALLED_ONLY) as srv, \
            httpx.Client(base_url=srv.url, timeout=300) as client:
        assert "structured outputs are unavailable" not in srv.output()
        where = run(python, "-I", "-c", "import server, xgrammar; print(server.__file__)", cwd=tmp_path)
        assert str(tmp_path / "venv") in where
        r = client.post("/v1/chat/completions", json=JSON_MODE)
        assert r.status_code == 200, r.text
        choice = r.json()["choices"][0]
        if choice["finish_reason"] == "stop":
            assert isinstance(json.loads(choice["message"]["content"]), dict)
        r = client.post("/v1/chat/completions", json=REQUIRED)
        assert r.status_code == 200, r.text
        assert r.json()["choices"][0]["message"]["tool_calls"][0]["function"]["name"] == "get_weather"


def test_without_xgrammar_structured_outputs_are_400s_that_say_how_to_install_it(
        asset: Callable[[str], Path]) -> None:
    with ServerProcess(serve_args(asset("tiny-qwen3")), preamble=HIDE_XGRAMMAR) as srv, \
            httpx.Client(base_url=srv.url, timeout=120) as client:
        warnings = [line for line in srv.output().splitlines() if "structured outputs are unavailable" in line]
        assert len(warnings) == 1 and "pip install 'tokenwire[engine]'" in warnings[0]

        for body in (JSON_MODE, REQUIRED, {**REQUIRED, "tool_choice": {"type": "function",
                                                                       "function": {"name": "get_weather"}}},
                     {**JSON_MODE, "stream": True}):
            r = client.post("/v1/chat/completions", json=body)
            assert r.status_code == 400, r.text
            err: dict[str, Any] = r.json()["error"]
            assert err["message"] == XGRAMMAR_MISSING and err["param"] == "sampling_params.structured_outputs"
        r = client.post("/v1/messages", json={"messages": USER, "max_tokens": 32, "tool_choice": {"type": "any"},
                                              "tools": [{"name": "get_weather", "input_schema": WEATHER_SCHEMA}]})
        assert r.status_code == 400, r.text
        assert r.json() == {"type": "error", "error": {"type": "invalid_request_error", "message": XGRAMMAR_MISSING}}

        plain = client.post("/v1/chat/completions", json={"messages": USER, "max_tokens": 4})
        assert plain.status_code == 200, plain.text
        assert client.get("/health").json()["status"] == "ok"
