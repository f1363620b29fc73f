"""``RemoteEngine``: the :class:`~engine.interface.Engine` interface over HTTP to any vLLM-compatible
tokens-only engine (SSE per step, ``/abort_requests`` on an early close, failures as
:mod:`engine.errors` values). No torch, no HTTP library: a pool of keep-alive HTTP/1.1 connections
(engine/remote_wire.py: each a plain :class:`asyncio.Protocol`, the response-head parser, chunked
decoding, SSE event splitting, the decoding of each request's chunks). The SSE events every
connection brought in one turn of the event loop are parsed in one ``orjson`` pass and handed to each
request's :class:`~engine.outbox.Outbox`, the push path of the engine link (engine/link.py). The
requests it makes and the errors it maps: docs/engine.md, "The HTTP engine".
"""
from __future__ import annotations

import asyncio
import contextlib
import logging
import ssl
from collections.abc import Sequence
from typing import Any, TypeVar
from urllib.parse import urlsplit

import anyio
import orjson

from engine.access import EngineIds, auth_headers, key_refused
from engine.errors import (
    EngineError,
    EngineOverloaded,
    EngineProtocolError,
    EngineShutDown,
    EngineTimeout,
    EngineUnavailable,
    InvalidGenerateRequest,
)
from engine.inbound import protocol_error, safe_param
from engine.interface import Engine, EngineHealth, EngineStream
from engine.outbox import Outbox, OutboxStream
from engine.protocol import GenerateRequest
from engine.remote_wire import DONE, END, MAX_ERROR_BODY, Answer, Conn, Stream

log = logging.getLogger("tokenwire.remote")

GENERATE_PATH = "/inference/v1/generate"
ABORT_PATHS = ("/abort_requests", "/inference/v1/abort_requests")
MAX_ERROR_MESSAGE = 500
MAX_IDLE = 64  # keep-alive connections kept open while no request needs them

_E = TypeVar("_E", bound=EngineError)


