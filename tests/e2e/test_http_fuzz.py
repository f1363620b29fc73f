"""HTTP fuzzing with schemathesis against ``/openapi.json`` of real servers, one per mode.

For every operation the document lists, the schemathesis CLI runs its examples, coverage and
fuzzing phases (schema-valid and schema-invalid bodies, boundary values, unexpected methods) and
checks that

- no answer is a 5xx (``not_a_server_error``);
- every 4xx carries its API's error envelope (``error_envelope``, ``tests/support/fuzz_checks.py``);
- answers match the document: status codes, content types, JSON bodies, each SSE event, and a
  405 lists the allowed methods;
- a body the document calls valid is accepted (``accepts_valid_data``: schemathesis'
  ``positive_data_acceptance`` less the model-dependent and cross-field rules, which answer 400
  naming the field).

Schema-*invalid* bodies that pydantic's lax mode coerces (``"5"`` or ``false`` for an integer, as
vLLM's FastAPI server also accepts) are not failures: the document states the canonical types, so
schemathesis' ``negative_data_rejection`` is not run.

Bounded for CI: ``TOKENWIRE_FUZZ_EXAMPLES`` (default 10) examples per operation and phase, and a
time budget per mode for the modes with an engine (35 s; ``TOKENWIRE_FUZZ_SECONDS`` overrides every
mode's, and past its examples the fuzzing phase repeats until the budget is spent);
``python -m bench.fuzz http`` runs the long form. The three servers start side by side when the
module begins (separate processes: three starts take about as long as the slowest), and each mode's
fuzzing runs alone against its own server (an idle server costs no CPU).
(The schemathesis pytest plugin's lazy fixtures do not run under pytest 9, hence the CLI.)
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

import pytest

from tests.e2e.deploy_support import side_by_side
from tests.support.server_proc import ServerProcess, merged_env

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = int(os.environ.get("TOKENWIRE_FUZZ_EXAMPLES", "10"))
SECONDS = os.environ.get("TOKENWIRE_FUZZ_SECONDS")  # overrides the modes' CI time budgets
TINY = "tiny-qwen3"
CHECKS = ("not_a_server_error,status_code_conformance,content_type_conformance,response_schema_conformance,"
          "unsupported_method,allow_header_conformance,error_envelope,accepts_valid_data")

# Per mode: the server's CLI arguments, and which operations to fuzz there. A short context and a few
# sequences keep every generated request cheap for the tiny engine; plain serve fuzzes only what it
# adds (the OpenAI / Anthropic pipelines), the scale-out operations being the tokens-only mode's code.
ENGINE = ["--dtype", "float32", "--max-model-len", "32", "--max-num-seqs", "4"]
# name: (server arguments, schemathesis arguments, seconds: the CI time budget, 0 for none)
MODES: dict[str, tuple[Callable[[Callable[[str], Path]], list[str]], list[str], int]] = {
    "render": (lambda a: ["launch", "render", str(a("qwen3"))], [], 0),
    "tokens-only": (lambda a: ["serve", str(a(TINY)), "--tokens-only", *ENGINE], [], 35),
    "serve-scale-out": (lambda a: ["serve", str(a(TINY)), "--enable-scale-out", *ENGINE],
                        ["--exclude-path-regex", "/(render|derender)$|^/inference/|^/engine/"], 35),
}


# A request that makes the server allocate without bound fails with MemoryError (a 500 the checks
# report) instead of taking the machine: "n": 2**63 once grew a server to 20 GB before the OOM killer.
MEMORY_CAP = "import resource; resource.setrlimit(resource.RLIMIT_AS, (12 << 30, 12 << 30))"


def run_schemathesis(url: str, *, examples: int, seconds: int, seed: int | None = None, extra: Sequence[str] = (),
                     timeout: float = 600) -> subprocess.CompletedProcess[str]:
    """The schemathesis CLI against ``url``'s document with tokenwire's checks."""
    args = [sys.executable, "-m", "schemathesis.cli", "run", url + "/openapi.json", "--checks", CHECKS,
            "--max-examples", str(examples), "--workers", "1",
            "--phases", "examples,coverage,fuzzing", "--request-timeout", "60", "--continue-on-failure",
            "--suppress-health-check", "all", "--no-color"]
    args += list(extra)
    if seconds:  # fuzzing repeats until the time is spent
        args += ["--max-time", str(seconds)]
    if seed is not None:
        args += ["--seed", str(seed)]
    env = merged_env({"SCHEMATHESIS_HOOKS": "tests.support.fuzz_checks", "PYTHONPATH": str(ROOT)})
    return subprocess.run(args, cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout)


def generated_cases(output: str) -> int:
    match = re.search(r"(\d+) generated", output)
    return int(match.group(1)) if match else 0


@pytest.fixture(scope="module")
def fuzz_servers(asset: Callable[[str], Path]) -> Iterator[dict[str, ServerProcess]]:
    servers = {name: ServerProcess(server_args(asset), startup_timeout=180, preamble=MEMORY_CAP)
               for name, (server_args, _, _) in MODES.items()}
    try:
        side_by_side(*(srv.start for srv in servers.values()))
        yield servers
    finally:
        side_by_side(*(srv.stop for srv in servers.values()))


@pytest.mark.parametrize("mode", list(MODES))
def test_every_operation_keeps_its_contract_under_generated_input(fuzz_servers: dict[str, ServerProcess],
                                                                 mode: str) -> None:
    fuzz_server = fuzz_servers[mode]
    _, fuzz_args, budget = MODES[mode]
    seconds = int(SECONDS) if SECONDS is not None else budget
    result = run_schemathesis(fuzz_server.url, examples=EXAMPLES, seconds=seconds, seed=20240917, extra=fuzz_args)
    output = result.stdout + result.stderr
    assert result.returncode == 0, output[-12000:]
    assert generated_cases(output) > 50, output[-3000:]
    assert fuzz_server.proc is not None and fuzz_server.proc.poll() is None  # still serving
