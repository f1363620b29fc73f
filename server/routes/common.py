"""Always-on endpoints: /health, /v1/models, /version, /openapi.json."""

from __future__ import annotations

import time
from typing import Literal

from pydantic import BaseModel
from starlette.requests import Request
from starlette.responses import Response

from server.gating import RouteGroup
from server.http import json_response
from server.openapi import build_openapi
from server.routing import Route
from server.services import ctx_of, routes_of
from server.settings import package_version

_STARTED = int(time.time())


class HealthResponse(BaseModel):
    status: Literal["ok", "degraded"]
    mode: str
    model: str
    engine: str | None = None
    live_sequences: int | None = None  # sequences holding engine memory (0 when idle)
    detail: str = ""
    worker: int | None = None  # which of --workers N processes answered (absent: the server runs alone)


class ModelCard(BaseModel):
    id: str
    object: Literal["model"] = "model"
    created: int
    owned_by: str = "tokenwire"
    root: str
    parent: str | None = None
    max_model_len: int


class ModelList(BaseModel):
    object: Literal["list"] = "list"
    data: list[ModelCard]


class VersionResponse(BaseModel):
    version: str


async def health(request: Request) -> Response:
    ctx = ctx_of(request)
    engine = ctx.engine
    status, detail, engine_kind, live = "ok", "", None, None
    if engine is not None:
        engine_kind = type(engine).__name__
        live = engine.live_sequences()
        h = await engine.health()
        if not h.ok:
            status, detail = "degraded", h.detail
    body = HealthResponse(status=status, mode=ctx.settings.mode.value, model=ctx.model_name,  # type: ignore[arg-type]
                          engine=engine_kind, live_sequences=live, detail=detail, worker=ctx.settings.worker)
    return json_response(body, status=200 if status == "ok" else 503)


async def models(request: Request) -> Response:
    ctx = ctx_of(request)
    card = ModelCard(id=ctx.model_name, created=_STARTED, root=str(ctx.settings.model_dir),
                     max_model_len=ctx.max_model_len)
    return json_response(ModelList(data=[card]))


async def version(request: Request) -> Response:
    return json_response(VersionResponse(version=package_version()))


async def openapi(request: Request) -> Response:
    return json_response(build_openapi(list(routes_of(request)), version=package_version()))


def routes() -> list[Route]:
    g = RouteGroup.ALWAYS
    return [
        Route("/health", health, g, ("GET",), "Liveness and engine health", response_model=HealthResponse,
              responses=((503, "The engine is unhealthy (status degraded)", HealthResponse),)),
        Route("/v1/models", models, g, ("GET",), "The served model (OpenAI shape)", response_model=ModelList),
        Route("/version", version, g, ("GET",), "tokenwire version", response_model=VersionResponse),
        Route("/openapi.json", openapi, g, ("GET",), "This document"),
    ]
