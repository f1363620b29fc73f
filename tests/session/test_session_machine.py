"""Every row of the session transition table, and every pair missing from it (illegal)."""

from __future__ import annotations

import itertools
from typing import Any

import pytest

from session import client_frames as f
from session import server_frames as sf
from session.actions import Cancel, Close, Send, StartPipeline
from session.machine import (
    _DISPATCHING,
    _SENDING,
    TRANSITIONS,
    Event,
    RequestState,
    Session,
    SessionConfig,
    SessionProtocolError,
    SessionState,
)

SESSION_EVENTS = (Event.FRAME, Event.WORK, Event.VIOLATION, Event.EXPIRED, Event.INTERNAL, Event.LOST)
REQUEST_EVENTS = (Event.START, Event.CANCEL, Event.DELTA, Event.DONE, Event.FAILED, Event.ABORTED)
CONFIG = SessionConfig(model="m", frames=frozenset(f.REQUEST_FRAME_TYPES), idle_timeout=10.0,
                       max_lifetime=100.0)
ERR = sf.ErrorInfo("invalid_request", "bad", status=400)


def session_in(state: SessionState, *, request: RequestState | None = None) -> Session:
    s = Session(CONFIG, now=0.0)
    if request in (RequestState.RUNNING, RequestState.CANCELLING):
        s.receive_frame(f.Chat(id="r", body={}), now=0.0)
    if request is RequestState.CANCELLING:
        s.receive_frame(f.Cancel(id="r"), now=0.0)
    if state is SessionState.CLOSING:
        s.internal_error()
    elif state is SessionState.CLOSED:
        s.connection_lost()
    s.actions()
    assert s.state is state
    assert request is None or s.request_state("r") is request
    return s


def fire_session(s: Session, event: Event) -> None:
    if event is Event.FRAME:
        s.receive_frame(f.Ping(event_id="p"), now=1.0)
    elif event is Event.WORK:
        s.done("r", now=1.0)
    elif event is Event.VIOLATION:
        s.receive_text(b"{not json", now=1.0)
    elif event is Event.EXPIRED:
        s.tick(now=1000.0)
    elif event is Event.INTERNAL:
        s.internal_error()
    elif event is Event.LOST:
        s.connection_lost()


def fire_request(s: Session, event: Event) -> None:
    if event is Event.START:
        s.receive_frame(f.Chat(id="r", event_id="e2", body={"messages": []}), now=1.0)
    elif event is Event.CANCEL:
        s.receive_frame(f.Cancel(id="r", event_id="c"), now=1.0)
    elif event is Event.DELTA:
        s.pipeline_delta("r", [{"chunk": 1}], now=1.0)
    elif event is Event.DONE:
        s.done("r", now=1.0)
    elif event is Event.FAILED:
        s.failed("r", ERR, now=1.0)
    elif event is Event.ABORTED:
        s.aborted("r", now=1.0)


def sent(actions: list[Any]) -> list[sf.ServerFrame]:
    return [a.frame for a in actions if isinstance(a, Send)]


SESSION_ROWS = [k for k in TRANSITIONS if isinstance(k[0], SessionState)]
REQUEST_ROWS = [k for k in TRANSITIONS if isinstance(k[0], RequestState)]


def test_the_delta_shortcut_covers_the_states_the_table_sends_a_delta_in() -> None:
    # Session._delta skips the lookups in the states read from the table: a running request's
    # delta in an open session.
    assert (_DISPATCHING, _SENDING) == (SessionState.OPEN, RequestState.RUNNING)
    assert TRANSITIONS[(_DISPATCHING, Event.WORK)] == (_DISPATCHING, "dispatch")
    assert TRANSITIONS[(_SENDING, Event.DELTA)] == (_SENDING, "send_delta")


def test_table_has_a_row_for_every_session_pair_and_no_stray_keys() -> None:
    assert set(SESSION_ROWS) == set(itertools.product(SessionState, SESSION_EVENTS))
    assert all(isinstance(k[0], SessionState | RequestState) for k in TRANSITIONS)
    assert {e for _, e in REQUEST_ROWS} <= set(REQUEST_EVENTS)


# -- session rows ---------------------------------------------------------------------------

SESSION_EXPECT = {
    # (state, event): (next state, what the effect must produce)
    (SessionState.OPEN, Event.FRAME): (SessionState.OPEN, "pong"),
    (SessionState.OPEN, Event.WORK): (SessionState.OPEN, "chat.done"),
    (SessionState.OPEN, Event.VIOLATION): (SessionState.CLOSING, 1007),
    (SessionState.OPEN, Event.EXPIRED): (SessionState.CLOSING, 1001),
    (SessionState.OPEN, Event.INTERNAL): (SessionState.CLOSING, 1011),
    (SessionState.OPEN, Event.LOST): (SessionState.CLOSED, "cancel r"),
    **{(state, event): (SessionState.CLOSING if state is SessionState.CLOSING else SessionState.CLOSED, None)
       for state in (SessionState.CLOSING, SessionState.CLOSED) for event in SESSION_EVENTS},
}
SESSION_EXPECT[(SessionState.CLOSING, Event.LOST)] = (SessionState.CLOSED, None)


