"""A remote engine that fails, behind ``tokenwire launch render --engine-url``: answers HTTP 500, sends
garbage or the wrong shape, hangs before or mid-stream, drops the connection mid-stream, dies
and comes back; in process, on the app that command line builds (tests/support/cli_app.py) under
Starlette's TestClient, over the scripted engine on a loopback socket. Every failure is a clear error in each API's shape (HTTP 502 / 504 with the error
envelope, an SSE error event once a stream has started, an ``error`` frame on a WebSocket session
that lives on), the engine's internal address never reaches a client, ``/health`` reports the
engine degraded while it is, and the server serves again as soon as the engine does.
tests/app/test_misbehaving_engine.py holds the wider fault table over both engine transports."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import orjson
import pytest
from starlette.testclient import TestClient

from tests.conftest import asset_path
from tests.support.cli_app import cli_client, logged_lines
from tests.support.scripted_engine import ScriptedEngine
from tests.support.session_frames import open_session
from tests.support.sse import sse_payloads
from tests.support.waiting import wait_until

pytestmark = pytest.mark.slow  # ~30 s, most of it the --engine-timeout of 2 s waited out: not the fast loop

ENGINE_TIMEOUT = 2  # seconds (--engine-timeout)
TEXT = "The weather in Paris is sunny and warm today, with a light breeze."
CHAT = {"messages": [{"role": "user", "content": "Weather in Paris?"}], "max_tokens": 64}
MESSAGES = {"messages": [{"role": "user", "content": "Weather in Paris?"}], "max_tokens": 64}


@pytest.fixture(scope="module")
def engine(tokenizer: Callable[[str], Any]) -> Iterator[ScriptedEngine]:
    tok = tokenizer("qwen3")
    ids = [*tok.encode(TEXT, add_special_tokens=False), tok.eos_token_id]  # "stop": the last id is the eos
    with ScriptedEngine(ids, step=2) as scripted:
        yield scripted


@pytest.fixture(scope="module")
def logged() -> Iterator[list[str]]:
    with logged_lines() as lines:
        yield lines


@pytest.fixture(scope="module")
def render(engine: ScriptedEngine, logged: list[str]) -> Iterator[TestClient]:
    args = ["launch", "render", str(asset_path("qwen3")), "--engine-url", engine.url,
            "--engine-timeout", str(ENGINE_TIMEOUT)]
    with cli_client(args) as srv:
        yield srv


@pytest.fixture
def fault(engine: ScriptedEngine) -> Iterator[Callable[[str | None], None]]:
    def set_fault(name: str | None) -> None:
        engine.fault = name
    yield set_fault
    engine.fault = None


def ws_chat(srv: TestClient, chat: dict[str, Any]) -> tuple[list[dict[str, Any]], bool]:
    """The request's frames, and whether the session still answers a ping afterwards."""
    with open_session(srv) as ws:
        ws.send(type="chat", id="c", body=chat)
        frames = []
        while True:
            frame = orjson.loads(ws.ws.receive_text())
            frames.append(frame)
            if frame.get("id") == "c" and frame["type"] in ("chat.done", "error"):
                break
        ws.send(type="ping", event_id="alive")
        alive = orjson.loads(ws.ws.receive_text()) == {"type": "pong", "seq": frames[-1]["seq"] + 1, "event_id": "alive"}
        return frames, alive


# fault → (HTTP status, WebSocket error code, words of the message); "mid" faults fail after a first event
FAULTS = {
    "status_500": (502, "engine_unavailable", "failed (HTTP 500)"),
    "garbage": (502, "engine_error", "invalid answer"),  # a bad engine, not an unreachable one
    "wrong_shape": (502, "engine_error", "invalid answer"),
    "hang": (504, "engine_timeout", f"did not answer within {ENGINE_TIMEOUT} s"),
    "hang_mid_stream": (504, "engine_timeout", f"did not answer within {ENGINE_TIMEOUT} s"),
    "die_mid_stream": (502, "engine_unavailable", "remote engine"),
}


@pytest.mark.parametrize("name", list(FAULTS))
def test_a_failing_remote_engine_is_a_clear_error_on_every_api(render: TestClient, engine: ScriptedEngine,
                                                                fault: Callable[[str | None], None],
                                                                name: str) -> None:
    status, code, words = FAULTS[name]
    fault(name)
    mid = name.endswith("mid_stream")
    # OpenAI JSON and Anthropic JSON: the status and each API's envelope
    r = render.post("/v1/chat/completions", json=CHAT)
    assert r.status_code == status and words in r.json()["error"]["message"], r.text
    r = render.post("/v1/messages", json=MESSAGES)
    assert r.status_code == status and r.json()["type"] == "error" and words in r.json()["error"]["message"]
    # OpenAI SSE: before the first event an HTTP error, after it an error event, then [DONE]
    r = render.post("/v1/chat/completions", json={**CHAT, "stream": True})
    if mid:
        events = sse_payloads(r.text)
        assert r.status_code == 200 and events[-1] == "[DONE]"  # after the error event, as vLLM
        assert words in events[-2]["error"]["message"] and events[-2]["error"]["code"] == status
    else:
        assert r.status_code == status and words in r.json()["error"]["message"]
    # WebSocket: an error frame for the request, and the session lives on
    frames, alive = ws_chat(render, CHAT)
    assert (frames[-1]["type"], frames[-1]["error"]["code"], frames[-1]["error"]["status"]) == ("error", code, status)
    assert words in frames[-1]["error"]["message"] and alive
    assert engine.url.split("//")[1] not in r.text + str(frames)  # the engine's address stays internal


def test_a_remote_engine_that_dies_degrades_health_and_the_server_recovers_when_it_returns(
        render: TestClient, engine: ScriptedEngine) -> None:
    assert render.get("/health").json()["status"] == "ok"
    engine.stop()
    try:
        health = render.get("/health")
        assert health.status_code == 503 and health.json()["status"] == "degraded"
        assert "unreachable" in health.json()["detail"]
        r = render.post("/v1/chat/completions", json=CHAT)
        assert r.status_code == 502 and r.json()["error"]["message"] == "Cannot reach the remote engine (connection failed)."
        frames, alive = ws_chat(render, CHAT)
        assert frames[-1]["error"]["code"] == "engine_unavailable" and alive
    finally:
        engine.start()
    wait_until(lambda: render.get("/health").status_code == 200,
               "the render server to report healthy once the engine is back", timeout=30, interval=0.1)
    r = render.post("/v1/chat/completions", json=CHAT)
    assert r.status_code == 200 and r.json()["choices"][0]["message"]["content"] == TEXT
    frames, alive = ws_chat(render, CHAT)
    assert frames[-1] == {**frames[-1], "type": "chat.done", "status": "completed"} and alive


def test_an_unhealthy_remote_engine_shows_in_health(render: TestClient, fault: Callable[[str | None], None]) -> None:
    fault("unhealthy")
    health = render.get("/health")
    assert health.status_code == 503 and health.json() == {**health.json(), "status": "degraded",
                                                           "detail": "remote engine health is HTTP 503"}
    fault(None)
    assert render.get("/health").status_code == 200


def test_after_the_faults_the_render_server_logged_no_traceback(render: TestClient, logged: list[str]) -> None:
    assert render.get("/health").status_code == 200  # still serving (the process form: still running)
    output = "\n".join(logged)
    assert "Traceback" not in output, output[-5000:]
