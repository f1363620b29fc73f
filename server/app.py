"""The ASGI app: HTTP routes and the WebSocket route on one port, registered per the gating."""

from __future__ import annotations

import contextlib
import hmac
import importlib
import logging
from collections.abc import AsyncIterator
from typing import Any

from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route as StarletteRoute
from starlette.routing import WebSocketRoute
from starlette.types import ASGIApp, Receive, Scope, Send

from server import metrics
from server.context import ServerContext
from server.errors import ApiError, error_response
from server.hosts import host_allowed
from server.hosts import refusal as host_refusal
from server.http import is_json_media_type, not_json_message
from server.routes import Route

log = logging.getLogger("tokenwire")

# Every module that contributes HTTP routes. Each exposes ``routes() -> list[Route]``.
ROUTE_MODULES = (
    "server.routes.common",
    "server.routes.render",
    "server.routes.derender",
    "server.routes.generate",
    "server.routes.pipeline",
    "server.routes.playground",
    "server.routes.metrics",
)
# Modules that contribute WebSocket routes: ``websocket_routes() -> list[(path, endpoint, group)]``.
WEBSOCKET_MODULES: tuple[str, ...] = ("server.ws",)

# Paths anyone may read without an API key.
PUBLIC_PATHS = frozenset({"/health", "/version", "/", "/openapi.json", "/metrics"})
PUBLIC_PREFIXES = ("/static/",)


def all_routes() -> list[Route]:
    out: list[Route] = []
    for name in ROUTE_MODULES:
        out.extend(importlib.import_module(name).routes())
    return out


def enabled_routes(ctx: ServerContext) -> list[Route]:
    return [r for r in all_routes() if r.group in ctx.gating]


def flavor_of(path: str) -> str:
    """Which API's error envelope answers on ``path``: Anthropic's on ``/v1/messages*``."""
    return "anthropic" if path.startswith("/v1/messages") else "openai"


def _wrap(route: Route) -> Any:
    flavor = flavor_of(route.path)

    async def endpoint(request: Request) -> Response:
        try:
            response = await route.endpoint(request)
        except Exception as exc:  # translated once, here; never str(exc) to the client
            response = error_response(exc, flavor=flavor)
        metrics.http_request(route.path, response.status_code)
        return response

    endpoint.__name__ = getattr(route.endpoint, "__name__", "endpoint")
    return endpoint


class ApiKeyMiddleware:
    """Checks ``Authorization: Bearer KEY`` (or ``x-api-key``) on HTTP requests. WebSocket
    upgrades are checked by the WebSocket route itself, so it can refuse before accepting."""

    def __init__(self, app: ASGIApp, keys: tuple[str, ...]) -> None:
        self.app = app
        self.keys = tuple(k.encode() for k in keys)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or not self.keys or _is_public(scope["path"]):
            await self.app(scope, receive, send)
            return
        headers = dict(scope["headers"])
        given = _bearer(headers.get(b"authorization", b"")) or headers.get(b"x-api-key", b"")
        flavor = flavor_of(scope["path"])
        if not given:
            response = error_response(ApiError(401, "Missing API key; send 'Authorization: Bearer <key>'."),
                                      flavor=flavor)
        elif not any(hmac.compare_digest(given, k) for k in self.keys):
            response = error_response(ApiError(401, "Invalid API key."), flavor=flavor)
        else:
            await self.app(scope, receive, send)
            return
        await response(scope, receive, send)


class HostMiddleware:
    """Refuses an HTTP request whose ``Host`` is not one of the server's names (server/hosts.py:
    DNS rebinding). WebSocket upgrades are checked by the WebSocket route (server/ws/upgrade.py)."""

    def __init__(self, app: ASGIApp, allowed: tuple[str, ...]) -> None:
        self.app = app
        self.allowed = allowed

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or "*" in self.allowed:
            await self.app(scope, receive, send)
            return
        raw = dict(scope["headers"]).get(b"host")
        host = raw.decode("latin-1") if raw is not None else None
        if host_allowed(host, self.allowed):
            await self.app(scope, receive, send)
            return
        response = error_response(ApiError(400, host_refusal(host or "")), flavor=flavor_of(scope["path"]))
        await response(scope, receive, send)


