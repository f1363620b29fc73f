"""The seam between the client's API and the wire: a transport starts requests and hands back, per
request, a :class:`Handle` that yields that request's server frames.

Both transports speak in the WebSocket session's own frame types (``session.server_frames``):
the WebSocket session (``client_sdk.connection``) routes the frames it receives by ``id``; the HTTP
fallback (``client_sdk.http_fallback``) builds the same frames from the HTTP endpoints' answers. So
everything above this seam — resumption, typed streams, accumulation — is written once.

A request's frames wait in a :class:`Channel`: a bounded buffer that, when its reader falls
behind, merges a request's consecutive deltas into one frame (exactly as the server coalesces for
a slow client, docs/protocol.md §6) instead of growing, so one slow reader never stalls the socket
that the session's other requests share.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Callable
from typing import Any, Literal, Protocol

from client_sdk.errors import ConnectionLostError
from client_sdk.types import SessionInfo
from session.client_frames import RequestFrame
from session.server_frames import AnyServerFrame, ErrorFrame

FINAL_TYPES = frozenset({"render.done", "derender.delta", "generate.done", "chat.done", "completion.done",
                         "messages.done", "response.done", "error"})
KNOWN_TYPES = frozenset({"session.created", "session.updated", "pong", "error", "render.done", "derender.delta",
                         "generate.delta", "generate.done", "chat.delta", "chat.done", "completion.delta",
                         "completion.done", "messages.delta", "messages.done", "response.delta",
                         "response.done"})


class Interrupted(ConnectionLostError):
    """The connection under an in-flight request dropped. A resumable stream continues on a new
    connection; any other request ends with this error."""


class Channel:
    """The frames of one request, in order, with merging when the reader falls behind."""

    def __init__(self, request_id: str, *, capacity: int = 64) -> None:
        self.id = request_id
        self.capacity = capacity
        self.cancelling = False
        self.finished = False  # the final frame arrived
        self.discard = False  # nobody reads any more: keep nothing
        self._frames: deque[AnyServerFrame] = deque()
        self._error: BaseException | None = None
        self._wake = asyncio.Event()

    def put(self, frame: AnyServerFrame) -> None:
        if frame.type in FINAL_TYPES:
            self.finished = True
        if self.discard:
            return
        last = self._frames[-1] if self._frames else None
        merge = getattr(last, "merge", None)
        if len(self._frames) >= self.capacity and merge is not None and type(last) is type(frame):
            self._frames[-1] = merge(frame)
        else:
            self._frames.append(frame)
        self._wake.set()

    def fail(self, error: BaseException) -> None:
        """No more frames will come: raise ``error`` once the buffered ones are read."""
        if self._error is None:
            self._error = error
        self._wake.set()

    async def get(self, timeout: float | None) -> AnyServerFrame:
        while not self._frames:
            if self._error is not None:
                raise self._error
            self._wake.clear()
            if timeout is None:
                await self._wake.wait()
            else:
                async with asyncio.timeout(timeout):
                    await self._wake.wait()
        return self._frames.popleft()


class Handle:
    """One started request, as its reader sees it."""

    def __init__(self, channel: Channel, *, cancel: Callable[[], None], release: Callable[[], None]) -> None:
        self.channel = channel
        self._cancel = cancel
        self._release = release

    @property
    def id(self) -> str:
        return self.channel.id

    async def next(self, timeout: float | None) -> AnyServerFrame:
        return await self.channel.get(timeout)

    def cancel(self) -> None:
        """Ask the server to stop the request (non-blocking; safe from a cancelled task)."""
        if not self.channel.finished and not self.channel.cancelling:
            self.channel.cancelling = True
            self._cancel()

    def release(self) -> None:
        """The reader is gone: buffer nothing more for this request."""
        self.channel.discard = True
        self._release()


class Transport(Protocol):
    """What the client's API needs from a transport."""

    kind: Literal["websocket", "http"]

    @property
    def info(self) -> SessionInfo: ...

    def new_id(self, prefix: str) -> str: ...

    async def ready(self) -> None:
        """Wait until requests can be sent (a WebSocket transport may be reconnecting)."""

    async def start(self, frame: RequestFrame) -> Handle: ...

    async def cancel(self, request_id: str) -> None: ...

    async def update_session(self, patch: dict[str, Any]) -> dict[str, Any]: ...

    async def aclose(self) -> None: ...


def call_in_loop(loop: asyncio.AbstractEventLoop | None, fn: Callable[[], None]) -> None:
    """Run ``fn`` on ``loop``: now when called from it, else soon (from a finalizer, another thread)."""
    if loop is None or loop.is_closed():
        return
    try:
        running = asyncio.get_running_loop()
    except RuntimeError:
        running = None
    if running is loop:
        fn()
    else:
        loop.call_soon_threadsafe(fn)


def error_frame(request_id: str | None, error: dict[str, Any]) -> ErrorFrame:
    return ErrorFrame(id=request_id, error=error)
