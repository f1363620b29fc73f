"""The HTTP/1.1 wire of ``RemoteEngine`` (engine/remote.py): :class:`Conn`, one keep-alive connection
as a plain :class:`asyncio.Protocol` (response-head parser, content-length, chunked and until-close
bodies), and :class:`Stream`, one generate request's answer (SSE event splitting, the decoding of each
chunk into :class:`~engine.interface.EngineOutput` values for its :class:`~engine.outbox.Outbox`).
The engine client (the pool, the requests, health, aborts, the errors it maps) is engine/remote.py;
the requests and the errors: docs/engine.md, "The HTTP engine".
"""

from __future__ import annotations

import asyncio
import secrets
import sys
from collections.abc import Callable
from typing import Any, Protocol

import orjson

from engine.errors import EngineError, EngineUnavailable
from engine.inbound import Expect, Malformed
from engine.interface import EngineOutput
from engine.outbox import Outbox
from engine.protocol import GenerateRequest, UsageInfo

MAX_ERROR_BODY = 65536  # what is read of an error answer (the rest is cut)
MAX_HEAD_BYTES = 65536  # a response head (status line and headers) past this is not an HTTP answer

DONE = object()  # the SSE stream's ``data: [DONE]``
END = object()  # the response body ended

# the response states of a connection
_HEAD, _LENGTH, _CHUNK_SIZE, _CHUNK_DATA, _CHUNK_CRLF, _TRAILER, _UNTIL_CLOSE, _IDLE = range(8)
# the states that take body bytes as they come, up to ``Conn.remaining`` (a content-length's, a chunk's
# size, or for a body that ends with the connection, more than any answer holds)
_TAKING = (_LENGTH, _CHUNK_DATA, _UNTIL_CLOSE)
_UNBOUNDED = sys.maxsize


class Client(Protocol):
    """What the wire hands to and asks of its engine client (``RemoteEngine``)."""

    max_model_len: int
    vocab_size: int | None

    def queue_event(self, stream: Stream, item: Any) -> None: ...
    def release(self, conn: Conn) -> None: ...
    def connection_closed(self, conn: Conn) -> None: ...
    def resend(self, stream: Stream) -> bool: ...
    def abort_later(self, wire: str) -> None: ...
    def status_error(self, status: int, body: bytes) -> EngineError: ...
    def mid_stream_error(self, obj: dict[str, Any]) -> EngineError: ...
    def lost_error(self) -> EngineError: ...
    def malformed(self, what: str) -> EngineError: ...


class Answer:
    """What a connection hands the response of one request to."""

    __slots__ = ()

    def head(self, conn: Conn, status: int, ctype: bytes) -> None: ...

    def body(self, data: bytes) -> None: ...

    def end(self) -> None: ...

    def lost(self, error: EngineError) -> None: ...

    def retry(self) -> bool:
        """The connection was a reused one, closed before any of the answer came: True if the
        request is sent again elsewhere."""
        return False


class Stream(Answer):
    """One generate request: its connection, what it may receive and what it has received."""

    __slots__ = ("buf", "completion", "conn", "ctype", "engine", "expect", "heard", "held", "limit", "mode", "n",
                 "names", "now", "outbox", "prompt_tokens", "request", "request_id", "sent", "status", "tries", "wire")

    def __init__(self, engine: Client, request: GenerateRequest, wire: str) -> None:
        self.engine = engine
        self.request = request
        self.request_id = request.request_id or secrets.token_hex(8)  # this front end's id: the outputs carry it
        self.wire = wire  # the engine's id for it (engine/access.py)
        self.names = ("generate-tokens-" + self.wire, self.wire)  # what its chunks may call it
        self.n = request.sampling_params.n
        self.expect = Expect(request, max_model_len=engine.max_model_len, vocab_size=engine.vocab_size)
        self.limit = self.expect.message_bytes()
        self.outbox = Outbox()
        self.conn: Conn | None = None
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

    def retry(self) -> bool:
        """A reused keep-alive connection the engine had closed before it read the request: sent
        again on another connection (once more at most)."""
        return self.engine.resend(self)

    # --- what the connection hands over ---------------------------------------------------------
    def head(self, conn: Conn, status: int, ctype: bytes) -> None:
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
                self.fail(self.engine.malformed("an answer larger than the request may receive"), abort=True)
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
                self.fail(self.engine.malformed("an SSE event larger than the request may receive"), abort=True)
            return
        blocks = bytes(buf[:end]).split(b"\n\n")
        del buf[:end + 2]
        queue = self.engine.queue_event
        for block in blocks:
            if block.startswith(b"data: ") and b"\n" not in block:
                value = block[6:]
            else:
                found = _sse_data(block)
                if found is None:  # a comment or keepalive: no progress
                    continue
                value = found
            if len(value) > self.limit:
                self.fail(self.engine.malformed("an SSE event larger than the request may receive"), abort=True)
                return
            queue(self, DONE if value == b"[DONE]" else value)
        if len(buf) > self.limit:
            self.fail(self.engine.malformed("an SSE event larger than the request may receive"), abort=True)

    def end(self) -> None:
        if self.outbox.done:
            return
        engine = self.engine
        if self.mode == 3:
            self.fail(engine.status_error(self.status, bytes(self.buf)))
        elif self.mode == 2:
            self._from_json(bytes(self.buf))
        else:
            rest = bytes(self.buf).strip()
            if rest:  # a last event without its blank line
                value = _sse_data(rest)
                if value is not None:
                    engine.queue_event(self, DONE if value == b"[DONE]" else value)
            engine.queue_event(self, END)

    def lost(self, error: EngineError) -> None:
        if self.mode == 1:
            self.engine.queue_event(self, (error,))  # after the events it brought before it went
        else:
            self.fail(error, abort=self.mode != 0)

    # --- decoding ------------------------------------------------------------------------------
    def event(self, obj: Any) -> None:
        if self.outbox.done:
            return
        engine = self.engine
        if type(obj) is not dict or ("choices" not in obj and "error" not in obj):
            self.fail(engine.malformed("an SSE event that is not a generate stream chunk"), abort=True)
            return
        if "error" in obj and "choices" not in obj:  # an error event from the remote
            self.fail(engine.mid_stream_error(obj), abort=True)
            return
        self.heard = self.now()
        try:
            choices = self.expect.choices((_modern_logprobs(obj) if self.expect.logprobs is not None
                                           else obj)["choices"])
            raw_usage = obj.get("usage")
            usage = None if raw_usage is None else self.expect.usage(raw_usage)
        except Malformed as exc:
            self.fail(engine.malformed(str(exc)), abort=True)
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
            self.fail(self.engine.malformed("a body that is neither an SSE stream nor a generate response"))
            return
        try:
            choices = self.expect.choices(_modern_logprobs(obj)["choices"])
            usage = self.expect.usage(obj.get("usage"))
        except Malformed as exc:
            self.fail(self.engine.malformed(str(exc)))
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
            self.engine.abort_later(self.wire)

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


