"""The HTTP fallback transport: the same requests over the HTTP endpoints, for when no WebSocket gets
through (a proxy refuses the upgrade) or when asked for (``transport="http"``). Each request frame
becomes the matching HTTP call and its answer the frames a session would have sent; no resumable
streams. The frame ↔ HTTP call table and the rules: docs/client.md, "The HTTP fallback transport".
"""

from __future__ import annotations

import asyncio
import dataclasses
import itertools
import logging
from collections.abc import AsyncIterator
from typing import Any, Literal

import anyio
import httpx
import orjson

from client_sdk import errors
from client_sdk.options import Options
from client_sdk.sse import SSEDecoder
from client_sdk.transport import Channel, Handle, call_in_loop, error_frame
from client_sdk.types import SessionInfo
from engine.task_host import TaskHost
from session.client_frames import Derender, FrameError, Generate, Render, RequestFrame, SessionPatch
from session.server_frames import (
    DELTA_FRAME_OF,
    DONE_FRAME_OF,
    DerenderDelta,
    GenerateDelta,
    GenerateDone,
    RenderDone,
)
from session.settings import SessionSettings, apply_defaults, apply_patch

PIPELINE_PATHS = {"chat": "/v1/chat/completions", "completion": "/v1/completions", "messages": "/v1/messages",
                  "response": "/v1/responses"}
RENDER_PATHS = {k: PIPELINE_PATHS[k] + "/render" for k in ("chat", "completion", "messages")}
DERENDER_PATHS = {"chat": "/v1/chat/completions/derender", "completion": "/v1/completions/derender"}
GENERATE_PATH = "/inference/v1/generate"
# The frames of the scale-out endpoints, and how a server turns them on (a plain `serve` has them off).
SCALE_OUT_FRAMES = frozenset({"render", "derender", "generate"})
SCALE_OUT_HINT = (": they are scale-out endpoints, which a server started with --enable-scale-out "
                  "(or `launch render`, `serve --tokens-only`) serves")
# Which frame type each HTTP route serves (the HTTP twin of session.created's ``frames``).
FRAME_OF_PATH = {PIPELINE_PATHS["chat"]: "chat", PIPELINE_PATHS["completion"]: "completion",
                 PIPELINE_PATHS["messages"]: "messages", PIPELINE_PATHS["response"]: "response",
                 RENDER_PATHS["chat"]: "render",
                 DERENDER_PATHS["chat"]: "derender", GENERATE_PATH: "generate"}
log = logging.getLogger("client_sdk")
_ANTHROPIC_STATUS = {"invalid_request_error": 400, "authentication_error": 401, "permission_error": 403,
                     "not_found_error": 404, "request_too_large": 413, "rate_limit_error": 429,
                     "api_error": 500, "overloaded_error": 503}


