"""The WebSocket transport: one session (docs/protocol.md) carrying many requests, kept alive and
reopened when it drops. Connect, the reader task and its ``seq`` check, request ids and
``max_in_flight``, keep-alive and reconnection, and the task group they run in: docs/client.md,
"The WebSocket transport".
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import random
from typing import Any, Literal

import anyio
import orjson
from pydantic import ValidationError
from websockets.asyncio.client import ClientConnection
from websockets.asyncio.client import connect as ws_connect
from websockets.exceptions import ConnectionClosed, InvalidStatus
from websockets.typing import Subprotocol

from client_sdk import errors
from client_sdk.options import Options, ws_url
from client_sdk.transport import (
    FINAL_TYPES,
    KNOWN_TYPES,
    Channel,
    Handle,
    Interrupted,
    call_in_loop,
)
from client_sdk.types import SessionInfo
from engine.task_host import TaskHost
from session.client_frames import (
    Cancel,
    ClientFrame,
    Ping,
    RequestFrame,
    SessionUpdate,
    encode_client_frame,
    subprotocol,
)
from session.server_frames import SERVER_FRAMES, AnyServerFrame, ErrorFrame, SessionCreated, SessionUpdated

log = logging.getLogger("client_sdk")

# after a shutting_down error, how long to wait for the server to close the session (its drain's
# last requests end, then 1012 within about 3 s, server/shutdown.py) before using it again
DRAIN_CLOSE_S = 5.0


class WebSocketTransport:
    kind: Literal["websocket", "http"] = "websocket"

    def __init__(self, urls: list[str], options: Options) -> None:
        self.urls = urls
        self.options = options
        self._api_key = Options.resolve_key(options.api_key)
        self._url_index = 0
        self._info: SessionInfo | None = None
        self._ws: ClientConnection | None = None
        self._seq = 0
        self._connected = asyncio.Event()  # set while connected, and when broken (ready() then raises)
        self._broken: BaseException | None = None
        self._closing = False
        self._channels: dict[str, Channel] = {}
        self._waiters: dict[str, asyncio.Future[AnyServerFrame]] = {}
        self._ids = itertools.count(1)
        self._tasks = TaskHost("tokenwire session")  # the reader, its keep-alive, cancels being sent
        self._slots: asyncio.Semaphore | None = None
        self._slot_holders: set[str] = set()
        self._settings_patch: dict[str, Any] = {}  # every session.update so far, merged: re-sent on reconnect
        self._loop: asyncio.AbstractEventLoop | None = None

    # -- the transport interface ------------------------------------------------------------------
    @property
    def info(self) -> SessionInfo:
        if self._info is None:
            raise errors.ConnectError("not connected; await client.connect() first")
        return self._info

    @property
    def connected(self) -> bool:
        return self._ws is not None and self._connected.is_set() and self._broken is None

    def new_id(self, prefix: str) -> str:
        return f"{prefix}-{next(self._ids)}"

    async def open(self) -> None:
        """Open the first session: each URL once, in order; tokenwire's refusals are final."""
        self._loop = asyncio.get_running_loop()
        last: errors.TokenwireError | None = None
        for index, url in enumerate(self.urls):
            try:
                ws = await self._open(url)
            except (errors.APIError, errors.UpgradeRefused):
                raise
            except errors.TokenwireError as exc:
                last = exc
                continue
            self._url_index = index
            self._attach(ws)
            group = await self._tasks.open()
            group.start_soon(self._run, ws, name="tokenwire session reader")
            return
        assert last is not None
        raise last

    async def ready(self) -> None:
        if self._closing:
            raise errors.ConnectError("the client is closed")
        await self._connected.wait()
        if self._broken is not None:
            raise self._broken

    async def start(self, frame: RequestFrame) -> Handle:
        await self.ready()
        assert self._slots is not None
        await self._slots.acquire()
        channel = Channel(frame.id)
        self._channels[frame.id] = channel
        self._slot_holders.add(frame.id)
        handle = Handle(channel, cancel=lambda: self._cancel_soon(frame.id),
                        release=lambda: self._forget(frame.id))
        try:
            await self._send(frame)
        except errors.ConnectionLostError as exc:
            self._end(frame.id)
            channel.fail(Interrupted(str(exc), code=exc.code, reason=exc.reason))
        return handle

    async def cancel(self, request_id: str) -> None:
        if request_id in self._channels:
            self._channels[request_id].cancelling = True
            await self._send(Cancel(id=request_id))

    async def update_session(self, patch: dict[str, Any]) -> dict[str, Any]:
        frame = await self._roundtrip(SessionUpdate.model_validate({"session": patch}))
        assert isinstance(frame, SessionUpdated)
        _merge_patch(self._settings_patch, patch)
        self._info = _with_settings(self.info, frame.session)
        return frame.session

    async def ping(self) -> None:
        await self._roundtrip(Ping())

    async def aclose(self) -> None:
        self._closing = True
        for channel in self._channels.values():
            channel.fail(errors.ConnectionLostError("the client was closed"))
        await self._tasks.aclose()  # the reader, its keep-alive and any cancel being sent: ended
        ws, self._ws = self._ws, None
        if ws is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(ws.close(), 2.0)

    def abort_connection(self) -> None:
        """Drop the socket without a closing handshake (as a network failure would)."""
        if self._ws is not None:
            self._ws.transport.abort()

    # -- opening a session ----------------------------------------------------------------------------
    async def _open(self, base: str) -> ClientConnection:
        headers = dict(self.options.headers)
        if self._api_key:
            headers["Authorization"] = f"Bearer {self._api_key}"
        url = ws_url(base)
        with errors.transport_errors(f"opening a session at {url}"):
            try:
                ws = await ws_connect(url, subprotocols=[Subprotocol(subprotocol())], additional_headers=headers,
                                      open_timeout=self.options.connect_timeout, compression=None,
                                      max_size=self.options.max_frame_bytes, close_timeout=2.0,
                                      user_agent_header="tokenwire-client_sdk")
            except InvalidStatus as exc:
                status, body = exc.response.status_code, bytes(exc.response.body or b"")
                if status in (400, 401, 403) and errors.is_tokenwire_refusal(body):
                    raise errors.from_http(status, body) from None
                raise errors.UpgradeRefused(f"The WebSocket upgrade at {url} was answered with HTTP {status}.",
                                            status=status) from None
            try:
                async with asyncio.timeout(self.options.connect_timeout):
                    created = _decode(await ws.recv())
                    if not isinstance(created, SessionCreated) or created.seq != 1:
                        raise errors.ProtocolError("the first frame of a session must be session.created (seq 1)")
                    seq = 1
                    if self._settings_patch:
                        seq, created = await self._restore(ws, created)
            except BaseException:
                ws.transport.abort()
                raise
        self._seq = seq
        self._info = SessionInfo(transport="websocket", url=base, model=str(created.session.get("model", "")),
                                 frames=frozenset(created.frames), session_id=created.session_id,
                                 protocol_version=created.protocol_version, server=dict(created.server),
                                 limits=dict(created.limits), settings=dict(created.session),
                                 features=dict(created.features))
        return ws

    async def _restore(self, ws: ClientConnection, created: SessionCreated) -> tuple[int, SessionCreated]:
        """Re-apply the client's session settings on a new session, before any request."""
        update = SessionUpdate.model_validate({"event_id": "restore", "session": self._settings_patch})
        await ws.send(encode_client_frame(update).decode())
        frame = _decode(await ws.recv())
        if frame.seq != 2:
            raise errors.ProtocolError(f"seq {frame.seq} after 1")
        if isinstance(frame, ErrorFrame):
            raise errors.from_error_body(frame.error)
        if not isinstance(frame, SessionUpdated):
            raise errors.ProtocolError(f"expected session.updated, got {frame.type}")
        return 2, SessionCreated(**{**_fields(created), "session": frame.session})

    def _attach(self, ws: ClientConnection) -> None:
        self._ws = ws
        limit = int(self.info.limits.get("max_in_flight", 64))
        if self._slots is None:
            self._slots = asyncio.Semaphore(limit)
        self._connected.set()

    # -- the live session ---------------------------------------------------------------------------
    async def _run(self, ws: ClientConnection) -> None:
        """The session's reader, in the transport's task group, until the client closes or the
        session cannot be reopened. If it fails (a bug of ours), every request in flight and every
        later call raises :class:`~client_sdk.errors.ConnectionLostError` caused by that error."""
        try:
            await self._supervise(ws)
        except Exception as exc:
            while isinstance(exc, ExceptionGroup) and len(exc.exceptions) == 1:  # the keep-alive's group
                exc = exc.exceptions[0]
            log.error("tokenwire session reader failed", exc_info=exc)
            if self._ws is not None:
                self._ws.transport.abort()
            error = errors.ConnectionLostError(f"The session's reader failed: {exc!r}")
            error.__cause__ = exc
            self._lost(error)
            self._break(error)

    async def _supervise(self, ws: ClientConnection) -> None:
        while True:
            lost = await self._serve(ws)
            self._lost(lost)
            if self._closing:
                return
            if not self.options.reconnect:
                self._break(lost)
                return
            try:
                ws = await self._reconnect()
            except errors.TokenwireError as exc:
                self._break(exc)
                return
            self._attach(ws)

    async def _serve(self, ws: ClientConnection) -> errors.ConnectionLostError:
        """Read ``ws`` until it ends, its keep-alive beside it; why it ended."""
        async with anyio.create_task_group() as tg:
            tg.start_soon(self._keepalive, ws, name="tokenwire keepalive")
            lost = await self._read(ws)
            tg.cancel_scope.cancel()
        return lost

    async def _read(self, ws: ClientConnection) -> errors.ConnectionLostError:
        try:
            async for message in ws:
                if isinstance(message, bytes):
                    raise errors.ProtocolError("the server sent a binary message")
                self._dispatch(message)
        except ConnectionClosed as exc:
            rcvd = exc.rcvd
            return errors.from_close(rcvd.code if rcvd else None, rcvd.reason if rcvd else "")
        except errors.ProtocolError as exc:
            log.warning("tokenwire session broke the protocol (%s); reconnecting", exc)
            ws.transport.abort()
            return errors.ConnectionLostError(f"The server broke the protocol: {exc}")
        return errors.from_close(ws.close_code, ws.close_reason or "")

    def _dispatch(self, message: str) -> None:
        try:
            data = orjson.loads(message)
        except orjson.JSONDecodeError:
            raise errors.ProtocolError("a frame is not JSON") from None
        if not isinstance(data, dict):
            raise errors.ProtocolError("a frame is not a JSON object")
        seq = data.get("seq")
        if seq != self._seq + 1:
            raise errors.ProtocolError(f"seq {seq} after {self._seq}")
        self._seq = seq
        if data.get("type") not in KNOWN_TYPES:
            return  # a newer server's frame type (§12)
        try:
            frame = SERVER_FRAMES.validate_python(data)
        except ValidationError:
            raise errors.ProtocolError(f"a {data.get('type')} frame is malformed") from None
        request_id = getattr(frame, "id", None)
        if request_id is not None:
            channel = self._channels.get(request_id)
            if channel is None:
                return  # e.g. unknown_id for a cancel that crossed the request's final frame
            if isinstance(frame, ErrorFrame) and frame.error.get("code") == "unknown_id":
                return  # the answer to our cancel, not about the request itself
            if isinstance(frame, ErrorFrame) and frame.error.get("code") == "session_closed":
                # The session is closing under this request (its close frame follows): as when
                # the connection drops, a resumable stream resumes on the next session.
                self._connected.clear()
                channel.fail(Interrupted(str(frame.error.get("message") or "the session closed")))
                self._end(request_id)
                return
            if isinstance(frame, ErrorFrame) and frame.error.get("code") == "shutting_down":
                # The server drains: this session takes no new request and closes (1012) once its
                # work ends; what is sent next (a resumed stream too) waits for the next session.
                # The same code also reports a remote engine that drains under a server that does
                # not: if the session is still open after DRAIN_CLOSE_S, it is used again.
                self._connected.clear()
                if self._loop is not None:
                    self._loop.call_later(DRAIN_CLOSE_S, self._reuse_if_open, self._ws)
            channel.put(frame)
            if frame.type in FINAL_TYPES:
                self._end(request_id)
            return
        waiter = self._waiters.pop(frame.event_id or "", None)
        if waiter is not None and not waiter.done():
            waiter.set_result(frame)
        elif isinstance(frame, ErrorFrame):
            log.warning("tokenwire session error: %s", frame.error.get("message"))

    def _reuse_if_open(self, ws: ClientConnection | None) -> None:
        if ws is not None and self._ws is ws and self._broken is None and not self._connected.is_set():
            self._connected.set()

    def _lost(self, lost: errors.ConnectionLostError) -> None:
        self._ws = None
        if not self._broken:
            self._connected.clear()
        for request_id, channel in list(self._channels.items()):
            channel.fail(Interrupted(str(lost), code=lost.code, reason=lost.reason))
            self._end(request_id)
        for waiter in self._waiters.values():
            if not waiter.done():
                waiter.set_exception(errors.ConnectionLostError(str(lost), code=lost.code, reason=lost.reason))
        self._waiters.clear()

    def _break(self, error: BaseException) -> None:
        self._broken = error
        self._connected.set()

    async def _reconnect(self) -> ClientConnection:
        delay = self.options.backoff_initial
        last: BaseException | None = None
        for attempt in range(max(1, self.options.max_reconnect_attempts)):
            if attempt:
                await asyncio.sleep(delay * (0.5 + random.random() / 2))
                delay = min(delay * 2, self.options.backoff_max)
            self._url_index = (self._url_index + 1) % len(self.urls)
            url = self.urls[self._url_index]
            try:
                ws = await self._open(url)
            except errors.APIError:
                raise
            except errors.TokenwireError as exc:
                log.info("reconnecting to %s failed (%s)", url, exc)
                last = exc
                continue
            log.info("tokenwire session reopened at %s", url)
            return ws
        raise errors.ConnectError(f"Could not reopen the session after {self.options.max_reconnect_attempts} "
                                  f"attempts: {last}")

    async def _keepalive(self, ws: ClientConnection) -> None:
        interval = self.options.keepalive_interval
        if interval is None:
            idle = float(self.info.limits.get("idle_timeout_s", 90.0))
            interval = min(idle / 3, 30.0)
        if interval <= 0:
            return
        while True:
            await asyncio.sleep(interval)
            try:
                async with asyncio.timeout(self.options.ping_timeout):
                    await self._roundtrip(Ping())
            except TimeoutError:
                log.warning("no pong within %.0f s; dropping the connection", self.options.ping_timeout)
                ws.transport.abort()
                return
            except errors.TokenwireError:
                return

    # -- sending --------------------------------------------------------------------------------------
    async def _send(self, frame: ClientFrame) -> None:
        ws = self._ws
        if ws is None:
            raise errors.ConnectionLostError("the connection is down")
        with errors.transport_errors("sending a frame"):
            await ws.send(encode_client_frame(frame).decode())

    async def _roundtrip(self, frame: SessionUpdate | Ping) -> AnyServerFrame:
        await self.ready()
        event_id = f"ev-{next(self._ids)}"
        frame = frame.model_copy(update={"event_id": event_id})
        waiter: asyncio.Future[AnyServerFrame] = asyncio.get_running_loop().create_future()
        self._waiters[event_id] = waiter
        try:
            await self._send(frame)
            answer = await waiter
        finally:
            self._waiters.pop(event_id, None)
        if isinstance(answer, ErrorFrame):
            raise errors.from_error_body(answer.error)
        return answer

    def _cancel_soon(self, request_id: str) -> None:
        def send() -> None:
            if request_id in self._channels and self._ws is not None:
                self._tasks.start_soon(self._send_quietly, Cancel(id=request_id), name=f"cancel {request_id}")

        call_in_loop(self._loop, send)

    async def _send_quietly(self, frame: ClientFrame) -> None:
        with contextlib.suppress(errors.TokenwireError):
            await self._send(frame)

    def _end(self, request_id: str) -> None:
        self._channels.pop(request_id, None)
        if request_id in self._slot_holders:
            self._slot_holders.discard(request_id)
            assert self._slots is not None
            self._slots.release()

    def _forget(self, request_id: str) -> None:
        # Keep routing until the final frame arrives (it frees the slot); keep no frames.
        channel = self._channels.get(request_id)
        if channel is not None:
            channel.discard = True


def _decode(message: str | bytes) -> AnyServerFrame:
    try:
        return SERVER_FRAMES.validate_json(message)
    except ValidationError:
        raise errors.ProtocolError("a frame is not a valid server frame") from None


def _fields(frame: SessionCreated) -> dict[str, Any]:
    return {name: getattr(frame, name) for name in frame.__dataclass_fields__}


def _merge_patch(acc: dict[str, Any], patch: dict[str, Any]) -> None:
    for key, value in patch.items():
        if key in ("sampling", "chat_template_kwargs") and isinstance(value, dict):
            merged = dict(acc.get(key) or {})
            merged.update(value)
            acc[key] = merged
        else:
            acc[key] = value


def _with_settings(info: SessionInfo, settings: dict[str, Any]) -> SessionInfo:
    from dataclasses import replace

    return replace(info, settings=dict(settings), model=str(settings.get("model", info.model)))
