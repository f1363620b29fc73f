"""Codex CLI 0.171.0 (pinned, installed from npm by scripts/install-agent-clis.sh) driven end to end
against ``tokenwire serve`` over the Responses API: ``codex exec --json`` with a
``[model_providers.tokenwire]`` of ``wire_api = "responses"`` pointed at the server through a
recording proxy (tests/support/recording_proxy.py) that keeps every request and answer.

``serve`` runs the tiny-qwen3 asset (the Qwen3 template, with tools; ``--tool-call-parser hermes``)
with an ``--api-key``. The turns that must end use a scripted engine (``--engine-url``,
tests/support/scripted_engine.py; one script per engine request, in order) since the random tiny
model never ends its turn; the last test runs the real local engine on Codex's whole prompt.

Codex gets a model catalog entry for the served model (``model_catalog_json``,
``tests/support/agent_clis.py``), without which each turn starts with an ``error`` item, and the
config lines that keep it off the network (no update check, analytics, feedback or plugin sync)."""

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

from tests.support.agent_clis import (
    CODEX_QUIET_TOML,
    AgentCLIs,
    agent_clis,
    codex_model_catalog,
    isolated_env,
)
from tests.support.recording_proxy import Exchange, RecordingProxy
from tests.support.scripted_engine import ScriptedEngine
from tests.support.sequenced_engine import SequencedEngine
from tests.support.server_proc import ServerProcess
from tests.support.waiting import wait_until

pytestmark = pytest.mark.slow

MODEL = "tiny-qwen3"
CONTEXT = 32768
API_KEY = "tokenwire-test-key"
AUTH = {"Authorization": f"Bearer {API_KEY}"}
SERVER_FLAGS = ["--dtype", "float32", "--max-model-len", str(CONTEXT), "--enable-scale-out",
                "--tool-call-parser", "hermes", "--enable-auto-tool-choice", "--api-key", API_KEY]
ANSWER = "Hello from tokenwire."
PROMPTS = ("Say hello.", "Now say goodbye.")


@pytest.fixture(scope="module")
def clis() -> AgentCLIs:
    return agent_clis()


@dataclass
class Turn:
    returncode: int
    events: list[dict[str, Any]]
    stderr: str
    exchanges: list[Exchange]

    def items(self, kind: str) -> list[dict[str, Any]]:
        return [e["item"] for e in self.events if e["type"] == "item.completed" and e["item"]["type"] == kind]


class Codex:
    """One Codex home (config, model catalog, sessions) and working folder; :meth:`turn` runs
    ``codex exec --json`` in it against ``server`` through a fresh recording proxy."""

    def __init__(self, clis: AgentCLIs, server: ServerProcess, tmp: Path, *, websockets: bool = False) -> None:
        self.clis, self.server = clis, server
        self.home, self.work = tmp / "home", tmp / "work"
        (self.home / ".codex").mkdir(parents=True)
        self.work.mkdir()
        catalog = self.home / ".codex" / "catalog.json"
        catalog.write_text(json.dumps(codex_model_catalog(MODEL, CONTEXT)))
        self.websockets = websockets
        self.catalog = catalog

    def config(self, base_url: str) -> str:
        lines = [f'model = "{MODEL}"', 'model_provider = "tokenwire"', f'model_catalog_json = "{self.catalog}"',
                 'approval_policy = "never"', 'sandbox_mode = "read-only"', CODEX_QUIET_TOML,
                 "[model_providers.tokenwire]", 'name = "tokenwire"', f'base_url = "{base_url}/v1"',
                 'wire_api = "responses"', 'env_key = "TOKENWIRE_API_KEY"', "request_max_retries = 0",
                 "stream_max_retries = 0"]
        if self.websockets:
            lines.append("supports_websockets = true")
        return "\n".join(lines) + "\n"

    def turn(self, *args: str) -> Turn:
        """One ``codex exec`` through a fresh recording proxy (HTTP only: with ``websockets`` the proxy,
        which carries no WebSocket, is left out and Codex talks to the server itself)."""
        if self.websockets:
            return self._run(self.server.url, args, [])
        with RecordingProxy(self.server.url) as proxy:
            return self._run(proxy.url, args, proxy.exchanges)

    def _run(self, base_url: str, args: tuple[str, ...], exchanges: list[Exchange]) -> Turn:
        (self.home / ".codex" / "config.toml").write_text(self.config(base_url))
        env = isolated_env(self.home, {"CODEX_HOME": str(self.home / ".codex"), "TOKENWIRE_API_KEY": API_KEY,
                                       "NO_COLOR": "1"})
        done = subprocess.run([str(self.clis.codex), "exec", "--json", "--skip-git-repo-check", *args],
                              cwd=self.work, env=env, stdin=subprocess.DEVNULL, capture_output=True, text=True,
                              timeout=240)
        events = [json.loads(line) for line in done.stdout.splitlines() if line.strip()]
        return Turn(done.returncode, events, done.stderr, list(exchanges))


