"""``GET /metrics``: Prometheus metrics (``server.metrics``), public like ``/health``."""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import Response

from server import metrics as m
from server.gating import RouteGroup
from server.routing import Route


async def metrics(request: Request) -> Response:
    return Response(m.exposition(), media_type=m.CONTENT_TYPE)


def routes() -> list[Route]:
    return [Route("/metrics", metrics, RouteGroup.ALWAYS, ("GET",), "Prometheus metrics",
                  content_type="text/plain", tags=("always",))]