class JsonBodyMiddleware:
    """A POST to a route that takes a body must send it as JSON, else 415 before the route runs
    (server/http.py's ``read_json`` says why: no CORS preflight guards text/plain or form posts)."""

    def __init__(self, app: ASGIApp, paths: frozenset[str]) -> None:
        self.app = app
        self.paths = paths

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["method"] == "POST" and scope["path"] in self.paths:
            raw = dict(scope["headers"]).get(b"content-type")
            ctype = raw.decode("latin-1") if raw is not None else None
            if ctype is None or not is_json_media_type(ctype):
                response = error_response(ApiError(415, not_json_message(ctype)), flavor=flavor_of(scope["path"]))
                await response(scope, receive, send)
                return
        await self.app(scope, receive, send)


def _bearer(value: bytes) -> bytes:
    scheme, _, token = value.partition(b" ")
    return token.strip() if scheme.lower() == b"bearer" else b""


def _is_public(path: str) -> bool:
    return path in PUBLIC_PATHS or path.startswith(PUBLIC_PREFIXES)


def api_key_ok(ctx: ServerContext, given: str | None) -> bool:
    """One check for every transport (HTTP middleware above, WebSocket upgrade)."""
    keys = ctx.settings.api_keys
    if not keys:
        return True
    return given is not None and any(hmac.compare_digest(given.encode(), k.encode()) for k in keys)


def create_app(ctx: ServerContext) -> Starlette:
    for name in ROUTE_MODULES:  # a module may check its configuration / build services up front
        prepare = getattr(importlib.import_module(name), "prepare", None)
        if prepare is not None:
            prepare(ctx)  # raises ValueError for a configuration it refuses
    routes: list[Any] = [
        StarletteRoute(r.path, _wrap(r), methods=list(r.methods)) for r in enabled_routes(ctx)
    ]
    for name in WEBSOCKET_MODULES:
        for path, endpoint, group in importlib.import_module(name).websocket_routes():
            if group in ctx.gating:
                routes.append(WebSocketRoute(path, endpoint))

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        if ctx.gating.info:
            log.info(ctx.gating.info)
        if "*" not in ctx.settings.allowed_hosts:
            names = ", ".join(ctx.settings.allowed_hosts) or "no other name"
            log.info("Answering Host names: IP addresses, localhost, %s (--allowed-host NAME adds one)", names)
        if ctx.engine is not None:
            await ctx.engine.start()
        try:
            yield
        finally:
            if ctx.engine is not None:
                await ctx.engine.close()

    from server.limits import LimitMiddleware, limiter_of
    from server.shutdown import DrainMiddleware, drain_of
    from server.ws.transport import RawSendMiddleware

    middleware = [Middleware(RawSendMiddleware),  # first: it must see the server's own send
                  Middleware(DrainMiddleware, drain=ctx.service(drain_of)),
                  Middleware(HostMiddleware, allowed=ctx.settings.allowed_hosts),
                  Middleware(ApiKeyMiddleware, keys=ctx.settings.api_keys),
                  Middleware(JsonBodyMiddleware,
                             paths=frozenset(r.path for r in enabled_routes(ctx) if "POST" in r.methods)),
                  Middleware(LimitMiddleware, limiter=ctx.service(limiter_of),
                             body_timeout=ctx.settings.body_timeout, exempt=_is_public,
                             by_key=bool(ctx.settings.api_keys))]
    app = Starlette(routes=routes, middleware=middleware, lifespan=lifespan,
                    exception_handlers={404: _not_found, 405: _method_not_allowed})
    app.state.ctx = ctx
    metrics.ENGINE.watch(ctx.engine)
    return app


async def _not_found(request: Request, exc: Exception) -> Response:
    return error_response(ApiError(404, f"Not found: {request.method} {request.url.path}"),
                          flavor=flavor_of(request.url.path))


async def _method_not_allowed(request: Request, exc: Exception) -> Response:
    response = error_response(ApiError(405, f"Method {request.method} is not allowed on {request.url.path}"),
                              flavor=flavor_of(request.url.path))
    allow = (getattr(exc, "headers", None) or {}).get("Allow")
    if allow:  # RFC 9110: a 405 lists the methods the resource supports
        response.headers["Allow"] = allow
    return response


def ctx_of(request: Request) -> ServerContext:
    return request.app.state.ctx  # type: ignore[no-any-return]
