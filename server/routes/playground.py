"""The playground page at ``/`` and the browser client under ``/static/`` (``client_sdk/web``).

The files are read once, at app creation, and served from memory; only the files that exist in
``client_sdk/web`` are routes (one fixed route per file, no path parameters, so nothing outside
that folder can be named). Public (no API key: the page asks for it) and in
``RouteGroup.PLAYGROUND`` (``serve``, ``launch render --engine-url``).
"""

from __future__ import annotations

from pathlib import Path

from starlette.requests import Request
from starlette.responses import Response

from server.gating import RouteGroup
from server.routing import Endpoint, Route

WEB_DIR = Path(__file__).resolve().parents[2] / "client_sdk" / "web"
MEDIA_TYPES = {".html": "text/html; charset=utf-8", ".js": "text/javascript; charset=utf-8",
               ".css": "text/css; charset=utf-8", ".png": "image/png", ".svg": "image/svg+xml"}
HEADERS = {
    "Cache-Control": "no-cache",
    "X-Content-Type-Options": "nosniff",
    "Content-Security-Policy": "default-src 'self'; connect-src 'self' ws: wss:; img-src 'self' data:; "
                               "object-src 'none'; base-uri 'none'; frame-ancestors 'none'",
}


def _files() -> dict[str, Path]:
    if not WEB_DIR.is_dir():
        return {}
    return {p.name: p for p in sorted(WEB_DIR.iterdir()) if p.is_file() and p.suffix in MEDIA_TYPES}


def _endpoint(path: Path) -> Endpoint:
    body = path.read_bytes()
    media_type = MEDIA_TYPES[path.suffix]

    async def serve(request: Request) -> Response:
        return Response(body, media_type=media_type, headers=HEADERS)

    serve.__name__ = f"static_{path.stem}"
    return serve


def routes() -> list[Route]:
    files = _files()
    out: list[Route] = []
    if "index.html" in files:
        out.append(Route("/", _endpoint(files["index.html"]), RouteGroup.PLAYGROUND, ("GET",),
                         summary="The playground page (a chat over one WebSocket session)", tags=("playground",)))
    for name, path in files.items():
        out.append(Route(f"/static/{name}", _endpoint(path), RouteGroup.PLAYGROUND, ("GET",),
                         summary=f"Browser client file {name}", tags=("playground",)))
    return out
