"""``Session.pipeline_delta_now``: the per-token shortcut gives exactly the frame the table's path
would send, stamped in the same ``seq`` order, and declines (doing nothing) whenever that path
would do anything else."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from session import client_frames as f
from session.actions import Send
from session.machine import RequestState, Session, SessionConfig

CONFIG = SessionConfig(model="m", frames=frozenset(f.REQUEST_FRAME_TYPES))
START: dict[str, Any] = {"chat": f.Chat, "completion": f.Completion, "messages": f.Messages}


def running(kind: str, *, event_id: str | None = "e1", rid: str = "r") -> Session:
    s = Session(CONFIG, now=0.0)
    s.receive_frame(START[kind](id=rid, event_id=event_id, body={}), now=0.0)
    s.actions()
    assert s.request_state(rid) is RequestState.RUNNING
    return s


def via_the_table(s: Session, payloads: list[dict[str, Any]], rid: str = "r", **extra: Any) -> bytes:
    s.pipeline_delta(rid, payloads, now=1.0, **extra)
    [send] = s.actions()
    assert isinstance(send, Send)
    return s.stamp(send.frame)


@pytest.mark.parametrize("kind", ["chat", "completion", "messages"])
@pytest.mark.parametrize("extra", [{}, {"checkpoint": "ck.sig", "output_token_ids": [5, 6], "stream_id": "chatcmpl-1"}])
@pytest.mark.parametrize(("event_id", "rid"), [("e1", "r"), (None, "r"), ('ev "1"\u2028', 'id "q" \\ é\n\x7f')])
def test_the_bytes_are_the_frame_the_table_would_send(kind: str, extra: dict[str, Any], event_id: str | None,
                                                      rid: str) -> None:
    payloads: list[Any] = [{"id": "x", "choices": [{"index": 0, "delta": {"content": "é\n\"q\""}}]}, {1: 2.5}]
    fast, slow = running(kind, event_id=event_id, rid=rid), running(kind, event_id=event_id, rid=rid)
    for seq in range(1, 4):
        want = via_the_table(slow, payloads, rid, **extra)
        got = fast.pipeline_delta_now(rid, payloads, **extra)
        assert got == want
        assert fast.actions() == []
        frame = orjson.loads(got or b"null")
        assert frame["type"] == f"{kind}.delta" and frame["seq"] == seq and frame["event_id"] == event_id
        assert frame["id"] == rid and frame["events" if kind == "messages" else "chunks"] == orjson.loads(
            orjson.dumps(payloads, option=orjson.OPT_NON_STR_KEYS))


def test_seq_is_shared_with_the_frames_the_table_sends() -> None:
    s = running("chat")
    seqs = [orjson.loads(s.pipeline_delta_now("r", [{"n": 1}]) or b"null")["seq"],
            orjson.loads(via_the_table(s, [{"n": 2}]))["seq"],
            orjson.loads(s.pipeline_delta_now("r", [{"n": 3}]) or b"null")["seq"]]
    assert seqs == [1, 2, 3]
    assert s.last_seq == 3


def _cancelling() -> Session:
    s = running("chat")
    s.receive_frame(f.Cancel(id="r"), now=1.0)
    s.actions()
    return s


def _pending_actions() -> Session:
    s = running("chat")
    s.receive_frame(f.Ping(event_id="p"), now=1.0)  # its pong is not drained yet: a delta must follow it
    return s


def _closing() -> Session:
    s = running("chat")
    s.internal_error()
    s.actions()
    return s


def _generate() -> Session:
    s = Session(CONFIG, now=0.0)
    s.receive_frame(f.Generate(id="r", body={}), now=0.0)
    s.actions()
    return s


@pytest.mark.parametrize("make", [_cancelling, _pending_actions, _closing, _generate, lambda: Session(CONFIG, now=0.0)],
                         ids=["cancelling", "actions pending", "closing", "a generate request", "no such request"])
def test_anything_but_the_common_case_is_declined_and_nothing_changes(make: Any) -> None:
    s = make()
    seq, actions_before = s.last_seq, list(s._actions)
    assert s.pipeline_delta_now("r", [{"n": 1}]) is None
    assert s.last_seq == seq and s._actions == actions_before
