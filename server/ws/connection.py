"""One accepted WebSocket session: the I/O shell around ``session.machine.Session``.

One anyio task group per connection holds a reader, a single writer, a timer and one task per
request in flight. The machine decides; this module only shuttles: what each part does, how frames
leave (written at once, at the end of the loop tick, or queued and merged while the client does
not read), cancels and closes: docs/serve.md, "Inside a WebSocket session".
"""

from __future__ import annotations

import asyncio
import logging
import math
from collections.abc import Callable
from typing import Any

import anyio
import anyio.abc
import anyio.to_thread
from starlette.websockets import WebSocket, WebSocketDisconnect

from engine.errors import EngineProtocolError, EngineShutDown
from server import metrics
from server.errors import to_api_error
from server.limits import Limiter, admitted, resume_weight
from server.pipeline.stream import StreamEvent
from server.shutdown import Drain
from server.ws.end_of_tick import EndOfTick
from server.ws.send_queue import SendQueue
from server.ws.transport import FrameWriter
from server.ws.work import Stages, run
from session.actions import (
    Action,
    Cancel,
    Close,
    Send,
    Start,
    StartDerender,
    StartGenerate,
    StartPipeline,
    StartRender,
)
from session.error_codes import code_for_status
from session.errors import StateError
from session.machine import Session, SessionState
from session.server_frames import ErrorFrame, ErrorInfo, ServerFrame

log = logging.getLogger("tokenwire.ws")

BATCH_SUBPROTOCOL = "tokenwire.batch"  # offered next to tokenwire.v1: the client takes batch frames
FLUSH_ON_CLOSE_S = 2.0  # how long queued frames may take to leave before the close frame
THREAD_DECODE_CHARS = 256 * 1024  # larger messages are validated on a worker thread

_SEND_ERRORS = (WebSocketDisconnect, OSError, RuntimeError)
_FRAME_OF = {StartRender: "render", StartGenerate: "generate", StartDerender: "derender"}


def error_info(exc: BaseException) -> ErrorInfo:
    """The ``error`` frame body for an exception, translated once by ``server.errors``."""
    err = to_api_error(exc)
    if isinstance(exc, EngineShutDown):
        return ErrorInfo("shutting_down", err.message, status=err.status)
    if isinstance(exc, EngineProtocolError):  # a bad engine, not an unreachable one (engine/inbound.py)
        return ErrorInfo("engine_error", err.message, status=err.status)
    if isinstance(exc, StateError):
        return ErrorInfo("bad_state", err.message, status=err.status, param=err.param, reason=exc.reason)
    if err.status == 404 and err.param == "model":
        return ErrorInfo("model_not_found", err.message, status=404, param="model")
    return ErrorInfo(code_for_status(err.status), err.message, status=err.status, param=err.param)


class _Report:
    """The machine's work inputs with the clock bound in (what ``work.run`` reports to)."""

    def __init__(self, conn: Connection) -> None:
        self._conn = conn

    def generate_delta(self, request_id: str, chunk: dict[str, Any]) -> None:
        self._conn.session.generate_delta(request_id, chunk, now=self._conn._now())
        self._conn.carry_out()

    def pipeline_events(self, request_id: str, *, resumable: bool) -> Callable[[list[StreamEvent]], None]:
        """The WebSocket per-token function of one pipeline request: each event becomes a delta
        frame. Where it may leave at once (the tick's first frame, to a client that takes single
        frames, the transport ready, the session not closing), the machine hands its bytes over and
        they go straight to the socket; otherwise (later in the tick, backed up, closing, a batch
        client, no direct writer) the machine queued it as an action, carried out as every frame
        is (:meth:`Connection._do`: the tick's end, or the send queue)."""
        conn = self._conn
        session, now = conn.session, conn._now

        def send(events: list[StreamEvent]) -> None:
            for event in events:
                writer = conn._first_of_tick()
                if resumable:
                    data = session.pipeline_delta(request_id, [event.payload], now=now(), checkpoint=event.checkpoint,
                                                  output_token_ids=list(event.output_token_ids),
                                                  stream_id=event.stream_id, at_once=writer is not None)
                else:
                    data = session.pipeline_delta(request_id, [event.payload], now=now(), at_once=writer is not None)
                if data is not None and writer is not None:
                    conn._open_tick()
                    writer.write_one(data)
                else:
                    conn.carry_out()

        return send

    def done(self, request_id: str, *, result: Any = None, usage: dict[str, Any] | None = None) -> None:
        self._conn.session.done(request_id, now=self._conn._now(), result=result, usage=usage)
        self._conn.carry_out()