class Conn(asyncio.Protocol):
    """One keep-alive HTTP/1.1 connection to the engine; one request at a time."""

    def __init__(self, engine: Client) -> None:
        self.engine = engine
        self.transport: asyncio.Transport | None = None
        self.answer: Answer | None = None
        self.state = _IDLE
        self.buf = bytearray()
        self.remaining = 0
        self.keep = True
        self.closed = False
        self.served = 0  # answers read to their end on this connection

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def send(self, answer: Answer, data: bytes) -> None:
        self.answer = answer
        self.state = _HEAD
        self.buf.clear()
        if self.closed or self.transport is None:
            answer.lost(self.engine.lost_error())
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
        self.engine.connection_closed(self)
        answer, self.answer = self.answer, None
        if answer is None:
            return
        if self.state == _UNTIL_CLOSE:
            answer.end()
        elif self.state == _HEAD and self.served and not self.buf and answer.retry():
            return
        else:
            answer.lost(self.engine.lost_error())

    def data_received(self, data: bytes) -> None:
        answer = self.answer
        if answer is None:  # bytes nobody asked for: this connection is not reused
            self.drop()
            return
        if len(data) < self.remaining and self.state in _TAKING:  # body bytes alone: handed over, no copy
            self.remaining -= len(data)
            answer.body(data)
            return
        self.buf += data
        try:
            self._advance(answer)
        except Malformed as exc:
            self.answer = None
            self.drop()
            answer.lost(self.engine.malformed(str(exc)))

    def _advance(self, answer: Answer) -> None:
        buf = self.buf
        parts: list[bytes] = []
        at = 0
        try:
            while self.answer is answer:
                state = self.state
                if state == _CHUNK_SIZE:
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
                elif state in _TAKING:
                    take = min(self.remaining, len(buf) - at)
                    if take:
                        parts.append(bytes(buf[at:at + take]))
                    at += take
                    self.remaining -= take
                    if self.remaining:
                        return
                    if state == _CHUNK_DATA:
                        self.state = _CHUNK_CRLF
                    else:
                        self._complete(answer, parts)
                        parts = []
                elif state == _CHUNK_CRLF:
                    if len(buf) - at < 2:
                        return
                    if buf[at:at + 2] != b"\r\n":
                        raise Malformed("a chunked body whose chunk does not end with CRLF")
                    at += 2
                    self.state = _CHUNK_SIZE
                elif state == _HEAD:
                    end = buf.find(b"\r\n\r\n", at)
                    if end < 0:
                        if len(buf) - at > MAX_HEAD_BYTES:
                            raise Malformed("a response head larger than 64 KiB")
                        return
                    head = bytes(buf[at:end])
                    at = end + 4
                    self._head(answer, head)
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
                else:  # _IDLE
                    if at < len(buf):
                        raise Malformed("bytes after the end of an answer")
                    return
        finally:
            if parts and self.answer is answer:
                answer.body(b"".join(parts))
            del buf[:at]

    def _head(self, answer: Answer, head: bytes) -> None:
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
            self.remaining = _UNBOUNDED
            self.state = _UNTIL_CLOSE

    def _complete(self, answer: Answer, parts: list[bytes]) -> None:
        """The answer's body ended: hand the rest and the end over; the connection is free."""
        if parts:
            answer.body(b"".join(parts))
            parts.clear()
        self.state = _IDLE
        self.answer = None
        self.served += 1
        answer.end()
        if self.keep:
            self.engine.release(self)
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
