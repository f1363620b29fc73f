"""The end of a loop tick, for every WebSocket session of one endpoint: sessions that wrote a
frame this tick are flushed by one callback when it ends (docs/serve.md, "Inside a WebSocket
session"). The endpoint owns one (``server.services.Services.ws_ticks``) and hands it to each
connection."""

from __future__ import annotations

import asyncio
from collections.abc import Callable


class EndOfTick:
    """Runs the flushes registered during a loop tick once it ends, with one ``call_soon`` for all
    of them. Each tick's flushes are their own list, so a loop that closed before its callback ran
    leaves nothing behind for the next loop (tests run one app on several)."""

    __slots__ = ("_due", "_loop")

    def __init__(self) -> None:
        self._due: list[Callable[[], None]] | None = None  # this tick's flushes
        self._loop: asyncio.AbstractEventLoop | None = None

    def add(self, flush: Callable[[], None], loop: asyncio.AbstractEventLoop) -> None:
        """Have ``flush`` run at the end of this tick of ``loop``."""
        due = self._due
        if due is None or self._loop is not loop:
            due = self._due = []
            self._loop = loop
            loop.call_soon(self._run, due)
        due.append(flush)

    def _run(self, due: list[Callable[[], None]]) -> None:
        if self._due is due:
            self._due = None
        for flush in due:
            flush()
