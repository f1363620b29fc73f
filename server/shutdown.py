"""Graceful shutdown: SIGTERM stops accepting, lets work in flight finish up to a deadline
(``--shutdown-timeout``), then ends the rest with a clear error (503 ``shutting_down``), and the
process exits 0. :class:`Drain` is the per-process state, :class:`DrainMiddleware` counts HTTP
requests in flight, :class:`GracefulServer` runs the sequence. The sequence and its tests:
docs/reliability.md, "Graceful shutdown".
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
import socket
import threading
from collections.abc import Awaitable, Callable, Generator, Iterator
from typing import Any

import uvicorn
from starlette.types import ASGIApp, Receive, Scope, Send

from engine.errors import EngineShutDown
from engine.interface import Engine
from server.errors import error_response, flavor_of
from server.heap import settle_heap_for_serving

log = logging.getLogger("tokenwire")

SHUTTING_DOWN = "The server is shutting down; retry the request (on another replica)."
WIND_DOWN_S = 3.0  # after the deadline: how long requests may take to send their error and end
FLUSH_S = 0.3  # then, before uvicorn closes the connections (sessions: 1012), for queued frames to leave


class Drain:
    def __init__(self) -> None:
        self.draining = False
        self._in_flight = 0
        self._changed: asyncio.Event | None = None

    @property
    def in_flight(self) -> int:
        return self._in_flight

    def error(self) -> EngineShutDown:
        return EngineShutDown(SHUTTING_DOWN)

    @contextlib.contextmanager
    def track(self) -> Iterator[None]:
        """Count one unit of work in flight for its duration (event loop only)."""
        self._in_flight += 1
        try:
            yield
        finally:
            self._in_flight -= 1
            if self._changed is not None:
                self._changed.set()

    async def wait_idle(self, timeout: float) -> bool:
        """Until nothing is in flight (True) or ``timeout`` seconds passed (False)."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while self._in_flight:
            self._changed = asyncio.Event()
            remaining = deadline - loop.time()
            if remaining <= 0:
                return False
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._changed.wait(), remaining)
        return True


class DrainMiddleware:
    """Counts HTTP requests in flight; while draining, answers new ones 503 with the API's envelope."""

    def __init__(self, app: ASGIApp, drain: Drain) -> None:
        self.app = app
        self.drain = drain

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        if self.drain.draining:
            response = error_response(self.drain.error(), flavor=flavor_of(scope["path"]))
            response.headers["Connection"] = "close"
            await response(scope, receive, send)
            return
        with self.drain.track():
            await self.app(scope, receive, send)


class GracefulServer(uvicorn.Server):
    """uvicorn with tokenwire's shutdown sequence (module docstring), exiting 0 on SIGTERM / SIGINT."""

    def __init__(self, config: uvicorn.Config, drain: Drain, engine: Engine | None, *,
                 shutdown_timeout: float, on_started: Callable[[], Awaitable[None]] | None = None) -> None:
        super().__init__(config)
        self.drain = drain
        self.engine = engine
        self.shutdown_timeout = shutdown_timeout
        self.on_started = on_started  # once serving (a --workers process tells its supervisor)

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        await super().startup(sockets=sockets)  # the lifespan ran: the engine is loaded
        settle_heap_for_serving()
        if self.on_started is not None and self.started:
            await self.on_started()

    def handle_exit(self, sig: int, frame: Any) -> None:
        """uvicorn's convention: a second SIGINT while shutting down quits at once; here a second
        SIGTERM does too (a supervisor's "I mean it")."""
        if self.should_exit and sig in (signal.SIGINT, signal.SIGTERM):
            self._captured_signals.append(sig)
            self.force_exit = True
            return
        super().handle_exit(sig, frame)

    async def _idle_or_forced(self, drain: Drain, timeout: float) -> bool:
        """Until nothing is in flight (True), ``timeout`` passed or a second signal came (False)."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while not self.force_exit:
            if await drain.wait_idle(min(0.1, max(0.0, deadline - loop.time()))):
                return True
            if loop.time() >= deadline:
                return False
        return False

    async def shutdown(self, sockets: Any = None) -> None:
        for server in self.servers:  # stop accepting before anything else
            server.close()
        drain = self.drain
        drain.draining = True
        log.info("draining: %d request(s) in flight, up to %g s (a second signal quits at once)",
                 drain.in_flight, self.shutdown_timeout)
        if not await self._idle_or_forced(drain, self.shutdown_timeout):
            if self.force_exit:
                log.warning("second signal: ending %d request(s) in flight now", drain.in_flight)
            else:
                log.warning("shutdown timeout: ending %d request(s) still in flight", drain.in_flight)
            if self.engine is not None:
                await self.engine.close()  # every generation still running ends with EngineShutDown
            await self._idle_or_forced(drain, WIND_DOWN_S)
        await asyncio.sleep(FLUSH_S)  # the last frames and events leave before connections close
        # uvicorn's own end, never its forced form: that skips the lifespan's end, whose task is then
        # cancelled with the loop (a CancelledError traceback); the work is over, so this is quick
        self.force_exit = False
        await super().shutdown(sockets)

    @contextlib.contextmanager
    def capture_signals(self) -> Generator[None, None, None]:
        """As uvicorn's, without raising the signal again afterwards: a server that shut down
        gracefully on SIGTERM exits 0."""
        if threading.current_thread() is not threading.main_thread():
            yield
            return
        handled = (signal.SIGINT, signal.SIGTERM)
        original = {sig: signal.signal(sig, self.handle_exit) for sig in handled}
        try:
            yield
        finally:
            for sig, handler in original.items():
                signal.signal(sig, handler)

