"""The Responses API's WebSocket mode (``GET /v1/responses``) on real server processes, through the
official ``openai`` SDK's ``client.responses.connect()`` (sync and async) and a plain ``websockets``
client: ``tokenwire serve`` on the tiny qwen3 model (greedy: the streamed text equals the HTTP
answer), and ``launch render --engine-url`` over the scripted engine (tests/support/scripted_engine.py),
whose recorded engine requests show the prompt a chained turn renders to, token for token, and
which answers the Codex CLI 0.171.0 WebSocket messages recorded in tests/data/codex/.

Every server event is validated against the SDK's own event types (``ResponsesServerEvent``)."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, get_args

import httpx
import openai
import pytest
from openai.types.responses.responses_server_event import ResponsesServerEvent
from websockets.exceptions import ConnectionClosed, InvalidStatus
from websockets.sync.client import ClientConnection
from websockets.sync.client import connect as ws_connect

from tests.support.scripted_engine import ScriptedEngine
from tests.support.server_proc import ServerProcess

pytestmark = pytest.mark.slow

KEY = "tokenwire-test-key"
MODEL = "tiny-qwen3"
TERMINAL = ("response.completed", "response.incomplete", "response.failed", "error")
CODEX = Path(__file__).resolve().parents[1] / "data" / "codex"
ANSWER = "<think>\nA short one.\n</think>\n\nHello there.<|im_end|>"


def _event_classes() -> dict[str, type[Any]]:
    union = get_args(ResponsesServerEvent)[0]
    out: dict[str, type[Any]] = {}
    for cls in get_args(union):
        for name in get_args(cls.model_fields["type"].annotation):
            out[name] = cls
    return out


EVENT_CLASSES = _event_classes()


def checked(raw: bytes | str) -> dict[str, Any]:
    """One server message: JSON, of a type the SDK knows, valid against that type's model."""
    event: dict[str, Any] = json.loads(raw)
    EVENT_CLASSES[event["type"]].model_validate(event)
    return event


def until_done(recv: Callable[[], bytes | str]) -> list[dict[str, Any]]:
    events = [checked(recv())]
    while events[-1]["type"] not in TERMINAL:
        events.append(checked(recv()))
    return events


def text_of(events: list[dict[str, Any]]) -> str:
    return "".join(e["delta"] for e in events if e["type"] == "response.output_text.delta")


def user(text: str) -> Any:
    return {"type": "message", "role": "user", "content": [{"type": "input_text", "text": text}]}


@pytest.fixture(scope="module")
def tiny(asset: Callable[[str], Path]) -> Iterator[ServerProcess]:
    with ServerProcess(["serve", asset(MODEL), "--api-key", KEY, "--max-model-len", "1024",
                        "--ws-per-message-deflate"]) as srv:
        yield srv


@pytest.fixture(scope="module")
def oai(tiny: ServerProcess) -> openai.OpenAI:
    return openai.OpenAI(base_url=tiny.url + "/v1", api_key=KEY, max_retries=0)


def raw_ws(srv: ServerProcess, headers: dict[str, str] | None = None, **kw: Any) -> ClientConnection:
    conn: ClientConnection = ws_connect(srv.ws_url + "/v1/responses",
                      additional_headers={"Authorization": f"Bearer {KEY}", **(headers or {})},
                      open_timeout=10, **kw)
    return conn


GREEDY: dict[str, Any] = {"model": MODEL, "max_output_tokens": 8, "temperature": 0, "store": False}


