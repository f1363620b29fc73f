"""``LinkEngine``: the :class:`~engine.interface.Engine` interface over tokenwire's own session
protocol, many requests on one WebSocket (``--engine-url ws://HOST:PORT``). No torch.

Every request is a ``generate`` frame on a ``/v1/session`` socket offered with the
``tokenwire.batch`` subprotocol, so the front end reads one message per engine step for all the
requests on that socket. Links, outputs, aborts and errors: docs/engine.md, "The engine link".
Every link's tasks (its reader, its watchdog, the cancels it sends) run in the engine's
:class:`~engine.task_host.TaskHost`, each link in a task group of its own that ends with it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import secrets
from collections.abc import Callable, Sequence
from typing import Any

import anyio
import orjson
from anyio.abc import TaskGroup, TaskStatus

from engine.access import EngineIds, auth_headers, key_refused
from engine.errors import (
    EngineError,
    EngineOverloaded,
    EngineShutDown,
    EngineTimeout,
    EngineUnavailable,
    InvalidGenerateRequest,
)
from engine.inbound import Expect, Malformed, protocol_error, safe_param
from engine.interface import Engine, EngineHealth, EngineOutput, EngineStream
from engine.outbox import Outbox, OutboxStream
from engine.protocol import GenerateRequest, UsageInfo
from engine.task_host import TaskHost

log = logging.getLogger("tokenwire.link")

SESSION_PATH = "/v1/session"
SUBPROTOCOLS = ("tokenwire.v1", "tokenwire.batch")
# What one link message may carry (docs/engine.md, "The engine link"): for each request in flight
# on the socket, at most what that request may still receive (engine/inbound.py,
# Expect.message_bytes: its token budget for every choice, at the bytes of a token with the logprobs
# it asked for, since the deltas a slow front end has not read merge on the engine's side into one
# per request), plus LINK_FRAME_BYTES for the frames of no request. A larger message is an engine
# error, refused before it is parsed. And never more than MAX_MESSAGE_BYTES, which the WebSocket
# layer refuses from its header, unbuffered: the front end parses and checks a message on its event
# loop (15 to 35 ms per MB), so 16 MiB is the longest one message may hold up every request of this
# process (a quarter to half a second; a 60 MB message, under the former 64 MiB bound, held it 2.1 s).
MAX_MESSAGE_BYTES = 16 * 1024 * 1024
LINK_FRAME_BYTES = 64 * 1024


class LinkEngine(Engine):
    def __init__(self, url: str, *, model_name: str, max_model_len: int, connect_timeout: float = 5.0,
                 max_links: int = 64, api_key: str | None = None, read_timeout: float | None = None,
                 vocab_size: int | None = None) -> None:
        self.url = url.rstrip("/")
        self.read_timeout = read_timeout  # --engine-timeout: a request the engine sends nothing for that long is a 504
        self.vocab_size = vocab_size  # the bound on the token ids the engine may send (engine/inbound.py)
        self.api_key = api_key  # --engine-api-key: a bearer token on every link's upgrade
        self._ids = EngineIds()  # the engine request ids (a client's own id never reaches the engine)
        self.model_name = model_name
        self.max_model_len = max_model_len
        self.connect_timeout = connect_timeout
        self.max_links = max_links
        self._links: list[_Link] = []
        self._opening: asyncio.Lock | None = None
        self._room = asyncio.Event()  # set when a request ends (a full pool may have room again)
        self._closing = False
        self._tasks = TaskHost(f"engine links {self.url}")  # every link's tasks, until close()

    # --- lifecycle -------------------------------------------------------------------------
    async def start(self) -> None:
        try:
            await self._link()
        except EngineError as exc:
            log.warning("engine link %s is not up yet: %s", self.url, exc.message)

    async def close(self) -> None:
        self._closing = True
        links, self._links = self._links, []
        for link in links:
            await link.close(EngineShutDown("The server is shutting down; retry the request (on another replica)."))
        await self._tasks.aclose()  # the links that ended by themselves too: nothing of theirs runs on

    # --- the Engine interface --------------------------------------------------------------
    def generate(self, request: GenerateRequest) -> EngineStream:
        sent: list[tuple[_Link, _Call]] = []

        async def start() -> Outbox:
            link = await self._link()
            expect = Expect(request, max_model_len=self.max_model_len, vocab_size=self.vocab_size)
            call = link.start(request, self._ids.new(), expect)
            sent.append((link, call))
            await link.send(call.frame)
            return call.outbox

        def forget() -> None:
            for link, call in sent:
                link.forget(call)
                self._room.set()

        async def abort() -> None:
            for link, call in sent:
                if not link.closed:
                    await link.cancel(call.id)

        return OutboxStream(start, forget=forget, abort=abort)

    async def abort(self, request_ids: Sequence[str]) -> None:
        wanted = set(request_ids)
        for link in list(self._links):
            for call in list(link.calls.values()):
                if call.request_id in wanted:  # the engine's generate.done (cancelled) ends the call
                    await link.cancel(call.id)

    async def health(self) -> EngineHealth:
        stats = {"url": self.url, "links": len(self._links), "in_flight": self.live_sequences()}
        try:
            await self._link()
        except EngineError as exc:
            return EngineHealth(ok=False, detail=exc.message, stats=stats)
        return EngineHealth(ok=True, stats=stats)

    def live_sequences(self) -> int:
        return sum(len(link.calls) for link in self._links)

    # --- links -------------------------------------------------------------------------------
    async def _link(self) -> _Link:
        """A link with room for one more request: an open one, or a new one."""
        while True:
            if self._closing:
                raise EngineShutDown("The server is shutting down; retry the request (on another replica).")
            self._links = [link for link in self._links if not link.closed]
            for link in self._links:
                if link.has_room:
                    return link
            if len(self._links) < self.max_links:
                if self._opening is None:
                    self._opening = asyncio.Lock()
                async with self._opening:
                    if any(link.has_room for link in self._links if not link.closed):
                        continue
                    group = await self._tasks.open()
                    link = await _Link.open(self.url, self.connect_timeout, self.api_key, self.read_timeout)
                    if self._closing:  # close() came while it opened
                        await link.close(EngineShutDown("The server is shutting down; retry the request "
                                                        "(on another replica)."))
                        continue
                    await group.start(link.run, name=f"engine link {self.url}")
                    link.on_free = self._room.set
                    self._links.append(link)
                    return link
            self._room.clear()
            await self._room.wait()


class _Call:
    """One request in flight on a link."""

    __slots__ = ("bytes", "completion", "ended", "engine_id", "expect", "frame", "heard", "held", "id", "n",
                 "outbox", "prompt_tokens", "request_id", "response_id")

    def __init__(self, call_id: str, request: GenerateRequest, engine_id: str, expect: Expect) -> None:
        self.id = call_id
        self.request_id = request.request_id or secrets.token_hex(8)  # this front end's id (outputs, abort)
        self.engine_id = engine_id  # the id the engine knows it by (engine/access.py)
        self.response_id = "generate-tokens-" + engine_id  # what its chunks name it (vLLM's response id)
        self.expect = expect  # what the engine may send it (engine/inbound.py)
        self.bytes = expect.message_bytes()  # its share of a link message's bound
        self.heard = 0.0  # when the engine last sent it something (the --engine-timeout clock)
        self.ended = False  # the engine sent its generate.done or error
        body = request.to_engine_wire()
        body["request_id"] = engine_id
        self.frame = orjson.dumps({"type": "generate", "id": call_id, "body": body}).decode()
        self.n = request.sampling_params.n
        self.prompt_tokens = len(request.token_ids)
        self.outbox = Outbox()
        self.held: EngineOutput | None = None  # the output that finished every choice, until done
        self.completion = 0

    def delta(self, chunk: Any) -> None:
        """One ``generate.delta``'s chunk, checked (:class:`Malformed` if the engine got it wrong)."""
        if not isinstance(chunk, dict):
            raise Malformed("a generate.delta chunk is not an object")
        rid = chunk.get("request_id")
        if rid is not None and rid != self.response_id and rid != self.engine_id:
            raise Malformed("a generate.delta chunk names another request")
        choices = self.expect.choices(chunk.get("choices"))
        for c in choices:
            self.completion += len(c.token_ids)
        out = EngineOutput(self.request_id, choices)
        if len(self.expect.finished) >= self.n:
            if self.held is None:
                self.held = out
            else:
                self.held.choices += choices
            return
        self.outbox.push(out)

    def done(self, frame: dict[str, Any]) -> None:
        usage = self.expect.usage(frame.get("usage"))
        out = self.held or EngineOutput(self.request_id, [])
        out.finished = True
        out.usage = usage or UsageInfo.of(self.prompt_tokens, self.completion)
        self.outbox.push(out)