class HttpTransport:
    kind: Literal["websocket", "http"] = "http"

    def __init__(self, urls: list[str], options: Options) -> None:
        self.urls = urls
        self.options = options
        key = Options.resolve_key(options.api_key)
        headers = dict(options.headers)
        if key:
            headers["Authorization"] = f"Bearer {key}"
        self._http = httpx.AsyncClient(base_url=urls[0], headers=headers, timeout=httpx.Timeout(
            None, connect=options.connect_timeout, write=options.connect_timeout))
        self._info: SessionInfo | None = None
        self._settings: SessionSettings | None = None
        self._ids = itertools.count(1)
        self._tasks = TaskHost("tokenwire http")  # one task per request in flight
        self._running: dict[str, anyio.CancelScope] = {}  # each request's: cancelling it ends the request

    @property
    def info(self) -> SessionInfo:
        if self._info is None:
            raise errors.ConnectError("not connected; await client.connect() first")
        return self._info

    def new_id(self, prefix: str) -> str:
        return f"{prefix}-{next(self._ids)}"

    async def open(self) -> None:
        """Learn the model (``/v1/models``, which also checks the API key) and which routes exist
        (``/openapi.json`` lists exactly the enabled ones)."""
        base = self.urls[0]
        with errors.transport_errors(f"connecting to {base}"):
            models = await self._http.get("/v1/models")
            if models.status_code >= 400:
                raise errors.from_http(models.status_code, models.content)
            spec = await self._http.get("/openapi.json")
        model = str((models.json().get("data") or [{}])[0].get("id", ""))
        paths = spec.json().get("paths", {}) if spec.status_code == 200 else {}
        frames = {frame for path, frame in FRAME_OF_PATH.items() if path in paths}
        frames |= {"session.update", "cancel", "ping"}
        self._settings = SessionSettings(model=model)
        self._info = SessionInfo(transport="http", url=base, model=model, frames=frozenset(frames),
                                 settings=self._settings.as_dict())

    async def ready(self) -> None:
        return None

    async def start(self, frame: RequestFrame) -> Handle:
        if frame.type not in self.info.frames:
            hint = SCALE_OUT_HINT if frame.type in SCALE_OUT_FRAMES else ""
            raise errors.from_error_body({"code": "not_enabled", "status": 404, "param": "type",
                                          "message": f"This server does not serve {frame.type} requests{hint}."})
        if getattr(frame, "resume", None) is not None or getattr(frame, "resumable", None):
            raise errors.UnsupportedError("Resumable streams need a WebSocket session; the HTTP endpoints "
                                          "send no checkpoints.")
        if self._tasks.closed:
            raise errors.ConnectError("the client is closed")
        group = await self._tasks.open()
        channel = Channel(frame.id)
        scope = self._running[frame.id] = anyio.CancelScope()
        group.start_soon(self._run, frame, channel, scope, name=f"http {frame.id}")
        loop = asyncio.get_running_loop()

        def stop() -> None:
            call_in_loop(loop, scope.cancel)

        return Handle(channel, cancel=stop, release=stop)

    async def cancel(self, request_id: str) -> None:
        scope = self._running.get(request_id)
        if scope is not None:
            scope.cancel()

    async def update_session(self, patch: dict[str, Any]) -> dict[str, Any]:
        assert self._settings is not None
        try:
            self._settings = apply_patch(self._settings, SessionPatch.model_validate(patch),
                                         default_model=self.info.model, models=frozenset({self.info.model}))
        except FrameError as exc:
            raise errors.from_error_body({"code": exc.code, "message": exc.message, "status": 404 if
                                          exc.code == "model_not_found" else 400, "param": exc.param}) from None
        self._info = dataclasses.replace(self.info, settings=self._settings.as_dict())
        return self._settings.as_dict()

    async def aclose(self) -> None:
        await self._tasks.aclose()  # every request still running: cancelled, and ended
        await self._http.aclose()

    # -- one request ------------------------------------------------------------------------------
    async def _run(self, frame: RequestFrame, channel: Channel, scope: anyio.CancelScope) -> None:
        """One request, in the transport's task group, until it ends or ``scope`` is cancelled
        (its stream's cancel, ``cancel(id)``) or the transport closes: then it ends "cancelled"."""
        try:
            with scope:
                await self._request(frame, channel)
        except anyio.get_cancelled_exc_class():  # the transport closes: its requests end as cancelled
            self._cancelled(frame, channel)
            raise
        except errors.TokenwireError as exc:
            channel.fail(exc)
        except Exception as exc:  # e.g. an SSE payload that is not JSON: its reader raises, not waits
            log.error("%s over HTTP failed", frame.type, exc_info=exc)
            error = errors.ProtocolError(f"{frame.type} over HTTP failed: {exc!r}")
            error.__cause__ = exc
            channel.fail(error)
        else:
            if scope.cancelled_caught:
                self._cancelled(frame, channel)
        finally:
            self._running.pop(frame.id, None)

    async def _request(self, frame: RequestFrame, channel: Channel) -> None:
        with errors.transport_errors(f"{frame.type} over HTTP"):
            if isinstance(frame, Render):
                body = apply_defaults(frame.kind, frame.body, self._session())
                result = await self._post_json(RENDER_PATHS[frame.kind], body, channel)
                if result is not None:
                    channel.put(RenderDone(id=frame.id, result=result))
            elif isinstance(frame, Derender):
                result = await self._post_json(DERENDER_PATHS[frame.kind], {**frame.body, "stream": True}, channel)
                if result is not None:
                    channel.put(DerenderDelta(id=frame.id, result=result))
            elif isinstance(frame, Generate):
                await self._generate(frame, channel)
            else:
                await self._pipeline(frame, channel)

    @staticmethod
    def _cancelled(frame: RequestFrame, channel: Channel) -> None:
        if frame.type in ("render", "derender"):
            channel.put(error_frame(frame.id, {"code": "cancelled", "status": 499, "param": None,
                                               "message": "The request was cancelled."}))
        else:
            channel.put(DONE_FRAME_OF[frame.type](id=frame.id, status="cancelled"))

    def _session(self) -> SessionSettings:
        assert self._settings is not None
        return self._settings

    async def _post_json(self, path: str, body: dict[str, Any], channel: Channel) -> Any:
        response = await self._http.post(path, content=orjson.dumps(body),
                                         headers={"content-type": "application/json"})
        if response.status_code >= 400:
            channel.put(error_frame(channel.id, errors.http_error_body(response.status_code, response.content)))
            return None
        return orjson.loads(response.content)

    async def _pipeline(self, frame: RequestFrame, channel: Channel) -> None:
        kind = frame.type
        assert kind in PIPELINE_PATHS
        body = {**apply_defaults(kind, frame.body, self._session()), "stream": True}  # type: ignore[arg-type]
        delta = DELTA_FRAME_OF[kind]
        field = "events" if kind in ("messages", "response") else "chunks"
        async for payload in self._sse(PIPELINE_PATHS[kind], body, channel, anthropic=kind == "messages",
                                       responses=kind == "response"):
            channel.put(delta(id=frame.id, **{field: [payload]}))  # type: ignore[arg-type]
        if not channel.finished:
            channel.put(DONE_FRAME_OF[kind](id=frame.id, status="completed"))

    async def _generate(self, frame: Generate, channel: Channel) -> None:
        options = dict(frame.body.get("stream_options") or {})
        options["include_usage"] = True
        body = {**frame.body, "stream": True, "stream_options": options}
        usage: dict[str, Any] | None = None
        async for chunk in self._sse(GENERATE_PATH, body, channel, anthropic=False):
            if not chunk.get("choices") and chunk.get("usage") is not None:
                usage = chunk["usage"]
                continue
            channel.put(GenerateDelta(id=frame.id, chunk=chunk))
        if not channel.finished:
            channel.put(GenerateDone(id=frame.id, status="completed", usage=usage))

    async def _sse(self, path: str, body: dict[str, Any], channel: Channel, *,
                   anthropic: bool, responses: bool = False) -> AsyncIterator[dict[str, Any]]:
        """The JSON payloads of an SSE answer; an error (status or event) ends it with an error frame."""
        async with self._http.stream("POST", path, content=orjson.dumps(body),
                                     headers={"content-type": "application/json"}) as response:
            if response.status_code >= 400:
                channel.put(error_frame(channel.id, errors.http_error_body(response.status_code,
                                                                           await response.aread())))
                return
            decoder = SSEDecoder()
            async for line in response.aiter_lines():
                event = decoder.line(line)
                if event is None:
                    continue
                name, data = event
                if data == "[DONE]":
                    return
                payload = orjson.loads(data)
                error = _stream_error(name, payload, anthropic=anthropic, responses=responses)
                if error is not None:
                    channel.put(error_frame(channel.id, error))
                    return
                yield payload


def _stream_error(name: str, payload: Any, *, anthropic: bool, responses: bool = False) -> dict[str, Any] | None:
    """An error event inside an SSE stream, as an ``error`` frame body (None: not an error). A
    Responses stream's failure is its own ``response.failed`` event, passed on as an event."""
    if not isinstance(payload, dict):
        return None
    if responses:
        if payload.get("type") != "error":
            return None
        return {"code": "internal_error", "status": 500, "param": payload.get("param"),
                "message": str(payload.get("message") or "The response failed.")}
    if anthropic and (name == "error" or payload.get("type") == "error"):
        inner = payload.get("error") or {}
        status = _ANTHROPIC_STATUS.get(str(inner.get("type")), 500)
        return errors.http_error_body(status, payload)
    if not anthropic and isinstance(payload.get("error"), dict) and "choices" not in payload:
        code = payload["error"].get("code")
        return errors.http_error_body(code if isinstance(code, int) else 500, payload)
    return None