def test_sync_warm_up_and_two_turns_chained_without_store(oai: openai.OpenAI) -> None:
    warm_input: list[Any] = [{"type": "message", "role": "developer",
                   "content": [{"type": "input_text", "text": "You are terse."}]}]
    with oai.responses.connect() as conn:
        conn.response.create(**GREEDY, input=warm_input, generate=False)
        warm = until_done(conn.recv_bytes)
        assert [e["type"] for e in warm] == ["response.created", "response.in_progress", "response.completed"]
        assert warm[-1]["response"]["output"] == [] and warm[-1]["response"]["usage"]["output_tokens"] == 0
        warm_id = warm[-1]["response"]["id"]
        conn.response.create(**GREEDY, input=[user("Tell me a story.")],
                             previous_response_id=warm_id)
        first = until_done(conn.recv_bytes)
        conn.response.create(**GREEDY, input=[user("And then?")],
                             previous_response_id=first[-1]["response"]["id"])
        second = until_done(conn.recv_bytes)
    assert first[-1]["type"] in ("response.completed", "response.incomplete") and text_of(first)
    assert [e["sequence_number"] for e in first] == list(range(len(first)))
    # The same conversation sent whole over HTTP: the same answer, from the same prompt length.
    whole: list[Any] = [*warm_input, user("Tell me a story.")]
    http = oai.responses.create(**GREEDY, input=whole)
    assert http.output_text == text_of(first)
    assert http.usage is not None and http.usage.input_tokens == first[-1]["response"]["usage"]["input_tokens"]
    whole += [*first[-1]["response"]["output"], user("And then?")]
    count = oai.responses.input_tokens.count(model=MODEL, input=whole)
    assert count.input_tokens == second[-1]["response"]["usage"]["input_tokens"]
    # store: false responses live on their connection only
    with pytest.raises(openai.BadRequestError) as exc:
        oai.responses.create(**GREEDY, input="x", previous_response_id=first[-1]["response"]["id"])
    assert exc.value.code == "previous_response_not_found"


def test_async_two_turns_chained_without_store(tiny: ServerProcess, oai: openai.OpenAI) -> None:
    async def main() -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
        client = openai.AsyncOpenAI(base_url=tiny.url + "/v1", api_key=KEY, max_retries=0)
        async with client.responses.connect() as conn:
            await conn.response.create(**GREEDY, input="Tell me a story.")
            first: list[dict[str, Any]] = []
            while not first or first[-1]["type"] not in TERMINAL:
                first.append(checked(await conn.recv_bytes()))
            await conn.response.create(**GREEDY, input="And then?",
                                       previous_response_id=first[-1]["response"]["id"])
            second: list[dict[str, Any]] = []
            while not second or second[-1]["type"] not in TERMINAL:
                second.append(checked(await conn.recv_bytes()))
        return first, second

    first, second = asyncio.run(main())
    assert text_of(first) == oai.responses.create(**GREEDY, input="Tell me a story.").output_text
    assert second[-1]["response"]["previous_response_id"] == first[-1]["response"]["id"]
    assert second[-1]["response"]["usage"]["input_tokens"] > (first[-1]["response"]["usage"]["input_tokens"]
                                                               + first[-1]["response"]["usage"]["output_tokens"])


def test_bad_input_gets_error_events_naming_the_field(tiny: ServerProcess) -> None:
    with raw_ws(tiny) as ws:
        def error_for(event: dict[str, Any] | str) -> dict[str, Any]:
            ws.send(event if isinstance(event, str) else json.dumps(event))
            got = checked(ws.recv(timeout=30))
            assert got["type"] == "error", got
            return got

        assert error_for({"type": "response.bogus"})["error"]["param"] == "type"
        assert error_for("not json")["error"]["code"] == "invalid_json"
        assert error_for({"type": "response.create", "model": MODEL, "input": "x", "background": True}
                         )["error"]["param"] == "background"
        assert error_for({"type": "response.create", "model": MODEL, "input": "x", "temperature": 9}
                         )["error"]["param"] == "temperature"
        for generate in (True, False):  # an input past the context, generated or warmed up
            too_long = error_for({"type": "response.create", "model": MODEL, "input": "word " * 3000,
                                  "generate": generate})
            assert too_long["status"] == 400 and "context length" in too_long["error"]["message"]
            assert too_long["error"]["param"] == "input", too_long
        assert error_for({"type": "response.create", "model": MODEL, "input": "x",
                          "previous_response_id": "resp_nope"})["error"]["code"] == "previous_response_not_found"
        # a second create while one is in flight on the same lane
        long_one = {"type": "response.create", "model": MODEL, "input": "Hi", "max_output_tokens": 64,
                    "store": False}
        ws.send(json.dumps(long_one))
        ws.send(json.dumps(long_one))
        events = [checked(ws.recv(timeout=30))]
        while events[-1]["type"] not in ("response.completed", "response.incomplete"):
            events.append(checked(ws.recv(timeout=30)))
        errors = [e for e in events if e["type"] == "error"]
        assert len(errors) == 1 and errors[0]["error"]["code"] == "response_already_in_flight"
        assert sum(e["type"] == "response.created" for e in events) == 1
        # the connection still answers
        ws.send(json.dumps({**long_one, "max_output_tokens": 2}))
        assert until_done(lambda: ws.recv(timeout=30))[-1]["type"] == "response.incomplete"


