"""A front end over an engine that misbehaves (issue 39 items 2, 7, 8, 9), in process: the app of
``launch render --engine-url`` (its engine built from the settings by ``server.context.create_engine``,
as the CLI builds it) under Starlette's TestClient, over the scripted engine of
tests/support/scripted_engine.py on a loopback socket, through both engine transports: ``ws://`` (the
engine link, ``LinkEngine``) and ``http://`` (``RemoteEngine``).

For each fault, three client APIs: an OpenAI JSON chat (the status and the envelope), an OpenAI SSE
chat (an HTTP error before the first event, an SSE error event after it) and a WebSocket ``chat``
(an ``error`` frame with the code and status, the session answering a ping afterwards). Then: the
engine's slot is free (``live_sequences`` back to 0, a cancel sent to the engine for what it still
runs), no client saw the engine's address or its error text, and the next chat completes with the
scripted text.

- a silent engine (``hang``, ``hang_after_one``, ``wrong_id`` over the link) is a 504
  ``engine_timeout`` after ``--engine-timeout`` of silence for that request (the link's pings, which
  the engine answers, do not count);
- malformed output (token ids that are strings, floats, lists, nulls, negative or past the
  vocabulary; a string or out-of-range ``index``; more tokens than ``max_tokens``; a free-text finish
  reason; string usage; a chunk naming another request) is a 502 ``engine_error`` naming the engine,
  never a 500 and never a 400;
- an oversized message (past what the request may receive, or past the link's 16 MiB) is a 502
  ``engine_error``;
- an engine's error text with internal addresses reaches the client as its status and our own message.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from starlette.testclient import TestClient

from engine.link import LinkEngine
from server.app import create_app
from server.context import ServerContext, create_engine
from server.gating import decide
from server.settings import Mode, Settings
from tests.support.scripted_engine import LEAK, LEAK_MARKERS, MALFORMED, ScriptedEngine
from tests.support.sse import sse_payloads
from tests.support.waiting import wait_until

TIMEOUT = 0.5  # --engine-timeout, seconds
TEXT = "The weather in Paris is sunny and warm today, with a light breeze."
CHAT = {"messages": [{"role": "user", "content": "Weather in Paris?"}], "max_tokens": 64}
TRANSPORTS = ("ws", "http")


@pytest.fixture(scope="module")
def engine(tokenizer: Callable[[str], Any]) -> Iterator[ScriptedEngine]:
    tok = tokenizer("qwen3")
    ids = [*tok.encode(TEXT, add_special_tokens=False), tok.eos_token_id]
    with ScriptedEngine(ids, step=2) as scripted:
        yield scripted


@pytest.fixture(scope="module")
def front(request: pytest.FixtureRequest, engine: ScriptedEngine, asset: Callable[[str], Path],
          tokenizer: Callable[[str], Any]) -> Iterator[tuple[str, TestClient, Any]]:
    url = engine.ws_url if request.param == "ws" else engine.url
    settings = Settings(mode=Mode.RENDER, model_dir=asset("qwen3"), served_model_name="qwen3", environ={},
                        engine_url=url, engine_timeout=TIMEOUT,
                        state_secret=b"test-state-secret-0123456789-abcdefghijklmnopqrstuvwxyz")
    real = create_engine(settings, 4096)  # as the CLI builds it: --engine-timeout reaches both kinds
    ctx = ServerContext(settings=settings, gating=decide(Mode.RENDER, {}, has_engine_url=True),
                        tokenizer=tokenizer("qwen3"), max_model_len=4096, engine=real)
    with TestClient(create_app(ctx)) as client:
        yield request.param, client, real


@pytest.fixture
def fault(engine: ScriptedEngine) -> Iterator[Callable[[str | None], None]]:
    def set_fault(name: str | None) -> None:
        engine.fault = name
    yield set_fault
    engine.fault = None


def ws_chat(client: TestClient) -> tuple[list[dict[str, Any]], bool]:
    """The chat's frames, and whether the session still answers a ping afterwards."""
    with client.websocket_connect("/v1/session", subprotocols=["tokenwire.v1"]) as ws:
        ws.receive_json()  # session.created
        ws.send_json({"type": "chat", "id": "c", "body": CHAT})
        frames = [ws.receive_json()]
        while not (frames[-1].get("id") == "c" and frames[-1]["type"] in ("chat.done", "error")):
            frames.append(ws.receive_json())
        ws.send_json({"type": "ping", "event_id": "alive"})
        alive = ws.receive_json() == {"type": "pong", "seq": frames[-1]["seq"] + 1, "event_id": "alive"}
        return frames, alive


def settled(engine: Any) -> int:
    """0 once the front end holds no engine request (its link slot or HTTP stream freed)."""
    wait_until(lambda: engine.live_sequences() == 0, "the front end to hold no engine request", timeout=30,
               interval=0.01, detail=lambda: f"{engine.live_sequences()} live")
    return 0


def content(r: Any) -> str:
    assert r.status_code == 200, r.text
    return str(r.json()["choices"][0]["message"]["content"])


def not_leaked(text: str, engine: ScriptedEngine) -> None:
    assert engine.url.split("//")[1] not in text  # the engine's address stays internal
    assert LEAK not in text and not any(marker in text for marker in LEAK_MARKERS)
    assert "Traceback" not in text and "Internal server error" not in text


