"""The Responses API's WebSocket mode: ``GET /v1/responses`` upgraded, as OpenAI documents it.

The upgrade is checked as ``/v1/session``'s (``server/ws/upgrade.py``); the client sends
``response.create`` (the ``POST /v1/responses`` body) and ``response.steer`` events, and each create
is answered with the very events its SSE stream carries (one generator:
:meth:`server.responses.ResponsesService.open_stream`), one JSON text message each. Lanes
(``stream_id``), the per-connection chain of ``store: false`` responses, ``generate: false``, the
lifetime and the idle timeout: docs/responses.md, "WebSocket mode".
"""

from __future__ import annotations

import contextlib
import logging
import math
from collections import OrderedDict
from typing import Any

import anyio
import anyio.abc
import anyio.to_thread
import orjson
from starlette.websockets import WebSocket, WebSocketDisconnect

from server import metrics
from server.errors import ApiError, openai_error_body, to_api_error
from server.limits import Limiter, admitted, key_of
from server.render_work import json_size
from server.responses import ResponsesService, responses_of
from server.responses_store import ResponseStore
from server.services import ctx_of, services_of
from server.shutdown import Drain
from server.ws.connection import THREAD_DECODE_CHARS
from server.ws.endpoint import decide_upgrade, refuse
from server.ws.transport import FrameWriter, frame_writer
from server.ws.upgrade import Refused
from session.responses.events import ResponseEvents, usage_of

log = logging.getLogger("tokenwire.ws")

RESPONSES_PATH = "/v1/responses"
EVENT_TYPES = ("response.create", "response.steer")
WS_ONLY = ("type", "generate", "stream_id", "stream")  # envelope fields, not the HTTP body's
LIMIT_REACHED = "websocket_connection_limit_reached"
LIMIT_MESSAGE = ("Responses websocket connection limit reached ({minutes:g} minutes). Create a new websocket "
                 "connection to continue.")
CLOSE_GOING_AWAY = 1001
CLOSE_INTERNAL = 1011
SEND_STALL_S = 60.0  # a client that takes no event for this long is treated as gone
LIFETIME_GRACE_S = 30.0  # how long responses in flight at the lifetime may still run
MAX_CACHED = 64  # lanes whose latest response the connection keeps
STEER_UNSUPPORTED = ("tokenwire does not steer a running response: its engine cannot add input to a generation "
                     "in progress. Wait for the response's response.completed, then send the input in a "
                     "response.create with previous_response_id set to it.")
_GONE = (WebSocketDisconnect, OSError, RuntimeError)


class _Disconnected(Exception):
    """The client went away while an event was being written."""


class ConnectionStore:
    """The store a connection's responses read through: the connection's own latest responses
    first (``store: false`` chains), then the shared store; writes go to the shared store."""

    def __init__(self, shared: ResponseStore) -> None:
        self.shared = shared
        self.latest: OrderedDict[str | None, tuple[str, dict[str, Any]]] = OrderedDict()  # lane -> (id, record)

    def remember(self, lane: str | None, response_id: str, record: dict[str, Any]) -> None:
        self.latest.pop(lane, None)
        self.latest[lane] = (response_id, record)
        while len(self.latest) > MAX_CACHED:
            self.latest.popitem(last=False)

    def cached(self, response_id: str) -> dict[str, Any] | None:
        for rid, record in self.latest.values():
            if rid == response_id:
                return record
        return None

    async def get(self, response_id: str) -> dict[str, Any] | None:
        record = self.cached(response_id)
        return record if record is not None else await self.shared.get(response_id)

    async def put(self, response_id: str, record: dict[str, Any]) -> None:
        await self.shared.put(response_id, record)

    async def delete(self, response_id: str) -> bool:
        return await self.shared.delete(response_id)

    def limits(self) -> dict[str, Any]:
        limits = getattr(self.shared, "limits", None)
        return limits() if callable(limits) else {}


def error_event(exc: BaseException, stream_id: str | None = None) -> dict[str, Any]:
    """OpenAI's ``error`` event for an exception (translated once by ``server.errors``)."""
    err = to_api_error(exc)
    body = openai_error_body(err)["error"]
    if not isinstance(body.get("code"), str):
        body["code"] = None
    event: dict[str, Any] = {"type": "error", "status": err.status, "error": body}
    if stream_id is not None:
        event["stream_id"] = stream_id
    return event