def test_stream_ids_run_side_by_side_and_are_echoed(tiny: ServerProcess) -> None:
    with raw_ws(tiny) as ws:
        for lane in ("a", "b"):
            ws.send(json.dumps({"type": "response.create", "model": MODEL, "input": f"Lane {lane}",
                                "max_output_tokens": 6, "temperature": 0, "store": False, "stream_id": lane}))
        done: dict[str, dict[str, Any]] = {}
        lanes_seen: list[str] = []
        while len(done) < 2:
            event = checked(ws.recv(timeout=30))
            lanes_seen.append(event["stream_id"])
            if event["type"] in TERMINAL:
                done[event["stream_id"]] = event
        assert set(done) == {"a", "b"} and all(e["type"] == "response.incomplete" for e in done.values())
        # a fork: lane c continues lane a's response
        ws.send(json.dumps({"type": "response.create", "model": MODEL, "input": "More", "max_output_tokens": 2,
                            "store": False, "stream_id": "c",
                            "previous_response_id": done["a"]["response"]["id"]}))
        forked = until_done(lambda: ws.recv(timeout=30))
        assert forked[-1]["stream_id"] == "c" and forked[-1]["response"]["usage"]["input_tokens"] > \
            done["a"]["response"]["usage"]["input_tokens"]


def test_cancel_a_stored_websocket_response_over_http(tiny: ServerProcess, oai: openai.OpenAI) -> None:
    with raw_ws(tiny) as ws:
        ws.send(json.dumps({"type": "response.create", "model": MODEL, "input": "Write a long story.",
                            "max_output_tokens": 900, "store": True}))
        created = checked(ws.recv(timeout=30))
        rid = created["response"]["id"]
        while checked(ws.recv(timeout=30))["type"] != "response.output_text.delta":
            pass
        cancelled = oai.responses.cancel(rid)
        assert cancelled.status == "cancelled"
        rest = until_done(lambda: ws.recv(timeout=30))
        assert rest[-1]["type"] == "response.incomplete" and rest[-1]["response"]["status"] == "cancelled"
        assert len([e for e in rest if e["type"] == "response.output_text.delta"]) < 900


def test_a_websocket_response_deleted_over_http_while_running_stays_deleted(tiny: ServerProcess,
                                                                            oai: openai.OpenAI) -> None:
    with raw_ws(tiny) as ws:
        ws.send(json.dumps({"type": "response.create", "model": MODEL, "input": "Write a long story.",
                            "max_output_tokens": 900, "store": True}))
        rid = checked(ws.recv(timeout=30))["response"]["id"]
        while checked(ws.recv(timeout=30))["type"] != "response.output_text.delta":
            pass
        oai.responses.delete(rid)
        until_done(lambda: ws.recv(timeout=30))
    with pytest.raises(openai.NotFoundError):  # its end did not store it again
        oai.responses.retrieve(rid)