def completed(turn: Turn) -> None:
    """The turn ended with ``turn.completed``, no ``error`` item, no error event, exit status 0."""
    types = [e["type"] for e in turn.events]
    assert turn.returncode == 0 and types[-1] == "turn.completed", (turn.events, turn.stderr)
    assert "error" not in types and "turn.failed" not in types and not turn.items("error"), turn.events


ACCESS = re.compile(r'"POST /v1/responses HTTP/1\.1" (\d+)')
WS_ACCEPTED = re.compile(r'"WebSocket /v1/responses" \[accepted\]')


def answered_and_rendered(turn: Turn, server: ServerProcess, engine: ScriptedEngine, first: int) -> None:
    """Every request of the turn a ``POST /v1/responses`` answered 200 (at the proxy and, in all, in the
    server's access log) whose prompt, as the engine received it, is what ``/v1/responses/render``
    gives for the same body; ``first`` is the index of its first engine request."""
    assert turn.exchanges
    assert [(x.method, x.path, x.status) for x in turn.exchanges] == [("POST", "/v1/responses", 200)] * len(turn.exchanges)
    assert {x.headers["authorization"] for x in turn.exchanges} == {f"Bearer {API_KEY}"}
    for i, x in enumerate(turn.exchanges):
        assert x.sse_events()[-1]["type"] == "response.completed"
        r = httpx.post(server.url + "/v1/responses/render", json=x.json(), headers=AUTH, timeout=60)
        assert r.status_code == 200, r.text
        assert engine.requests[first + i]["token_ids"] == r.json()["token_ids"]

    def logged() -> list[int] | None:
        found = [int(m.group(1)) for line in list(server.lines) if (m := ACCESS.search(line))]
        return found if len(found) >= first + len(turn.exchanges) else None

    statuses = wait_until(logged, "the access-log lines of the turn", timeout=30, detail=server.output)
    assert statuses == [200] * (first + len(turn.exchanges))


def ids(tokenizer: Callable[[str], Any], text: str) -> list[int]:
    out: list[int] = tokenizer("qwen3").encode(text, add_special_tokens=False)
    return out


# --- a turn and its resumed turn over HTTP -------------------------------------------------------------


@pytest.fixture(scope="module")
def answering(asset: Callable[[str], Path], tokenizer: Callable[[str], Any]) -> Iterator[tuple[ServerProcess, SequencedEngine]]:
    engine = SequencedEngine([ids(tokenizer, ANSWER + "<|im_end|>")])
    with engine, ServerProcess(["serve", asset(MODEL), "--engine-url", engine.url, *SERVER_FLAGS]) as srv:
        yield srv, engine


