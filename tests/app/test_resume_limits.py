"""What a resumed stream may cost (issue 39 item 5), through the app in process with the real local
engine (tiny-qwen3 in bf16, where the engine replays the covered output in one pass): a resume is
charged to the client's rate limit by the tokens it covers, one checkpoint starts at most 4 streams
on a replica, and a checkpoint expires 5 minutes after it was issued."""

from __future__ import annotations

import time
import types
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest
from starlette.testclient import TestClient

import server.limits
import server.pipeline.checkpoint
from engine.local import LocalEngine
from server.app import create_app
from server.context import ServerContext
from server.gating import decide
from server.settings import Mode, Settings

MODEL = "tiny-qwen3"
SECRET = b"resume-limits-secret-0123456789-abcdefghijklmnop"
CHAT = {"messages": [{"role": "user", "content": "Count to ten."}], "max_tokens": 12, "temperature": 0,
        "ignore_eos": True}


def _app(asset: Callable[[str], Path], tokenizer: Callable[[str], Any], **limits: Any) -> Iterator[TestClient]:
    model_dir = asset(MODEL)
    settings_ = Settings(mode=Mode.SERVE, model_dir=model_dir, served_model_name=MODEL, environ={},
                         state_secret=SECRET, dtype="bfloat16", **limits)
    engine = LocalEngine(model_dir, model_name=MODEL, max_model_len=512, dtype="bfloat16", num_threads=1)
    ctx = ServerContext(settings=settings_, gating=decide(Mode.SERVE, {}), tokenizer=tokenizer(MODEL),
                        max_model_len=512, engine=engine)
    with TestClient(create_app(ctx), raise_server_exceptions=False) as client:
        yield client


@pytest.fixture(scope="module")
def app(asset: Callable[[str], Path], tokenizer: Callable[[str], Any]) -> Iterator[TestClient]:
    yield from _app(asset, tokenizer)


@pytest.fixture(scope="module")
def limited(asset: Callable[[str], Path], tokenizer: Callable[[str], Any]) -> Iterator[TestClient]:
    yield from _app(asset, tokenizer, rate_limit=6)  # a bucket of 6, refilled at one per 10 s


def _until(ws: Any, rid: str) -> list[dict[str, Any]]:
    frames = []
    while True:
        frame = orjson.loads(ws.receive_text())
        if frame.get("id") == rid:
            frames.append(frame)
            if frame["type"] in ("chat.done", "error"):
                return frames


def _session(client: TestClient) -> Any:
    ws = client.websocket_connect("/v1/session", subprotocols=["tokenwire.v1"])
    return ws


def _stream_and_checkpoint(ws: Any, covered: int) -> tuple[list[int], dict[str, Any]]:
    """A resumable chat; its ids, and the resume from the first checkpoint covering ``covered`` ids or more."""
    ws.send_text(orjson.dumps({"type": "chat", "id": "first", "body": CHAT, "resumable": True}).decode())
    deltas = [f for f in _until(ws, "first") if f["type"] == "chat.delta"]
    ids: list[int] = []
    for f in deltas:
        ids += f["output_token_ids"]
        if f.get("checkpoint") and len(ids) >= covered:
            return ids, {"request_id": deltas[0]["stream_id"], "checkpoint": f["checkpoint"],
                         "output_token_ids": list(ids)}
    raise AssertionError(f"no checkpoint covering {covered} ids: {deltas}")


def _resume(ws: Any, rid: str, resume: dict[str, Any]) -> list[dict[str, Any]]:
    ws.send_text(orjson.dumps({"type": "chat", "id": rid, "body": CHAT, "resume": resume}).decode())
    return _until(ws, rid)


def test_one_checkpoint_starts_at_most_four_streams_on_a_replica(app: TestClient) -> None:
    with _session(app) as ws:
        assert orjson.loads(ws.receive_text())["type"] == "session.created"
        _, resume = _stream_and_checkpoint(ws, 6)
        for k in range(4):
            frames = _resume(ws, f"r{k}", resume)
            assert frames[-1]["type"] == "chat.done", frames[-1]
        frames = _resume(ws, "r4", resume)
        error = frames[-1]["error"]
        assert frames[-1]["type"] == "error" and error["code"] == "bad_state" and error["reason"] == "replayed", error
        assert "already resumed 4 times" in error["message"]
        # the session lives on, and a later checkpoint (of a resumed stream) resumes
        frames = _resume(ws, "again", resume | {"checkpoint": None})
        assert frames[-1]["type"] == "error" and frames[-1]["error"]["status"] == 400


def test_a_checkpoint_past_its_window_is_refused_as_expired(app: TestClient, monkeypatch: pytest.MonkeyPatch) -> None:
    with _session(app) as ws:
        assert orjson.loads(ws.receive_text())["type"] == "session.created"
        _, resume = _stream_and_checkpoint(ws, 6)
        later = types.SimpleNamespace(time=lambda: time.time() + 301)  # the checkpoints' clock, 301 s on
        monkeypatch.setattr(server.pipeline.checkpoint, "time", later)
        frames = _resume(ws, "late", resume)
        error = frames[-1]["error"]
        assert frames[-1]["type"] == "error" and error["code"] == "bad_state" and error["reason"] == "expired", error
        assert "within 300 s" in error["message"]


def test_a_resume_is_charged_to_the_rate_limit_by_the_tokens_it_covers(
        limited: TestClient, monkeypatch: pytest.MonkeyPatch) -> None:
    # one request more per 2 covered tokens here (256 in production), so a short stream shows it
    monkeypatch.setattr(server.limits, "RESUME_TOKENS_PER_REQUEST", 2)
    with _session(limited) as ws:
        assert orjson.loads(ws.receive_text())["type"] == "session.created"
        _, resume = _stream_and_checkpoint(ws, 8)  # 1 of the bucket's 6
        weight = 1 + len(resume["output_token_ids"]) // 2  # 5 to 7 (a delta may carry several ids)
        frames = _resume(ws, "r1", resume)
        if weight == 5:  # 1 + 5: the bucket is empty now; each resume counted as one request before issue 39
            assert frames[-1]["type"] == "chat.done", frames[-1]
            frames = _resume(ws, "r2", resume)
        error = frames[-1]["error"]
        assert frames[-1]["type"] == "error" and error["code"] == "rate_limited", error
        assert f"counts as {weight} requests" in error["message"]
