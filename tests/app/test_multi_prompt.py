"""A completion over several prompts (``"prompt": [...]``) with the real LocalEngine on tiny-qwen3
serving the in-process app: its engine requests run at once, streamed or not, over SSE and over a
session; each choice's text is what the prompt alone gives; a client that leaves mid-stream
aborts every one of them; and the reads are owned by the reading task
(``PipelineStream.running``, issue 21 item 13), so no task outlives the stream."""

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
PROMPTS = ["Once upon a time", "The river ran", "In the morning the"]
COMMON = {"max_tokens": 24, "temperature": 0, "ignore_eos": True}


@pytest.fixture(scope="module")
def served(asset: Callable[[str], Path], tokenizer: Callable[[str], Any]) -> Iterator[tuple[TestClient, LocalEngine,
                                                                                             ServerContext]]:
    model_dir = asset(MODEL)
    settings = Settings(mode=Mode.SERVE, model_dir=model_dir, served_model_name=MODEL, environ={},
                        state_secret=b"test-state-secret-0123456789-abcdefghijklmnopqrstuvwxyz", dtype="float32")
    engine = LocalEngine(model_dir, model_name=MODEL, max_model_len=512, dtype="float32", num_threads=1)
    ctx = ServerContext(settings=settings, gating=decide(Mode.SERVE, {}), tokenizer=tokenizer(MODEL),
                        max_model_len=512, engine=engine)
    with TestClient(create_app(ctx)) as client:
        yield client, engine, ctx


@pytest.fixture(scope="module")
def alone(served: tuple[TestClient, LocalEngine, ServerContext]) -> list[str]:
    """Each prompt's text when it is the only prompt of its request."""
    client = served[0]
    return [client.post("/v1/completions", json={"prompt": p, **COMMON}).json()["choices"][0]["text"] for p in PROMPTS]


class MostLive:
    """The most sequences the engine held at once while the block ran (polled on a thread)."""

    def __init__(self, engine: LocalEngine) -> None:
        self.engine = engine
        self.most = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._poll, daemon=True)

    def _poll(self) -> None:
        while not self._stop.is_set():
            self.most = max(self.most, self.engine.live_sequences())
            self._stop.wait(0.001)

    def __enter__(self) -> MostLive:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(5)


def wait_idle(engine: LocalEngine) -> None:
    wait_until(lambda: not engine.live_sequences(), "the engine to hold no sequence", timeout=20, interval=0.01,
               detail=lambda: f"{engine.live_sequences()} live")


def sse_texts(lines: Iterator[str]) -> tuple[dict[int, str], list[Any]]:
    texts: dict[int, str] = {}
    events: list[Any] = []
    for line in lines:
        if not line.startswith("data: "):
            continue
        data = line[6:]
        events.append(data if data == "[DONE]" else orjson.loads(data))
        if data != "[DONE]":
            for c in events[-1]["choices"]:
                texts[c["index"]] = texts.get(c["index"], "") + c["text"]
    return texts, events


def test_a_non_streaming_completion_runs_its_prompts_at_once(
        served: tuple[TestClient, LocalEngine, ServerContext], alone: list[str]) -> None:
    client, engine, _ = served
    with MostLive(engine) as live:
        r = client.post("/v1/completions", json={"prompt": PROMPTS, **COMMON})
    assert r.status_code == 200
    choices = sorted(r.json()["choices"], key=lambda c: c["index"])
    assert [c["text"] for c in choices] == alone
    assert live.most == len(PROMPTS), f"at most {live.most} of {len(PROMPTS)} prompts ran at once"
    wait_idle(engine)


def test_a_streamed_completion_interleaves_its_prompts_over_sse(
        served: tuple[TestClient, LocalEngine, ServerContext], alone: list[str]) -> None:
    client, engine, _ = served
    with MostLive(engine) as live, client.stream("POST", "/v1/completions",
                                                 json={"prompt": PROMPTS, **COMMON, "stream": True}) as r:
        assert r.status_code == 200
        texts, events = sse_texts(r.iter_lines())
    assert events[-1] == "[DONE]"
    assert [texts[k] for k in range(len(PROMPTS))] == alone
    assert live.most == len(PROMPTS)
    wait_idle(engine)


