"""A deadline for an HTTP request's headers (``--header-timeout``), which uvicorn does not have.

uvicorn times a connection out only between requests (its keep-alive timeout, armed once a
response is complete): a client that connects and sends nothing, or part of a request line or of
its headers, holds the connection, a file descriptor and a parser for as long as it likes (the
slowloris pattern; issue 39 item 10). :func:`http_protocol` wraps uvicorn's own HTTP/1.1 protocol
(httptools, else h11: the one ``--http auto`` picks) with a timer that starts when a connection is
made, and again at the first byte of each later request on a kept-alive connection, and stops when
the request's headers are complete (the protocol starts a new request cycle) or the connection is
upgraded to a WebSocket. On expiry the connection is answered 408 and closed, and
``tokenwire_header_timeouts_total`` counts it. ``--body-timeout`` (``server/limits.py``) takes over
once the headers are in.
"""

from __future__ import annotations

import asyncio
from typing import Any

import orjson
from uvicorn.protocols.http.auto import AutoHTTPProtocol

from server import metrics
from server.errors import ApiError, openai_error_body


def http_protocol(timeout: float, base: type[asyncio.Protocol] = AutoHTTPProtocol) -> type[asyncio.Protocol]:
    """uvicorn's HTTP protocol class with a ``timeout``-second header deadline (``base`` as it is for 0)."""
    if not timeout:
        return base
    body = orjson.dumps(openai_error_body(ApiError(
        408, f"The request headers did not arrive within {timeout:g} s.", error_type="RequestTimeout")))
    answer = (b"HTTP/1.1 408 Request Timeout\r\ncontent-type: application/json\r\nconnection: close\r\n"
              b"content-length: " + str(len(body)).encode() + b"\r\n\r\n" + body)

    class HeaderTimeoutProtocol(base):  # type: ignore[valid-type, misc]
        _header_timer: asyncio.TimerHandle | None = None

        def connection_made(self, transport: Any) -> None:
            super().connection_made(transport)
            self._arm()

        def data_received(self, data: bytes) -> None:
            if self._header_timer is None and (self.cycle is None or self.cycle.response_complete):
                self._arm()  # the first byte of another request on a kept-alive connection
            cycle = self.cycle
            super().data_received(data)
            if self.cycle is not cycle or self.transport.get_protocol() is not self:
                self._disarm()  # the headers are in (a new request cycle), or it is a WebSocket now

        def connection_lost(self, exc: Exception | None) -> None:
            self._disarm()
            super().connection_lost(exc)

        def _arm(self) -> None:
            self._header_timer = self.loop.call_later(timeout, self._expired)

        def _disarm(self) -> None:
            if self._header_timer is not None:
                self._header_timer.cancel()
                self._header_timer = None

        def _expired(self) -> None:
            self._header_timer = None
            if self.transport.is_closing():
                return
            metrics.header_timeout()
            self.transport.write(answer)
            self.transport.close()

    return HeaderTimeoutProtocol
