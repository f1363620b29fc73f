"""An engine step that raises (a forward or prefill failing on the engine thread), with the real
LocalEngine on tiny-qwen3 serving the in-process app: the requests of that step fail cleanly (a 500
with the API's envelope, an SSE error event, an error frame on a session that lives on; the message
says nothing of the exception), their memory is freed, and the engine keeps serving new requests
with the same output as before the fault.

The fault is injected by wrapping the engine's model runner (``engine.runner``) on the instance:
no test hook in the engine."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest
from starlette.testclient import TestClient

from engine.local import LocalEngine
from server.app import create_app
from server.context import ServerContext
from server.gating import decide
from server.settings import Mode, Settings
from tests.support.waiting import wait_until

MODEL = "tiny-qwen3"
CHAT = {"messages": [{"role": "user", "content": "Tell me a story."}], "max_tokens": 40, "temperature": 0,
        "ignore_eos": True}
SAFE_MESSAGE = "The engine failed while generating this request; see the server log."


class InjectedFault(RuntimeError):
    pass


class FaultyRunner:
    """Wraps a model runner's ``prefill`` / ``decode``: an armed one raises once, on the engine thread."""

    def __init__(self, runner: Any) -> None:
        self.runner = runner
        self.armed: dict[str, int] = {"prefill": 0, "decode": 0}
        self.fired = threading.Event()
        for name in self.armed:
            setattr(runner, name, self._wrap(name, getattr(runner, name)))

    def _wrap(self, name: str, real: Callable[..., Any]) -> Callable[..., Any]:
        def step(*args: Any) -> Any:
            if self.armed[name]:
                self.armed[name] -= 1
                self.fired.set()
                raise InjectedFault(f"injected {name} failure (secret detail)")
            return real(*args)
        return step

    def arm(self, name: str) -> None:
        self.fired.clear()
        self.armed[name] = 1


@pytest.fixture(scope="module")
def app(asset: Callable[[str], Path], tokenizer: Callable[[str], Any]) -> Iterator[tuple[TestClient, LocalEngine,
                                                                                          FaultyRunner]]:
    model_dir = asset(MODEL)
    settings = Settings(mode=Mode.SERVE, model_dir=model_dir, served_model_name=MODEL, environ={}, state_secret=b"test-state-secret-0123456789-abcdefghijklmnopqrstuvwxyz",
                        dtype="float32")
    engine = LocalEngine(model_dir, model_name=MODEL, max_model_len=512, dtype="float32", num_threads=1)
    ctx = ServerContext(settings=settings, gating=decide(Mode.SERVE, {}), tokenizer=tokenizer(MODEL),
                        max_model_len=512, engine=engine)
    faults = FaultyRunner(engine.runner)
    with TestClient(create_app(ctx)) as client:
        yield client, engine, faults


def wait_idle(engine: LocalEngine) -> int:
    """0 once the engine holds no sequence; fails if it still holds some after 20 s."""
    wait_until(lambda: not engine.live_sequences(), "the engine to hold no sequence", timeout=20, interval=0.01,
               detail=lambda: f"{engine.live_sequences()} live")
    return 0


def stream_until_error(client: TestClient, faults: FaultyRunner, arm: str, concurrent: int) -> list[list[Any]]:
    """``concurrent`` SSE chats; once each has produced output, arm the fault; every stream's events."""
    results: list[list[Any]] = [[] for _ in range(concurrent)]
    started = threading.Barrier(concurrent + 1)

    def one(k: int) -> None:
        with client.stream("POST", "/v1/chat/completions", json={**CHAT, "max_tokens": 300, "stream": True}) as r:
            assert r.status_code == 200
            waited = False
            for line in r.iter_lines():
                if not line.startswith("data: "):
                    continue
                results[k].append(line[6:] if line[6:] == "[DONE]" else orjson.loads(line[6:]))
                if not waited and len(results[k]) >= 3:
                    waited = True
                    started.wait(30)

    threads = [threading.Thread(target=one, args=(k,)) for k in range(concurrent)]
    for t in threads:
        t.start()
    started.wait(30)
    faults.arm(arm)
    for t in threads:
        t.join(60)
    return results


def test_a_failing_decode_step_fails_its_batch_cleanly_and_the_engine_serves_on(
        app: tuple[TestClient, LocalEngine, FaultyRunner]) -> None:
    client, engine, faults = app
    before = client.post("/v1/chat/completions", json=CHAT).json()["choices"][0]["message"]["content"]
    streams = stream_until_error(client, faults, "decode", concurrent=3)
    assert faults.fired.is_set()
    for events in streams:
        # the error event, then [DONE] as vLLM ends every OpenAI stream (issue 19 item 8)
        assert events[-2:] == [{"error": {"message": SAFE_MESSAGE, "type": "InternalServerError", "param": None,
                                          "code": 500}}, "[DONE]"]
    assert wait_idle(engine) == 0
    after = client.post("/v1/chat/completions", json=CHAT)
    assert after.status_code == 200 and after.json()["choices"][0]["message"]["content"] == before
    health = client.get("/health").json()
    assert (health["status"], health["live_sequences"]) == ("ok", 0)


def test_a_failing_prefill_is_a_500_with_the_envelope_and_an_error_frame_on_a_living_session(
        app: tuple[TestClient, LocalEngine, FaultyRunner]) -> None:
    client, engine, faults = app
    faults.arm("prefill")
    r = client.post("/v1/chat/completions", json=CHAT)
    assert r.status_code == 500 and r.json()["error"]["message"] == SAFE_MESSAGE
    faults.arm("prefill")
    r = client.post("/v1/messages", json={"messages": CHAT["messages"], "max_tokens": 10})
    assert r.status_code == 500 and r.json() == {"type": "error", "error": {"type": "api_error",
                                                                            "message": SAFE_MESSAGE}}
    with client.websocket_connect("/v1/session", subprotocols=["tokenwire.v1"]) as ws:
        ws.receive_json()  # session.created
        faults.arm("prefill")
        ws.send_json({"type": "chat", "id": "c", "body": CHAT})
        error = ws.receive_json()
        assert (error["type"], error["id"], error["error"]["code"], error["error"]["message"]) == (
            "error", "c", "internal_error", SAFE_MESSAGE)
        ws.send_json({"type": "chat", "id": "c", "body": {**CHAT, "max_tokens": 3}})
        frames = [ws.receive_json() for _ in range(3)]
        while frames[-1]["type"] != "chat.done":
            frames.append(ws.receive_json())
        assert frames[-1]["status"] == "completed"
    assert wait_idle(engine) == 0
    assert "secret detail" not in r.text