class RemoteEngine(Engine):
    def __init__(self, base_url: str, *, model_name: str, max_model_len: int, connect_timeout: float = 5.0,
                 read_timeout: float = 300.0, abort_timeout: float = 5.0, max_connections: int = 1024,
                 api_key: str | None = None, vocab_size: int | None = None) -> None:
        self.base_url = base_url.rstrip("/")
        parts = urlsplit(self.base_url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"an HTTP engine URL is http://HOST[:PORT][/PATH] or https://…, not {base_url!r}")
        self._host = parts.hostname
        self._port = parts.port or (443 if parts.scheme == "https" else 80)
        self._tls = parts.scheme == "https"
        self._prefix = parts.path.rstrip("/")
        netloc = parts.netloc.rpartition("@")[2]
        self._head_lines = (f"Host: {netloc}\r\n" + "".join(f"{k}: {v}\r\n" for k, v in auth_headers(api_key).items())
                            + "User-Agent: tokenwire\r\n").encode("latin-1")
        self.vocab_size = vocab_size  # the bound on the token ids the engine may send (engine/inbound.py)
        self.api_key = api_key  # --engine-api-key: a bearer token on every request to the engine
        self.model_name = model_name
        self.max_model_len = max_model_len
        self.connect_timeout = connect_timeout
        self.read_timeout = read_timeout
        self.abort_timeout = abort_timeout
        self.max_connections = max_connections
        self._abort_path: str | None = None
        self._ids = EngineIds()  # the engine request ids (a client's own id never reaches the engine)
        self._calls: dict[str, Stream] = {}  # engine id -> the request in flight
        self._idle: list[Conn] = []
        self._open = 0  # connections open or opening
        self._waiters: list[asyncio.Future[None]] = []  # requests waiting for room in a full pool
        self._pending: list[tuple[Stream, Any]] = []  # SSE events (and ends) not parsed yet
        self._flushing = False
        self._tasks: set[asyncio.Task[None]] = set()
        self._watch: asyncio.Task[None] | None = None
        self._ssl: ssl.SSLContext | None = None
        self._closing = False

    # --- lifecycle -------------------------------------------------------------------------
    async def start(self) -> None:
        health = await self.health()
        if not health.ok:
            log.warning("remote engine %s is not healthy yet: %s", self.base_url, health.detail)

    async def close(self) -> None:
        self._closing = True  # streams still running end with EngineShutDown
        for call in list(self._calls.values()):
            call.fail(EngineShutDown("The server is shutting down; retry the request (on another replica)."))
        idle, self._idle = self._idle, []
        for conn in idle:
            conn.drop()
        if self._watch is not None:
            self._watch.cancel()
            self._watch = None
        for fut in self._waiters:
            if not fut.done():
                fut.set_result(None)

    # --- the Engine interface --------------------------------------------------------------
    def generate(self, request: GenerateRequest) -> EngineStream:
        call: list[Stream] = []

        async def start() -> Outbox:
            stream = Stream(self, request, self._ids.new())
            call.append(stream)
            await self._send(stream)
            return stream.outbox

        def forget() -> None:
            for stream in call:
                if self._calls.get(stream.wire) is stream:
                    del self._calls[stream.wire]

        async def abort() -> None:
            for stream in call:
                stream.leave()
                await self._abort_quietly([stream.wire])

        return OutboxStream(start, forget=forget, abort=abort)

    async def abort(self, request_ids: Sequence[str]) -> None:
        wanted = set(request_ids)
        wires = [call.wire for call in self._calls.values() if call.request_id in wanted]
        if wires:
            await self._abort_quietly(wires)

    async def health(self) -> EngineHealth:
        stats = {"url": self.base_url, "in_flight": self.live_sequences()}
        try:
            status, _ = await self._exchange("GET", "/health", None, timeout=min(self.connect_timeout, 5.0))
        except EngineError as exc:
            what = "no answer in time" if isinstance(exc, EngineTimeout) else "connection failed"
            return EngineHealth(ok=False, detail=f"remote engine unreachable ({what})", stats=stats)
        if status != 200:
            return EngineHealth(ok=False, detail=f"remote engine health is HTTP {status}", stats=stats)
        return EngineHealth(ok=True, stats=stats)

    def live_sequences(self) -> int:
        """Requests this client has in flight at the remote."""
        return len(self._calls)

    # --- the connection pool -----------------------------------------------------------------
    def _request_bytes(self, method: str, path: str, body: bytes | None, accept: str = "application/json") -> bytes:
        head = f"{method} {self._prefix}{path} HTTP/1.1\r\n".encode("latin-1") + self._head_lines
        head += f"Accept: {accept}\r\n".encode("latin-1")
        if body is None:
            return head + b"\r\n"
        return head + b"Content-Type: application/json\r\nContent-Length: %d\r\n\r\n" % len(body) + body

    async def _acquire(self) -> Conn:
        """An idle keep-alive connection, a new one, or (a full pool) the next one freed."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.read_timeout
        while True:
            if self._closing:
                raise EngineShutDown("The server is shutting down; retry the request (on another replica).")
            while self._idle:
                conn = self._idle.pop()
                if not conn.closed:
                    return conn
            if self._open < self.max_connections:
                self._open += 1
                try:
                    return await self._connect()
                except BaseException:
                    self._open -= 1
                    self._wake()
                    raise
            fut = loop.create_future()
            self._waiters.append(fut)
            try:
                await asyncio.wait_for(fut, max(deadline - loop.time(), 0))
            except TimeoutError:
                raise EngineTimeout(f"The remote engine did not accept a connection within "
                                    f"{self.connect_timeout:g} s.") from None
            finally:
                if fut in self._waiters:
                    self._waiters.remove(fut)

    async def _connect(self) -> Conn:
        loop = asyncio.get_running_loop()
        context = None
        if self._tls:
            if self._ssl is None:
                self._ssl = ssl.create_default_context()
            context = self._ssl
        try:
            _, conn = await asyncio.wait_for(
                loop.create_connection(lambda: Conn(self), self._host, self._port, ssl=context,
                                       server_hostname=self._host if context else None),
                self.connect_timeout)
        except TimeoutError:
            raise EngineTimeout(f"The remote engine did not accept a connection within "
                                f"{self.connect_timeout:g} s.") from None
        except (OSError, ssl.SSLError):
            raise EngineUnavailable("Cannot reach the remote engine (connection failed).") from None
        return conn

    def release(self, conn: Conn) -> None:
        """A connection whose answer was read to its end: kept for the next request, or closed."""
        if conn.closed:
            return
        if self._closing or len(self._idle) >= MAX_IDLE:
            conn.drop()
            return
        self._idle.append(conn)
        self._wake()

    def connection_closed(self, conn: Conn) -> None:
        self._open -= 1
        with contextlib.suppress(ValueError):
            self._idle.remove(conn)
        self._wake()

    def _wake(self) -> None:
        for fut in self._waiters:
            if not fut.done():
                fut.set_result(None)
                return

    async def _exchange(self, method: str, path: str, body: dict[str, Any] | None,
                        timeout: float) -> tuple[int, bytes]:
        """One plain request: its status and (up to MAX_ERROR_BODY bytes of) its body."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        data = self._request_bytes(method, path, None if body is None else orjson.dumps(body))
        for _ in range(3):  # a reused connection the engine had closed: once more on another
            try:
                conn = await asyncio.wait_for(self._acquire(), max(deadline - loop.time(), 0))
            except TimeoutError:
                raise EngineTimeout(f"The remote engine did not accept a connection within {timeout:g} s.") from None
            answer = _Plain(loop.create_future())
            conn.send(answer, data)
            try:
                result = await asyncio.wait_for(answer.result, max(deadline - loop.time(), 0))
            except TimeoutError:
                conn.drop()
                raise EngineTimeout(f"The remote engine did not answer within {timeout:g} s.") from None
            if result is not None:
                return result
        raise EngineUnavailable("The connection to the remote engine was lost.")

    # --- a generate request: sent, and sent again after a stale keep-alive connection ------------
    async def _send(self, stream: Stream) -> None:
        body = stream.request.to_engine_wire()
        body.update(request_id=stream.wire, stream=True,
                    stream_options={**(body.get("stream_options") or {}), "include_usage": True})
        body["sampling_params"]["output_kind"] = 1  # DELTA: each event carries that step's new tokens
        stream.sent = self._request_bytes("POST", GENERATE_PATH, orjson.dumps(body), accept="text/event-stream")
        stream.now = asyncio.get_running_loop().time
        try:
            conn = await self._acquire()
        except EngineError as exc:
            raise self._logged(exc) from None
        stream.conn = conn
        stream.heard = stream.now()
        self._calls[stream.wire] = stream
        conn.send(stream, stream.sent)
        self._watching()

    def resend(self, stream: Stream) -> bool:
        """A reused keep-alive connection the engine had closed before it read the request: send it
        again on another connection (once more at most)."""
        if stream.tries >= 2 or stream.outbox.done:
            return False
        stream.tries += 1
        task = asyncio.get_running_loop().create_task(self._resend(stream))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return True

    async def _resend(self, stream: Stream) -> None:
        try:
            conn = await self._acquire()
        except EngineError as exc:
            stream.fail(self._logged(exc))
            return
        if stream.outbox.done:
            self.release(conn)
            return
        stream.conn = conn
        conn.send(stream, stream.sent)

    # --- SSE events: parsed in one pass per turn of the event loop -----------------------------
    def queue_event(self, stream: Stream, item: Any) -> None:
        self._pending.append((stream, item))
        if not self._flushing:
            self._flushing = True
            asyncio.get_running_loop().call_soon(self._flush)

    def _flush(self) -> None:
        """Parse every SSE event the connections brought since the last flush with one ``orjson``
        call (a JSON array of their data) and hand each to its request. When an event is not JSON,
        or the array does not split into one object per event naming its own request (an engine
        whose events are not one object each), every event is parsed on its own instead."""
        self._flushing = False
        items, self._pending = self._pending, []
        datas = [item for _, item in items if type(item) is bytes]
        objs: list[Any] | None = None
        if len(datas) > 1:
            try:
                objs = orjson.loads(b"[" + b",".join(datas) + b"]")
            except orjson.JSONDecodeError:
                objs = None
            if objs is not None and len(objs) == len(datas):
                at = 0
                for stream, item in items:
                    if type(item) is bytes:
                        obj = objs[at]
                        at += 1
                        if type(obj) is not dict or obj.get("request_id") not in stream.names:
                            objs = None
                            break
            else:
                objs = None
        at = 0
        for stream, item in items:
            if type(item) is bytes:
                if objs is not None:
                    obj = objs[at]
                    at += 1
                else:
                    try:
                        obj = orjson.loads(item)
                    except orjson.JSONDecodeError:
                        stream.fail(self.malformed("an SSE event that is not JSON"))
                        continue
                stream.event(obj)
            elif item is DONE:
                stream.finish()
            elif item is END:
                stream.finish(ended=True)
            else:  # the connection was lost: after the events it brought
                stream.fail(item[0], abort=True)

    async def _watchdog(self) -> None:
        """``--engine-timeout`` per request: one the engine sent no event for in that long (comments
        and keepalives are no progress) ends with a 504 and is aborted at the engine."""
        loop = asyncio.get_running_loop()
        tick = min(1.0, self.read_timeout / 4)
        while self._calls:
            await asyncio.sleep(tick)
            late = loop.time() - self.read_timeout
            for call in [c for c in self._calls.values() if c.heard <= late and not c.outbox.done]:
                call.fail(self._logged(EngineTimeout(f"The remote engine did not answer within "
                                                     f"{self.read_timeout:g} s.")), abort=True)
        self._watch = None

    def _watching(self) -> None:
        if self._watch is None and not self._closing:
            self._watch = asyncio.get_running_loop().create_task(self._watchdog(), name="remote engine timeouts")

    # --- errors --------------------------------------------------------------------------------
    def status_error(self, status: int, body: bytes) -> EngineError:
        if status in (401, 403):
            return self._logged(key_refused(status, key_sent=bool(self.api_key)))
        # The engine's message is for the operator (it may name internal hosts): logged, never passed on.
        log.warning("remote engine %s answered HTTP %s: %r", self.base_url, status, _error_message(body))
        if status in (400, 422):
            return InvalidGenerateRequest(f"The remote engine refused the request as invalid (HTTP {status}).",
                                          param=safe_param(_error_param(body)))
        if status == 404:
            return EngineUnavailable("The remote engine does not serve this request (HTTP 404).")
        if status in (429, 503):
            return EngineOverloaded("The remote engine is overloaded; retry later.")
        return EngineUnavailable(f"The remote engine failed (HTTP {status}).")

    def mid_stream_error(self, obj: dict[str, Any]) -> EngineError:
        """An error event from the remote mid-stream: its message to the log."""
        log.warning("remote engine %s failed mid-stream: %r", self.base_url, _error_message(orjson.dumps(obj)))
        return EngineUnavailable("The remote engine failed mid-stream.")

    def lost_error(self) -> EngineError:
        if self._closing:
            return EngineShutDown("The server is shutting down; retry the request (on another replica).")
        return self._logged(EngineUnavailable("The connection to the remote engine was lost."))

    def malformed(self, what: str) -> EngineProtocolError:
        return self._logged(protocol_error(what))

    def _logged(self, err: _E) -> _E:
        """Clients are told what failed, not where: the engine's address is internal and goes to the log."""
        log.warning("remote engine %s: %s", self.base_url, err.message)
        return err

    def abort_later(self, wire: str) -> None:
        if self._closing:
            return
        task = asyncio.get_running_loop().create_task(self._abort_quietly([wire]))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _abort_quietly(self, request_ids: list[str]) -> None:
        if self._closing:
            return
        with anyio.move_on_after(self.abort_timeout, shield=True):
            paths = [self._abort_path] if self._abort_path else list(ABORT_PATHS)
            for path in paths:
                try:
                    status, _ = await self._exchange("POST", path, {"request_ids": request_ids},
                                                     timeout=self.abort_timeout)
                except EngineError as exc:
                    log.warning("abort at %s failed: %s", self.base_url, type(exc).__name__)
                    return
                if status in (401, 403):
                    self._logged(key_refused(status, key_sent=bool(self.api_key)))
                if status != 404:
                    self._abort_path = path
                    return