def invalid(message: str, param: str | None, code: str | None = None, status: int = 400) -> ApiError:
    return ApiError(status, message, param=param, error_type="invalid_request_error", code=code)


async def responses_endpoint(websocket: WebSocket) -> None:
    ctx = ctx_of(websocket)
    decision = decide_upgrade(websocket, ctx)
    if isinstance(decision, Refused):
        await refuse(websocket, decision.status, decision.message)
        return
    services = services_of(websocket)
    try:
        shared = responses_of(websocket)
    except ApiError as exc:  # a store it cannot reach: refused, as the HTTP routes answer it
        await refuse(websocket, exc.status, exc.message)
        return
    await websocket.accept()
    settings = ctx.settings
    key = key_of(decision.api_key if settings.api_keys else None, websocket.scope.get("client"))
    metrics.session_opened()
    try:
        await ResponsesConnection(websocket, shared, drain=services.drain, limits=(services.limiter, key),
                                  max_in_flight=settings.ws_max_in_flight,
                                  lifetime=settings.responses_ws_max_lifetime,
                                  idle_timeout=settings.ws_idle_timeout,
                                  direct=frame_writer(websocket.scope)).run()
    finally:
        metrics.session_closed()


class ResponsesConnection:
    def __init__(self, websocket: WebSocket, shared: ResponsesService, *, drain: Drain | None = None,
                 limits: tuple[Limiter, str] | None = None, max_in_flight: int = 64,
                 lifetime: float = 3600.0, idle_timeout: float = 300.0,
                 direct: FrameWriter | None = None) -> None:
        self.websocket = websocket
        self.store = ConnectionStore(shared.store)
        # The service over this connection's store: the same pipeline, codec and events as HTTP;
        # the responses it runs are listed with the process's, so POST /v1/responses/{id}/cancel
        # (and DELETE) reach a stored one streaming here.
        self.service = shared.over_store(self.store)
        self.drain = drain or Drain()
        self.limits = limits or (Limiter(), "")
        self.max_in_flight = max_in_flight
        self.lifetime = lifetime
        self.idle_timeout = idle_timeout
        self.direct = direct
        self._lanes: dict[str | None, anyio.CancelScope] = {}  # lanes with a response in flight
        self._targets: dict[str, str | None] = {}  # response id in flight -> its lane
        self._seq = 0  # sequence numbers of the connection's own events (steer answers)
        self._expired = False
        self._send_lock = anyio.Lock()
        self._idle = anyio.Event()  # set whenever the last response in flight ends
        self._activity = anyio.Event()
        self._tg: anyio.abc.TaskGroup | None = None

    async def run(self) -> None:
        try:
            async with anyio.create_task_group() as tg:
                self._tg = tg
                tg.start_soon(self._timer)
                await self._reader()
                tg.cancel_scope.cancel()  # the peer is gone (or the connection closed): stop everything
        except Exception as exc:  # a bug on this side: a close with a reason, never a traceback to the client
            log.error("Responses WebSocket failed; closing with 1011", exc_info=exc)
            with anyio.move_on_after(2), anyio.CancelScope(shield=True), contextlib.suppress(*_GONE):
                await self.websocket.close(CLOSE_INTERNAL, "internal error")

    # -- reading ---------------------------------------------------------------------------------
    async def _reader(self) -> None:
        while True:
            try:
                message = await self.websocket.receive()
            except _GONE:
                return
            if message["type"] == "websocket.disconnect":
                return
            self._activity.set()
            text = message.get("text")
            try:
                if text is None:
                    raise invalid("Send each event as a JSON text message; binary messages are not read.", None,
                                  "invalid_message")
                event = await self._decode(text)
                await self._dispatch(event)
            except _Disconnected:
                return
            except Exception as exc:  # a refused event (shutting down included): an error event, the socket lives on
                if not await self._send_safe(error_event(exc)):
                    return

    async def _decode(self, text: str) -> dict[str, Any]:
        try:
            if len(text) > THREAD_DECODE_CHARS:  # a long input: decode off the event loop
                event = await anyio.to_thread.run_sync(orjson.loads, text)
            else:
                event = orjson.loads(text)
        except orjson.JSONDecodeError as exc:
            raise invalid(f"The message is not JSON: {exc}.", None, "invalid_json") from None
        if not isinstance(event, dict):
            raise invalid("An event is a JSON object with a `type`.", "type", "invalid_event")
        return event

    async def _dispatch(self, event: dict[str, Any]) -> None:
        kind = event.get("type")
        if kind == "response.create":
            self._create(event)
        elif kind == "response.steer":
            await self._steer(event)
        elif not isinstance(kind, str):
            raise invalid("An event needs a string `type`: response.create or response.steer.", "type",
                          "unknown_event_type")
        else:
            raise invalid(f"Unknown event type {kind[:100]!r}; this WebSocket takes "
                          f"{' and '.join(EVENT_TYPES)}.", "type", "unknown_event_type")

    def _create(self, event: dict[str, Any]) -> None:
        lane = event.get("stream_id")
        if lane is not None and (not isinstance(lane, str) or not lane or len(lane) > 256):
            raise invalid("stream_id must be a non-empty string of at most 256 characters.", "stream_id")
        if self._expired:
            raise invalid(self._limit_message(), None, LIMIT_REACHED)
        if self.drain.draining:
            raise self.drain.error()
        if event.get("background"):
            raise invalid("background is not supported over WebSocket: responses stream on the socket; send "
                          "response.create without `background`.", "background")
        if "generate" in event and not isinstance(event["generate"], bool):
            raise invalid("generate must be a boolean.", "generate")
        if lane in self._lanes:
            where = "this connection" if lane is None else f"stream_id {lane[:100]!r}"
            raise invalid(f"A response is already in flight on {where}: send the next response.create after its "
                          "response.completed (or response.failed / response.incomplete / error), or on "
                          "another stream_id.", "stream_id" if lane is not None else "type",
                          "response_already_in_flight")
        if len(self._lanes) >= self.max_in_flight:
            raise invalid(f"{self.max_in_flight} responses are in flight on this connection, the most it runs "
                          "at once (--ws-max-in-flight).", "stream_id", "too_many_requests", status=429)
        body = {k: v for k, v in event.items() if k not in WS_ONLY}
        scope = self._lanes[lane] = anyio.CancelScope()
        self._idle = anyio.Event()
        assert self._tg is not None
        metrics.ws_request("response")
        self._tg.start_soon(self._respond, lane, body, event.get("generate") is not False, scope)

    async def _steer(self, event: dict[str, Any]) -> None:
        target = event.get("previous_response_id")
        given = event.get("input")
        steer: dict[str, Any] = {"input": given if isinstance(given, str | list) else "",
                                 "previous_response_id": target if isinstance(target, str) else ""}
        if not isinstance(target, str) or not target:
            code, message = "invalid_input", "previous_response_id must name the response to steer."
        elif not isinstance(given, str | list) or not given:
            code, message = "invalid_input", "input must be a string or a non-empty list of user messages."
        elif target not in self._targets and self.store.cached(target) is None:
            code, message = "response_not_found", f"No response with id {target[:200]!r} on this connection."
        else:
            code, message = "steering_not_supported", STEER_UNSUPPORTED
        answer: dict[str, Any] = {"type": "response.steer.failed", "sequence_number": self._next_seq(),
                                  "error": {"code": code, "message": message, "type": "invalid_request_error"},
                                  "steer": steer}
        lane = self._targets.get(steer["previous_response_id"])
        if lane is not None:
            answer["stream_id"] = lane
        await self._send(answer)

    # -- one response ----------------------------------------------------------------------------
    async def _respond(self, lane: str | None, body: dict[str, Any], generate: bool,
                       scope: anyio.CancelScope) -> None:
        try:
            with scope, self.drain.track():
                try:
                    with admitted(*self.limits, 1):
                        if generate:
                            await self._stream(lane, body)
                        else:
                            await self._warm_up(lane, body)
                except _Disconnected:
                    raise
                except Exception as exc:
                    await self._send(error_event(exc, lane))
        except _Disconnected:
            pass
        finally:
            if self._lanes.get(lane) is scope:
                del self._lanes[lane]
            if not self._lanes:
                self._idle.set()
            self._activity.set()

    async def _stream(self, lane: str | None, body: dict[str, Any]) -> None:
        stream = await self.service.open_stream(body)
        self._targets[stream.id] = lane
        events = stream.events()
        try:
            async for ev in events:
                await self._send(ev if lane is None else {**ev, "stream_id": lane})
        finally:
            self._targets.pop(stream.id, None)
            await events.aclose()  # type: ignore[attr-defined]
        final = stream.events_out.final
        if final is not None and final["status"] in ("completed", "incomplete"):
            self.store.remember(lane, stream.id, self.service.record(stream.prep, final))

    async def _warm_up(self, lane: str | None, body: dict[str, Any]) -> None:
        """``generate: false``: the input validated and rendered, a response with no output."""
        svc = self.service
        prep = await svc.prepare(body, stream=True)
        # rendered as for generation (the context-length check included), then not generated
        rendered = await svc.render_prepared(prep, json_size(body))
        rs = ResponseEvents(prep.shape, response_id=prep.id, created_at=prep.created, names=prep.chat.names)
        events = [*rs.start(), *rs.finish(usage_of(len(rendered.token_ids), 0, 0))]
        assert rs.final is not None
        record = svc.record(prep, rs.final)
        if prep.req.store is not False:
            await svc.store.put(prep.id, record)
        self.store.remember(lane, prep.id, record)
        for ev in events:
            await self._send(ev if lane is None else {**ev, "stream_id": lane})

    # -- writing ---------------------------------------------------------------------------------
    async def _send(self, event: dict[str, Any]) -> None:
        """Write one event. The wait is shielded: a response's cancel (``POST .../cancel``, from
        another task) must not interrupt a half-sent message; it lands at the stream's next wait for
        the engine instead. A client that reads nothing for :data:`SEND_STALL_S` counts as gone."""
        if event.get("type") == "error":
            metrics.error(str(event["error"].get("code") or event["status"]), "ws")
        data = orjson.dumps(event)
        direct = self.direct
        if direct is not None and direct.ready:  # the common case: straight to the transport
            direct.write_one(data)
            return
        with anyio.move_on_after(SEND_STALL_S, shield=True) as stalled:
            if direct is not None:
                if not direct.closed:
                    await direct.drained()
                if direct.closed:
                    raise _Disconnected
                direct.write_one(data)
                return
            try:
                async with self._send_lock:
                    await self.websocket.send_text(data.decode())
            except _GONE:
                raise _Disconnected from None
        if stalled.cancelled_caught:
            raise _Disconnected

    async def _send_safe(self, event: dict[str, Any]) -> bool:
        try:
            await self._send(event)
        except _Disconnected:
            return False
        return True

    def _next_seq(self) -> int:
        seq = self._seq
        self._seq += 1
        return seq

    def _limit_message(self) -> str:
        return LIMIT_MESSAGE.format(minutes=self.lifetime / 60)

    # -- lifetime and idleness -------------------------------------------------------------------
    async def _timer(self) -> None:
        deadline = anyio.current_time() + self.lifetime
        idle = self.idle_timeout if self.idle_timeout > 0 else math.inf
        while True:
            now = anyio.current_time()
            if now >= deadline:
                break
            self._activity = anyio.Event()
            with anyio.move_on_after(min(deadline - now, idle)) as waited:
                await self._activity.wait()
            if waited.cancelled_caught and not self._lanes and anyio.current_time() < deadline:
                await self._close(CLOSE_GOING_AWAY, "idle timeout")
                return
        self._expired = True
        if self._lanes:
            with anyio.move_on_after(LIFETIME_GRACE_S):
                await self._idle.wait()
            for scope in list(self._lanes.values()):
                scope.cancel()
        await self._send_safe(error_event(invalid(self._limit_message(), None, LIMIT_REACHED)))
        await self._close(CLOSE_GOING_AWAY, LIMIT_REACHED)

    async def _close(self, code: int, reason: str) -> None:
        with anyio.move_on_after(2):
            with contextlib.suppress(*_GONE):
                await self.websocket.close(code, reason)
        assert self._tg is not None
        self._tg.cancel_scope.cancel()
