"""Every code block of README.md runs as written after ``bash scripts/serve.sh``.

The Python blocks run here, each in its own process against a real ``tokenwire serve`` of the
embedded default model (what serve.sh starts; ``serve --enable-scale-out`` for a block that says it
needs it), with ``http://127.0.0.1:8000`` (serve.sh's address) replaced by the test server's, and
with torch and transformers unimportable (neither the client SDK nor the OpenAI and Anthropic SDKs
need them). The JavaScript block runs in headless Chromium (tests/e2e/test_browser_readme.py), and
each shell command is run where it can be: listed in ``SHELL`` with the file that runs it."""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.support.server_proc import ServerProcess, merged_env

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
SERVE_URL = "http://127.0.0.1:8000"  # where scripts/serve.sh listens
MODEL = "smollm2-135m-instruct"  # the embedded default model
# Run before each example: any import of torch or transformers raises ImportError.
BLOCK_HEAVY = "import sys\nsys.modules['torch'] = None\nsys.modules['transformers'] = None\n"
FENCE = re.compile(r"^```(\w*)\n(.*?)^```$", re.M | re.S)

# Each shell command of the README → (a file that runs it, text that file must hold to run it).
SHELL = {
    "bash scripts/serve.sh": ("tests/e2e/test_serve_script.py", '"scripts/serve.sh"'),
    "bash scripts/test.sh": (".ci/run", "exec bash scripts/test.sh"),
    "bash scripts/install.sh dev": ("scripts/test.sh", "bash scripts/install.sh dev"),
    # Not in the suite (about 10 minutes); tests/e2e/test_bench_run.py covers how it runs each benchmark.
    ".venv/bin/python -m bench.run --quick": ("bench/run.py", '"--quick"'),
    "pip install ./packaging/client": ("tests/e2e/test_client_dist.py", '"install", wheel'),
    "pip wheel ./packaging/client -w dist/": ("tests/e2e/test_client_dist.py", '"wheel", "--no-deps", "-w"'),
}


@dataclass(frozen=True)
class Block:
    heading: str  # the ## section it is in ("" before the first)
    language: str
    code: str


def all_blocks() -> list[Block]:
    text = (ROOT / "README.md").read_text()
    out = []
    for m in FENCE.finditer(text):
        headings = re.findall(r"^## (.+)$", text[:m.start()], flags=re.M)
        out.append(Block(headings[-1] if headings else "", m.group(1), m.group(2)))
    return out


def readme_blocks(heading: str, language: str) -> list[str]:
    """The ``language`` code blocks of the README section under ``## heading``."""
    return [b.code for b in all_blocks() if b.heading == heading and b.language == language]


def shell_commands(block: Block) -> list[str]:
    return [line.split("  #")[0].strip() for line in block.code.splitlines() if line.strip()]


# What each Python block prints, keyed by a line of the block.
def _capital(out: list[str]) -> None:
    assert "Paris" in out[-1]


def _sdk_async(out: list[str]) -> None:
    # The haiku streams first and may hold newlines; then the four completions as a list; then the
    # message's text (which may hold newlines too).
    # Python's repr picks either quote per item (a completion holding ' is shown in "), so the
    # line is parsed, not pattern-matched.
    lists = [line for line in out if _is_list_of_strings(line, 4)]
    assert len(lists) == 1, out
    assert out.index(lists[0]) < len(out) - 1  # the message's text follows


def _is_list_of_strings(line: str, n: int) -> bool:
    try:
        value = ast.literal_eval(line)
    except (ValueError, SyntaxError):
        return False
    return isinstance(value, list) and len(value) == n and all(isinstance(v, str) for v in value)


def _sdk_sync(out: list[str]) -> None:
    assert out[0] == f"transport: websocket model: {MODEL}"
    assert len(out) > 2 and out[-1].startswith("refused: invalid_request messages ")


def _primitives(out: list[str]) -> None:
    assert re.fullmatch(r"\d+ prompt tokens", out[0])
    assert out[-1].startswith("usage: prompt_tokens=")


EXPECT: dict[str, Callable[[list[str]], None]] = {
    'client = OpenAI(base_url="http://127.0.0.1:8000/v1", api_key="none")': _capital,
    'client = anthropic.Anthropic(base_url="http://127.0.0.1:8000", api_key="none")': _capital,
    'oai = OpenAI(base_url="http://127.0.0.1:8000/v1", api_key="none")': _capital,  # the Responses API
    "async with client_sdk.connect(URL) as client:  # api_key=... when the server has --api-key": _sdk_async,
    "with client_sdk.Client([URL], resumable=True, timeout=120) as client:": _sdk_sync,
    'request = await client.render("chat", BODY)  # a vLLM GenerateRequest': _primitives,
}

PYTHON = [b for b in all_blocks() if b.language == "python"]


def expectation(block: Block) -> Callable[[list[str]], None]:
    lines = {line.strip() for line in block.code.splitlines()}
    checks = [check for line, check in EXPECT.items() if line in lines]
    assert len(checks) == 1, f"a README Python block needs one entry in EXPECT:\n{block.code}"
    return checks[0]


def test_every_readme_code_block_is_run_by_a_test() -> None:
    blocks = all_blocks()
    assert blocks, "no code blocks found in README.md"
    for block in blocks:
        if block.language == "python":
            assert expectation(block) is not None  # run below, each with its own check
            assert set(re.findall(r"https?://[\w.:]+", block.code)) <= {SERVE_URL}, block.code
        elif block.language == "js":
            assert block.heading == "Browser client"  # tests/e2e/test_browser_readme.py runs it
        elif block.language == "bash":
            for command in shell_commands(block):
                assert command in SHELL, f"README command {command!r} is run by no test: add it to SHELL"
                path, text = SHELL[command]
                assert text in (ROOT / path).read_text(), f"{path} no longer runs {command!r}"
        else:  # the one block without a language is the pipeline diagram
            assert block.language == "" and "──render──▶" in block.code, block
    assert sum(b.language == "js" for b in blocks) == 1
    assert len(PYTHON) == len(EXPECT)


@pytest.fixture(scope="module")
def servers() -> Iterator[dict[bool, ServerProcess]]:
    """The default model as serve.sh serves it, started on first use: {scale_out: server}."""
    started: dict[bool, ServerProcess] = {}

    class Lazy(dict[bool, ServerProcess]):
        def __missing__(self, scale_out: bool) -> ServerProcess:
            args = ["serve", "--enable-scale-out"] if scale_out else ["serve"]
            started[scale_out] = ServerProcess(args, startup_timeout=600).start()
            self[scale_out] = started[scale_out]
            return started[scale_out]

    try:
        yield Lazy()
    finally:
        for srv in started.values():
            srv.stop()


@pytest.mark.parametrize("block", PYTHON, ids=[f"{b.heading.lower().replace(' ', '-')}-{i}" for i, b in enumerate(PYTHON)])
def test_a_readme_python_block_runs_as_written(block: Block, servers: dict[bool, ServerProcess]) -> None:
    server = servers["--enable-scale-out" in block.code]
    code = BLOCK_HEAVY + block.code.replace(SERVE_URL, server.url)
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=300,
                          env=merged_env({"TOKENWIRE_URL": None, "TOKENWIRE_API_KEY": None}))
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines, done.stderr
    expectation(block)(lines)
