"""The CLI as an operator meets it: help, one-line startup errors, --port 0, torch-free render."""

from __future__ import annotations

import re
import socket
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest

from server.cli import build_parser
from tests.support.server_proc import ServerProcess, run_cli

# A finder that lets `torch` be found but makes importing it fail, as on a machine where torch is
# broken or absent: anything in the render path that imports torch crashes the server.
BREAK_TORCH = """
import importlib.abc, importlib.machinery, sys
class _BrokenTorch(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def find_spec(self, name, path=None, target=None):
        if name == "torch" or name.startswith("torch."):
            return importlib.machinery.ModuleSpec(name, self)
        return None
    def create_module(self, spec):
        return None
    def exec_module(self, module):
        raise ImportError("torch must not be imported by launch render")
sys.meta_path.insert(0, _BrokenTorch())
"""


# Makes any import of torch fail (sys.modules holds None for it).
NO_TORCH = "import sys\nsys.modules['torch'] = None\n"

# Makes any import of torch or transformers fail: a check that runs before the model loads needs neither.
NO_MODEL_LIBS = "import sys\nsys.modules['torch'] = None\nsys.modules['transformers'] = None\n"


def _flags(*path: str) -> set[str]:
    parser = build_parser()
    for name in path:
        sub = next(a for a in parser._actions if a.dest in ("command", "tier"))
        parser = sub.choices[name]  # type: ignore[index]
    return {opt for a in parser._actions for opt in a.option_strings if opt.startswith("--")}


@pytest.mark.parametrize("command", [["serve"], ["launch", "render"]])
def test_help_documents_every_flag(command: list[str]) -> None:
    done = run_cli([*command, "--help"])
    assert done.returncode == 0
    text = re.sub(r"\s+", " ", done.stdout)
    for flag in _flags(*command):
        assert flag in text
    for required in ("--host", "--port", "--served-model-name", "--max-model-len", "--chat-template",
                     "--tool-call-parser", "--reasoning-parser", "--enable-auto-tool-choice", "--api-key",
                     "--state-secret", "--engine-url", "--enable-scale-out", "--log-level"):
        assert required in text


def test_top_level_help_is_plain_text_with_every_command() -> None:
    done = run_cli(["--help"])
    assert done.returncode == 0
    assert "``" not in done.stdout  # no reStructuredText markup
    assert not any(line.strip() == "::" for line in done.stdout.splitlines())
    for command in ("tokenwire serve", "tokenwire launch render", "tokenwire assets"):
        assert command in done.stdout


@pytest.mark.parametrize("command", [["serve"], ["launch", "render"]])
def test_help_lists_the_environment_variables(command: list[str]) -> None:
    text = run_cli([*command, "--help"]).stdout
    for name in ("TOKENWIRE_API_KEY", "TOKENWIRE_STATE_SECRET", "TOKENWIRE_ENABLE_SCALE_OUT_ENDPOINTS",
                 "TOKENWIRE_CACHE_DIR"):
        assert name in text
    for name in ("TOKENWIRE_NUM_THREADS", "TOKENWIRE_THREAD_PLAN", "TOKENWIRE_NATIVE_SPIN_US"):  # the local engine
        assert (name in text) == (command == ["serve"])


BAD_FLAGS = [
    (["--port", "99999"], "argument --port: 99999 is out of range (0 to 65535; 0 picks a free port)"),
    (["--port", "-1"], "argument --port: -1 is out of range (0 to 65535; 0 picks a free port)"),
    (["--port", "http"], "argument --port: 'http' is not a whole number"),
    (["--max-model-len", "-5"], "argument --max-model-len: -5 is out of range (1 or more)"),
    (["--max-num-seqs", "0"], "argument --max-num-seqs: 0 is out of range (1 or more)"),
    (["--max-num-batched-tokens", "0"], "argument --max-num-batched-tokens: 0 is out of range (1 or more)"),
    (["--ws-max-in-flight", "0"], "argument --ws-max-in-flight: 0 is out of range (1 or more)"),
    (["--ws-idle-timeout", "0"], "argument --ws-idle-timeout: 0 is out of range (more than 0)"),
    (["--engine-timeout", "nan"], "argument --engine-timeout: 'nan' is not a finite number"),
    (["--rate-limit", "-1"], "argument --rate-limit: -1 is out of range (0 or more)"),
]


