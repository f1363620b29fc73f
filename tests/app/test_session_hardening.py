"""Issue 19's WebSocket session findings, in process on the app of ``tokenwire serve tiny-qwen3``
(the local engine; tests/support/cli_app.py) through Starlette's TestClient:

- a burst of requests past ``max_in_flight`` on one socket is refused for load (``too_many_requests``)
  and never closes the session; every accepted request ends with its own final frame;
- a session that closes (here: a message that is not JSON) first ends every request in flight with
  its final frame (``error`` ``session_closed``), then sends the close frame;
- a resumed stream can be resumed again, from a checkpoint it sent.

Through client_sdk over a real socket, and by the process's memory: tests/e2e/test_session_hardening.py.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import Any

import orjson
import pytest
from starlette.testclient import TestClient
from starlette.websockets import WebSocketDisconnect

from tests.conftest import asset_path
from tests.e2e.client_support import serve_args
from tests.support.cli_app import cli_client
from tests.support.session_frames import SessionFrames, open_session

pytestmark = pytest.mark.slow  # the local engine on tiny-qwen3 (model loading): not the fast loop

USER = [{"role": "user", "content": "Count to ten."}]
FINAL = {"chat.done", "error"}


@pytest.fixture(scope="module")
def server() -> Iterator[TestClient]:
    with cli_client(serve_args(asset_path("tiny-qwen3"))) as srv:
        yield srv


def chat_frame(rid: str, max_tokens: int, **body: Any) -> str:
    return orjson.dumps({"type": "chat", "id": rid, "body": {
        "messages": USER, "max_tokens": max_tokens, "ignore_eos": True, "temperature": 0, **body}}).decode()


def read_until(ws: SessionFrames, done: Callable[[list[dict[str, Any]]], bool]) -> list[dict[str, Any]]:
    frames: list[dict[str, Any]] = []
    while not done(frames):
        frames.append(ws.next())
    return frames


def finals_by_id(frames: list[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    out: dict[str, list[dict[str, Any]]] = {}
    for frame in frames:
        if frame["type"] in FINAL and frame.get("id") is not None:
            out.setdefault(frame["id"], []).append(frame)
    return out


def test_a_burst_past_max_in_flight_is_refused_for_load_and_every_accepted_request_completes(
        server: TestClient) -> None:
    # 97 or more requests at once used to close the session with 1008 (the 33rd consecutive
    # too_many_requests counted as a protocol error), and the 64 accepted ones got no final frame.
    burst = 130
    with open_session(server) as ws:
        for i in range(burst):
            ws.ws.send_text(chat_frame(f"c{i}", 48))
        frames = read_until(ws, lambda fs: len(finals_by_id(fs)) == burst)
        finals = finals_by_id(frames)
        assert all(len(f) == 1 for f in finals.values())  # exactly one final frame each
        refused = sorted(rid for rid, (f,) in finals.items() if f["type"] == "error")
        completed = [rid for rid, (f,) in finals.items() if f["type"] == "chat.done"]
        assert all(finals[rid][0]["error"]["code"] == "too_many_requests" for rid in refused)
        assert all(finals[rid][0]["status"] == "completed" for rid in completed)
        assert len(completed) >= 64 and len(refused) > 32, (len(completed), len(refused))
        ws.send(type="ping", event_id="alive")
        (pong,) = read_until(ws, lambda fs: bool(fs))
        assert (pong["type"], pong["event_id"]) == ("pong", "alive")


def test_a_closing_session_ends_every_request_in_flight_with_its_final_frame_before_the_close(
        server: TestClient) -> None:
    ids = [f"long{i}" for i in range(6)]
    with open_session(server) as ws:
        for rid in ids:
            ws.ws.send_text(chat_frame(rid, 2000))
        read_until(ws, lambda fs: {f.get("id") for f in fs if f["type"] == "chat.delta"} >= set(ids))  # all running
        ws.ws.send_text("{not json")
        frames: list[dict[str, Any]] = []
        with pytest.raises(WebSocketDisconnect) as closed:
            while True:
                frames.append(ws.next())
    assert closed.value.code == 1007
    finals = finals_by_id(frames)
    assert sorted(finals) == ids
    for rid in ids:
        (final,) = finals[rid]
        assert (final["type"], final["error"]["code"], final["error"]["status"]) == ("error", "session_closed", 503)
        assert "close code 1007" in final["error"]["message"]
    stats = server.get("/engine/stats").json()
    deadline = time.monotonic() + 30
    while stats.get("live_sequences") and time.monotonic() < deadline:  # the generations are aborted
        time.sleep(0.2)
        stats = server.get("/engine/stats").json()
    assert stats.get("live_sequences") == 0


def resumable_chat(ws: SessionFrames, rid: str, body: dict[str, Any], **extra: Any) -> list[dict[str, Any]]:
    ws.send(type="chat", id=rid, body=body, resumable=True, **extra)
    return [f for f in read_until(ws, lambda fs: bool(fs) and fs[-1]["type"] in FINAL) if f.get("id") == rid]


def text_of(frames: list[dict[str, Any]]) -> str:
    return "".join(ch["choices"][0]["delta"].get("content") or "" for f in frames if f["type"] == "chat.delta"
                   for ch in f["chunks"] if ch.get("choices"))


def test_a_resumed_stream_can_be_resumed_again(server: TestClient) -> None:
    # A resumed stream's checkpoints were bound to its engine prompt, which also holds the earlier
    # output, so resuming it a second time was refused as bad_state wrong_request.
    body = {"messages": USER, "max_tokens": 40, "temperature": 0, "ignore_eos": True}
    with open_session(server) as ws:
        full = resumable_chat(ws, "whole", body)
        deltas = [f for f in full if f["type"] == "chat.delta"]
        first = [i for i, f in enumerate(deltas) if f["checkpoint"]][2]

        def resume(frames: list[dict[str, Any]], upto: int) -> dict[str, Any]:
            ids = [t for f in frames[:upto + 1] for t in f["output_token_ids"]]
            return {"request_id": frames[0]["stream_id"], "checkpoint": frames[upto]["checkpoint"],
                    "output_token_ids": ids}

        once = resumable_chat(ws, "once", body, resume=resume(deltas, first))
        assert once[-1]["type"] == "chat.done", once[-1]
        # resume the resumed stream, from a checkpoint it sent, with all ids up to there
        carried = deltas[:first + 1] + [f for f in once if f["type"] == "chat.delta"]
        second = [i for i, f in enumerate(carried) if f["checkpoint"] and i > first + 1][-3]
        twice = resumable_chat(ws, "twice", body, resume=resume(carried, second))
        assert twice[-1]["type"] == "chat.done", twice[-1]
        assert text_of(carried[:second + 1]) + text_of(twice) == text_of(full)


