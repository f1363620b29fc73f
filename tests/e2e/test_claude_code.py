"""Claude Code 2.1.332 (pinned, installed from npm by scripts/install-agent-clis.sh) driven end to end
against ``tokenwire serve``: ``claude -p --output-format stream-json --verbose`` with
``ANTHROPIC_BASE_URL`` pointed at the server, through a recording proxy (tests/support/recording_proxy.py)
that keeps every request Claude Code sends and every answer it gets.

Two servers, both ``serve`` on the tiny-qwen3 asset (the Qwen3 chat template, with tools) with an
``--api-key`` (Claude Code sends ``ANTHROPIC_API_KEY`` as ``x-api-key``):

- the real local engine: Claude Code's own requests (about 11,600 prompt tokens: its system prompt,
  an inline ``system`` message, 12 tools, ``thinking: adaptive``, ``output_config.effort``,
  ``context_management``, the ``anthropic-beta`` header) are all answered 200 and streamed. The random
  model never ends its turn, so every answer stops at ``max_tokens`` (``CLAUDE_CODE_MAX_OUTPUT_TOKENS``
  keeps it short) and Claude Code asks it to go on, three times, then gives up: each of those requests
  is a new turn (the previous answer and Claude Code's "Output token limit hit" reminder appended),
  never a retry of a failed one;
- a scripted engine (``--engine-url``, tests/support/scripted_engine.py) that answers a short text and
  ``<|im_end|>``: one request, with Claude Code's default ``max_tokens`` (32,000), and a result event
  that is a success carrying that text; and one that calls ``Bash`` first, whose ``tool_result``
  Claude Code sends back before the answer ends the turn.

For every request: the answer is 2xx (at the proxy and in the server's access log), and the prompt is
what ``/v1/messages/render`` gives for the same body, whose decoded text holds the system prompt, the
inline system message, every tool's name and the user's prompt, and whose length is the
``input_tokens`` the answer reported (and, with the scripted engine, the ids the engine received)."""

from __future__ import annotations

import json
import re
import subprocess
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.support.agent_clis import CLAUDE_CODE_QUIET, AgentCLIs, agent_clis, isolated_env
from tests.support.recording_proxy import Exchange, RecordingProxy
from tests.support.scripted_engine import ScriptedEngine
from tests.support.sequenced_engine import SequencedEngine
from tests.support.server_proc import ServerProcess
from tests.support.waiting import wait_until

pytestmark = pytest.mark.slow

MODEL = "tiny-qwen3"
PROMPT = "Say hello."
ANSWER = "Hello from tokenwire."
API_KEY = "tokenwire-test-key"
AUTH = {"x-api-key": API_KEY}
SERVER_FLAGS = ["--dtype", "float32", "--enable-scale-out", "--tool-call-parser", "hermes", "--enable-auto-tool-choice",
                "--api-key", API_KEY]


@pytest.fixture(scope="module")
def clis() -> AgentCLIs:
    return agent_clis()


@dataclass
class Run:
    events: list[dict[str, Any]]
    returncode: int
    stderr: str
    exchanges: list[Exchange]
    server: ServerProcess

    @property
    def result(self) -> dict[str, Any]:
        results = [e for e in self.events if e["type"] == "result"]
        assert len(results) == 1, self.events
        return results[0]

    def streamed_text(self) -> str:
        return "".join(e["event"]["delta"]["text"] for e in self.events if e["type"] == "stream_event"
                       and e["event"]["type"] == "content_block_delta" and e["event"]["delta"]["type"] == "text_delta")


def run_claude(clis: AgentCLIs, server: ServerProcess, tmp: Path, extra_env: dict[str, str],
               args: tuple[str, ...] = ()) -> Run:
    home, work = tmp / "home", tmp / "work"
    home.mkdir()
    work.mkdir()
    with RecordingProxy(server.url) as proxy:
        env = isolated_env(home, {
            **CLAUDE_CODE_QUIET, "CLAUDE_CONFIG_DIR": str(home / ".claude"),
            "ANTHROPIC_BASE_URL": proxy.url, "ANTHROPIC_API_KEY": API_KEY,  # sent as x-api-key
            # the aliases Claude Code resolves for its own side requests: all the served model
            "ANTHROPIC_DEFAULT_HAIKU_MODEL": MODEL, "ANTHROPIC_DEFAULT_SONNET_MODEL": MODEL,
            "ANTHROPIC_DEFAULT_OPUS_MODEL": MODEL, **extra_env})
        done = subprocess.run([str(clis.claude), "-p", "--output-format", "stream-json", "--verbose",
                               "--include-partial-messages", "--model", MODEL, *args, "--", PROMPT],
                              cwd=work, env=env, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=240)
        exchanges = proxy.taken()
    events = [json.loads(line) for line in done.stdout.splitlines() if line.strip()]
    return Run(events, done.returncode, done.stderr, exchanges, server)


