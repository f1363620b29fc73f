"""Server frames written straight to the session's transport, once per loop tick.

:class:`FrameWriter` builds unmasked text frame headers itself and writes a session's ready frames
in one ``transport.write``, skipping the ASGI send chain; it is used only with uvicorn's
``websockets-sansio`` protocol without ``permessage-deflate`` (:func:`frame_writer` returns None
elsewhere). Why, and its backpressure: docs/serve.md, "Inside a WebSocket session".
"""

from __future__ import annotations

import struct
from collections.abc import Mapping, Sequence
from typing import Any

from websockets.protocol import OPEN, Protocol

RAW_SEND_KEY = "tokenwire.raw_send"  # the ASGI server's own send callable, in the scope

_SHORT = struct.Struct("!BB")
_MEDIUM = struct.Struct("!BBH")
_LONG = struct.Struct("!BBQ")


class RawSendMiddleware:
    """Puts the ASGI server's ``send`` into WebSocket scopes (before any middleware wraps it)."""

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "websocket":
            scope[RAW_SEND_KEY] = send
        await self.app(scope, receive, send)


def text_frame(payload: bytes) -> bytes:
    """An unmasked, unfragmented text frame (RFC 6455 §5.2) carrying ``payload``."""
    n = len(payload)
    if n < 126:
        return _SHORT.pack(0x81, n) + payload
    if n < 65536:
        return _MEDIUM.pack(0x81, 126, n) + payload
    return _LONG.pack(0x81, 127, n) + payload


class FrameWriter:
    def __init__(self, protocol: Any) -> None:
        self._protocol = protocol
        self._conn: Protocol = protocol.conn
        self._transport = protocol.transport
        self._writable = protocol.writable

    @property
    def closed(self) -> bool:
        return bool(self._protocol.close_sent) or self._transport.is_closing() or self._conn.state is not OPEN

    @property
    def backed_up(self) -> bool:
        return not self._writable.is_set()

    @property
    def ready(self) -> bool:
        """Open, and the transport takes more now (not :attr:`backed_up`): a frame may be written."""
        return (self._writable.is_set() and not self._protocol.close_sent and self._conn.state is OPEN
                and not self._transport.is_closing())

    async def drained(self) -> None:
        await self._writable.wait()

    def write(self, payloads: Sequence[bytes]) -> bool:
        """Write each payload as a text frame, all in one write. False (nothing written) when the
        connection is closing or gone."""
        if self.closed:
            return False
        self._transport.write(b"".join([text_frame(p) for p in payloads]))
        return True

    def write_one(self, payload: bytes) -> None:
        """Write one text frame; only right after :attr:`ready` was true (the per-token path)."""
        self._transport.write(text_frame(payload))


def frame_writer(scope: Mapping[str, Any]) -> FrameWriter | None:
    """The direct writer for this WebSocket scope, or None where the ASGI send must be used (another
    server or protocol implementation, or a compression extension in use)."""
    protocol = getattr(scope.get(RAW_SEND_KEY), "__self__", None)
    conn = getattr(protocol, "conn", None)
    if (not isinstance(conn, Protocol) or conn.extensions or getattr(protocol, "transport", None) is None
            or not hasattr(protocol, "writable") or not hasattr(protocol, "close_sent")):
        return None
    return FrameWriter(protocol)
