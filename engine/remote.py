"""``RemoteEngine``: the :class:`~engine.interface.Engine` interface over HTTP to any vLLM-compatible
tokens-only engine (SSE per step, ``/abort_requests`` on an early close, failures as
:mod:`engine.errors` values). No torch, no HTTP library: a pool of keep-alive HTTP/1.1 connections,
each a plain :class:`asyncio.Protocol` (request writer, response-head parser, chunked decoding, SSE
event splitting). The SSE events every connection brought in one turn of the event loop are parsed
in one ``orjson`` pass and handed to each request's :class:`~engine.outbox.Outbox`, the push path of
the engine link (engine/link.py). The requests it makes and the errors it maps: docs/engine.md,
"The HTTP engine".
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import secrets
import ssl
from collections.abc import Callable, Sequence
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
from engine.inbound import Expect, Malformed, protocol_error, safe_param
from engine.interface import Engine, EngineHealth, EngineOutput, EngineStream
from engine.outbox import Outbox, OutboxStream
from engine.protocol import GenerateRequest, UsageInfo

log = logging.getLogger("tokenwire.remote")

GENERATE_PATH = "/inference/v1/generate"
ABORT_PATHS = ("/abort_requests", "/inference/v1/abort_requests")
MAX_ERROR_MESSAGE = 500
MAX_ERROR_BODY = 65536  # what is read of an error answer (the rest is cut)
MAX_HEAD_BYTES = 65536  # a response head (status line and headers) past this is not an HTTP answer
MAX_IDLE = 64  # keep-alive connections kept open while no request needs them

_E = TypeVar("_E", bound=EngineError)
_DONE = object()  # the SSE stream's ``data: [DONE]``
_END = object()  # the response body ended

# the response states of a connection
_HEAD, _LENGTH, _CHUNK_SIZE, _CHUNK_DATA, _CHUNK_CRLF, _TRAILER, _UNTIL_CLOSE, _IDLE = range(8)


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
        self._calls: dict[str, _Stream] = {}  # engine id -> the request in flight
        self._idle: list[_Conn] = []
        self._open = 0  # connections open or opening
        self._waiters: list[asyncio.Future[None]] = []  # requests waiting for room in a full pool
        self._pending: list[tuple[_Stream, Any]] = []  # SSE events (and ends) not parsed yet
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
        call: list[_Stream] = []

        async def start() -> Outbox:
            stream = _Stream(self, request)
            call.append(stream)
            await stream.send()
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

    async def _acquire(self) -> _Conn:
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

    async def _connect(self) -> _Conn:
        loop = asyncio.get_running_loop()
        context = None
        if self._tls:
            if self._ssl is None:
                self._ssl = ssl.create_default_context()
            context = self._ssl
        try:
            _, conn = await asyncio.wait_for(
                loop.create_connection(lambda: _Conn(self), self._host, self._port, ssl=context,
                                       server_hostname=self._host if context else None),
                self.connect_timeout)
        except TimeoutError:
            raise EngineTimeout(f"The remote engine did not accept a connection within "
                                f"{self.connect_timeout:g} s.") from None
        except (OSError, ssl.SSLError):
            raise EngineUnavailable("Cannot reach the remote engine (connection failed).") from None
        return conn

    def _release(self, conn: _Conn) -> None:
        """A connection whose answer was read to its end: kept for the next request, or closed."""
        if conn.closed:
            return
        if self._closing or len(self._idle) >= MAX_IDLE:
            conn.drop()
            return
        self._idle.append(conn)
        self._wake()

    def _lost(self, conn: _Conn) -> None:
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

    # --- SSE events: parsed in one pass per turn of the event loop -----------------------------
    def _queue(self, stream: _Stream, item: Any) -> None:
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
                        stream.fail(self._garbage("an SSE event that is not JSON"))
                        continue
                stream.event(obj)
            elif item is _DONE:
                stream.finish()
            elif item is _END:
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
    def _status_error(self, status: int, body: bytes) -> EngineError:
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

    def _lost_error(self) -> EngineError:
        if self._closing:
            return EngineShutDown("The server is shutting down; retry the request (on another replica).")
        return self._logged(EngineUnavailable("The connection to the remote engine was lost."))

    def _garbage(self, what: str) -> EngineProtocolError:
        return self._logged(protocol_error(what))

    def _logged(self, err: _E) -> _E:
        """Clients are told what failed, not where: the engine's address is internal and goes to the log."""
        log.warning("remote engine %s: %s", self.base_url, err.message)
        return err

    def _abort_later(self, wire: str) -> None:
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