class _Plain(Answer):
    """A short answer (health, aborts): its status and body, up to MAX_ERROR_BODY bytes (None:
    send it again, the connection was stale)."""

    __slots__ = ("data", "result", "status")

    def __init__(self, result: asyncio.Future[tuple[int, bytes] | None]) -> None:
        self.result = result
        self.status = 0
        self.data = bytearray()

    def head(self, conn: Conn, status: int, ctype: bytes) -> None:
        self.status = status

    def body(self, data: bytes) -> None:
        if len(self.data) < MAX_ERROR_BODY:
            self.data += data

    def end(self) -> None:
        if not self.result.done():
            self.result.set_result((self.status, bytes(self.data[:MAX_ERROR_BODY])))

    def lost(self, error: EngineError) -> None:
        if not self.result.done():
            self.result.set_exception(error)

    def retry(self) -> bool:
        if not self.result.done():
            self.result.set_result(None)
        return True


def _error_message(body: bytes) -> str:
    """The ``error.message`` of an OpenAI-style error body, shortened; "" when there is none."""
    try:
        obj = orjson.loads(body)
    except orjson.JSONDecodeError:
        return ""
    message: Any = None
    if isinstance(obj, dict):
        err = obj.get("error")
        message = err.get("message") if isinstance(err, dict) else obj.get("message") or obj.get("detail")
    if not isinstance(message, str):
        return ""
    return message[:MAX_ERROR_MESSAGE]


def _error_param(body: bytes) -> str | None:
    try:
        obj = orjson.loads(body)
    except orjson.JSONDecodeError:
        return None
    err = obj.get("error") if isinstance(obj, dict) else None
    param = err.get("param") if isinstance(err, dict) else None
    return param if isinstance(param, str) else None
