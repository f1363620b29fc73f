"""``LinkEngine``: the :class:`~engine.interface.Engine` interface over tokenwire's own session
protocol, many requests on one WebSocket (``--engine-url ws://HOST:PORT``). No torch.

Every request is a ``generate`` frame on a ``/v1/session`` socket offered with the
``tokenwire.batch`` subprotocol, so the front end reads one message per engine step for all the
requests on that socket. Links, outputs, aborts and errors: docs/engine.md, "The engine link".
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import secrets
from collections.abc import Sequence
from typing import Any

import orjson
from pydantic import TypeAdapter, ValidationError

from engine.access import EngineIds, auth_headers, key_refused
from engine.errors import (
    EngineError,
    EngineOverloaded,
    EngineShutDown,
    EngineUnavailable,
    InvalidGenerateRequest,
)
from engine.interface import ChoiceDelta, Engine, EngineHealth, EngineOutput, EngineStream
from engine.outbox import Outbox, OutboxStream
from engine.protocol import GenerateRequest, TokenLogprob, UsageInfo

log = logging.getLogger("tokenwire.link")

SESSION_PATH = "/v1/session"
SUBPROTOCOLS = ("tokenwire.v1", "tokenwire.batch")
MAX_MESSAGE_BYTES = 64 * 1024 * 1024

_LOGPROBS = TypeAdapter(list[TokenLogprob])


class LinkEngine(Engine):
    def __init__(self, url: str, *, model_name: str, max_model_len: int, connect_timeout: float = 5.0,
                 max_links: int = 64, api_key: str | None = None) -> None:
        self.url = url.rstrip("/")
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

    # --- the Engine interface --------------------------------------------------------------
    def generate(self, request: GenerateRequest) -> EngineStream:
        sent: list[tuple[_Link, _Call]] = []

        async def start() -> Outbox:
            link = await self._link()
            call = link.start(request, self._ids.new())
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
                    link = await _Link.open(self.url, self.connect_timeout, self.api_key)
                    self._links.append(link)
                    return link
            self._room.clear()
            await self._room.wait()


class _Call:
    """One request in flight on a link."""

    __slots__ = ("completion", "done_choices", "engine_id", "frame", "held", "id", "n", "outbox",
                 "prompt_tokens", "request_id")

    def __init__(self, call_id: str, request: GenerateRequest, engine_id: str) -> None:
        self.id = call_id
        self.request_id = request.request_id or secrets.token_hex(8)  # this front end's id (outputs, abort)
        self.engine_id = engine_id  # the id the engine knows it by (engine/access.py)
        body = request.to_wire()
        body["request_id"] = engine_id
        self.frame = orjson.dumps({"type": "generate", "id": call_id, "body": body}).decode()
        self.n = request.sampling_params.n
        self.prompt_tokens = len(request.token_ids)
        self.outbox = Outbox()
        self.done_choices: set[int] = set()
        self.held: EngineOutput | None = None  # the output that finished every choice, until done
        self.completion = 0

    def delta(self, chunk: dict[str, Any]) -> None:
        choices = []
        for c in chunk.get("choices") or ():
            ids = c.get("token_ids") or []
            lp = c.get("logprobs")
            logprobs = _LOGPROBS.validate_python(lp.get("content") or []) if lp else None
            reason = c.get("finish_reason")
            choices.append(ChoiceDelta(c.get("index", 0), ids, logprobs, reason, c.get("stop_reason")))
            self.completion += len(ids)
            if reason is not None:
                self.done_choices.add(c.get("index", 0))
        out = EngineOutput(self.request_id, choices)
        if len(self.done_choices) >= self.n:
            if self.held is None:
                self.held = out
            else:
                self.held.choices += choices
            return
        self.outbox.push(out)

    def done(self, frame: dict[str, Any]) -> None:
        usage = frame.get("usage")
        out = self.held or EngineOutput(self.request_id, [])
        out.finished = True
        out.usage = UsageInfo.model_validate(usage) if usage else UsageInfo.of(self.prompt_tokens, self.completion)
        self.outbox.push(out)


class _Link:
    """One ``/v1/session`` socket and the requests it carries."""

    def __init__(self, ws: Any, url: str, max_in_flight: int) -> None:
        self.ws = ws
        self.url = url
        self.max_in_flight = max_in_flight
        self.calls: dict[str, _Call] = {}
        self.closed = False
        self._next = 0
        self._reader = asyncio.get_running_loop().create_task(self._read(), name=f"engine link {url}")

    @classmethod
    async def open(cls, url: str, timeout: float, api_key: str | None = None) -> _Link:
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
        return cls(ws, url, limit if isinstance(limit, int) and limit > 0 else 1)

    @property
    def has_room(self) -> bool:
        return not self.closed and len(self.calls) < self.max_in_flight

    def start(self, request: GenerateRequest, engine_id: str) -> _Call:
        self._next += 1
        call = self.calls[str(self._next)] = _Call(str(self._next), request, engine_id)
        return call

    def forget(self, call: _Call) -> None:
        self.calls.pop(call.id, None)

    async def send(self, text: str) -> None:
        from websockets.exceptions import WebSocketException

        try:
            await self.ws.send(text)
        except (OSError, WebSocketException):
            await self.close(EngineUnavailable("The connection to the remote engine was lost."))
            raise EngineUnavailable("The connection to the remote engine was lost.") from None

    async def cancel(self, call_id: str) -> None:
        with contextlib.suppress(EngineError):
            await asyncio.shield(self.send(orjson.dumps({"type": "cancel", "id": call_id}).decode()))

    async def close(self, error: EngineError) -> None:
        if not self.closed:
            self.closed = True
            self._reader.cancel()
            self._fail_all(error)
            with contextlib.suppress(Exception):
                await self.ws.close()

    def _fail_all(self, error: EngineError) -> None:
        for call in list(self.calls.values()):  # a push may end its call, which leaves self.calls
            call.outbox.push(error)

    async def _read(self) -> None:
        from websockets.exceptions import ConnectionClosedOK, WebSocketException

        recv = self.ws.recv
        try:
            while True:
                # bytes, not str: orjson parses UTF-8 bytes about twice as fast, and no str is built
                frame = orjson.loads(await recv(decode=False))
                if frame.get("type") == "batch":
                    for inner in frame.get("frames") or ():
                        self._dispatch(inner)
                else:
                    self._dispatch(frame)
        except ConnectionClosedOK:
            pass  # the engine closed the socket cleanly (a drain, a shutdown)
        except (OSError, WebSocketException, orjson.JSONDecodeError, ValidationError, AttributeError,
                TypeError, KeyError) as exc:
            # a replica that dies or drains ends its links: one line, no traceback
            log.warning("engine link %s ended: %s", self.url, type(exc).__name__)
        self.closed = True
        self._fail_all(EngineUnavailable("The connection to the remote engine was lost."))

    def _dispatch(self, frame: dict[str, Any]) -> None:
        call = self.calls.get(frame.get("id"))  # type: ignore[arg-type]
        if call is None:
            return  # a late frame of a request that was left (its cancel crossed it)
        kind = frame["type"]
        if kind == "generate.delta":
            call.delta(frame["chunk"])
        elif kind == "generate.done":
            call.done(frame)
        elif kind == "error":
            call.outbox.push(_engine_error(frame.get("error") or {}))


def _engine_error(info: dict[str, Any]) -> EngineError:
    status, code, message = info.get("status"), info.get("code"), str(info.get("message") or "")[:500]
    if code == "shutting_down":
        return EngineShutDown(message or "The engine is shutting down; retry the request.")
    if status in (400, 422):
        return InvalidGenerateRequest(message or "The remote engine rejected the request.", param=info.get("param"))
    if status in (429, 503):
        return EngineOverloaded(message or "The remote engine is overloaded; retry later.")
    log.warning("engine link: the engine failed a request: %s %s", code, message)
    return EngineUnavailable(f"The remote engine failed{': ' + message if message else ''}.")
