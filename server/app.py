"""The ASGI app: HTTP routes and the WebSocket route on one port, registered per the gating.

The routes are listed here, explicitly (:data:`ROUTE_LISTS`, :data:`WEBSOCKET_ROUTES`): this is the
one module that imports the route modules. The services the routes use are built once, at
start-up (``server/services.py``), and held by the app with the context and the route list.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import AsyncIterator, Callable
from typing import Any

from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route as StarletteRoute
from starlette.routing import WebSocketRoute
from starlette.types import ASGIApp, Receive, Scope, Send

from server import metrics
from server.auth import ApiKeyMiddleware, is_public
from server.context import ServerContext
from server.errors import ApiError, error_response, flavor_of
from server.gating import RouteGroup
from server.hosts import host_allowed
from server.hosts import refusal as host_refusal
from server.http import is_json_media_type, not_json_message
from server.limits import LimitMiddleware
from server.routes import common, derender, generate, pipeline, playground, render, responses, tokenize
from server.routes import metrics as metrics_routes
from server.routing import Route
from server.services import Services, build_services
from server.shutdown import DrainMiddleware
from server.ws.endpoint import SESSION_PATH, session_endpoint
from server.ws.responses import RESPONSES_PATH, responses_endpoint
from server.ws.transport import RawSendMiddleware

log = logging.getLogger("tokenwire")

# Every HTTP route, by module (each ``routes() -> list[Route]``), in registration order.
ROUTE_LISTS: tuple[Callable[[], list[Route]], ...] = (
    common.routes,
    render.routes,
    derender.routes,
    generate.routes,
    pipeline.routes,
    responses.routes,
    tokenize.routes,
    playground.routes,
    metrics_routes.routes,
)
# The WebSocket routes: (path, endpoint, group).
WEBSOCKET_ROUTES: tuple[tuple[str, Callable[..., Any], RouteGroup], ...] = (
    (SESSION_PATH, session_endpoint, RouteGroup.WEBSOCKET),
    (RESPONSES_PATH, responses_endpoint, RouteGroup.PIPELINE),  # the Responses API's WebSocket mode
)


def all_routes() -> list[Route]:
    return [route for routes in ROUTE_LISTS for route in routes()]


def enabled_routes(ctx: ServerContext, every: list[Route] | None = None) -> list[Route]:
    """The routes ``ctx`` turns on, of ``every`` (else of :func:`all_routes`)."""
    return [r for r in (all_routes() if every is None else every) if r.group in ctx.gating]


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


def create_app(ctx: ServerContext, services: Services | None = None) -> Starlette:
    """The app over ``ctx``, with ``services`` built by the caller at start-up (else here)."""
    if services is None:
        services = build_services(ctx)  # raises ValueError for a configuration it refuses
    every = all_routes()  # built once: the playground's routes read its files
    enabled = enabled_routes(ctx, every)
    routes: list[Any] = [StarletteRoute(r.path, _wrap(r), methods=list(r.methods)) for r in enabled]
    routes += [WebSocketRoute(path, endpoint) for path, endpoint, group in WEBSOCKET_ROUTES if group in ctx.gating]

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
            async with services.responses.background.serving():  # background responses' tasks
                yield
        finally:
            if ctx.engine is not None:
                await ctx.engine.close()

    middleware = [Middleware(RawSendMiddleware),  # first: it must see the server's own send
                  Middleware(DrainMiddleware, drain=services.drain),
                  Middleware(HostMiddleware, allowed=ctx.settings.allowed_hosts),
                  Middleware(ApiKeyMiddleware, keys=ctx.settings.api_keys),
                  Middleware(JsonBodyMiddleware,
                             paths=frozenset(r.path for r in enabled if "POST" in r.methods)),
                  Middleware(LimitMiddleware, limiter=services.limiter,
                             body_timeout=ctx.settings.body_timeout, exempt=is_public,
                             by_key=bool(ctx.settings.api_keys))]
    app = Starlette(routes=routes, middleware=middleware, lifespan=lifespan,
                    exception_handlers={404: _not_found, 405: _method_not_allowed})
    app.state.ctx = ctx
    app.state.services = services
    app.state.routes = tuple(enabled)
    app.state.route_groups = {r.path: r.group for r in every}  # for the 404's "not enabled" hint
    metrics.ENGINE.watch(ctx.engine)
    return app


async def _not_found(request: Request, exc: Exception) -> Response:
    path = request.url.path
    message = f"Not found: {request.method} {path}"
    gating = request.app.state.ctx.gating
    group = request.app.state.route_groups.get(path)  # every route's, enabled or not: built once
    hint = gating.hints.get(group) if group is not None else None
    if hint is not None:  # a route this server has, turned off: say how to turn it on
        message = f"{path} is not enabled on this server: {hint}."
    return error_response(ApiError(404, message), flavor=flavor_of(path))


async def _method_not_allowed(request: Request, exc: Exception) -> Response:
    response = error_response(ApiError(405, f"Method {request.method} is not allowed on {request.url.path}"),
                              flavor=flavor_of(request.url.path))
    allow = (getattr(exc, "headers", None) or {}).get("Allow")
    if allow:  # RFC 9110: a 405 lists the methods the resource supports
        response.headers["Allow"] = allow
    return response
