"""The ``/v1/session`` WebSocket endpoint: decide the upgrade, then run the session.

Refusals (Origin, API key, protocol version) are answered before accepting, as a real HTTP
response through the ASGI ``websocket.http.response`` extension (uvicorn supports it); a server
without the extension gets a close before accept, which ASGI servers turn into a 403.
"""

from __future__ import annotations

import logging
from typing import Any

import anyio
from starlette.responses import Response
from starlette.websockets import WebSocket

from server import metrics
from server.app import api_key_ok
from server.context import ServerContext
from server.errors import ApiError, openai_error_body
from server.gating import RouteGroup
from server.limits import key_of, limiter_of
from server.shutdown import drain_of
from server.ws.connection import BATCH_SUBPROTOCOL, Connection
from server.ws.state_peek import peek_state
from server.ws.transport import frame_writer
from server.ws.upgrade import Accepted, Refused, decide
from server.ws.work import Stages
from session.machine import Session, SessionConfig

log = logging.getLogger("tokenwire.ws")

# Which route group enables which request frame (the same gating as the HTTP routes).
FRAMES_BY_GROUP = {
    RouteGroup.RENDER: ("render",),
    RouteGroup.DERENDER: ("derender",),
    RouteGroup.GENERATE: ("generate",),
    RouteGroup.PIPELINE: ("chat", "completion", "messages"),
}


def session_config(ctx: ServerContext) -> SessionConfig:
    from server.routes.common import package_version

    s = ctx.settings
    frames = frozenset(t for group, types in FRAMES_BY_GROUP.items() if group in ctx.gating for t in types)
    return SessionConfig(model=ctx.model_name, frames=frames, max_in_flight=s.ws_max_in_flight,
                         max_frame_bytes=s.ws_max_frame_bytes, idle_timeout=s.ws_idle_timeout or None,
                         max_lifetime=s.ws_max_lifetime or None,
                         server={"name": "tokenwire", "version": package_version()})


def resolve_stages(ctx: ServerContext) -> Stages:
    from server.ws.stages import stages_of

    return ctx.service(stages_of)


def decide_upgrade(websocket: WebSocket, ctx: ServerContext) -> Accepted | Refused:
    return decide(websocket.headers, websocket.scope.get("subprotocols") or [],
                  websocket.scope.get("query_string", b"").decode("latin-1"),
                  allowed_origins=ctx.settings.allowed_origins, key_ok=lambda key: api_key_ok(ctx, key),
                  keys_required=bool(ctx.settings.api_keys), allowed_hosts=ctx.settings.allowed_hosts)


async def session_endpoint(websocket: WebSocket) -> None:
    ctx: ServerContext = websocket.app.state.ctx
    decision = decide_upgrade(websocket, ctx)
    if isinstance(decision, Refused):
        await refuse(websocket, decision.status, decision.message)
        return
    try:
        stages = resolve_stages(ctx)
        config = ctx.service(session_config)
    except Exception:
        log.exception("cannot start a WebSocket session")
        await refuse(websocket, 500, "Internal server error; see the server log for details.")
        return
    await websocket.accept(subprotocol=decision.subprotocol)
    session = Session(config, now=anyio.current_time(), state_tagger=peek_state)
    key = key_of(decision.api_key if ctx.settings.api_keys else None, websocket.scope.get("client"))
    metrics.session_opened()
    try:
        batch = BATCH_SUBPROTOCOL in (websocket.scope.get("subprotocols") or ())
        await Connection(websocket, session, stages, drain=ctx.service(drain_of),
                         limits=(ctx.service(limiter_of), key), batch=batch,
                         direct=frame_writer(websocket.scope)).run()
    finally:
        metrics.session_closed()


async def refuse(websocket: WebSocket, status: int, message: str) -> None:
    import orjson

    body = orjson.dumps(openai_error_body(ApiError(status, message)))
    headers: dict[str, Any] = {"WWW-Authenticate": 'Bearer realm="tokenwire"'} if status == 401 else {}
    response = Response(body, status_code=status, media_type="application/json", headers=headers)
    if "websocket.http.response" in websocket.scope.get("extensions", {}):
        await websocket.send_denial_response(response)
    else:
        await websocket.close(1008)
