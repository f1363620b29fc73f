"""``Session.pipeline_delta(..., at_once=True)``: the per-token shortcut gives exactly the frame the
table's path would send, stamped in the same ``seq`` order, and where it cannot (any case but the
common one) the delta goes through the table as if ``at_once`` were not asked."""

from __future__ import annotations

import dataclasses
from typing import Any

import orjson
import pytest

from session import client_frames as f
from session import server_frames as sf
from session.actions import Send
from session.machine import RequestState, Session, SessionConfig, SessionProtocolError

CONFIG = SessionConfig(model="m", frames=frozenset(f.REQUEST_FRAME_TYPES))
START: dict[str, Any] = {"chat": f.Chat, "completion": f.Completion, "messages": f.Messages}


def running(kind: str, *, event_id: str | None = "e1", rid: str = "r") -> Session:
    s = Session(CONFIG, now=0.0)
    s.receive_frame(START[kind](id=rid, event_id=event_id, body={}), now=0.0)
    s.actions()
    assert s.request_state(rid) is RequestState.RUNNING
    return s


def via_the_table(s: Session, payloads: list[dict[str, Any]], rid: str = "r", **extra: Any) -> bytes:
    assert s.pipeline_delta(rid, payloads, now=1.0, **extra) is None
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
        got = fast.pipeline_delta(rid, payloads, now=1.0, at_once=True, **extra)
        assert got == want
        assert fast.actions() == []
        frame = orjson.loads(got or b"null")
        assert frame["type"] == f"{kind}.delta" and frame["seq"] == seq and frame["event_id"] == event_id
        assert frame["id"] == rid and frame["events" if kind == "messages" else "chunks"] == orjson.loads(
            orjson.dumps(payloads, option=orjson.OPT_NON_STR_KEYS))


def test_seq_is_shared_with_the_frames_the_table_sends() -> None:
    s = running("chat")
    seqs = [orjson.loads(s.pipeline_delta("r", [{"n": 1}], now=1.0, at_once=True) or b"null")["seq"],
            orjson.loads(via_the_table(s, [{"n": 2}]))["seq"],
            orjson.loads(s.pipeline_delta("r", [{"n": 3}], now=1.0, at_once=True) or b"null")["seq"]]
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


@pytest.mark.parametrize("make", [_cancelling, _pending_actions, _closing, _generate],
                         ids=["cancelling", "actions pending", "closing", "a generate request"])
def test_anything_but_the_common_case_goes_through_the_table(make: Any) -> None:
    asked, plain = make(), make()
    try:
        plain.pipeline_delta("r", [{"n": 1}], now=1.0)
    except SessionProtocolError as exc:  # a generate request's pipeline delta: refused the same way
        with pytest.raises(SessionProtocolError, match=str(exc)):
            asked.pipeline_delta("r", [{"n": 1}], now=1.0, at_once=True)
    else:
        assert asked.pipeline_delta("r", [{"n": 1}], now=1.0, at_once=True) is None
    assert asked.last_seq == plain.last_seq and asked.actions() == plain.actions()


def test_a_delta_for_no_such_request_is_the_tables_illegal_transition_either_way() -> None:
    for at_once in (False, True):
        with pytest.raises(SessionProtocolError, match="illegal transition"):
            Session(CONFIG, now=0.0).pipeline_delta("r", [{"n": 1}], now=1.0, at_once=at_once)


def test_every_pipeline_kinds_fast_bytes_are_its_frame_classes_encoding() -> None:
    """By construction (one codec per class, ``sf.codec``), checked here for every pipeline kind."""
    values = ("e", "r", "chatcmpl-1", "ck.sig", [1, 2], [{"x": "é"}])
    for kind in sf.PIPELINE_KINDS:
        cls = sf.DELTA_FRAME_OF[kind]
        names = [fl.name for fl in dataclasses.fields(cls) if fl.name not in ("type", "seq")]
        frame = cls(**dict(zip(names, values, strict=True)))
        assert sf.ENCODE_PIPELINE_DELTA[kind](7, *values) == frame.encode(7)