ACCESS = re.compile(r'"POST /v1/messages(?:\?\S*)? HTTP/1\.1" (\d+)')


def access_log_statuses(server: ServerProcess, count: int) -> list[int]:
    """The statuses of the server's access-log lines for ``POST /v1/messages``, once ``count`` are in."""
    def found() -> list[int] | None:
        out = [int(m.group(1)) for line in list(server.lines) if (m := ACCESS.search(line))]
        return out if len(out) >= count else None
    return wait_until(found, f"{count} access-log lines for POST /v1/messages", timeout=30,
                      detail=server.output)


def texts(content: str | list[dict[str, Any]]) -> list[str]:
    return [content] if isinstance(content, str) else [b["text"] for b in content if b["type"] == "text"]


def check_every_request(run: Run, tokenizer: Any) -> list[list[int]]:
    """Every request answered 2xx (proxy and access log) and rendered whole; the rendered ids of each."""
    assert run.exchanges, f"Claude Code sent nothing:\n{run.stderr}"
    assert [(x.method, x.path) for x in run.exchanges] == [("POST", "/v1/messages")] * len(run.exchanges)
    assert {x.headers.get("x-api-key") for x in run.exchanges} == {API_KEY}
    assert [x.status for x in run.exchanges] == [200] * len(run.exchanges), [x.response_body[:300] for x in run.exchanges]
    assert access_log_statuses(run.server, len(run.exchanges)) == [200] * len(run.exchanges)
    rendered = []
    for x in run.exchanges:
        body = x.json()
        assert body["stream"] is True
        events = x.sse_events()
        assert [e["type"] for e in events if e["type"] not in ("content_block_delta", "ping")] == [
            "message_start", "content_block_start", "content_block_stop", "message_delta", "message_stop"]
        headers = {k: v for k, v in x.headers.items() if k in ("anthropic-beta", "anthropic-version")}
        r = httpx.post(run.server.url + "/v1/messages/render", json=body, headers={**headers, **AUTH}, timeout=60)
        assert r.status_code == 200, r.text
        ids = r.json()["token_ids"]
        assert events[0]["message"]["usage"]["input_tokens"] == len(ids)
        text = tokenizer.decode(ids)
        system = [b["text"] for b in body["system"] if not b["text"].startswith("x-anthropic-billing-header")]
        assert system and all(s.strip() in text for s in system)
        inline = [t for m in body["messages"] if m["role"] == "system" for t in texts(m["content"])]
        assert inline and all(s.strip() in text for s in inline)  # Claude Code's environment message
        names = [t["name"] for t in body["tools"]]
        assert len(names) >= 10 and all(f'"name": "{n}"' in text for n in names)
        assert PROMPT in text
        rendered.append(ids)
    return rendered


# --- the real local engine -------------------------------------------------------------------------


@pytest.fixture(scope="module")
def real_run(clis: AgentCLIs, asset: Callable[[str], Path], tmp_path_factory: pytest.TempPathFactory) -> Iterator[Run]:
    # sampled (greedy, the random model gives only newlines, which Claude Code drops as no answer)
    with ServerProcess(["serve", asset(MODEL), "--max-model-len", "16384", *SERVER_FLAGS]) as srv:
        yield run_claude(clis, srv, tmp_path_factory.mktemp("claude-real"), {"CLAUDE_CODE_MAX_OUTPUT_TOKENS": "8"})


def test_every_request_of_a_real_turn_is_answered_and_rendered(real_run: Run, tokenizer: Callable[[str], Any]) -> None:
    rendered = check_every_request(real_run, tokenizer("qwen3"))
    first = real_run.exchanges[0].json()
    assert first["max_tokens"] == 8
    assert first["thinking"]["type"] == "adaptive" and "output_config" in first and "context_management" in first
    assert "mid-conversation-tool-changes-2026-07-01" in real_run.exchanges[0].headers["anthropic-beta"]
    # the prompt tokens the server counted are those of the rendered prompts, each sent once
    metrics = httpx.get(real_run.server.url + "/metrics", headers=AUTH, timeout=10).text
    counted = next(line for line in metrics.splitlines() if line.startswith("tokenwire_prompt_tokens_total"))
    assert float(counted.split()[-1]) == sum(len(ids) for ids in rendered)