@pytest.mark.parametrize(("flags", "message"), BAD_FLAGS, ids=[" ".join(f) for f, _ in BAD_FLAGS])
def test_a_bad_flag_value_is_one_line_and_exit_2_before_any_model_loads(flags: list[str], message: str) -> None:
    # The default model with torch and transformers unimportable: reaching the model would fail otherwise.
    done = run_cli(["serve", *flags], preamble=NO_MODEL_LIBS)
    assert done.returncode == 2, done.stderr
    assert done.stderr == f"tokenwire serve: error: {message} (see tokenwire serve --help)\n"


def test_a_bad_flag_is_reported_before_a_missing_model_directory(tmp_path: Path) -> None:
    done = run_cli(["launch", "render", str(tmp_path / "nope"), "--max-model-len", "0"])
    assert done.returncode == 2
    assert done.stderr.strip() == ("tokenwire launch render: error: argument --max-model-len: 0 is out of range "
                                   "(1 or more) (see tokenwire launch render --help)")


@pytest.fixture
def busy_port() -> Iterator[int]:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        yield sock.getsockname()[1]


@pytest.mark.parametrize("command", [["serve"], ["launch", "render"]])
def test_a_port_in_use_is_one_line_and_exit_2_before_any_model_loads(command: list[str], busy_port: int,
                                                                      tmp_path: Path) -> None:
    # A model directory that does not exist: the port must be checked first.
    done = run_cli([*command, str(tmp_path / "nope"), "--port", str(busy_port)], preamble=NO_MODEL_LIBS)
    assert done.returncode == 2
    assert done.stderr == (f"tokenwire: error: cannot bind 127.0.0.1:{busy_port}: the port is in use "
                           "(choose another --port, or 0 for a free one)\n")


def test_a_port_in_use_is_reported_before_the_default_model_is_built(busy_port: int) -> None:
    done = run_cli(["serve", "--port", str(busy_port)], preamble=NO_MODEL_LIBS)
    assert done.returncode == 2
    assert done.stderr.startswith(f"tokenwire: error: cannot bind 127.0.0.1:{busy_port}: the port is in use")


@pytest.mark.parametrize(("env", "error"), [
    ({"TOKENWIRE_NUM_THREADS": "two"}, "TOKENWIRE_NUM_THREADS='two' is not a positive whole number of threads"),
    ({"TOKENWIRE_THREAD_PLAN": "sometimes"}, "TOKENWIRE_THREAD_PLAN='sometimes' is not one of adaptive, fixed"),
])
def test_a_bad_thread_setting_in_the_environment_is_one_line_and_exit_2(tmp_path: Path, env: dict[str, str | None],
                                                                        error: str) -> None:
    done = run_cli(["serve", str(tmp_path / "nope")], env=env, preamble=NO_MODEL_LIBS)
    assert done.returncode == 2
    assert done.stderr == f"tokenwire: error: {error}\n"


STRONG = "cli-tests-state-secret-0123456789-abcdef"
WEAK_SECRETS = [
    (["--state-secret", "a"], {}, "--state-secret is 1 bytes; it must be at least 32 bytes"),
    ([], {"TOKENWIRE_STATE_SECRET": "a" * 40}, "--state-secret has fewer than 8 distinct characters"),
    (["--state-secret", STRONG, "--state-secret", "old"], {}, "the previous --state-secret is 3 bytes"),
    (["--state-secret", STRONG, "--state-secret", STRONG], {}, "the two --state-secret values are the same"),
    (["--state-secret", STRONG, "--state-secret", STRONG + "1", "--state-secret", STRONG + "2"], {},
     "--state-secret is given at most twice"),
    ([], {"TOKENWIRE_STATE_SECRET_PREVIOUS": STRONG}, "TOKENWIRE_STATE_SECRET_PREVIOUS needs TOKENWIRE_STATE_SECRET"),
]


@pytest.mark.parametrize(("flags", "env", "message"), WEAK_SECRETS, ids=[m[:40] for _, _, m in WEAK_SECRETS])
def test_a_weak_state_secret_is_one_line_and_exit_2_before_any_model_loads(
        tmp_path: Path, flags: list[str], env: dict[str, str | None], message: str) -> None:
    # issue 19 item 5: "--state-secret a" was accepted silently, and a state gave the secret away
    done = run_cli(["launch", "render", str(tmp_path / "nope"), *flags], env=env, preamble=NO_MODEL_LIBS)
    assert done.returncode == 2, done.stderr
    assert done.stderr.startswith(f"tokenwire: error: {message}"), done.stderr
    assert done.stderr.count("\n") == 1


