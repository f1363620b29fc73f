"""The ``/v1/session`` WebSocket endpoint: decide the upgrade, then run the session.

Refusals (Origin, API key, protocol version) are answered before accepting, as a real HTTP
response through the ASGI ``websocket.http.response`` extension (uvicorn supports it); a server
without the extension gets a close before accept, which ASGI servers turn into a 403.
"""

from __future__ import annotations

import logging
from typing import Any

import anyio
import orjson
from starlette.responses import Response
from starlette.websockets import WebSocket

from server import metrics
from server.auth import api_key_ok
from server.context import ServerContext
from server.errors import ApiError, openai_error_body
from server.limits import key_of
from server.services import ctx_of, services_of
from server.ws.connection import BATCH_SUBPROTOCOL, Connection
from server.ws.state_peek import peek_state
from server.ws.transport import frame_writer
from server.ws.upgrade import Accepted, Refused, decide
from session.machine import Session

log = logging.getLogger("tokenwire.ws")

SESSION_PATH = "/v1/session"


def decide_upgrade(websocket: WebSocket, ctx: ServerContext) -> Accepted | Refused:
    return decide(websocket.headers, websocket.scope.get("subprotocols") or [],
                  websocket.scope.get("query_string", b"").decode("latin-1"),
                  allowed_origins=ctx.settings.allowed_origins,
                  key_ok=lambda key: api_key_ok(ctx.settings.api_keys, key), keys_required=bool(ctx.settings.api_keys), allowed_hosts=ctx.settings.allowed_hosts)


async def session_endpoint(websocket: WebSocket) -> None:
    ctx = ctx_of(websocket)
    decision = decide_upgrade(websocket, ctx)
    if isinstance(decision, Refused):
        await refuse(websocket, decision.status, decision.message)
        return
    services = services_of(websocket)
    await websocket.accept(subprotocol=decision.subprotocol)
    session = Session(services.session, now=anyio.current_time(), state_tagger=peek_state)
    key = key_of(decision.api_key if ctx.settings.api_keys else None, websocket.scope.get("client"))
    metrics.session_opened()
    try:
        batch = BATCH_SUBPROTOCOL in (websocket.scope.get("subprotocols") or ())
        await Connection(websocket, session, services.stages, shutdown=services.drain,
                         limits=(services.limiter, key), batch=batch,
                         direct=frame_writer(websocket.scope), ticks=services.ws_ticks).run()
    finally:
        metrics.session_closed()


async def refuse(websocket: WebSocket, status: int, message: str) -> None:
    body = orjson.dumps(openai_error_body(ApiError(status, message)))
    headers: dict[str, Any] = {"WWW-Authenticate": 'Bearer realm="tokenwire"'} if status == 401 else {}
    response = Response(body, status_code=status, media_type="application/json", headers=headers)
    if "websocket.http.response" in websocket.scope.get("extensions", {}):
        await websocket.send_denial_response(response)
    else:
        await websocket.close(1008)
