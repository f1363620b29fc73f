"""A recording reverse proxy for HTTP clients under test (Claude Code): every request is passed to the
upstream server as it came (streamed answers streamed back chunk by chunk) and kept with its method,
path, headers and body, and the answer's status, headers and body, so a test can check exactly what a
real client sent and got."""

from __future__ import annotations

import asyncio
import json
import socket
import threading
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import httpx
import uvicorn
from starlette.applications import Starlette
from starlette.background import BackgroundTask
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse
from starlette.routing import Route

HOP_BY_HOP = {"connection", "keep-alive", "transfer-encoding", "te", "upgrade", "proxy-authorization", "trailer",
              "content-length", "host"}
# asked of the upstream without compression, so the recorded answer is the bytes the client gets
NOT_FORWARDED = HOP_BY_HOP | {"accept-encoding"}


@dataclass
class Exchange:
    method: str
    path: str
    query: str
    headers: dict[str, str]
    body: bytes
    status: int = 0
    response_headers: dict[str, str] = field(default_factory=dict)
    response_body: bytes = b""  # every chunk passed on so far (appended before the client gets it)

    def json(self) -> Any:
        return json.loads(self.body)

    def sse_events(self) -> list[dict[str, Any]]:
        """The answer's server-sent events' ``data`` objects (an SSE answer)."""
        out = []
        for line in self.response_body.decode().splitlines():
            if line.startswith("data:"):
                out.append(json.loads(line[5:]))
        return out


class RecordingProxy:
    """``with RecordingProxy(upstream_url) as proxy:`` point the client at ``proxy.url``."""

    def __init__(self, upstream: str) -> None:
        self.upstream = upstream.rstrip("/")
        self.exchanges: list[Exchange] = []
        self._lock = threading.Lock()
        self._sock = socket.socket()
        self._sock.bind(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self._sock.getsockname()[1]}"
        app = Starlette(routes=[Route("/{path:path}", self._forward,
                                      methods=["GET", "POST", "PUT", "PATCH", "DELETE", "HEAD", "OPTIONS"])])
        self._server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="off"))
        self._thread = threading.Thread(target=lambda: asyncio.run(self._server.serve(sockets=[self._sock])),
                                        daemon=True)
        self._client: httpx.AsyncClient | None = None

    async def _forward(self, request: Request) -> Response:
        if self._client is None:
            self._client = httpx.AsyncClient(timeout=httpx.Timeout(600.0, connect=10.0))
        body = await request.body()
        ex = Exchange(request.method, request.url.path, request.url.query, dict(request.headers), body)
        with self._lock:
            self.exchanges.append(ex)
        headers = {k: v for k, v in request.headers.items() if k.lower() not in NOT_FORWARDED}
        url = self.upstream + request.url.path + (f"?{request.url.query}" if request.url.query else "")
        upstream = await self._client.send(self._client.build_request(request.method, url, headers=headers,
                                                                       content=body), stream=True)
        ex.status = upstream.status_code
        ex.response_headers = dict(upstream.headers)

        async def relay() -> AsyncIterator[bytes]:
            async for chunk in upstream.aiter_raw():
                ex.response_body += chunk
                yield chunk

        out_headers = {k: v for k, v in upstream.headers.items() if k.lower() not in HOP_BY_HOP}
        return StreamingResponse(relay(), status_code=upstream.status_code, headers=out_headers,
                                 background=BackgroundTask(upstream.aclose))

    def __enter__(self) -> RecordingProxy:
        self._thread.start()
        deadline = time.monotonic() + 10
        while not self._server.started:
            if time.monotonic() > deadline:
                raise RuntimeError("the recording proxy did not start")
            time.sleep(0.02)
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.should_exit = True
        self._thread.join(10)

    def taken(self) -> list[Exchange]:
        with self._lock:
            return list(self.exchanges)
