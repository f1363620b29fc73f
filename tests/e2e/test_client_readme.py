"""The README's Python SDK examples, run as written against a real server (so they cannot rot),
in subprocesses where torch and transformers cannot be imported: the client needs neither."""

from __future__ import annotations

import re
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.e2e.client_support import serve_args
from tests.support.server_proc import ServerProcess, merged_env

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
# Run before each example: any import of torch or transformers raises ImportError.
BLOCK_HEAVY = "import sys\nsys.modules['torch'] = None\nsys.modules['transformers'] = None\n"


def readme_blocks(heading: str, language: str) -> list[str]:
    """The fenced ``language`` code blocks of the README section under ``## heading``."""
    text = (ROOT / "README.md").read_text()
    start = text.index(f"\n## {heading}\n")
    end = text.find("\n## ", start + 1)
    section = text[start:end if end != -1 else None]
    return re.findall(rf"```{language}\n(.*?)```", section, flags=re.S)


@pytest.fixture(scope="module")
def server(asset: Callable[[str], Path]) -> Iterator[ServerProcess]:
    with ServerProcess(serve_args(asset("tiny-qwen3"))) as srv:
        yield srv


def run_python(code: str, url: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", BLOCK_HEAVY + code], cwd=ROOT, capture_output=True, text=True,
                          timeout=180, env=merged_env({"TOKENWIRE_URL": url, "TOKENWIRE_API_KEY": None}))


def test_the_readme_has_the_python_sdk_examples() -> None:
    assert len(readme_blocks("Python SDK", "python")) == 3


@pytest.mark.parametrize("index", [0, 1, 2])
def test_a_readme_python_sdk_example_runs_without_torch_or_transformers(server: ServerProcess, index: int) -> None:
    code = readme_blocks("Python SDK", "python")[index]
    out = run_python(code, server.url)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert lines, out.stderr
    if index == 0:
        # The streamed text comes first and may itself hold newlines (a random-weight model), and
        # so may the message's text at the end: the printed list of completions is found between.
        assert any(line.startswith("[") and "content=" not in line for line in lines)
    elif index == 1:
        assert lines[0] == "transport: websocket model: tiny-qwen3"
        assert lines[-1].startswith("refused: invalid_request messages")
    else:
        assert lines[0].endswith("prompt tokens") and lines[-1].startswith("usage: prompt_tokens=")