@pytest.mark.parametrize("command", [["serve"], ["launch", "render"], ["serve", "--tokens-only"]])
def test_missing_model_directory_is_one_line_and_exit_2(command: list[str], tmp_path: Path) -> None:
    done = run_cli([*command, str(tmp_path / "nope")])
    assert done.returncode == 2
    assert done.stderr.strip() == f"tokenwire: error: model directory not found: {tmp_path / 'nope'}"


def test_directory_without_tokenizer_is_one_line_and_exit_2(tmp_path: Path) -> None:
    done = run_cli(["launch", "render", str(tmp_path)])
    assert done.returncode == 2
    assert done.stderr.strip().startswith("tokenwire: error: no tokenizer in model directory")
    assert "Traceback" not in done.stderr


def test_auto_tool_choice_without_parser_is_a_startup_error(tmp_path: Path) -> None:
    done = run_cli(["launch", "render", str(tmp_path), "--enable-auto-tool-choice"])
    assert done.returncode == 2
    assert "--enable-auto-tool-choice needs --tool-call-parser" in done.stderr


@pytest.mark.slow
def test_launch_render_serves_where_importing_torch_fails(asset: Callable[[str], Path]) -> None:
    model = asset("qwen3")
    with ServerProcess(["launch", "render", model, "--port", "0"], preamble=BREAK_TORCH) as srv:
        assert re.fullmatch(r"http://127\.0\.0\.1:\d+", srv.url)
        assert srv.url.rsplit(":", 1)[1] != "0"
        assert httpx.get(srv.url + "/health").json()["status"] == "ok"
        assert httpx.get(srv.url + "/v1/models").json()["data"][0]["id"] == "qwen3"
        assert httpx.get(srv.url + "/version").status_code == 200
        assert "/health" in httpx.get(srv.url + "/openapi.json").json()["paths"]
        # render and derender, which tests/app runs with torch unimportable in the test process
        chat = {"messages": [{"role": "user", "content": "hi"}]}
        rendered = httpx.post(srv.url + "/v1/chat/completions/render", json=chat, timeout=30)
        assert rendered.status_code == 200 and rendered.json()["token_ids"], rendered.text
        derendered = httpx.post(srv.url + "/v1/chat/completions/derender", timeout=30, json={
            "chat_request": chat, "prompt_token_ids": rendered.json()["token_ids"],
            "generate_response": {"request_id": "c", "choices": [{"index": 0, "finish_reason": "length",
                                                                  "token_ids": [9707]}]}})
        assert derendered.status_code == 200, derendered.text
        assert "torch must not be imported" not in srv.output()
        # transformers' import-time advice ("PyTorch was not found…") is not shown: torch is kept out on purpose
        assert "[transformers]" not in srv.output() and "PyTorch" not in srv.output()


@pytest.mark.slow
def test_served_model_name_and_max_model_len_are_reported(asset: Callable[[str], Path]) -> None:
    with ServerProcess(["launch", "render", asset("qwen3"), "--served-model-name", "my-model",
                        "--max-model-len", "1234"]) as srv:
        card = httpx.get(srv.url + "/v1/models").json()["data"][0]
        assert card["id"] == "my-model"
        assert card["max_model_len"] == 1234


@pytest.mark.slow
def test_api_key_guards_v1_routes_but_not_health(asset: Callable[[str], Path]) -> None:
    with ServerProcess(["launch", "render", asset("qwen3"), "--api-key", "sekret"]) as srv:
        assert httpx.get(srv.url + "/health").status_code == 200
        missing = httpx.get(srv.url + "/v1/models")
        assert missing.status_code == 401
        assert missing.json()["error"]["message"].startswith("Missing API key")
        assert httpx.get(srv.url + "/v1/models", headers={"Authorization": "Bearer wrong"}).status_code == 401
        ok = httpx.get(srv.url + "/v1/models", headers={"Authorization": "Bearer sekret"})
        assert ok.status_code == 200


@pytest.mark.slow
def test_a_chat_template_that_does_not_compile_stops_startup(asset: Callable[[str], Path]) -> None:
    done = run_cli(["launch", "render", asset("qwen3"), "--port", "0", "--chat-template", "{% if %}oops"],
                   preamble=NO_TORCH)
    assert done.returncode == 2
    lines = done.stderr.strip().splitlines()
    assert lines[-1].startswith("tokenwire: error: the chat template does not compile:"), done.stderr
    assert "Traceback" not in done.stderr