def test_a_turn_and_its_resumed_turn_complete_over_http(clis: AgentCLIs, answering: tuple[ServerProcess, SequencedEngine],
                                                         tmp_path: Path) -> None:
    srv, engine = answering
    codex = Codex(clis, srv, tmp_path)
    first = codex.turn(PROMPTS[0])
    completed(first)
    assert [i["text"] for i in first.items("agent_message")] == [ANSWER]
    answered_and_rendered(first, srv, engine, 0)
    body = first.exchanges[0].json()
    assert body["store"] is False and body["stream"] is True
    assert {t["type"] for t in body["tools"]} == {"function", "namespace", "web_search"}

    second = codex.turn("resume", "--last", PROMPTS[1])
    completed(second)
    assert [i["text"] for i in second.items("agent_message")] == [ANSWER]
    assert second.events[0]["thread_id"] == first.events[0]["thread_id"]
    answered_and_rendered(second, srv, engine, len(first.exchanges))
    history = second.exchanges[0].json()["input"]
    assert [(i.get("role"), i["content"][0]["text"]) for i in history[-2:]] == [("assistant", ANSWER),
                                                                                 ("user", PROMPTS[1])]
    assert "previous_response_id" not in second.exchanges[0].json()


# --- tool calls: a function and a namespaced function, their outputs sent back -------------------------

CALL_EXEC = '<tool_call>\n{"name": "exec_command", "arguments": {"cmd": "echo tokenwire-tool-output"}}\n</tool_call>'
CALL_NAMESPACED = ('<tool_call>\n{"name": "multi_agent_v1__close_agent", "arguments": {"target": "no-such-agent"}}\n'
                   "</tool_call>")


@pytest.mark.parametrize("websockets", [False, True], ids=["http", "websocket"])
def test_tool_calls_go_round_trip_within_one_turn(clis: AgentCLIs, asset: Callable[[str], Path],
                                                 tokenizer: Callable[[str], Any], tmp_path: Path,
                                                 websockets: bool) -> None:
    """The model calls ``exec_command``, then the namespaced ``multi_agent_v1`` ``close_agent``, then
    answers: Codex runs each call and sends its ``function_call_output`` back, and the turn completes
    (over the WebSocket mode each next request chains the previous response with only the new items)."""
    engine = SequencedEngine([ids(tokenizer, CALL_EXEC + "<|im_end|>"), ids(tokenizer, CALL_NAMESPACED + "<|im_end|>"),
                              ids(tokenizer, "Done.<|im_end|>")])
    with engine, ServerProcess(["serve", asset(MODEL), "--engine-url", engine.url, *SERVER_FLAGS]) as srv:
        turn = Codex(clis, srv, tmp_path, websockets=websockets).turn("Run echo, then close the agent.")
        completed(turn)
        if not websockets:
            answered_and_rendered(turn, srv, engine, 0)
        log = list(srv.lines)
    assert [i["text"] for i in turn.items("agent_message")] == ["Done."]
    assert len(engine.requests) == 3
    # the calls and their outputs reach the prompts of the next requests
    prompts = [tokenizer("qwen3").decode(r["token_ids"]) for r in engine.requests]
    assert CALL_EXEC in prompts[1] and "Output:\ntokenwire-tool-output" in prompts[1].split(CALL_EXEC)[1]
    assert CALL_EXEC in prompts[2] and CALL_NAMESPACED in prompts[2]
    assert prompts[2].split(CALL_NAMESPACED)[1].count("<tool_response>") == 1
    if websockets:
        assert not [line for line in log if ACCESS.search(line)]
        assert len([line for line in log if WS_ACCEPTED.search(line)]) == 1
        return
    assert len(turn.exchanges) == 3
    out = [[i for i in x.sse_events()[-1]["response"]["output"] if i["type"] == "function_call"] for x in turn.exchanges]
    assert [[(c["name"], c.get("namespace")) for c in calls] for calls in out] == [
        [("exec_command", None)], [("close_agent", "multi_agent_v1")], []]
    # each call comes back in the next request, with its output under the same call_id
    for calls, nxt in zip(out, turn.exchanges[1:], strict=False):
        items = nxt.json()["input"]
        sent = [i for i in items if i.get("type") == "function_call"]
        outputs = {i["call_id"]: i["output"] for i in items if i.get("type") == "function_call_output"}
        assert sent[-1]["call_id"] == calls[0]["call_id"] and sent[-1]["name"] == calls[0]["name"]
        assert sent[-1].get("namespace") == calls[0].get("namespace")
        assert calls[0]["call_id"] in outputs
    exec_output = json.dumps(next(i for i in turn.exchanges[1].json()["input"] if i.get("type") == "function_call_output"))
    assert "tokenwire-tool-output" in exec_output