class _Answer:
    """What a connection hands the response of one request to."""

    __slots__ = ()

    def head(self, conn: _Conn, status: int, ctype: bytes) -> None: ...

    def body(self, data: bytes) -> None: ...

    def end(self) -> None: ...

    def lost(self, error: EngineError) -> None: ...

    def retry(self) -> bool:
        """The connection was a reused one, closed before any of the answer came: True if the
        request is sent again elsewhere."""
        return False


class _Plain(_Answer):
    """A short answer (health, aborts): its status and body, up to MAX_ERROR_BODY bytes (None:
    send it again, the connection was stale)."""

    __slots__ = ("data", "result", "status")

    def __init__(self, result: asyncio.Future[tuple[int, bytes] | None]) -> None:
        self.result = result
        self.status = 0
        self.data = bytearray()

    def head(self, conn: _Conn, status: int, ctype: bytes) -> None:
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


class _Stream(_Answer):
    """One generate request: its connection, what it may receive and what it has received."""

    __slots__ = ("buf", "completion", "conn", "ctype", "engine", "expect", "heard", "held", "limit", "mode", "n",
                 "names", "now", "outbox", "prompt_tokens", "request", "request_id", "sent", "status", "tries", "wire")

    def __init__(self, engine: RemoteEngine, request: GenerateRequest) -> None:
        self.engine = engine
        self.request = request
        self.request_id = request.request_id or secrets.token_hex(8)  # this front end's id: the outputs carry it
        self.wire = engine._ids.new()  # the engine's id for it (engine/access.py)
        self.names = ("generate-tokens-" + self.wire, self.wire)  # what its chunks may call it
        self.n = request.sampling_params.n
        self.expect = Expect(request, max_model_len=engine.max_model_len, vocab_size=engine.vocab_size)
        self.limit = self.expect.message_bytes()
        self.outbox = Outbox()
        self.conn: _Conn | None = None
        self.buf = bytearray()
        self.mode = 0  # 0: no head yet; 1: SSE; 2: a JSON answer; 3: an error answer
        self.status = 0
        self.ctype = b""
        self.held: EngineOutput | None = None  # the output that finished every choice, until the usage
        self.completion = 0
        self.prompt_tokens: int | None = None
        self.heard = 0.0
        self.now: Callable[[], float] = time_of_loop
        self.sent = b""  # the request's bytes, until its answer's head (a stale keep-alive connection: sent again)
        self.tries = 0

    async def send(self) -> None:
        engine = self.engine
        body = self.request.to_engine_wire()
        body.update(request_id=self.wire, stream=True,
                    stream_options={**(body.get("stream_options") or {}), "include_usage": True})
        body["sampling_params"]["output_kind"] = 1  # DELTA: each event carries that step's new tokens
        self.sent = engine._request_bytes("POST", GENERATE_PATH, orjson.dumps(body), accept="text/event-stream")
        self.now = asyncio.get_running_loop().time
        try:
            conn = await engine._acquire()
        except EngineError as exc:
            raise engine._logged(exc) from None
        self.conn = conn
        self.heard = self.now()
        engine._calls[self.wire] = self
        conn.send(self, self.sent)
        engine._watching()

    def retry(self) -> bool:
        """A reused keep-alive connection the engine had closed before it read the request: send it
        again on another connection (once more at most)."""
        if self.tries >= 2 or self.outbox.done:
            return False
        self.tries += 1
        task = asyncio.get_running_loop().create_task(self._resend())
        self.engine._tasks.add(task)
        task.add_done_callback(self.engine._tasks.discard)
        return True

    async def _resend(self) -> None:
        engine = self.engine
        try:
            conn = await engine._acquire()
        except EngineError as exc:
            self.fail(engine._logged(exc))
            return
        if self.outbox.done:
            engine._release(conn)
            return
        self.conn = conn
        conn.send(self, self.sent)

    # --- what the connection hands over ---------------------------------------------------------
    def head(self, conn: _Conn, status: int, ctype: bytes) -> None:
        self.status = status
        self.heard = self.now()
        self.sent = b""
        if status != 200:
            self.mode = 3
        elif b"text/event-stream" in ctype:
            self.mode = 1
        else:
            self.mode = 2

    def body(self, data: bytes) -> None:
        if self.outbox.done:
            return
        if self.mode != 1:
            self.buf += data
            self.heard = self.now()
            if self.mode == 2 and len(self.buf) > self.limit:
                self.fail(self.engine._garbage("an answer larger than the request may receive"), abort=True)
            elif self.mode == 3 and len(self.buf) > MAX_ERROR_BODY:
                del self.buf[MAX_ERROR_BODY:]
            return
        buf = self.buf
        buf += data
        if b"\r" in buf:
            buf[:] = buf.replace(b"\r\n", b"\n")
        end = buf.rfind(b"\n\n")
        if end < 0:
            if len(buf) > self.limit:
                self.fail(self.engine._garbage("an SSE event larger than the request may receive"), abort=True)
            return
        blocks = bytes(buf[:end]).split(b"\n\n")
        del buf[:end + 2]
        queue = self.engine._queue
        for block in blocks:
            if block.startswith(b"data: ") and b"\n" not in block:
                value = block[6:]
            else:
                found = _sse_data(block)
                if found is None:  # a comment or keepalive: no progress
                    continue
                value = found
            if len(value) > self.limit:
                self.fail(self.engine._garbage("an SSE event larger than the request may receive"), abort=True)
                return
            queue(self, _DONE if value == b"[DONE]" else value)
        if len(buf) > self.limit:
            self.fail(self.engine._garbage("an SSE event larger than the request may receive"), abort=True)

    def end(self) -> None:
        if self.outbox.done:
            return
        engine = self.engine
        if self.mode == 3:
            self.fail(engine._status_error(self.status, bytes(self.buf)))
        elif self.mode == 2:
            self._from_json(bytes(self.buf))
        else:
            rest = bytes(self.buf).strip()
            if rest:  # a last event without its blank line
                value = _sse_data(rest)
                if value is not None:
                    engine._queue(self, _DONE if value == b"[DONE]" else value)
            engine._queue(self, _END)

    def lost(self, error: EngineError) -> None:
        if self.mode == 1:
            self.engine._queue(self, (error,))  # after the events it brought before it went
        else:
            self.fail(error, abort=self.mode != 0)

    # --- decoding ------------------------------------------------------------------------------
    def event(self, obj: Any) -> None:
        if self.outbox.done:
            return
        engine = self.engine
        if type(obj) is not dict or ("choices" not in obj and "error" not in obj):
            self.fail(engine._garbage("an SSE event that is not a generate stream chunk"), abort=True)
            return
        if "error" in obj and "choices" not in obj:  # an error event from the remote
            log.warning("remote engine %s failed mid-stream: %r", engine.base_url,
                        _error_message(orjson.dumps(obj)))
            self.fail(EngineUnavailable("The remote engine failed mid-stream."), abort=True)
            return
        self.heard = self.now()
        try:
            choices = self.expect.choices((_modern_logprobs(obj) if self.expect.logprobs is not None
                                           else obj)["choices"])
            raw_usage = obj.get("usage")
            usage = None if raw_usage is None else self.expect.usage(raw_usage)
        except Malformed as exc:
            self.fail(engine._garbage(str(exc)), abort=True)
            return
        if usage is not None and not choices:
            self.prompt_tokens = usage.prompt_tokens
            if self.held is not None:
                self.held.usage = usage
            return
        out = EngineOutput(self.request_id, choices)
        for c in choices:
            self.completion += len(c.token_ids)
        if len(self.expect.finished) >= self.n:
            if self.held is None:
                self.held = out
                out.usage = usage
            else:
                self.held.choices += choices
            return
        self.outbox.push(out)

    def finish(self, *, ended: bool = False) -> None:
        """``[DONE]``, or the end of the body: the held output goes out as the last one."""
        if self.outbox.done:
            return
        held = self.held
        if held is None:
            if ended:
                self.fail(EngineUnavailable("The remote engine ended the stream before the request finished."),
                          abort=True)
            return
        held.finished = True
        if held.usage is None:
            held.usage = UsageInfo.of(self.prompt_tokens or 0, self.completion)
        self.outbox.push(held)

    def _from_json(self, body: bytes) -> None:
        try:
            obj = orjson.loads(body)
        except orjson.JSONDecodeError:
            obj = None
        if not isinstance(obj, dict) or not isinstance(obj.get("choices"), list):
            self.fail(self.engine._garbage("a body that is neither an SSE stream nor a generate response"))
            return
        try:
            choices = self.expect.choices(_modern_logprobs(obj)["choices"])
            usage = self.expect.usage(obj.get("usage"))
        except Malformed as exc:
            self.fail(self.engine._garbage(str(exc)))
            return
        self.outbox.push(EngineOutput(self.request_id, choices, finished=True,
                                      usage=usage or UsageInfo.of(0, sum(len(c.token_ids) for c in choices))))

    # --- ending --------------------------------------------------------------------------------
    def fail(self, error: EngineError, *, abort: bool = False) -> None:
        """End this request with ``error``; its connection (mid-answer) is closed, and with
        ``abort`` the engine is told to stop it."""
        if self.outbox.done:
            return
        self.outbox.push(error)
        self.leave()
        if abort:
            self.engine._abort_later(self.wire)

    def leave(self) -> None:
        """Stop reading this request's answer: a connection mid-answer cannot carry another one."""
        conn = self.conn
        if conn is not None and conn.answer is self:
            conn.drop()


