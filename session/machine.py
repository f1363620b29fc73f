"""The sans-I/O WebSocket session: client frames and work results in, server frames and actions out.

Every state change goes through :data:`TRANSITIONS`, one table keyed by ``(state, event)`` (after
h11's ``_state.py``); a pair missing from it is a bug in the I/O layer
(:class:`SessionProtocolError`). Nothing here awaits, reads a socket or a clock. The rules of the
file, ``seq`` stamping, checks before the table and how a closing session ends its requests:
docs/serve.md, "Inside a WebSocket session".
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from enum import Enum
from typing import Any

from session import client_frames as f
from session import error_codes
from session import server_frames as sf
from session.actions import (
    Action,
    Cancel,
    Close,
    Send,
    StartDerender,
    StartGenerate,
    StartPipeline,
    StartRender,
)
from session.errors import StateError
from session.settings import SessionConfig, SessionSettings, apply_defaults, apply_patch
from session.state_ledger import OutOfOrder, StateLedger, StateTagger, Undo

__all__ = ["TRANSITIONS", "Action", "Cancel", "Close", "Event", "RequestState", "Send", "Session",
           "SessionConfig", "SessionProtocolError", "SessionState", "StartDerender", "StartGenerate",
           "StartPipeline", "StartRender"]


class SessionState(Enum):
    OPEN = "open"
    CLOSING = "closing"  # Close was emitted; waiting for the I/O layer to tear down
    CLOSED = "closed"  # the connection is gone


class RequestState(Enum):
    IDLE = "idle"  # no request with this id (never started, or finished)
    RUNNING = "running"
    CANCELLING = "cancelling"  # cancel accepted; waiting for the work to stop


class Event(Enum):
    # session scope
    FRAME = "client frame"
    VIOLATION = "protocol violation"
    EXPIRED = "idle timeout or lifetime reached"
    INTERNAL = "internal error"
    LOST = "connection lost"
    WORK = "work event"
    # request scope
    START = "start"
    CANCEL = "cancel"
    DELTA = "delta"
    DONE = "done"
    FAILED = "failed"
    ABORTED = "aborted"


State = SessionState | RequestState
S, R, E = SessionState, RequestState, Event

# (state, event) → (next state, effect). The effect names a method ``_do_<effect>``.
TRANSITIONS: dict[tuple[State, Event], tuple[State, str]] = {
    # -- the session --------------------------------------------------------------------------
    (S.OPEN, E.FRAME): (S.OPEN, "dispatch"),
    (S.OPEN, E.WORK): (S.OPEN, "dispatch"),
    (S.OPEN, E.VIOLATION): (S.CLOSING, "close"),
    (S.OPEN, E.EXPIRED): (S.CLOSING, "close"),
    (S.OPEN, E.INTERNAL): (S.CLOSING, "close"),
    (S.OPEN, E.LOST): (S.CLOSED, "forget_all"),
    (S.CLOSING, E.FRAME): (S.CLOSING, "ignore"),
    (S.CLOSING, E.WORK): (S.CLOSING, "ignore"),
    (S.CLOSING, E.VIOLATION): (S.CLOSING, "ignore"),
    (S.CLOSING, E.EXPIRED): (S.CLOSING, "ignore"),
    (S.CLOSING, E.INTERNAL): (S.CLOSING, "ignore"),
    (S.CLOSING, E.LOST): (S.CLOSED, "forget_all"),
    (S.CLOSED, E.FRAME): (S.CLOSED, "ignore"),
    (S.CLOSED, E.WORK): (S.CLOSED, "ignore"),
    (S.CLOSED, E.VIOLATION): (S.CLOSED, "ignore"),
    (S.CLOSED, E.EXPIRED): (S.CLOSED, "ignore"),
    (S.CLOSED, E.INTERNAL): (S.CLOSED, "ignore"),
    (S.CLOSED, E.LOST): (S.CLOSED, "ignore"),
    # -- one request --------------------------------------------------------------------------
    (R.IDLE, E.START): (R.RUNNING, "start"),
    (R.RUNNING, E.START): (R.RUNNING, "duplicate_id"),
    (R.CANCELLING, E.START): (R.CANCELLING, "duplicate_id"),
    (R.IDLE, E.CANCEL): (R.IDLE, "unknown_id"),
    (R.RUNNING, E.CANCEL): (R.CANCELLING, "cancel"),
    (R.CANCELLING, E.CANCEL): (R.CANCELLING, "ignore"),
    (R.RUNNING, E.DELTA): (R.RUNNING, "send_delta"),
    (R.CANCELLING, E.DELTA): (R.CANCELLING, "ignore"),
    (R.RUNNING, E.DONE): (R.IDLE, "send_done"),
    (R.CANCELLING, E.DONE): (R.IDLE, "send_cancelled"),
    (R.RUNNING, E.FAILED): (R.IDLE, "send_error"),
    (R.CANCELLING, E.FAILED): (R.IDLE, "send_cancelled"),
    (R.RUNNING, E.ABORTED): (R.IDLE, "send_cancelled"),
    (R.CANCELLING, E.ABORTED): (R.IDLE, "send_cancelled"),
    # (R.IDLE, DELTA | DONE | FAILED | ABORTED) are illegal: work reported for no request.
}


def _staying(event: Event, effect: str) -> State:
    """The one state in which ``event`` takes ``effect`` and leaves the state as it is (read from
    :data:`TRANSITIONS`, so the shortcut below cannot drift from the table)."""
    (state,) = [s for (s, e), (after, eff) in TRANSITIONS.items() if e is event and eff == effect and after is s]
    return state


# A delta of a running request in an open session is dispatched and sent, and changes no state:
# ``Session._delta`` takes that effect without the two lookups (it runs once per token).
_DISPATCHING = _staying(E.WORK, "dispatch")
_SENDING = _staying(E.DELTA, "send_delta")


Decoded = f.ClientFrame | f.FrameError | f.FatalFrameError


class SessionProtocolError(RuntimeError):
    """The I/O layer broke the machine's contract (an illegal transition). A bug, never a client
    error: the glue logs it and closes with 1011."""


@dataclass(slots=True)
class _Request:
    id: str
    type: str
    event_id: str | None
    state: RequestState = RequestState.RUNNING
    undo: Undo | None = None  # state-ledger entry to restore when the step fails
    restart: bool = False  # a derender step with no stream_state: (re)starts its stream



class Session:
    """One WebSocket session. See the module docstring and docs/protocol.md."""

    def __init__(self, config: SessionConfig, *, now: float, session_id: str | None = None,
                 state_tagger: StateTagger | None = None) -> None:
        self.config = config
        self.session_id = session_id or sf.new_session_id()
        self.state = SessionState.OPEN
        self.settings = SessionSettings(model=config.model)
        self._models = config.models or frozenset({config.model})
        self._tagger = state_tagger
        self._requests: dict[str, _Request] = {}
        self._ledger = StateLedger(config.state_ledger_size)
        self._actions: list[Action] = []
        self._seq = 0
        self._strikes = 0
        self._opened_at = now
        self._last_activity = now
        self._close: Close | None = None
        self._emit(sf.SessionCreated(session_id=self.session_id, protocol_version=f.PROTOCOL_VERSION,
                                    server=dict(config.server), frames=self.enabled_frames(),
                                    limits=config.limits(), session=self.settings.as_dict(),
                                    features=dict(config.features)))

    # -- read-only views -------------------------------------------------------------------
    def enabled_frames(self) -> list[str]:
        return [t for t in f.CLIENT_FRAME_TYPES if t not in f.REQUEST_FRAME_TYPES or t in self.config.frames]

    def request_state(self, request_id: str) -> RequestState:
        req = self._requests.get(request_id)
        return req.state if req is not None else RequestState.IDLE

    @property
    def in_flight(self) -> int:
        return len(self._requests)

    def next_deadline(self) -> float | None:
        """When :meth:`tick` next has something to do (None: never, as things stand)."""
        if self.state is not SessionState.OPEN:
            return None
        deadlines = []
        if self.config.max_lifetime is not None:
            deadlines.append(self._opened_at + self.config.max_lifetime)
        if self.config.idle_timeout is not None and not self._requests:
            deadlines.append(self._last_activity + self.config.idle_timeout)
        return min(deadlines, default=None)

    # -- output ------------------------------------------------------------------------------
    def actions(self) -> list[Action]:
        """Drain the actions produced so far, in the order they must be carried out."""
        out, self._actions = self._actions, []
        return out

    def stamp(self, frame: sf.ServerFrame) -> bytes:
        """Give ``frame`` the next ``seq`` and encode it: call once per frame, in write order."""
        self._seq += 1
        return frame.encode(self._seq)

    @property
    def last_seq(self) -> int:
        return self._seq

    @property
    def close_action(self) -> Close | None:
        return self._close

    # -- input: the socket -------------------------------------------------------------------
    def receive_text(self, data: bytes | str, *, now: float) -> None:
        """One text message as received (size-checked, then decoded and handled)."""
        self.receive_decoded(self.decode(data), now=now)

    def decode(self, data: bytes | str) -> Decoded:
        """Size-check and decode a text message without touching the session (pure, so a large
        message can be decoded on a worker thread); hand the result to :meth:`receive_decoded`."""
        if _utf8_size(data) > self.config.max_frame_bytes:
            return f.FatalFrameError(f.CLOSE_TOO_BIG, "frame exceeds max_frame_bytes")
        try:
            return f.decode_client_frame(data)
        except (f.FatalFrameError, f.FrameError) as exc:
            return exc

    def receive_decoded(self, decoded: Decoded, *, now: float) -> None:
        if isinstance(decoded, f.FatalFrameError):
            self._event(E.VIOLATION, Close(decoded.code, decoded.reason))
        elif isinstance(decoded, f.FrameError):
            if self.state is SessionState.OPEN:
                self._last_activity = now
                self._frame_error(decoded)
        else:
            self.receive_frame(decoded, now=now)

    def receive_binary(self, *, now: float) -> None:
        self._event(E.VIOLATION, Close(f.CLOSE_UNSUPPORTED_DATA, "binary frames are not supported"))

    def receive_frame(self, frame: f.ClientFrame, *, now: float) -> None:
        self._event(E.FRAME, (frame, now))

    def tick(self, *, now: float) -> None:
        if self.state is not SessionState.OPEN:
            return
        if self.config.max_lifetime is not None and now >= self._opened_at + self.config.max_lifetime:
            self._event(E.EXPIRED, Close(f.CLOSE_GOING_AWAY, "session lifetime reached"))
        elif (self.config.idle_timeout is not None and not self._requests
              and now >= self._last_activity + self.config.idle_timeout):
            self._event(E.EXPIRED, Close(f.CLOSE_GOING_AWAY, "idle timeout"))

    def internal_error(self) -> None:
        self._event(E.INTERNAL, Close(f.CLOSE_INTERNAL_ERROR, "internal error"))

    def connection_lost(self) -> None:
        self._event(E.LOST, None)

    # -- input: the work ---------------------------------------------------------------------
    def generate_delta(self, request_id: str, chunk: dict[str, Any], *, now: float) -> None:
        req = self._requests.get(request_id)
        event_id = req.event_id if req is not None else None
        self._delta(request_id, req, sf.GenerateDelta(id=request_id, chunk=chunk, event_id=event_id), now)

    def pipeline_delta(self, request_id: str, payloads: list[dict[str, Any]], *, now: float,
                       checkpoint: str | None = None, output_token_ids: list[int] | None = None,
                       stream_id: str | None = None, at_once: bool = False) -> bytes | None:
        """A pipeline request's delta (its chunks or events). ``at_once``: the caller writes the
        frame now if it may leave at once; then, in the common case (a running request in an open
        session, no action pending), the frame is returned stamped and encoded, with no frame
        object and no action (this runs once per token). Otherwise (None) it went through the
        table, as a :class:`Send` action or not at all."""
        req = self._requests.get(request_id)
        if req is None:
            kind, event_id = "chat", None
        else:
            kind, event_id = req.type, req.event_id
            if (at_once and req.state is _SENDING and self.state is _DISPATCHING and not self._actions
                    and kind in sf.PIPELINE_KINDS):
                self._seq += 1
                return sf.ENCODE_PIPELINE_DELTA[kind](self._seq, event_id, request_id, stream_id, checkpoint,
                                                      output_token_ids, payloads)
        frame: sf.ServerFrame
        if kind == "response":
            frame = sf.ResponseDelta(id=request_id, event_id=event_id, events=payloads)
        elif kind == "messages":
            frame = sf.MessagesDelta(id=request_id, event_id=event_id, events=payloads, stream_id=stream_id,
                                     checkpoint=checkpoint, output_token_ids=output_token_ids)
        elif kind == "completion":
            frame = sf.CompletionDelta(id=request_id, event_id=event_id, chunks=payloads, stream_id=stream_id,
                                       checkpoint=checkpoint, output_token_ids=output_token_ids)
        else:
            frame = sf.ChatDelta(id=request_id, event_id=event_id, chunks=payloads, stream_id=stream_id,
                                 checkpoint=checkpoint, output_token_ids=output_token_ids)
        self._delta(request_id, req, frame, now)
        return None

    def _delta(self, request_id: str, req: _Request | None, frame: sf.ServerFrame, now: float) -> None:
        """A delta of ``req``: in the common case, the effect the table gives it (``_DISPATCHING``,
        ``_SENDING``) without the two lookups; anything else goes through the table."""
        if req is not None and req.state is _SENDING and self.state is _DISPATCHING:
            self._do_send_delta(request_id, req, frame)
        else:
            self._work(request_id, E.DELTA, frame, now)

    def done(self, request_id: str, *, now: float, result: Any = None,
             usage: dict[str, Any] | None = None) -> None:
        """The work of ``request_id`` finished; ``result`` for render / derender, ``usage`` for generate."""
        self._work(request_id, E.DONE, (result, usage), now)

    def failed(self, request_id: str, error: sf.ErrorInfo, *, now: float) -> None:
        self._work(request_id, E.FAILED, error, now)

    def aborted(self, request_id: str, *, now: float) -> None:
        """The work stopped because of a :class:`Cancel` action (or shutdown)."""
        self._work(request_id, E.ABORTED, None, now)

    # -- the table ---------------------------------------------------------------------------
    def _event(self, event: Event, payload: Any) -> None:
        self.state, effect = self._transition(self.state, event)
        getattr(self, f"_do_{effect}")(event, payload)

    @staticmethod
    def _transition(state: State, event: Event) -> tuple[Any, str]:
        try:
            return TRANSITIONS[(state, event)]
        except KeyError:
            raise SessionProtocolError(f"illegal transition: {event.value} in state {state.value}") from None

    def _request_event(self, request_id: str, event: Event, payload: Any) -> None:
        req = self._requests.get(request_id)
        state = req.state if req is not None else RequestState.IDLE
        new_state, effect = self._transition(state, event)
        getattr(self, f"_do_{effect}")(request_id, req, payload)
        if new_state is RequestState.IDLE:
            self._requests.pop(request_id, None)
        elif request_id in self._requests:
            self._requests[request_id].state = new_state

    def _work(self, request_id: str, event: Event, payload: Any, now: float) -> None:
        self._event(E.WORK, (request_id, event, payload, now))

    # -- session effects ---------------------------------------------------------------------
    def _do_ignore(self, *args: Any) -> None:
        pass

    def _do_close(self, event: Event, close: Close) -> None:
        # Every accepted request gets its final frame before the close frame (docs/protocol.md §3);
        # Close then stops all work, and late work events are ignored in CLOSING.
        for req in self._requests.values():
            self._emit(_cancelled_frame(req) if req.state is RequestState.CANCELLING else _closed_frame(req, close))
        self._requests.clear()
        self._close = close
        self._actions.append(close)

    def _do_forget_all(self, event: Event, payload: None) -> None:
        for request_id in list(self._requests):
            self._actions.append(Cancel(request_id))
        self._requests.clear()

    def _do_dispatch(self, event: Event, payload: Any) -> None:
        if event is E.WORK:
            request_id, req_event, data, now = payload
            if req_event in (E.DONE, E.FAILED, E.ABORTED):
                self._last_activity = max(self._last_activity, now)
            self._request_event(request_id, req_event, data)
            return
        frame, now = payload
        self._last_activity = now
        if isinstance(frame, f.Ping):
            self._strikes = 0
            self._emit(sf.Pong(event_id=frame.event_id))
        elif isinstance(frame, f.SessionUpdate):
            self._session_update(frame)
        elif isinstance(frame, f.Cancel):
            self._request_event(frame.id, E.CANCEL, frame)
        else:
            self._start(frame)

    def _session_update(self, frame: f.SessionUpdate) -> None:
        try:
            self.settings = apply_patch(self.settings, frame.session, default_model=self.config.model,
                                        models=self._models, event_id=frame.event_id,
                                        max_bytes=self.config.max_settings_bytes)
        except f.FrameError as exc:
            self._frame_error(exc)
            return
        self._strikes = 0
        self._emit(sf.SessionUpdated(event_id=frame.event_id, session=self.settings.as_dict()))

    def _start(self, frame: f.RequestFrame) -> None:
        if frame.type not in self.config.frames:
            hint = self.config.frame_hints.get(frame.type)
            self._frame_error(f.FrameError(
                "not_enabled", f"{frame.type} frames are not enabled on this server"
                f"{': ' + hint if hint else ''} (enabled: {', '.join(self.enabled_frames())}).",
                event_id=frame.event_id, request_id=frame.id, param="type"))
            return
        if frame.id not in self._requests and len(self._requests) >= self.config.max_in_flight:
            self._frame_error(f.FrameError(
                "too_many_requests", f"This session already has {len(self._requests)} requests in flight "
                f"(max_in_flight {self.config.max_in_flight}); wait for one to finish.",
                event_id=frame.event_id, request_id=frame.id))
            return
        self._request_event(frame.id, E.START, frame)

    # -- request effects ---------------------------------------------------------------------
    def _do_start(self, request_id: str, req: None, frame: f.RequestFrame) -> None:
        undo = None
        restart = isinstance(frame, f.Derender) and frame.body.get("stream_state") is None
        if isinstance(frame, f.Derender):
            try:
                undo = self._consume_state(frame)
            except f.FrameError as exc:
                self._frame_error(exc)
                return
        if isinstance(frame, f.Response) and (frame.resume is not None or frame.resumable):
            param = "resume" if frame.resume is not None else "resumable"
            self._frame_error(f.FrameError(
                "invalid_frame", f"response streams are not resumable: {param} is not supported on a response "
                "frame (store the response and chain it with previous_response_id instead).",
                event_id=frame.event_id, request_id=frame.id, param=param))
            return
        action: Action
        if isinstance(frame, f.Render):
            action = StartRender(frame.id, frame.kind, apply_defaults(frame.kind, frame.body, self.settings))
        elif isinstance(frame, f.Generate):
            action = StartGenerate(frame.id, frame.body)
        elif isinstance(frame, f.Derender):
            action = StartDerender(frame.id, frame.kind, frame.body)
        else:
            resume = frame.resume.model_dump() if frame.resume is not None else None
            resumable = frame.resumable
            if isinstance(frame, f.Response):  # never resumable (refused above when asked)
                resumable = False
            elif resumable is None:  # a resumed stream stays resumable unless the frame says otherwise
                resumable = self.settings.resumable or frame.resume is not None
            action = StartPipeline(frame.id, frame.type, apply_defaults(frame.type, frame.body, self.settings),
                                   resume, resumable)
        self._strikes = 0
        self._requests[request_id] = _Request(request_id, frame.type, frame.event_id, undo=undo, restart=restart)
        self._actions.append(action)

    def _do_duplicate_id(self, request_id: str, req: _Request, frame: f.RequestFrame) -> None:
        self._frame_error(f.FrameError(
            "duplicate_id", f"A request with id {request_id!r} is already in flight in this session; "
            "choose a new id.", event_id=frame.event_id, param="id"))

    def _do_unknown_id(self, request_id: str, req: None, frame: f.Cancel) -> None:
        self._frame_error(f.FrameError(
            "unknown_id", f"No request with id {request_id!r} is in flight (it may have just finished).",
            event_id=frame.event_id, request_id=request_id, param="id"))

    def _do_cancel(self, request_id: str, req: _Request, frame: f.Cancel) -> None:
        self._strikes = 0
        self._actions.append(Cancel(request_id))

    def _do_send_delta(self, request_id: str, req: _Request, frame: sf.ServerFrame) -> None:
        if req.type not in sf.DELTA_FRAME_OF or not isinstance(frame, sf.DELTA_FRAME_OF[req.type]):
            raise SessionProtocolError(f"a {frame.type} frame for a {req.type} request")
        self._emit(frame)  # built with the request's event_id

    def _do_send_done(self, request_id: str, req: _Request, payload: tuple[Any, Any]) -> None:
        result, usage = payload
        frame: sf.ServerFrame
        if req.type == "render":
            frame = sf.RenderDone(id=request_id, result=result)
        elif req.type == "derender":
            if req.restart:
                self._restart_stream(result)
            frame = sf.DerenderDelta(id=request_id, result=result)
        elif req.type == "generate":
            frame = sf.GenerateDone(id=request_id, status="completed", usage=usage)
        else:
            frame = sf.DONE_FRAME_OF[req.type](id=request_id, status="completed")
        self._emit(_with_event_id(frame, req.event_id))

    def _do_send_cancelled(self, request_id: str, req: _Request, payload: Any) -> None:
        self._undo_state(req)
        self._emit(_cancelled_frame(req))

    def _do_send_error(self, request_id: str, req: _Request, error: sf.ErrorInfo) -> None:
        self._undo_state(req)
        self._emit(sf.ErrorFrame(event_id=req.event_id, id=request_id, error=error.as_dict()))

    # -- derender-state order ------------------------------------------------------------------
    def _consume_state(self, frame: f.Derender) -> Undo | None:
        state = frame.body.get("stream_state")
        if self._tagger is None or not isinstance(state, str):
            return None
        try:
            tag = self._tagger(state)
            return self._ledger.consume(tag) if tag is not None else None
        except StateError as exc:
            raise _state_error(frame, exc.message, exc.reason) from None
        except OutOfOrder as exc:
            raise _state_error(frame, f"This stream_state is {exc.reason}: its sequence number {exc.seq} is not "
                               f"after {exc.last}, the latest this session has used for the stream; send the "
                               "stream_state of the latest derender.delta of this stream.", exc.reason) from None

    def _restart_stream(self, result: Any) -> None:
        """A step with ``stream_state: null`` succeeded: it (re)started the stream its returned
        state names, so forget what the session remembered of an earlier stream under the same
        request (docs/protocol.md §9): the new stream's states are checked from its first one."""
        state = result.get("stream_state") if isinstance(result, dict) else None
        if self._tagger is None or not isinstance(state, str):
            return
        try:
            tag = self._tagger(state)
        except StateError:
            return
        if tag is not None:
            self._ledger.forget(tag.stream)

    def _undo_state(self, req: _Request) -> None:
        if req.undo is not None:
            self._ledger.undo(req.undo)

    # -- helpers -----------------------------------------------------------------------------
    def _emit(self, frame: sf.ServerFrame) -> None:
        self._actions.append(Send(frame))

    def _frame_error(self, exc: f.FrameError) -> None:
        status = error_codes.status_of(exc.code)
        # ``id`` in an error frame ends that request: never name one that is (still) running
        request_id = exc.request_id if exc.request_id not in self._requests else None
        error = sf.ErrorInfo(exc.code, exc.message, status=status, param=exc.param,
                            reason=exc.reason)
        self._emit(sf.ErrorFrame(event_id=exc.event_id, id=request_id, error=error.as_dict()))
        if exc.code in error_codes.LOAD_REFUSALS:  # the client may retry: not a strike (§3, §7)
            return
        self._strikes += 1
        if self._strikes > self.config.max_consecutive_errors:
            self._event(E.VIOLATION, Close(f.CLOSE_POLICY_VIOLATION, "too many invalid frames"))