def test_steer_is_answered_steer_failed_with_the_reason(tiny: ServerProcess) -> None:
    with raw_ws(tiny) as ws:
        ws.send(json.dumps({"type": "response.create", "model": MODEL, "input": "Hi", "max_output_tokens": 2,
                            "store": False}))
        rid = until_done(lambda: ws.recv(timeout=30))[-1]["response"]["id"]
        ws.send(json.dumps({"type": "response.steer", "previous_response_id": rid, "input": "shorter"}))
        failed = checked(ws.recv(timeout=30))
        assert failed["type"] == "response.steer.failed"
        assert failed["error"]["code"] == "steering_not_supported" and "steer" in failed["error"]["message"]
        assert failed["steer"] == {"input": "shorter", "previous_response_id": rid}
        ws.send(json.dumps({"type": "response.steer", "previous_response_id": "resp_other", "input": "x"}))
        assert checked(ws.recv(timeout=30))["error"]["code"] == "response_not_found"


def test_the_handshake_checks_the_key_and_negotiates_deflate(tiny: ServerProcess) -> None:
    url = tiny.ws_url + "/v1/responses"
    with pytest.raises(InvalidStatus) as missing:
        ws_connect(url, open_timeout=10)
    assert missing.value.response.status_code == 401
    assert b"API key" in missing.value.response.body
    with pytest.raises(InvalidStatus) as wrong:
        ws_connect(url, additional_headers={"Authorization": "Bearer wrong"}, open_timeout=10)
    assert wrong.value.response.status_code == 403
    with raw_ws(tiny) as ws:
        assert [e.name for e in ws.protocol.extensions] == ["permessage-deflate"]
    # a plain GET of the path is still the HTTP API's (POST only)
    assert httpx.get(tiny.url + "/v1/responses", headers={"Authorization": f"Bearer {KEY}"}).status_code == 405


def test_the_lifetime_ends_with_openai_reason_and_idleness_closes(asset: Callable[[str], Path]) -> None:
    with ServerProcess(["serve", asset(MODEL), "--responses-ws-max-lifetime", "5", "--ws-idle-timeout", "1.5"]) \
            as srv:
        url = srv.ws_url + "/v1/responses"
        with ws_connect(url, open_timeout=10) as idle:  # no message at all
            with pytest.raises(ConnectionClosed) as closed:
                idle.recv(timeout=10)
            assert closed.value.rcvd is not None and (closed.value.rcvd.code, closed.value.rcvd.reason) == \
                (1001, "idle timeout")
        with ws_connect(url, open_timeout=10) as ws:
            assert ws.protocol.extensions == []  # deflate is off by default (the direct writer is used)
            ws.send(json.dumps({"type": "response.create", "model": MODEL, "input": "Hi", "max_output_tokens": 2}))
            assert until_done(lambda: ws.recv(timeout=30))[-1]["type"] == "response.incomplete"
            steer = json.dumps({"type": "response.steer", "previous_response_id": "resp_x", "input": "x"})
            while True:  # keep it busy (each steer is answered, never idle) until the lifetime
                try:
                    event = checked(ws.recv(timeout=0.2))
                except TimeoutError:
                    ws.send(steer)
                    continue
                if event["type"] == "error":
                    break
                assert event["type"] == "response.steer.failed"
            assert event["error"]["code"] == "websocket_connection_limit_reached"
            assert "Create a new websocket connection" in event["error"]["message"]
            with pytest.raises(ConnectionClosed) as closed:
                ws.recv(timeout=10)
            assert closed.value.rcvd is not None
            assert (closed.value.rcvd.code, closed.value.rcvd.reason) == (1001, "websocket_connection_limit_reached")


# --- over the scripted engine: the prompts themselves --------------------------------------------

@pytest.fixture(scope="module")
def scripted(asset: Callable[[str], Path], tokenizer: Callable[[str], Any]) -> Iterator[tuple[ScriptedEngine,
                                                                                               ServerProcess]]:
    tok = tokenizer("qwen3")
    with ScriptedEngine(tok.encode(ANSWER, add_special_tokens=False)) as engine, ServerProcess(
            ["launch", "render", asset("qwen3"), "--engine-url", engine.url, "--reasoning-parser", "qwen3",
             "--tool-call-parser", "hermes", "--enable-auto-tool-choice", "--api-key", KEY]) as srv:
        yield engine, srv


