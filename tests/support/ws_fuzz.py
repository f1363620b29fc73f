"""Drive one WebSocket session with drawn messages and check what docs/protocol.md promises
(``tests/e2e/test_ws_fuzz.py``, ``python -m bench.fuzz ws``).

:func:`exercise` opens a session, sends the messages, then (when none of them was a protocol
violation) a ``ping`` probe, and reads until the probe's ``pong`` or the close. It fails when

- ``seq`` does not grow by exactly one, or a frame is not a JSON object with a known ``type``;
- an ``error`` frame has an unknown code, no message, or a message with server internals in it;
- the session closes with another code than the protocol promises for the messages (1011, an
  internal error, is never promised), or with a reason that is not one of the fixed texts;
- a session that saw no violation does not answer the probe (non-fatal errors must leave it usable).
"""

from __future__ import annotations

import base64
import itertools
from dataclasses import dataclass, field
from typing import Any

import orjson
from websockets.exceptions import ConnectionClosed
from websockets.sync.client import ClientConnection, connect

from tests.support.ws_strategies import Message

SERVER_FRAMES = frozenset({
    "session.created", "session.updated", "pong", "error", "render.done", "derender.delta", "generate.delta",
    "generate.done", "chat.delta", "chat.done", "completion.delta", "completion.done", "messages.delta",
    "messages.done"})
ERROR_CODES = frozenset({
    "invalid_frame", "unknown_type", "duplicate_id", "unknown_id", "not_enabled", "too_many_requests",
    "model_not_found", "bad_state", "invalid_request", "not_found", "too_large", "cancelled", "engine_unavailable",
    "engine_error", "overloaded", "engine_timeout", "rate_limited", "shutting_down", "session_closed"})
CLOSE_REASONS = frozenset({
    "frame is not a JSON object", "frame has no string 'type'", "binary frames are not supported",
    "frame is not valid JSON", "too many invalid frames", "frame exceeds max_frame_bytes"})
# Text that would mean internal details reached the client.
LEAKS = ("Traceback", 'File "', "site-packages", "/work/", " object at 0x", "Internal server error;")

_probe_ids = itertools.count()


class ProtocolBroken(AssertionError):
    pass


@dataclass
class Outcome:
    frames: list[dict[str, Any]] = field(default_factory=list)
    close_code: int | None = None
    close_reason: str = ""
    errors: int = 0


def open_session(ws_url: str, **kwargs: Any) -> ClientConnection:
    # No client keepalive pings: they draw from `random` on a background thread, which hypothesis
    # reports (a deprecation warning) when it happens while examples are being generated.
    kwargs.setdefault("ping_interval", None)
    kwargs.setdefault("subprotocols", ["tokenwire.v1"])
    ws: ClientConnection = connect(ws_url + "/v1/session", max_size=None, compression=None, open_timeout=30,
                                   **kwargs)
    created = orjson.loads(ws.recv(timeout=30))
    if created.get("type") != "session.created" or created.get("seq") != 1:
        raise ProtocolBroken(f"first frame is not session.created: {created}")
    return ws


def auth_subprotocol(key: str) -> str:
    """The browser form of the API key (docs/protocol.md, "Auth")."""
    return "tokenwire.auth." + base64.urlsafe_b64encode(key.encode()).rstrip(b"=").decode()


def check_frame(frame: Any, seq: int) -> None:
    if not isinstance(frame, dict) or frame.get("type") not in SERVER_FRAMES:
        raise ProtocolBroken(f"not a server frame: {frame!r:.300}")
    if frame.get("seq") != seq:
        raise ProtocolBroken(f"seq {frame.get('seq')} after {seq - 1}")
    if frame["type"] == "error":
        err = frame.get("error")
        if not isinstance(err, dict) or err.get("code") not in ERROR_CODES:
            raise ProtocolBroken(f"error frame with an unknown code: {frame!r:.300}")
        message = err.get("message")
        if not isinstance(message, str) or not message or not isinstance(err.get("status"), int):
            raise ProtocolBroken(f"error frame without a message or status: {frame!r:.300}")
        leaked = [marker for marker in LEAKS if marker in message]
        if leaked:
            raise ProtocolBroken(f"error message leaks {leaked}: {message!r:.500}")


def exercise(ws_url: str, messages: list[Message], *, timeout: float = 60.0) -> Outcome:
    expected = next((m.close for m in messages if m.close is not None), None)
    outcome = Outcome()
    ws = open_session(ws_url)
    seq = 1
    probe = f"probe-{next(_probe_ids)}"
    try:
        try:
            for m in messages:
                ws.send(m.data, text=m.text)
            if expected is None:
                ws.send(orjson.dumps({"type": "ping", "event_id": probe}).decode())
            while True:
                frame = orjson.loads(ws.recv(timeout=timeout))
                seq += 1
                check_frame(frame, seq)
                outcome.frames.append(frame)
                outcome.errors += frame["type"] == "error"
                if frame["type"] == "pong" and frame.get("event_id") == probe:
                    break
        except ConnectionClosed as exc:
            rcvd = exc.rcvd
            outcome.close_code = rcvd.code if rcvd is not None else 1006
            outcome.close_reason = rcvd.reason if rcvd is not None else ""
        except TimeoutError:
            raise ProtocolBroken(f"no answer within {timeout} s (expected close {expected})") from None
    finally:
        ws.close()
    if outcome.close_code != expected:
        raise ProtocolBroken(f"closed with {outcome.close_code} {outcome.close_reason!r}, expected "
                             f"{expected or 'the session to live on and answer the probe'}")
    # Invalid UTF-8 is refused by the WebSocket layer (uvicorn) before the session sees it: 1007, no reason.
    no_reason_ok = outcome.close_code == 1007 and outcome.close_reason == ""
    if expected is not None and outcome.close_reason not in CLOSE_REASONS and not no_reason_ok:
        raise ProtocolBroken(f"close reason {outcome.close_reason!r} is not one of the fixed texts")
    return outcome


def ping(ws: ClientConnection, event_id: str, *, timeout: float = 30.0) -> None:
    """A ping on a long-lived session (the bystander) is answered; other frames are skipped."""
    ws.send(orjson.dumps({"type": "ping", "event_id": event_id}).decode())
    while True:
        frame = orjson.loads(ws.recv(timeout=timeout))
        if frame.get("type") == "pong" and frame.get("event_id") == event_id:
            return
