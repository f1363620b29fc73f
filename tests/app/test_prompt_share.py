"""A completion's share of the engine's wait queue (issue 39 item 4): each of its prompts is an
engine request, all queued at once, so one request with 300 or 5,000 prompts used to fill the
queue up to ``--max-waiting``, end in 503 "overloaded" and have other clients refused meanwhile.

Now a request with more prompts than ``--max-prompts-per-request`` (default 64), or than a local
engine can queue at all (``--max-waiting``), is a 400 that says the limit, before anything is
rendered or queued; up to it, the prompts are served as before. The real app and the real
LocalEngine on tiny-qwen3, over HTTP and a WebSocket session."""

from __future__ import annotations

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

MODEL = "tiny-qwen3"
SECRET = b"prompt-share-secret-0123456789-abcdefghijklmnop"
COMMON = {"max_tokens": 2, "temperature": 0, "ignore_eos": True}

Served = tuple[TestClient, ServerContext, list[Any]]


def _serve(asset: Callable[[str], Path], tokenizer: Callable[[str], Any], **engine_args: Any) -> Iterator[Served]:
    model_dir = asset(MODEL)
    settings = Settings(mode=Mode.SERVE, model_dir=model_dir, served_model_name=MODEL, environ={},
                        state_secret=SECRET, dtype="float32")
    engine = LocalEngine(model_dir, model_name=MODEL, max_model_len=256, dtype="float32", num_threads=1,
                         **engine_args)
    queued: list[Any] = []  # every request handed to the engine
    generate = engine.generate
    engine.generate = lambda request: (queued.append(request), generate(request))[1]  # type: ignore[method-assign]
    ctx = ServerContext(settings=settings, gating=decide(Mode.SERVE, {}), tokenizer=tokenizer(MODEL),
                        max_model_len=256, engine=engine)
    with TestClient(create_app(ctx)) as client:
        yield client, ctx, queued


@pytest.fixture(scope="module")
def default(asset: Callable[[str], Path], tokenizer: Callable[[str], Any]) -> Iterator[Served]:
    yield from _serve(asset, tokenizer)  # --max-waiting 256, --max-prompts-per-request 64


@pytest.fixture(scope="module")
def small_queue(asset: Callable[[str], Path], tokenizer: Callable[[str], Any]) -> Iterator[Served]:
    yield from _serve(asset, tokenizer, max_waiting=4)


def _refused(r: Any, count: int, limit: int, flag: str) -> None:
    assert r.status_code == 400, r.text
    error = r.json()["error"]
    assert error["param"] == "prompt", error
    assert f"prompt holds {count} prompts" in error["message"] and f"at most {limit} in one request" in error["message"]
    assert flag in error["message"], error


@pytest.mark.parametrize("count", [300, 5000])
def test_hundreds_of_prompts_are_a_400_before_any_is_queued(default: Served, count: int) -> None:
    client, _, queued = default
    before = len(queued)
    for stream in (False, True):
        r = client.post("/v1/completions", json={"prompt": [f"p{i}" for i in range(count)], "stream": stream, **COMMON})
        _refused(r, count, 64, "--max-prompts-per-request")
    assert len(queued) == before
    r = client.post("/v1/completions", json={"prompt": ["a"] * 64, **COMMON})  # the share itself is served
    assert r.status_code == 200 and len(r.json()["choices"]) == 64


def test_the_share_is_the_flag(default: Served, monkeypatch: pytest.MonkeyPatch) -> None:
    client, ctx, queued = default
    monkeypatch.setattr(ctx, "settings", ctx.settings.with_(max_prompts_per_request=3))
    before = len(queued)
    _refused(client.post("/v1/completions", json={"prompt": ["a", "b", "c", "d"], **COMMON}), 4, 3,
             "--max-prompts-per-request")
    assert len(queued) == before
    r = client.post("/v1/completions", json={"prompt": ["a", "b", "c"], **COMMON})
    assert r.status_code == 200 and len(r.json()["choices"]) == 3
    token_ids = [[1, 2, 3]] * 4  # token-id prompts count alike; a single list of ids is one prompt
    _refused(client.post("/v1/completions", json={"prompt": token_ids, **COMMON}), 4, 3, "--max-prompts-per-request")
    assert client.post("/v1/completions", json={"prompt": [1, 2, 3, 4], **COMMON}).status_code == 200


def test_more_prompts_than_the_engine_can_queue_never_fit_and_are_a_400(small_queue: Served) -> None:
    client, _, queued = small_queue
    r = client.post("/v1/completions", json={"prompt": ["a"] * 5, **COMMON})
    _refused(r, 5, 4, "--max-waiting")
    with client.websocket_connect("/v1/session", subprotocols=["tokenwire.v1"]) as ws:
        assert orjson.loads(ws.receive_text())["type"] == "session.created"
        ws.send_text(orjson.dumps({"type": "completion", "id": "c", "body": {"prompt": ["a"] * 5, **COMMON}}).decode())
        error = orjson.loads(ws.receive_text())
        assert (error["type"], error["id"], error["error"]["param"]) == ("error", "c", "prompt"), error
        assert "at most 4 in one request" in error["error"]["message"], error
    assert queued == []
    r = client.post("/v1/completions", json={"prompt": ["a"] * 4, **COMMON})
    assert r.status_code == 200 and len(r.json()["choices"]) == 4