# --- a reasoning model: the sealed reasoning comes back next turn ------------------------------------

THOUGHT = "Planning a short greeting."


@pytest.fixture(scope="module")
def reasoning(asset: Callable[[str], Path], tokenizer: Callable[[str], Any]) -> Iterator[tuple[ServerProcess, SequencedEngine]]:
    engine = SequencedEngine([ids(tokenizer, f"<think>\n{THOUGHT}\n</think>\n\n{ANSWER}<|im_end|>")])
    with engine, ServerProcess(["serve", asset(MODEL), "--engine-url", engine.url, *SERVER_FLAGS,
                                "--reasoning-parser", "qwen3"]) as srv:
        yield srv, engine


def test_the_encrypted_reasoning_comes_back_next_turn(clis: AgentCLIs, reasoning: tuple[ServerProcess, SequencedEngine],
                                                      tmp_path: Path) -> None:
    srv, engine = reasoning
    codex = Codex(clis, srv, tmp_path)
    first = codex.turn(PROMPTS[0])
    completed(first)
    answered_and_rendered(first, srv, engine, 0)
    output = first.exchanges[0].sse_events()[-1]["response"]["output"]
    given = [i for i in output if i["type"] == "reasoning"]
    assert len(given) == 1 and given[0]["content"] == [{"type": "reasoning_text", "text": f"\n{THOUGHT}\n"}]
    sealed = given[0]["encrypted_content"]
    assert isinstance(sealed, str) and sealed
    # the text after </think>, its blank line included (vLLM's qwen3 reasoning parser keeps it)
    assert [i["text"] for i in first.items("agent_message")] == ["\n\n" + ANSWER]

    second = codex.turn("resume", "--last", PROMPTS[1])
    completed(second)
    answered_and_rendered(second, srv, engine, len(first.exchanges))
    back = [i for i in second.exchanges[0].json()["input"] if i.get("type") == "reasoning"]
    assert [i["encrypted_content"] for i in back] == [sealed]


# --- the real local engine on Codex's whole prompt -----------------------------------------------------


def test_the_real_engine_streams_an_answer_to_codex_s_whole_prompt(clis: AgentCLIs, asset: Callable[[str], Path],
                                                                   tmp_path: Path) -> None:
    """Codex's request (about 8,700 prompt tokens, no sampling fields) on the tiny model: answered 200
    and streamed, the text Codex shows is the streamed text. The random model never ends its turn, so
    the answer stops at the output limit (the model's default here, ``max_new_tokens`` 8 through
    ``--override-generation-config``, greedy so that the run is the same every time: Codex sends no
    sampling field) and Codex ends the turn as failed, saying so."""
    with ServerProcess(["serve", asset(MODEL), *SERVER_FLAGS,
                        "--override-generation-config", '{"max_new_tokens": 8, "temperature": 0}']) as srv:
        turn = Codex(clis, srv, tmp_path).turn(PROMPTS[0])
        metrics = httpx.get(srv.url + "/metrics", headers=AUTH, timeout=10).text
        [x] = turn.exchanges
        assert (x.method, x.path, x.status) == ("POST", "/v1/responses", 200)
        r = httpx.post(srv.url + "/v1/responses/render", json=x.json(), headers=AUTH, timeout=60)
        assert r.status_code == 200, r.text
        prompt = len(r.json()["token_ids"])
    events = x.sse_events()
    last = events[-1]
    assert last["type"] == "response.incomplete"
    assert last["response"]["incomplete_details"] == {"reason": "max_output_tokens"}
    assert last["response"]["usage"]["input_tokens"] == prompt and last["response"]["usage"]["output_tokens"] == 8
    counted = next(line for line in metrics.splitlines() if line.startswith("tokenwire_prompt_tokens_total"))
    assert float(counted.split()[-1]) == prompt
    streamed = "".join(e["delta"] for e in events if e["type"] == "response.output_text.delta")
    assert streamed and [i["text"] for i in turn.items("agent_message")] == [streamed]
    assert turn.events[-1] == {"type": "turn.failed",
                               "error": {"message": "Incomplete response returned, reason: max_output_tokens"}}