@pytest.mark.parametrize(("state", "event"), SESSION_ROWS, ids=lambda v: getattr(v, "name", str(v)))
def test_session_row(state: SessionState, event: Event) -> None:
    s = session_in(state, request=RequestState.RUNNING if state is SessionState.OPEN else None)
    fire_session(s, event)
    actions = s.actions()
    expected_state, produced = SESSION_EXPECT[(state, event)]
    assert s.state is expected_state
    assert TRANSITIONS[(state, event)][0] is expected_state
    if produced is None:
        assert actions == []  # ignored: nothing is sent, nothing is started
    elif isinstance(produced, int):
        # the request in flight gets its final frame, then Close stops all work
        assert describe_actions(actions[:-1]) == ["error session_closed"]
        assert isinstance(actions[-1], Close) and actions[-1].code == produced
        assert s.in_flight == 0
    elif produced == "cancel r":
        assert actions == [Cancel("r")]
    else:
        assert [fr.type for fr in sent(actions)] == [produced]


# -- request rows ---------------------------------------------------------------------------

REQUEST_EXPECT: dict[tuple[RequestState, Event], tuple[RequestState, list[str]]] = {
    (RequestState.IDLE, Event.START): (RequestState.RUNNING, ["start"]),
    (RequestState.RUNNING, Event.START): (RequestState.RUNNING, ["error duplicate_id"]),
    (RequestState.CANCELLING, Event.START): (RequestState.CANCELLING, ["error duplicate_id"]),
    (RequestState.IDLE, Event.CANCEL): (RequestState.IDLE, ["error unknown_id"]),
    (RequestState.RUNNING, Event.CANCEL): (RequestState.CANCELLING, ["cancel"]),
    (RequestState.CANCELLING, Event.CANCEL): (RequestState.CANCELLING, []),
    (RequestState.RUNNING, Event.DELTA): (RequestState.RUNNING, ["chat.delta"]),
    (RequestState.CANCELLING, Event.DELTA): (RequestState.CANCELLING, []),
    (RequestState.RUNNING, Event.DONE): (RequestState.IDLE, ["chat.done completed"]),
    (RequestState.CANCELLING, Event.DONE): (RequestState.IDLE, ["chat.done cancelled"]),
    (RequestState.RUNNING, Event.FAILED): (RequestState.IDLE, ["error invalid_request"]),
    (RequestState.CANCELLING, Event.FAILED): (RequestState.IDLE, ["chat.done cancelled"]),
    (RequestState.RUNNING, Event.ABORTED): (RequestState.IDLE, ["chat.done cancelled"]),
    (RequestState.CANCELLING, Event.ABORTED): (RequestState.IDLE, ["chat.done cancelled"]),
}


def describe_actions(actions: list[Any]) -> list[str]:
    out = []
    for a in actions:
        if isinstance(a, StartPipeline):
            out.append("start")
        elif isinstance(a, Cancel):
            out.append("cancel")
        elif isinstance(a, Send) and isinstance(a.frame, sf.ErrorFrame):
            out.append(f"error {a.frame.error['code']}")
        elif isinstance(a, Send) and isinstance(a.frame, sf.ChatDone):
            out.append(f"chat.done {a.frame.status}")
        elif isinstance(a, Send):
            out.append(a.frame.type)
        else:
            out.append(repr(a))
    return out


def test_every_request_row_has_an_expectation() -> None:
    assert set(REQUEST_EXPECT) == set(REQUEST_ROWS)


@pytest.mark.parametrize(("state", "event"), REQUEST_ROWS, ids=lambda v: getattr(v, "name", str(v)))
def test_request_row(state: RequestState, event: Event) -> None:
    s = session_in(SessionState.OPEN, request=state)
    fire_request(s, event)
    expected_state, produced = REQUEST_EXPECT[(state, event)]
    assert describe_actions(s.actions()) == produced
    assert s.request_state("r") is expected_state
    assert s.state is SessionState.OPEN


ILLEGAL = [(state, event) for state, event in itertools.product(RequestState, REQUEST_EVENTS)
           if (state, event) not in TRANSITIONS]


def test_the_illegal_request_pairs_are_work_reported_for_no_request() -> None:
    assert set(ILLEGAL) == {(RequestState.IDLE, e) for e in (Event.DELTA, Event.DONE, Event.FAILED,
                                                              Event.ABORTED)}


@pytest.mark.parametrize(("state", "event"), ILLEGAL, ids=lambda v: getattr(v, "name", str(v)))
def test_illegal_request_transition_raises(state: RequestState, event: Event) -> None:
    s = session_in(SessionState.OPEN, request=state)
    with pytest.raises(SessionProtocolError, match="illegal transition"):
        fire_request(s, event)


def test_work_for_a_request_after_close_is_ignored_not_illegal() -> None:
    s = session_in(SessionState.OPEN, request=RequestState.RUNNING)
    s.internal_error()
    s.actions()
    s.pipeline_delta("r", [{}], now=1.0)
    s.done("r", now=1.0)
    assert s.actions() == []


def test_a_delta_of_the_wrong_kind_for_the_request_is_a_protocol_error() -> None:
    s = session_in(SessionState.OPEN, request=RequestState.RUNNING)
    with pytest.raises(SessionProtocolError):
        s.generate_delta("r", {"choices": []}, now=1.0)