def time_of_loop() -> float:
    return asyncio.get_running_loop().time()


def _sse_data(block: bytes) -> bytes | None:
    """The ``data`` of one server-sent event (multi-line data joined with newlines); None for an
    event without data (comments, keepalives)."""
    lines = []
    for line in block.split(b"\n"):
        if not line or line.startswith(b":"):
            continue
        name, _, value = line.partition(b":")
        if name == b"data":
            lines.append(value[1:] if value.startswith(b" ") else value)
    return b"\n".join(lines) if lines else None


class _Conn(asyncio.Protocol):
    """One keep-alive HTTP/1.1 connection to the engine; one request at a time."""

    def __init__(self, engine: RemoteEngine) -> None:
        self.engine = engine
        self.transport: asyncio.Transport | None = None
        self.answer: _Answer | None = None
        self.state = _IDLE
        self.buf = bytearray()
        self.remaining = 0
        self.keep = True
        self.closed = False
        self.served = 0  # answers read to their end on this connection

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def send(self, answer: _Answer, data: bytes) -> None:
        self.answer = answer
        self.state = _HEAD
        self.buf.clear()
        if self.closed or self.transport is None:
            answer.lost(self.engine._lost_error())
            return
        self.transport.write(data)

    def drop(self) -> None:
        """Close now (an answer left unread, a fault, the pool's end)."""
        self.answer = None
        if not self.closed and self.transport is not None:
            self.transport.abort()

    def connection_lost(self, exc: Exception | None) -> None:
        if self.closed:
            return
        self.closed = True
        self.engine._lost(self)
        answer, self.answer = self.answer, None
        if answer is None:
            return
        if self.state == _UNTIL_CLOSE:
            answer.end()
        elif self.state == _HEAD and self.served and not self.buf and answer.retry():
            return
        else:
            answer.lost(self.engine._lost_error())

    def data_received(self, data: bytes) -> None:
        answer = self.answer
        if answer is None:  # bytes nobody asked for: this connection is not reused
            self.drop()
            return
        state = self.state
        if state == _LENGTH and len(data) < self.remaining:  # the common case, no copy
            self.remaining -= len(data)
            answer.body(data)
            return
        if state == _UNTIL_CLOSE:
            answer.body(data)
            return
        self.buf += data
        try:
            self._advance(answer)
        except Malformed as exc:
            self.answer = None
            self.drop()
            answer.lost(self.engine._garbage(str(exc)))

    def _advance(self, answer: _Answer) -> None:
        buf = self.buf
        parts: list[bytes] = []
        at = 0
        try:
            while self.answer is answer:
                state = self.state
                if state == _HEAD:
                    end = buf.find(b"\r\n\r\n", at)
                    if end < 0:
                        if len(buf) - at > MAX_HEAD_BYTES:
                            raise Malformed("a response head larger than 64 KiB")
                        return
                    head = bytes(buf[at:end])
                    at = end + 4
                    self._head(answer, head)
                elif state == _LENGTH:
                    take = min(self.remaining, len(buf) - at)
                    if take:
                        parts.append(bytes(buf[at:at + take]))
                    at += take
                    self.remaining -= take
                    if self.remaining:
                        return
                    self._complete(answer, parts)
                    parts = []
                elif state == _CHUNK_SIZE:
                    end = buf.find(b"\r\n", at)
                    if end < 0:
                        if len(buf) - at > 1024:
                            raise Malformed("a chunk size line longer than 1 KiB")
                        return
                    size_text = bytes(buf[at:end]).partition(b";")[0].strip()
                    at = end + 2
                    try:
                        size = int(size_text, 16)
                    except ValueError:
                        raise Malformed("a chunked body with a chunk size that is not hexadecimal") from None
                    if size < 0:
                        raise Malformed("a chunked body with a negative chunk size")
                    if size == 0:
                        self.state = _TRAILER
                    else:
                        self.remaining = size
                        self.state = _CHUNK_DATA
                elif state == _CHUNK_DATA:
                    take = min(self.remaining, len(buf) - at)
                    if take:
                        parts.append(bytes(buf[at:at + take]))
                    at += take
                    self.remaining -= take
                    if self.remaining:
                        return
                    self.state = _CHUNK_CRLF
                elif state == _CHUNK_CRLF:
                    if len(buf) - at < 2:
                        return
                    if buf[at:at + 2] != b"\r\n":
                        raise Malformed("a chunked body whose chunk does not end with CRLF")
                    at += 2
                    self.state = _CHUNK_SIZE
                elif state == _TRAILER:
                    end = buf.find(b"\r\n", at)
                    if end < 0:
                        if len(buf) - at > MAX_HEAD_BYTES:
                            raise Malformed("a chunked body's trailer larger than 64 KiB")
                        return
                    empty = end == at
                    at = end + 2
                    if empty:
                        self._complete(answer, parts)
                        parts = []
                else:  # _UNTIL_CLOSE (after a head without length) or _IDLE
                    if at < len(buf):
                        if state == _UNTIL_CLOSE:
                            parts.append(bytes(buf[at:]))
                            at = len(buf)
                        else:
                            raise Malformed("bytes after the end of an answer")
                    return
        finally:
            if parts and self.answer is answer:
                answer.body(b"".join(parts))
            del buf[:at]

    def _head(self, answer: _Answer, head: bytes) -> None:
        lines = head.split(b"\r\n")
        version, _, rest = lines[0].partition(b" ")
        code = rest[:3]
        if not version.startswith(b"HTTP/1.") or not code.isdigit():
            raise Malformed("an answer that is not HTTP/1.1")
        status = int(code)
        if 100 <= status < 200:  # 100 Continue and the like: the real head follows
            return
        headers: dict[bytes, bytes] = {}
        for line in lines[1:]:
            name, sep, value = line.partition(b":")
            if not sep:
                raise Malformed("a response header without a colon")
            key = name.strip().lower()
            value = value.strip()
            headers[key] = headers[key] + b"," + value if key in headers else value
        self.keep = version == b"HTTP/1.1" and b"close" not in headers.get(b"connection", b"").lower()
        answer.head(self, status, headers.get(b"content-type", b"").lower())
        if b"chunked" in headers.get(b"transfer-encoding", b"").lower():
            self.state = _CHUNK_SIZE
        elif b"content-length" in headers:
            try:
                self.remaining = int(headers[b"content-length"])
            except ValueError:
                raise Malformed("an answer whose content-length is not a number") from None
            if self.remaining < 0:
                raise Malformed("an answer whose content-length is negative")
            self.state = _LENGTH
        elif status in (204, 304):
            self.remaining = 0
            self.state = _LENGTH
        else:
            self.keep = False
            self.state = _UNTIL_CLOSE

    def _complete(self, answer: _Answer, parts: list[bytes]) -> None:
        """The answer's body ended: hand the rest and the end over; the connection is free."""
        if parts:
            answer.body(b"".join(parts))
            parts.clear()
        self.state = _IDLE
        self.answer = None
        self.served += 1
        answer.end()
        if self.keep:
            self.engine._release(self)
        else:
            self.drop()


def _modern_logprobs(obj: Any) -> Any:
    """Accept older vLLM logprob entries (``"token": "token_id:N"``) as 0.32's integer ``token_id``."""
    if not isinstance(obj, dict):
        return obj
    for choice in obj.get("choices") or ():
        content = ((choice or {}).get("logprobs") or {}).get("content") if isinstance(choice, dict) else None
        for entry in content or ():
            for item in [entry, *(entry.get("top_logprobs") or [])] if isinstance(entry, dict) else ():
                if isinstance(item, dict) and "token_id" not in item and isinstance(item.get("token"), str):
                    prefix, _, num = item["token"].partition(":")
                    if prefix == "token_id" and num.isdigit():
                        item["token_id"] = int(num)
    return obj


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