# --- the WebSocket mode --------------------------------------------------------------------------------

def test_websocket_turns_use_no_http_and_send_the_http_turn_s_prompt(clis: AgentCLIs, asset: Callable[[str], Path],
                                                                     tokenizer: Callable[[str], Any],
                                                                     tmp_path: Path) -> None:
    """In one Codex home and working folder: a first turn over HTTP, then a new thread's first turn with
    ``supports_websockets = true`` and its ``resume --last``. The WebSocket turns complete with no HTTP
    request at the server (Codex would fall back to HTTP silently), and the engine gets the same prompt
    for the WebSocket turn as for the HTTP one, token for token."""
    engine = SequencedEngine([ids(tokenizer, ANSWER + "<|im_end|>")])
    with engine, ServerProcess(["serve", asset(MODEL), "--engine-url", engine.url, *SERVER_FLAGS]) as srv:
        codex = Codex(clis, srv, tmp_path)
        http = codex.turn(PROMPTS[0])
        completed(http)
        codex.websockets = True
        first = codex.turn(PROMPTS[0])
        completed(first)
        second = codex.turn("resume", "--last", PROMPTS[1])
        completed(second)
        log = list(srv.lines)
    assert [i["text"] for t in (http, first, second) for i in t.items("agent_message")] == [ANSWER] * 3
    assert first.events[0]["thread_id"] != http.events[0]["thread_id"]
    assert second.events[0]["thread_id"] == first.events[0]["thread_id"]
    assert len(http.exchanges) == 1
    assert [int(m.group(1)) for line in log if (m := ACCESS.search(line))] == [200]  # the HTTP turn's, no other
    assert len([line for line in log if WS_ACCEPTED.search(line)]) == 2  # one socket per turn
    # one engine request per turn: the warm-ups (generate: false) generate nothing
    assert len(engine.requests) == 3
    http_ids, ws_ids, resumed = (r["token_ids"] for r in engine.requests)
    assert ws_ids == http_ids
    text = tokenizer("qwen3").decode(resumed)
    assert text.index(PROMPTS[0]) < text.index(ANSWER) < text.index(PROMPTS[1])


def test_the_encrypted_reasoning_comes_back_over_the_websocket_mode(
        clis: AgentCLIs, reasoning: tuple[ServerProcess, SequencedEngine], tmp_path: Path) -> None:
    """The same over the WebSocket mode: the sealed reasoning Codex got on the socket is in its session
    file, and the resumed turn (a new socket, the whole history, that item included) is accepted; no
    HTTP request reaches the server."""
    srv, engine = reasoning
    posts = len([line for line in list(srv.lines) if ACCESS.search(line)])
    generated = len(engine.requests)
    codex = Codex(clis, srv, tmp_path, websockets=True)
    first = codex.turn(PROMPTS[0])
    completed(first)
    sessions = list((codex.home / ".codex" / "sessions").rglob("*.jsonl"))
    assert len(sessions) == 1
    items = [json.loads(line).get("payload", {}) for line in sessions[0].read_text().splitlines()]
    sealed = [i["encrypted_content"] for i in items if i.get("type") == "reasoning"]
    assert len(sealed) == 1 and sealed[0]
    second = codex.turn("resume", "--last", PROMPTS[1])
    completed(second)
    assert [i["text"] for t in (first, second) for i in t.items("agent_message")] == ["\n\n" + ANSWER] * 2
    assert len([line for line in list(srv.lines) if ACCESS.search(line)]) == posts
    assert len(engine.requests) == generated + 2  # one per turn: the warm-ups generate nothing