def test_a_streamed_completion_over_a_session_gives_the_same_texts(
        served: tuple[TestClient, LocalEngine, ServerContext], alone: list[str]) -> None:
    client, engine, _ = served
    texts: dict[int, str] = {}
    with client.websocket_connect("/v1/session", subprotocols=["tokenwire.v1"]) as ws:
        ws.receive_json()  # session.created
        ws.send_json({"type": "completion", "id": "m", "body": {"prompt": PROMPTS, **COMMON}})
        while (frame := ws.receive_json())["type"] == "completion.delta":
            for chunk in frame["chunks"]:
                for c in chunk["choices"]:
                    texts[c["index"]] = texts.get(c["index"], "") + c["text"]
        assert (frame["type"], frame["status"]) == ("completion.done", "completed"), frame
    assert [texts[k] for k in range(len(PROMPTS))] == alone
    wait_idle(engine)


def test_leaving_a_streamed_completion_aborts_every_prompt(
        served: tuple[TestClient, LocalEngine, ServerContext]) -> None:
    client, engine, _ = served
    body = {"prompt": PROMPTS, "max_tokens": 400, "temperature": 0, "ignore_eos": True, "stream": True}
    with client.stream("POST", "/v1/completions", json=body) as r:
        seen: set[int] = set()
        for line in r.iter_lines():
            if line.startswith("data: "):
                seen.update(c["index"] for c in orjson.loads(line[6:])["choices"])
            if len(seen) == len(PROMPTS):
                break  # every prompt is generating: leave
    assert seen == set(range(len(PROMPTS)))
    wait_idle(engine)  # each engine request was aborted, not run to its 400 tokens


def test_a_session_cancel_aborts_every_prompt(served: tuple[TestClient, LocalEngine, ServerContext]) -> None:
    client, engine, _ = served
    body = {"prompt": PROMPTS, "max_tokens": 400, "temperature": 0, "ignore_eos": True}
    with client.websocket_connect("/v1/session", subprotocols=["tokenwire.v1"]) as ws:
        ws.receive_json()  # session.created
        ws.send_json({"type": "completion", "id": "m", "body": body})
        assert ws.receive_json()["type"] == "completion.delta"
        ws.send_json({"type": "cancel", "id": "m"})
        while (frame := ws.receive_json())["type"] == "completion.delta":
            pass
        assert (frame["type"], frame["status"]) == ("completion.done", "cancelled"), frame
    wait_idle(engine)


def test_reading_several_prompts_outside_the_streams_task_group_is_refused(
        served: tuple[TestClient, LocalEngine, ServerContext]) -> None:
    """The pumps need a task group owned by the reader; reading without one says so instead of
    starting tasks that nothing owns."""
    client, engine, _ = served
    pipeline = client.app.state.services.pipeline  # type: ignore[attr-defined]
    portal = client.portal  # the app's event loop, where the engine delivers
    assert portal is not None

    async def read_without_running() -> str:
        stream = await pipeline.open_stream("completion", {"prompt": PROMPTS[:2], **COMMON})
        events = stream.stream_events()
        try:
            async for _ in events:
                pass
        except RuntimeError as exc:
            return str(exc)
        finally:
            await events.aclose()
        return "no error"

    async def read_inside_running() -> int:
        stream = await pipeline.open_stream("completion", {"prompt": PROMPTS[:2], **COMMON})
        count = 0
        async with stream.running():
            async for ev in stream.stream_events():
                count += len(ev.payload["choices"])
        return count

    message = portal.call(read_without_running)
    assert "async with stream.running()" in message
    wait_idle(engine)
    assert portal.call(read_inside_running) >= 2  # both prompts streamed
    wait_idle(engine)