# fault → (HTTP status, WebSocket code, words of the message, whether the client got events first)
TIMED_OUT = (504, "engine_timeout", f"did not answer within {TIMEOUT:g} s")
BAD = (502, "engine_error", "The remote engine sent an invalid answer")
EXPECTED: dict[str, dict[str, tuple[int, str, str, bool]]] = {
    "hang": {"ws": (*TIMED_OUT, False), "http": (*TIMED_OUT, False)},
    "hang_after_one": {"ws": (*TIMED_OUT, True), "http": (*TIMED_OUT, True)},
    "wrong_id": {"ws": (*TIMED_OUT, False)},  # over HTTP the connection says whose answer it is: served
    "crossed_id": {"ws": (*BAD, False)},
    **{name: {"ws": (*BAD, name == "bad_usage"), "http": (*BAD, name == "bad_usage")} for name in MALFORMED},
    "oversized": {"ws": (*BAD, False), "http": (*BAD, False)},
    "oversized_huge": {"ws": (*BAD, False), "http": (*BAD, False)},
    "garbage": {"ws": (*BAD, False), "http": (*BAD, False)},
    "wrong_shape": {"ws": (*BAD, False), "http": (*BAD, False)},
    "leaky_400": {"ws": (400, "invalid_request", "refused the request as invalid (HTTP 400)", False),
                  "http": (400, "invalid_request", "refused the request as invalid (HTTP 400)", False)},
    "leaky_503": {"ws": (503, "overloaded", "overloaded", False), "http": (503, "overloaded", "overloaded", False)},
    "leaky_500": {"ws": (502, "engine_unavailable", "failed", False),
                  "http": (502, "engine_unavailable", "failed (HTTP 500)", False)},
    "leaky_mid_stream": {"ws": (502, "engine_unavailable", "failed", True),
                         "http": (502, "engine_unavailable", "failed mid-stream", True)},
}
# the front end over each transport, built once per module (pytest groups the cases by it)
CASES = [(transport, name) for transport in TRANSPORTS for name, per in EXPECTED.items() if transport in per]


@pytest.mark.parametrize(("front", "name"), CASES, ids=[f"{t}-{n}" for t, n in CASES], indirect=["front"])
def test_a_misbehaving_engine_is_a_clear_engine_error_on_every_api(
        front: tuple[str, TestClient, Any], engine: ScriptedEngine, fault: Callable[[str | None], None],
        name: str) -> None:
    transport, client, real = front
    status, code, words, mid = EXPECTED[name][transport]
    fault(name)
    aborted = len(engine.aborted)
    # OpenAI JSON
    r = client.post("/v1/chat/completions", json=CHAT)
    assert r.status_code == status and words in r.json()["error"]["message"], r.text
    not_leaked(r.text, engine)
    assert settled(real) == 0
    # OpenAI SSE: before the first event an HTTP error, after it an error event, then [DONE]
    r = client.post("/v1/chat/completions", json={**CHAT, "stream": True})
    if mid:
        events = sse_payloads(r.text)
        assert r.status_code == 200 and events[-1] == "[DONE]", r.text
        assert words in events[-2]["error"]["message"] and events[-2]["error"]["code"] == status
    else:
        assert r.status_code == status and words in r.json()["error"]["message"], r.text
    not_leaked(r.text, engine)
    assert settled(real) == 0
    # WebSocket: an error frame for the request, and the session lives on
    frames, alive = ws_chat(client)
    last = frames[-1]
    assert (last["type"], last["error"]["code"], last["error"]["status"]) == ("error", code, status), frames
    assert words in last["error"]["message"] and alive
    not_leaked(str(frames), engine)
    assert settled(real) == 0
    if status == 504 and transport == "ws":  # each timed-out request was cancelled at the engine
        wait_until(lambda: len(engine.aborted) >= aborted + 3, "the engine to get the cancels", timeout=30,
                   interval=0.01)
    # and the engine serves the next request as before
    fault(None)
    assert content(client.post("/v1/chat/completions", json=CHAT)) == TEXT


@pytest.mark.parametrize("front", ["http"], indirect=True)
def test_over_http_the_connection_binds_an_answer_to_its_request(
        front: tuple[str, TestClient, Any], fault: Callable[[str | None], None]) -> None:
    _, client, real = front
    fault("wrong_id")
    assert content(client.post("/v1/chat/completions", json=CHAT)) == TEXT
    assert settled(real) == 0


@pytest.mark.parametrize("front", ["ws"], indirect=True)
def test_the_link_times_out_a_silent_request_while_the_others_on_it_finish(
        front: tuple[str, TestClient, Any], engine: ScriptedEngine, fault: Callable[[str | None], None]) -> None:
    """Silence is per request: outputs of other requests on the same socket are no progress for a
    request the engine says nothing about."""
    _, client, real = front
    assert isinstance(real, LinkEngine)
    with client.websocket_connect("/v1/session", subprotocols=["tokenwire.v1"]) as ws:
        ws.receive_json()
        fault("hang")
        asked = len(engine.requests)
        ws.send_json({"type": "chat", "id": "silent", "body": CHAT})
        wait_until(lambda: len(engine.requests) > asked, "the silent request to reach the engine", timeout=30,
                   interval=0.01)
        fault(None)
        ws.send_json({"type": "chat", "id": "fine", "body": CHAT})
        ends: dict[str, dict[str, Any]] = {}
        while len(ends) < 2:
            frame = ws.receive_json()
            if frame["type"] in ("chat.done", "error"):
                ends[frame["id"]] = frame
        assert ends["fine"]["type"] == "chat.done" and ends["fine"]["status"] == "completed"
        assert ends["silent"]["error"]["code"] == "engine_timeout"
        assert len({link for link in real._links if not link.closed}) == 1  # the same, healthy link
    assert settled(real) == 0
