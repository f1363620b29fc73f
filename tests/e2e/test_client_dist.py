"""The client-only distribution (``packaging/client``): pip builds its wheel, the wheel goes into a
fresh virtual environment (no system site packages; its dependencies from the package index), that
environment holds neither torch, transformers, tokenizers nor jinja2, and the installed client
talks to a real server process.

About 30 s: the venv and the dependency install (~20 s) overlap the server's start-up."""

from __future__ import annotations

import concurrent.futures
import json
import subprocess
import sys
import textwrap
import zipfile
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.e2e.client_support import serve_args
from tests.support.server_proc import ServerProcess

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
HEAVY = ("torch", "transformers", "tokenizers", "jinja2")
PIP = ("-m", "pip", "--disable-pip-version-check", "-q")

CLIENT_CALLS = textwrap.dedent("""
    import asyncio, json, sys

    import client_sdk

    async def main(url):
        async with client_sdk.connect(url) as client:
            body = dict(messages=[{"role": "user", "content": "Name a river."}], max_tokens=12, temperature=0)
            whole = await client.chat.completions.create(**body)
            stream = await client.chat.completions.create(**body, stream=True)
            pieces = [c.choices[0].delta.content or "" async for c in stream if c.choices]
            return {"transport": client.transport, "text": whole.choices[0].message.content,
                    "streamed": "".join(pieces)}

    out = asyncio.run(main(sys.argv[1]))
    out["client_sdk"] = client_sdk.__file__
    out["loaded"] = sorted(m for m in ("torch", "transformers", "tokenizers", "jinja2", "server") if m in sys.modules)
    print(json.dumps(out))
""")


def run(*args: str | Path, cwd: Path) -> str:
    out = subprocess.run([str(a) for a in args], cwd=cwd, capture_output=True, text=True, timeout=240)
    assert out.returncode == 0, f"{args}: {out.stderr[-3000:]}"
    return out.stdout


def build_and_install(work: Path) -> tuple[Path, Path]:
    """The wheel as pip builds it from ``packaging/client``, installed into a fresh venv."""
    run(sys.executable, *PIP, "wheel", "--no-deps", "-w", work / "wheels", ROOT / "packaging/client", cwd=work)
    (wheel,) = (work / "wheels").glob("tokenwire_client-*.whl")
    run(getattr(sys, "_base_executable", sys.executable), "-m", "venv", work / "venv", cwd=work)
    python = work / "venv/bin/python"
    run(python, *PIP, "install", wheel, cwd=work)
    return wheel, python


def test_the_client_installs_alone_and_talks_to_a_real_server(asset: Callable[[str], Path], tmp_path: Path) -> None:
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        installing = pool.submit(build_and_install, tmp_path)
        with ServerProcess(serve_args(asset("tiny-qwen3"))) as server:
            wheel, python = installing.result()
            # -I: no PYTHONPATH, no user site, not the current directory: only what the venv holds
            calls = json.loads(run(python, "-I", "-c", CLIENT_CALLS, server.url, cwd=tmp_path))

    names = {n.split("/")[0] for n in zipfile.ZipFile(wheel).namelist()}
    assert names == {"client_sdk", "session", "engine", wheel.name.split("-py3")[0] + ".dist-info"}
    installed = {d["name"].lower().replace("_", "-")
                 for d in json.loads(run(python, "-I", "-m", "pip", "list", "--format=json", cwd=tmp_path))}
    assert {"tokenwire-client", "websockets", "httpx", "pydantic", "orjson"} <= installed
    assert installed.isdisjoint(HEAVY), installed & set(HEAVY)
    assert "tokenwire" not in installed and "starlette" not in installed and "uvicorn" not in installed
    probe = "import importlib.util as u; print([m for m in ('torch', 'transformers', 'server') if u.find_spec(m)])"
    assert run(python, "-I", "-c", probe, cwd=tmp_path).strip() == "[]"

    assert Path(calls["client_sdk"]).is_relative_to(tmp_path / "venv")
    assert calls["loaded"] == []
    assert calls["transport"] == "websocket"
    assert calls["text"] and calls["streamed"] == calls["text"]  # greedy: streamed equals whole
