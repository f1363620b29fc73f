"""Background responses (``background: true``): generations that outlive their request.

:class:`BackgroundRuns` runs each one in a task of the server's own (opened by the app's lifespan,
:meth:`BackgroundRuns.serving`), counted by the shutdown drain and bounded in number, per front end
and per client; each keeps its events in an :class:`EventLog` (SSE bytes, bounded in count and
bytes, the oldest dropped first) that a stream reads from any sequence number on, replayed then
live, and that is kept :data:`KEEP_S` seconds after the response ends. Nothing here is shared
between front ends: the log lives where the response runs. docs/responses.md, "Background mode".
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections import OrderedDict
from collections.abc import AsyncIterator, Callable
from typing import Any

import anyio
import anyio.abc

from server.errors import ApiError
from server.shutdown import Drain
from server.sse import sse

log = logging.getLogger("tokenwire.responses")

MAX_RUNNING = 64  # background responses running at once on one front end
LOG_MAX_EVENTS = 65_536  # events one log keeps
LOG_MAX_BYTES = 2 * 1024 * 1024  # bytes of SSE one log keeps
KEEP_S = 600.0  # how long a finished response's log is kept
MAX_KEPT = 64  # finished logs kept at once (the oldest dropped first)
TERMINAL = ("response.completed", "response.incomplete", "response.failed")


class EventLog:
    """One background response's events as SSE bytes, by sequence number (from 0, one apart).
    Past :data:`LOG_MAX_EVENTS` or :data:`LOG_MAX_BYTES` the oldest are dropped (the last one is
    always kept); :attr:`first` is the first sequence number still held."""

    def __init__(self, response_id: str, *, max_events: int = LOG_MAX_EVENTS,
                 max_bytes: int = LOG_MAX_BYTES) -> None:
        self.id = response_id
        self.max_events = max_events
        self.max_bytes = max_bytes
        self.first = 0
        self.done = False
        self.forgotten = False  # its response was deleted: not kept once it ends
        self.ended_at: float | None = None
        self._events: list[bytes] = []
        self._bytes = 0
        self._changed = anyio.Event()

    @property
    def next(self) -> int:
        """The sequence number the next event will have."""
        return self.first + len(self._events)

    @property
    def size(self) -> tuple[int, int]:
        return len(self._events), self._bytes

    def append(self, event: dict[str, Any]) -> None:
        if event.get("sequence_number") != self.next:  # every event of one response, in order
            raise ValueError(f"event {event.get('sequence_number')} out of order (expected {self.next})")
        data = sse(event, named=True)
        self._events.append(data)
        self._bytes += len(data)
        if len(self._events) > self.max_events or self._bytes > self.max_bytes:
            # drop the oldest, down to three quarters of the bounds (so trimming is not per event)
            keep_events, keep_bytes = self.max_events * 3 // 4, self.max_bytes * 3 // 4
            drop = 0
            while len(self._events) - drop > 1 and (len(self._events) - drop > keep_events
                                                     or self._bytes > keep_bytes):
                self._bytes -= len(self._events[drop])
                drop += 1
            del self._events[:drop]
            self.first += drop
        if event.get("type") in TERMINAL:
            self.close()
        self._wake()

    def close(self) -> None:
        """No more events (the terminal one was appended, or the run ended without one)."""
        if not self.done:
            self.done = True
            self.ended_at = time.monotonic()
        self._wake()

    def check_after(self, after: int) -> None:
        """A 400 for a ``starting_after`` this log cannot serve."""
        if after + 1 < self.first:
            raise ApiError(400, f"starting_after={after}: the events of response '{self.id}' before sequence "
                                f"number {self.first} are no longer kept (a background response keeps its last "
                                f"{self.max_events} events and {self.max_bytes} bytes of events); resume from "
                                f"{self.first - 1} or later, or GET the response without stream for the whole of it.",
                           param="starting_after", error_type="invalid_request_error")
        if self.done and after >= self.next - 1:
            raise ApiError(400, f"starting_after={after}: response '{self.id}' has no event after it (its last "
                                f"event is {self.next - 1}).", param="starting_after",
                           error_type="invalid_request_error")

    async def after(self, after: int) -> AsyncIterator[bytes]:
        """The events after sequence number ``after``: those held, then each new one, to the end.
        A reader so slow that events it has not read were dropped gets an ``error`` event and
        the end of the stream."""
        nxt = after + 1
        while True:
            if nxt < self.first:
                yield sse({"type": "error", "sequence_number": nxt, "code": "events_dropped", "param": None,
                           "message": f"This stream fell behind: the events before {self.first} were dropped "
                                      "from the response's event log. GET the response without stream for "
                                      "the whole of it."}, named=True)
                return
            if nxt < self.next:
                yield self._events[nxt - self.first]
                nxt += 1
                continue
            if self.done:
                return
            await self._changed.wait()

    def _wake(self) -> None:
        self._changed.set()
        self._changed = anyio.Event()


class BackgroundRuns:
    """The background responses of one front end: their tasks and their event logs."""

    def __init__(self, drain: Drain | None = None, *, max_running: int = MAX_RUNNING, max_per_client: int = 0,
                 keep_s: float = KEEP_S, max_kept: int = MAX_KEPT,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.drain = drain or Drain()
        self.max_running = max_running
        self.max_per_client = max_per_client  # --max-concurrent-requests (0: no per-client bound)
        self.keep_s = keep_s
        self.max_kept = max_kept
        self._clock = clock
        self._tg: anyio.abc.TaskGroup | None = None
        self._running: dict[str, EventLog] = {}
        self._kept: OrderedDict[str, EventLog] = OrderedDict()  # finished, oldest first
        self._per_client: dict[str, int] = {}

    @contextlib.asynccontextmanager
    async def serving(self) -> AsyncIterator[None]:
        """Where the runs' tasks live (the app's lifespan); leaving it cancels those still running."""
        async with anyio.create_task_group() as tg:
            self._tg = tg
            try:
                yield
            finally:
                self._tg = None
                tg.cancel_scope.cancel()

    @property
    def running(self) -> int:
        return len(self._running)

    def log_of(self, response_id: str) -> EventLog | None:
        self._expire()
        found = self._running.get(response_id) or self._kept.get(response_id)
        return None if found is None or found.forgotten else found

    def forget(self, response_id: str) -> None:
        """Drop a finished response's log (a deleted response); a running one's goes as it ends."""
        self._kept.pop(response_id, None)
        running = self._running.get(response_id)
        if running is not None:
            running.forgotten = True

    def check(self, client: str) -> None:
        """Whether one more may start for ``client``: a 503 when the server is not serving
        background work or :data:`MAX_RUNNING` run, a 429 when the client has ``max_per_client``
        running (``--max-concurrent-requests``)."""
        if self._tg is None:
            raise ApiError(503, "Background responses are not being served (the server is starting or shutting "
                                "down); retry, or send the request without background.", error_type="server_error")
        if len(self._running) >= self.max_running:
            raise ApiError(503, f"{self.max_running} background responses are running on this server, the most it "
                                "runs at once; retry when one finishes, or send the request without background.",
                           error_type="server_error")
        if self.max_per_client and self._per_client.get(client, 0) >= self.max_per_client:
            raise ApiError(429, f"Too many background responses: at most {self.max_per_client} running per client "
                                "(--max-concurrent-requests); retry when one finishes.", error_type="rate_limit_error")

    def start(self, response_id: str, client: str, events: Callable[[], AsyncIterator[dict[str, Any]]]) -> EventLog:
        """Run ``events()`` to its end in a server task, each event into the returned log
        (:meth:`check` first: it raises what it raises)."""
        self.check(client)
        assert self._tg is not None
        self._expire()
        event_log = self._running[response_id] = EventLog(response_id)
        self._per_client[client] = self._per_client.get(client, 0) + 1
        self._tg.start_soon(self._run, event_log, client, events)
        return event_log

    async def _run(self, event_log: EventLog, client: str,
                   events: Callable[[], AsyncIterator[dict[str, Any]]]) -> None:
        stream = events()
        try:
            with self.drain.track():
                async for event in stream:
                    event_log.append(event)
        except Exception as exc:  # a bug: logged, the log closed; the other runs go on
            log.error("background response %s failed", event_log.id, exc_info=exc)
        finally:
            with anyio.CancelScope(shield=True):
                await stream.aclose()  # type: ignore[attr-defined]
            event_log.close()
            event_log.ended_at = self._clock()
            self._running.pop(event_log.id, None)
            left = self._per_client.get(client, 1) - 1
            if left > 0:
                self._per_client[client] = left
            else:
                self._per_client.pop(client, None)
            if not event_log.forgotten:
                self._kept[event_log.id] = event_log
            self._expire()

    def _expire(self) -> None:
        now = self._clock()
        while self._kept:
            oldest = next(iter(self._kept.values()))
            ended = oldest.ended_at if oldest.ended_at is not None else now
            if len(self._kept) <= self.max_kept and now - ended < self.keep_s:
                break
            self._kept.popitem(last=False)


def not_resumable(response_id: str, response: dict[str, Any], keep_s: float) -> ApiError:
    """Why a stored response whose event log this front end does not hold cannot be streamed."""
    rid = response_id[:200]
    if not response.get("background"):
        return ApiError(400, f"Response '{rid}' was not created with background: true; only a background response "
                             "can be streamed again. GET it without stream.", param="stream",
                        error_type="invalid_request_error")
    if response.get("status") in ("queued", "in_progress"):
        return ApiError(409, f"Background response '{rid}' is not running on this server: its events are kept only "
                             "by the server running it (another replica or worker, or one that restarted). Stream "
                             f"it from that server, or poll GET /v1/responses/{rid} without stream.",
                        param="response_id", error_type="invalid_request_error", code="response_not_local")
    return ApiError(400, f"The event log of background response '{rid}' is no longer kept (it is kept {keep_s:g} s "
                         "after the response ends); GET the response without stream for the whole of it.",
                    param="stream", error_type="invalid_request_error", code="event_log_expired")