class _Link:
    """One ``/v1/session`` socket and the requests it carries."""

    def __init__(self, ws: Any, url: str, max_in_flight: int, read_timeout: float | None = None) -> None:
        self.ws = ws
        self.url = url
        self.max_in_flight = max_in_flight
        self.calls: dict[str, _Call] = {}
        self.closed = False
        self.on_free: Callable[[], None] | None = None  # a call this link ended itself left room
        self._next = 0
        self._bound = LINK_FRAME_BYTES  # the largest message its requests may receive now
        self._ending: dict[str, int] = {}  # calls left before the engine ended them: their share of the bound
        self._read_timeout = read_timeout
        self._tg: TaskGroup | None = None  # the link's tasks beside its reader, while run() runs
        self._ended = asyncio.Event()  # run() ended: nothing of the link runs, its socket is closed
        self._now = asyncio.get_running_loop().time

    @classmethod
    async def open(cls, url: str, timeout: float, api_key: str | None = None,
                   read_timeout: float | None = None) -> _Link:
        from websockets.asyncio.client import connect
        from websockets.exceptions import InvalidStatus, WebSocketException

        try:
            ws = await asyncio.wait_for(connect(url + SESSION_PATH, subprotocols=list(SUBPROTOCOLS),  # type: ignore[arg-type]
                                                max_size=MAX_MESSAGE_BYTES, open_timeout=timeout,
                                                compression=None, ping_interval=20, ping_timeout=20,
                                                additional_headers=auth_headers(api_key)),
                                        timeout)
        except InvalidStatus as exc:
            status = exc.response.status_code
            if status in (401, 403):
                err = key_refused(status, key_sent=bool(api_key))
                log.warning("engine link %s: %s", url, err.message)
                raise err from None
            log.warning("engine link %s: cannot connect: the engine answered the upgrade with HTTP %s", url, status)
            raise EngineUnavailable("Cannot reach the remote engine (connection failed).") from None
        except (OSError, TimeoutError, WebSocketException) as exc:
            log.warning("engine link %s: cannot connect: %s", url, type(exc).__name__)
            raise EngineUnavailable("Cannot reach the remote engine (connection failed).") from None
        try:
            created = orjson.loads(await asyncio.wait_for(ws.recv(), timeout))
        except (OSError, TimeoutError, WebSocketException, orjson.JSONDecodeError):
            await ws.close()
            raise EngineUnavailable("The remote engine did not open a session.") from None
        if not isinstance(created, dict) or created.get("type") != "session.created":
            await ws.close()
            raise EngineUnavailable("The remote engine did not open a session.")
        if "generate" not in (created.get("frames") or ()):
            await ws.close()
            log.warning("engine link %s: the server does not enable generate frames", url)
            raise EngineUnavailable("The remote engine does not serve generate frames (start it with "
                                    "`tokenwire serve --tokens-only`).")
        limit = (created.get("limits") or {}).get("max_in_flight")
        return cls(ws, url, limit if isinstance(limit, int) and limit > 0 else 1, read_timeout)

    @property
    def has_room(self) -> bool:
        return not self.closed and len(self.calls) < self.max_in_flight

    def start(self, request: GenerateRequest, engine_id: str, expect: Expect) -> _Call:
        self._next += 1
        call = self.calls[str(self._next)] = _Call(str(self._next), request, engine_id, expect)
        call.heard = self._now()
        self._bound += call.bytes
        return call

    def forget(self, call: _Call) -> None:
        if self.calls.pop(call.id, None) is None:
            return
        if call.ended:
            self._bound -= call.bytes
            return
        # left before the engine ended it (a cancel crosses its last deltas): its share of the bound
        # stays until the engine's generate.done or error for it, or until many more were left
        self._ending[call.id] = call.bytes
        if len(self._ending) > 4 * self.max_in_flight:
            self._bound -= self._ending.pop(next(iter(self._ending)))

    def _fail(self, call: _Call, error: EngineError) -> None:
        """End ``call`` here (an engine fault): its error to its reader, a cancel to the engine, its
        slot to the next request."""
        call.outbox.push(error)
        self.forget(call)
        if self.on_free is not None:
            self.on_free()
        if not self.closed and self._tg is not None:
            self._tg.start_soon(self._send_cancel, call.id, None, name=f"engine link cancel {self.url}")

    async def run(self, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        """The link's life (a task of the engine's task group): its reader, here, until the socket
        ends or :meth:`close`; beside it, in the link's own task group, the watchdog and the cancels
        being sent, which end with it. At the end its requests have their error and the socket is
        closed."""
        error: EngineError = EngineUnavailable("The connection to the remote engine was lost.")
        try:
            async with anyio.create_task_group() as tg:
                self._tg = tg
                task_status.started()
                if self._read_timeout:
                    tg.start_soon(self._watchdog, self._read_timeout, name=f"engine link timeout {self.url}")
                error = await self._read()
                self._end(error)  # at once: no request is placed on a link that is not read
                tg.cancel_scope.cancel()
        except Exception:  # a bug of ours beside the reader (the watchdog): a 502 for its requests, not a hang
            log.exception("engine link %s: failed", self.url)
        finally:
            self._tg = None
            self._end(error)
            with anyio.CancelScope(shield=True), contextlib.suppress(Exception):
                await self.ws.close()  # a link not read further is not kept open (closed: a no-op)
            self._ended.set()

    def _end(self, error: EngineError) -> None:
        if not self.closed:
            self.closed = True
            self._fail_all(error)

    async def _watchdog(self, timeout: float) -> None:
        """``--engine-timeout`` per request: one the engine sent nothing for in that long (its pings,
        other requests' outputs, do not count) ends with a 504 and is cancelled at the engine."""
        tick = min(1.0, timeout / 4)
        while not self.closed:
            await asyncio.sleep(tick)
            late = self._now() - timeout
            for call in [c for c in self.calls.values() if c.heard <= late and not c.ended]:
                log.warning("engine link %s: request %s: the engine sent nothing for %g s", self.url,
                            call.engine_id, timeout)
                self._fail(call, EngineTimeout(f"The remote engine did not answer within {timeout:g} s."))

    async def send(self, text: str) -> None:
        from websockets.exceptions import WebSocketException

        try:
            await self.ws.send(text)
        except (OSError, WebSocketException):
            await self.close(EngineUnavailable("The connection to the remote engine was lost."))
            raise EngineUnavailable("The connection to the remote engine was lost.") from None

    async def cancel(self, call_id: str) -> None:
        """Tell the engine to stop ``call_id``. The frame is sent from the link's task group, so
        a caller cancelled meanwhile (its client gone) still stops the engine's work."""
        if self.closed or self._tg is None:
            return  # nothing reaches an engine over a closed link
        sent = anyio.Event()
        self._tg.start_soon(self._send_cancel, call_id, sent, name=f"engine link cancel {self.url}")
        await sent.wait()

    async def _send_cancel(self, call_id: str, sent: anyio.Event | None) -> None:
        try:
            with contextlib.suppress(EngineError):
                await self.send(orjson.dumps({"type": "cancel", "id": call_id}).decode())
        finally:
            if sent is not None:
                sent.set()

    async def close(self, error: EngineError) -> None:
        """End the link: ``error`` to its requests, its tasks cancelled; returns once they ended
        and the socket is closed."""
        if self.closed:
            return
        self._end(error)
        if self._tg is None:  # never run
            with contextlib.suppress(Exception):
                await self.ws.close()
            return
        self._tg.cancel_scope.cancel()
        await self._ended.wait()

    def _fail_all(self, error: EngineError) -> None:
        for call in list(self.calls.values()):  # a push may end its call, which leaves self.calls
            call.outbox.push(error)

    async def _read(self) -> EngineError:
        """Read the link until it ends; the error its requests end with."""
        from websockets.exceptions import ConnectionClosed, ConnectionClosedOK, WebSocketException

        recv = self.ws.recv
        error: EngineError = EngineUnavailable("The connection to the remote engine was lost.")
        try:
            while True:
                # bytes, not str: orjson parses UTF-8 bytes about twice as fast, and no str is built
                data = await recv(decode=False)
                if len(data) > self._bound:
                    log.warning("engine link %s: a message of %d bytes, more than the %d its requests may "
                                "receive", self.url, len(data), self._bound)
                    raise Malformed("a message larger than the requests on its link may receive")
                frame = orjson.loads(data)
                if type(frame) is not dict:
                    raise Malformed("a message that is not a JSON object")
                if frame.get("type") == "batch":
                    frames = frame.get("frames")
                    if type(frames) is not list:
                        raise Malformed("a batch whose frames are not a list")
                    for inner in frames:
                        self._dispatch(inner)
                else:
                    self._dispatch(frame)
        except ConnectionClosedOK:
            pass  # the engine closed the socket cleanly (a drain, a shutdown)
        except ConnectionClosed as exc:
            if exc.sent is not None and exc.sent.code == 1009:  # refused from its header: MAX_MESSAGE_BYTES
                log.warning("engine link %s: the engine sent a message of more than %d bytes", self.url,
                            MAX_MESSAGE_BYTES)
                error = protocol_error("a message larger than the requests on its link may receive")
            else:  # a replica that dies or drains ends its links: one line, no traceback
                log.warning("engine link %s ended: %s", self.url, type(exc).__name__)
        except (OSError, WebSocketException) as exc:
            log.warning("engine link %s ended: %s", self.url, type(exc).__name__)
        except (orjson.JSONDecodeError, Malformed) as exc:
            # a link the engine broke the protocol on is not read further: every request on it fails
            what = "a message that is not JSON" if isinstance(exc, orjson.JSONDecodeError) else str(exc)
            log.warning("engine link %s: the engine broke the link's protocol (%s); closing it", self.url, what)
            error = protocol_error(what)
        except Exception:  # a bug of ours on this path: its requests end with a 502, not a hang
            log.exception("engine link %s: reading failed", self.url)
        return error

    def _dispatch(self, frame: Any) -> None:
        if type(frame) is not dict:
            raise Malformed("a frame that is not a JSON object")
        kind = frame.get("type")
        call_id = frame.get("id")
        call = self.calls.get(call_id) if type(call_id) is str else None
        if call is None:  # a late frame of a request that was left (its cancel crossed it)
            if kind == "generate.done" or kind == "error":
                left = self._ending.pop(call_id, None) if type(call_id) is str else None
                if left is not None:
                    self._bound -= left
            return
        call.heard = self._now()
        try:
            if kind == "generate.delta":
                call.delta(frame.get("chunk"))
            elif kind == "generate.done":
                call.ended = True
                call.done(frame)
            elif kind == "error":
                call.ended = True
                call.outbox.push(_engine_error(frame.get("error"), self.url, call.engine_id))
        except Malformed as exc:
            log.warning("engine link %s: request %s: the engine sent an invalid %s frame: %s", self.url,
                        call.engine_id, kind, exc)
            self._fail(call, protocol_error(str(exc)))


def _engine_error(info: Any, url: str, engine_id: str) -> EngineError:
    """An engine's ``error`` frame as the client's error: its status and a message of our own. The
    engine's message is for the operator (it may name internal hosts): logged, never passed on."""
    info = info if isinstance(info, dict) else {}
    status, code = info.get("status"), info.get("code")
    log.warning("engine link %s: request %s: the engine answered an error: status %r, code %r, message %r", url,
                engine_id, status, code, str(info.get("message"))[:500])
    if code == "shutting_down":
        return EngineShutDown("The remote engine is shutting down; retry the request.")
    if status in (400, 422):
        return InvalidGenerateRequest(f"The remote engine refused the request as invalid (HTTP {status}).",
                                      param=safe_param(info.get("param")))
    if status in (429, 503):
        return EngineOverloaded("The remote engine is overloaded; retry later.")
    return EngineUnavailable("The remote engine failed the request.")