def test_the_random_model_streams_text_and_claude_code_asks_it_to_go_on(real_run: Run) -> None:
    """Each answer streams text and stops at ``max_tokens``; each next request is a new turn holding the
    answer before it and Claude Code's reminder, never the same request again."""
    bodies = [x.json() for x in real_run.exchanges]
    answers = ["".join(e["delta"].get("text", "") for e in x.sse_events() if e["type"] == "content_block_delta")
               for x in real_run.exchanges]
    stops = [next(e for e in x.sse_events() if e["type"] == "message_delta")["delta"]["stop_reason"]
             for x in real_run.exchanges]
    assert stops == ["max_tokens"] * len(bodies) and all(answers)
    assert real_run.streamed_text() == "".join(answers)
    for before, after, answer in zip(bodies, bodies[1:], answers, strict=False):
        # the conversation so far (its cache_control marks move to the newest message), then two more
        assert [m["role"] for m in after["messages"][:len(before["messages"])]] == [m["role"] for m in before["messages"]]
        added = after["messages"][len(before["messages"]):]
        assert [m["role"] for m in added] == ["assistant", "user"]
        assert texts(added[0]["content"]) == [answer]
        assert "Output token limit hit" in "".join(texts(added[1]["content"]))


# --- a scripted engine: a turn that ends ----------------------------------------------------------


@pytest.fixture(scope="module")
def scripted_run(clis: AgentCLIs, asset: Callable[[str], Path], tokenizer: Callable[[str], Any],
                 tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Run, ScriptedEngine]]:
    ids = tokenizer("qwen3").encode(ANSWER + "<|im_end|>", add_special_tokens=False)
    with ScriptedEngine(ids, step=2) as engine, ServerProcess(
            ["serve", asset(MODEL), "--engine-url", engine.url, "--max-model-len", "65536", *SERVER_FLAGS]) as srv:
        yield run_claude(clis, srv, tmp_path_factory.mktemp("claude-scripted"), {}), engine


def test_a_turn_that_ends_is_a_success_with_the_streamed_text(scripted_run: tuple[Run, ScriptedEngine],
                                                             tokenizer: Callable[[str], Any]) -> None:
    run, engine = scripted_run
    rendered = check_every_request(run, tokenizer("qwen3"))
    assert len(run.exchanges) == 1
    assert run.exchanges[0].json()["max_tokens"] == 32000  # Claude Code's own default, inside the context
    assert [r["token_ids"] for r in engine.requests] == rendered
    result = run.result
    assert run.returncode == 0, run.stderr
    assert result["subtype"] == "success" and result["is_error"] is False, result
    assert result["result"] == ANSWER
    assert run.streamed_text() == ANSWER
    assert result["usage"]["input_tokens"] == len(rendered[0])
    assistant = [e for e in run.events if e["type"] == "assistant"]
    assert [b["text"] for e in assistant for b in e["message"]["content"] if b["type"] == "text"] == [ANSWER]


# --- a tool round trip: Bash runs, its result comes back, the turn ends -------------------------------

CALL_BASH = ('<tool_call>\n{"name": "Bash", "arguments": {"command": "echo tokenwire-tool-output", '
             '"description": "Print a marker"}}\n</tool_call><|im_end|>')


def test_a_tool_call_runs_and_its_result_comes_back(clis: AgentCLIs, asset: Callable[[str], Path],
                                                    tokenizer: Callable[[str], Any], tmp_path: Path) -> None:
    """The model calls ``Bash`` (streamed as a ``tool_use`` block, ``stop_reason: tool_use``); Claude
    Code runs it (allowed with ``--allowedTools``) and sends its ``tool_result``, which the next prompt
    holds; the model's answer then ends the turn."""
    qwen3 = tokenizer("qwen3")
    engine = SequencedEngine([qwen3.encode(CALL_BASH, add_special_tokens=False),
                              qwen3.encode("Done.<|im_end|>", add_special_tokens=False)])
    with engine, ServerProcess(["serve", asset(MODEL), "--engine-url", engine.url, "--max-model-len", "65536",
                                *SERVER_FLAGS]) as srv:
        run = run_claude(clis, srv, tmp_path, {}, ("--allowedTools", "Bash(echo:*)"))
        rendered = check_every_request(run, qwen3)
    assert len(run.exchanges) == 2 and [r["token_ids"] for r in engine.requests] == rendered
    first = run.exchanges[0].sse_events()
    [block] = [e["content_block"] for e in first if e["type"] == "content_block_start"]
    assert block["type"] == "tool_use" and block["name"] == "Bash"
    args = "".join(e["delta"]["partial_json"] for e in first if e["type"] == "content_block_delta")
    assert json.loads(args) == {"command": "echo tokenwire-tool-output", "description": "Print a marker"}
    assert next(e for e in first if e["type"] == "message_delta")["delta"]["stop_reason"] == "tool_use"
    sent = run.exchanges[1].json()["messages"]
    assert [b["type"] for b in sent[-2]["content"]] == ["tool_use"] and sent[-2]["content"][0]["id"] == block["id"]
    [result] = sent[-1]["content"]
    assert result["type"] == "tool_result" and result["tool_use_id"] == block["id"] and not result["is_error"]
    assert "tokenwire-tool-output" in json.dumps(result["content"])
    assert "tokenwire-tool-output" in qwen3.decode(rendered[1])
    assert run.result["subtype"] == "success" and run.result["is_error"] is False and run.result["result"] == "Done."
