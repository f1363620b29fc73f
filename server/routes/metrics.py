"""``GET /metrics``: Prometheus metrics (``server.metrics``), public like ``/health``; under ``--workers N``
every worker's, labelled (server/workers.py)."""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import Response

from server import metrics as m
from server.gating import RouteGroup
from server.routing import Route
from server.worker_metrics import gathered_metrics


async def metrics(request: Request) -> Response:
    seat = getattr(request.app.state, "worker_seat", None)
    if seat is not None:  # one of --workers N: every worker's samples, labelled worker="K"
        return Response(await gathered_metrics(seat), media_type=m.CONTENT_TYPE)
    return Response(m.exposition(), media_type=m.CONTENT_TYPE)


def routes() -> list[Route]:
    return [Route("/metrics", metrics, RouteGroup.ALWAYS, ("GET",), "Prometheus metrics",
                  content_type="text/plain", tags=("always",))]