def test_the_chain_is_the_prompt_the_whole_conversation_gets(scripted: tuple[ScriptedEngine, ServerProcess]) -> None:
    engine, srv = scripted
    first_input = [user("Hi")]
    with raw_ws(srv) as ws:
        ws.send(json.dumps({"type": "response.create", "model": "qwen3", "input": first_input, "store": False}))
        first = until_done(lambda: ws.recv(timeout=30))[-1]["response"]
        assert [item["type"] for item in first["output"]] == ["reasoning", "message"]
        ws.send(json.dumps({"type": "response.create", "model": "qwen3", "input": [user("Again")], "store": False,
                            "previous_response_id": first["id"]}))
        until_done(lambda: ws.recv(timeout=30))
    chained = engine.requests[-1]["token_ids"]
    whole = [*first_input, *first["output"], user("Again")]
    r = httpx.post(srv.url + "/v1/responses", json={"model": "qwen3", "input": whole, "store": False},
                   headers={"Authorization": f"Bearer {KEY}"}, timeout=30)
    assert r.status_code == 200, r.text
    assert engine.requests[-1]["token_ids"] == chained


def test_codex_recorded_websocket_turns_are_answered(scripted: tuple[ScriptedEngine, ServerProcess]) -> None:
    """Each recorded turn replayed as Codex sent it (its handshake headers, its warm-up, then its
    turn chained to the warm-up's id): every message answered up to ``response.completed``, and the
    turn's prompt is the one the same turn sent whole over HTTP gets (tests/data/codex/http.json)."""
    engine, srv = scripted
    ws_turns = json.loads((CODEX / "websocket.json").read_text())["turns"]
    http_turns = json.loads((CODEX / "http.json").read_text())["turns"]
    for ws_turn, http_turn in zip(ws_turns, http_turns, strict=True):
        opened, warm, real = ws_turn["exchanges"][:3]
        headers = {k: v for k, v in opened["headers"].items()
                   if k in ("authorization", "openai-beta", "originator", "session-id", "thread-id",
                            "x-client-request-id", "x-codex-turn-metadata", "x-codex-beta-features")}
        with raw_ws(srv, headers=headers) as ws:
            assert [e.name for e in ws.protocol.extensions] == []  # offered; off unless --ws-per-message-deflate
            ws.send(json.dumps({**warm["message"], "model": "qwen3"}))
            warmed = until_done(lambda: ws.recv(timeout=60))
            assert warmed[-1]["type"] == "response.completed" and warmed[-1]["response"]["output"] == []
            requests_before = len(engine.requests)
            ws.send(json.dumps({**real["message"], "model": "qwen3",
                                "previous_response_id": warmed[-1]["response"]["id"]}))
            answered = until_done(lambda: ws.recv(timeout=60))
            assert answered[-1]["type"] == "response.completed", answered[-1]
            assert text_of(answered) == "\n\nHello there."
        assert len(engine.requests) == requests_before + 1  # the warm-up generated nothing
        over_ws = engine.requests[-1]["token_ids"]
        body = next(x for x in http_turn["exchanges"] if x["kind"] == "http")["body"]
        r = httpx.post(srv.url + "/v1/responses", json={**body, "model": "qwen3", "stream": False},
                       headers={"Authorization": f"Bearer {KEY}"}, timeout=60)
        assert r.status_code == 200, r.text
        assert engine.requests[-1]["token_ids"] == over_ws


def test_a_dropped_socket_aborts_its_engine_request(scripted: tuple[ScriptedEngine, ServerProcess]) -> None:
    engine, srv = scripted
    engine.fault = "hang_after_one"  # one output, then silence: the response stays in progress
    aborted = len(engine.aborted)
    try:
        ws = raw_ws(srv)
        ws.send(json.dumps({"type": "response.create", "model": "qwen3", "input": "Hi", "store": False}))
        assert checked(ws.recv(timeout=30))["type"] == "response.created"
        ws.close()
        deadline = time.monotonic() + 10
        while len(engine.aborted) == aborted:
            assert time.monotonic() < deadline, "the engine request was not aborted"
            time.sleep(0.05)
    finally:
        engine.fault = None