class Connection:
    def __init__(self, websocket: WebSocket, session: Session, stages: Stages, *,
                 send_queue_capacity: int = 256, shutdown: Drain | None = None,
                 limits: tuple[Limiter, str] | None = None, batch: bool = False,
                 direct: FrameWriter | None = None, ticks: EndOfTick | None = None) -> None:
        self.websocket = websocket
        self.batch = batch  # the client takes ``batch`` frames
        self.direct = direct  # writes frames to the transport itself (None: through ASGI)
        self._tick: list[ServerFrame] = []  # frames ready this loop tick, for ``_flush``
        self._tick_open = False  # this tick has a frame (``_open_tick``); ``_flush`` is scheduled
        # where ``_flush`` is scheduled: the endpoint's, shared by its sessions (None: this session's own)
        self._ticks = ticks or EndOfTick()
        self._now = anyio.current_time  # the clock (``run`` binds the loop's own)
        self._loop: asyncio.AbstractEventLoop  # the loop ``run`` runs on
        self.session = session
        self.stages = stages
        self.send_queue = SendQueue(send_queue_capacity)
        self._scopes: dict[str, anyio.CancelScope] = {}
        self._tg: anyio.abc.TaskGroup | None = None
        self._close: Close | None = None
        self._timer_wake = anyio.Event()
        self._report = _Report(self)
        self.shutdown = shutdown or Drain()  # graceful shutdown (server/shutdown.py): no new requests while draining
        self.limits = limits or (Limiter(), "")  # the client's rate and concurrency (server/limits.py)

    async def run(self) -> None:
        # anyio.current_time() is the loop's clock, found through sniffio on every call (~1 µs);
        # the session reads the clock on every frame, so bind it once.
        self._loop = asyncio.get_running_loop()
        self._now = self._loop.time
        async with anyio.create_task_group() as tg:
            self._tg = tg
            self.carry_out()  # session.created
            tg.start_soon(self._writer)
            tg.start_soon(self._timer)
            await self._reader()
            tg.cancel_scope.cancel()  # the peer is gone: stop every request and the writer

    # -- carrying out the machine's actions ------------------------------------------------------
    def carry_out(self) -> None:
        """Carry out the actions the machine has appended since the last call, in order."""
        for action in self.session.actions():
            self._do(action)

    def _do(self, action: Action) -> None:
        if isinstance(action, Send):
            direct = self._writable()
            if direct is None:
                self.send_queue.put(action.frame)
            elif not self._tick_open and not self.batch:  # the tick's first frame leaves at once (latency) ...
                self._open_tick()
                direct.write_one(self._encode(action.frame))
            else:  # ... later ones (and a batch client's) at its end
                if not self._tick_open:
                    self._open_tick()
                self._tick.append(action.frame)
        elif isinstance(action, Cancel):
            scope = self._scopes.get(action.id)
            if scope is not None:
                scope.cancel()
        elif isinstance(action, Close):
            if self._close is None:
                self._close = action
                for scope in self._scopes.values():
                    scope.cancel()
                self.send_queue.interrupt()
                assert self._tg is not None
                self._tg.start_soon(self._close_deadline)
        else:
            assert self._tg is not None
            # The scope exists before the task runs, so a cancel that comes first still applies.
            scope = self._scopes[action.id] = anyio.CancelScope()
            self._tg.start_soon(self._request, action, scope, name=f"ws request {action.id}")

    def _writable(self) -> FrameWriter | None:
        """The direct writer, where a frame may go to the transport this tick: the session writes
        directly, is not closing, has nothing in its send queue, and the transport takes more."""
        direct = self.direct
        if direct is None or self._close is not None or self.send_queue or not direct.ready:
            return None
        return direct

    def _first_of_tick(self) -> FrameWriter | None:
        """The direct writer, where a frame made now would leave at once (as :meth:`_do` decides):
        the tick's first frame, to a client that takes single frames."""
        return None if self._tick_open or self.batch else self._writable()

    def _open_tick(self) -> None:
        """This tick has written (or, for a batch client, queued) a frame: later ones wait for the
        tick's end, where ``_flush`` writes them (one callback per tick for every such session)."""
        self._tick_open = True
        self._ticks.add(self._flush, self._loop)

    def _internal_error(self, exc: BaseException) -> None:
        log.error("WebSocket session %s failed; closing with 1011", self.session.session_id, exc_info=exc)
        self.session.internal_error()
        self.carry_out()

    # -- tasks -------------------------------------------------------------------------------------
    async def _request(self, start: Start, scope: anyio.CancelScope) -> None:
        metrics.ws_request(start.kind if isinstance(start, StartPipeline) else _FRAME_OF[type(start)])
        error: Exception | None = None
        with scope, self.shutdown.track():
            try:
                if self.shutdown.draining:
                    raise self.shutdown.error()
                weight = resume_weight(start.resume) if isinstance(start, StartPipeline) else 1
                with admitted(*self.limits, weight):
                    await run(start, self.stages, self._report)
            except Exception as exc:
                error = exc
        if self._scopes.get(start.id) is scope:
            del self._scopes[start.id]
        self._timer_wake.set()
        if self.session.state is not SessionState.OPEN:
            return
        try:
            if scope.cancelled_caught:
                self.session.aborted(start.id, now=self._now())
            elif error is not None:
                self.session.failed(start.id, error_info(error), now=self._now())
            self.carry_out()
        except Exception as exc:  # the machine refused our report: a bug on this side
            self._internal_error(exc)

    async def _reader(self) -> None:
        while True:
            await self.send_queue.wait_for_room()
            try:
                message = await self.websocket.receive()
            except _SEND_ERRORS:
                message = {"type": "websocket.disconnect"}
            if message["type"] == "websocket.disconnect":
                self.session.connection_lost()
                self.carry_out()
                return
            try:
                text = message.get("text")
                if text is None:
                    self.session.receive_binary(now=self._now())
                elif len(text) > THREAD_DECODE_CHARS:  # a long prompt: decode off the event loop
                    decoded = await anyio.to_thread.run_sync(self.session.decode, text)
                    self.session.receive_decoded(decoded, now=self._now())
                else:
                    self.session.receive_text(text, now=self._now())
                self.carry_out()
            except Exception as exc:
                self._internal_error(exc)

    async def _writer(self) -> None:
        try:
            while self._close is None:
                await self.send_queue.wait()
                await self._send_pending()
            with anyio.move_on_after(FLUSH_ON_CLOSE_S):
                while await self._send_pending():
                    pass
            with anyio.move_on_after(FLUSH_ON_CLOSE_S):
                await self.websocket.close(self._close.code, self._close.reason)
        except _SEND_ERRORS:
            # The peer went away mid-send. The reader may be waiting for room in the send queue that
            # will never empty, so end everything here: the session is lost.
            self.session.connection_lost()
            self.carry_out()
            assert self._tg is not None
            self._tg.cancel_scope.cancel()
        finally:
            if self._close is not None and self._tg is not None:
                self._tg.cancel_scope.cancel()

    async def _close_deadline(self) -> None:
        """A client that reads nothing cannot hold a closing session open: give up after a while
        (the transport then closes without a close frame)."""
        await anyio.sleep(3 * FLUSH_ON_CLOSE_S)
        assert self._tg is not None
        self._tg.cancel_scope.cancel()

    def _flush(self) -> None:
        """Write the frames of this tick (direct writer only): one write, one message when batched."""
        self._tick_open = False
        if not self._tick:  # the common case: the tick's one frame already left
            return
        frames, self._tick = self._tick, []
        if self.direct is not None:
            self.direct.write(self._messages(frames))  # a closed transport: the reader sees the disconnect

    async def _send_pending(self) -> bool:
        """Send what is queued now: frame by frame, or, to a batch client, all of it as one
        message. False when nothing was queued."""
        self._flush()  # frames of this tick come before anything queued after them
        if self.direct is not None:
            if self.direct.backed_up:
                await self.direct.drained()
            frames = []
            while taken := self.send_queue.take():
                frames += taken
            self._tick += frames
            self._flush()
            return bool(frames)
        pending = self.send_queue.take()  # through ASGI: what is next, or, to a batch client, all of it
        while self.batch and (frames := self.send_queue.take()):
            pending += frames
        for message in self._messages(pending):
            await self.websocket.send_text(message.decode())
        return bool(pending)

    def _messages(self, frames: list[ServerFrame]) -> list[bytes]:
        """``frames`` stamped and encoded, in order: one message each, or one ``batch`` message
        holding them all for a batch client."""
        encoded = [self._encode(frame) for frame in frames]
        if self.batch and len(encoded) > 1:
            return [b'{"type":"batch","frames":[' + b",".join(encoded) + b"]}"]
        return encoded

    def _encode(self, frame: ServerFrame) -> bytes:
        if isinstance(frame, ErrorFrame):
            metrics.error(frame.error["code"], "ws")
        return self.session.stamp(frame)

    async def _timer(self) -> None:
        while self.session.state is SessionState.OPEN:
            deadline = self.session.next_deadline()
            delay = math.inf if deadline is None else max(0.0, deadline - self._now())
            with anyio.move_on_after(delay):
                await self._timer_wake.wait()
            self._timer_wake = anyio.Event()
            self.session.tick(now=self._now())
            self.carry_out()