def _state_error(frame: f.Derender, message: str, reason: str) -> f.FrameError:
    return f.FrameError("bad_state", message, event_id=frame.event_id, request_id=frame.id,
                        param="body.stream_state", reason=reason)


def _with_event_id(frame: sf.ServerFrame, event_id: str | None) -> sf.ServerFrame:
    return frame if event_id is None else dataclasses.replace(frame, event_id=event_id)


def _cancelled_frame(req: _Request) -> sf.ServerFrame:
    if req.type in sf.DONE_FRAME_OF:
        return sf.DONE_FRAME_OF[req.type](id=req.id, status="cancelled", event_id=req.event_id)
    # render and derender have no done-with-status frame: a cancelled one ends with an error frame
    error = sf.ErrorInfo("cancelled", f"The {req.type} request was cancelled.",
                         status=error_codes.STATUS_OF["cancelled"])
    return sf.ErrorFrame(event_id=req.event_id, id=req.id, error=error.as_dict())


def _closed_frame(req: _Request, close: Close) -> sf.ServerFrame:
    """The final frame of a request the session's close ends: ``error`` ``session_closed`` (503: retry
    it on a new session; a resumable stream resumes from its last checkpoint)."""
    why = f"{close.reason}, close code {close.code}" if close.reason else f"close code {close.code}"
    error = sf.ErrorInfo(
        "session_closed", f"The session is closing ({why}) before this {req.type} request finished; send "
        "it again on a new session (a resumable stream resumes from its last checkpoint).",
        status=error_codes.STATUS_OF["session_closed"])
    return sf.ErrorFrame(event_id=req.event_id, id=req.id, error=error.as_dict())


def _utf8_size(data: bytes | str) -> int:
    if isinstance(data, bytes) or data.isascii():
        return len(data)
    return len(data.encode("utf-8", "surrogatepass"))
