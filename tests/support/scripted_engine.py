"""A scripted vLLM-compatible tokens-only engine on a real socket, for end-to-end tests that need
specific model output (tool calls, reasoning) which the tiny random models cannot produce, or an
engine that misbehaves on cue.

It speaks the real ``/inference/v1/generate`` protocol (JSON and SSE, usage chunk, ``[DONE]``), so
``tokenwire launch render --engine-url`` talks to it exactly as to ``serve --tokens-only`` or vLLM;
only the token ids are scripted. Every request gets the script (cut at ``max_tokens``).

Faults (set :attr:`ScriptedEngine.fault` at any time; ``None`` behaves):

- ``"status_500"``: generate answers HTTP 500;
- ``"garbage"``: an SSE stream whose first event is not JSON; ``"wrong_shape"``: JSON that is not a
  generate chunk;
- ``"hang"``: accepts the request and never answers; ``"hang_mid_stream"``: one event, then nothing;
- ``"die_mid_stream"``: one event, then the connection drops;
- ``"unhealthy"``: ``/health`` answers 503.

:meth:`stop` and :meth:`start` take the engine down and bring it back on the same port (a remote
engine that dies and returns).
"""

from __future__ import annotations

import asyncio
import socket
import threading
import time
from collections.abc import AsyncIterator
from typing import Any

import orjson
import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse
from starlette.routing import Route

from tests.support.waiting import wait_until

FAULTS = ("status_500", "garbage", "wrong_shape", "hang", "hang_mid_stream", "die_mid_stream", "unhealthy")


class EngineDied(Exception):
    """Raised inside a streaming answer: uvicorn drops the connection mid-stream."""


class ScriptedEngine:
    def __init__(self, token_ids: list[int], *, step: int = 3, fault: str | None = None) -> None:
        self.token_ids = token_ids
        self.step = step
        self.fault = fault
        self.requests: list[dict[str, Any]] = []
        self.aborted: list[str] = []
        self.url = ""
        self.port = 0
        self._server: uvicorn.Server | None = None
        self._thread: threading.Thread | None = None

    def _chunk(self, rid: str, ids: list[int], finish: str | None) -> bytes:
        return b"data: " + orjson.dumps({
            "request_id": rid, "usage": None, "output_mode": "tokens",
            "choices": [{"index": 0, "finish_reason": finish, "stop_reason": None, "token_ids": ids,
                         "logprobs": None}]}) + b"\n\n"

    def _app(self) -> Starlette:
        async def generate(request: Request) -> Response:
            body = orjson.loads(await request.body())
            self.requests.append(body)
            fault = self.fault
            if fault == "status_500":
                return Response(b'{"error": {"message": "boom"}}', status_code=500, media_type="application/json")
            if fault == "hang":
                await asyncio.sleep(3600)
            rid = "generate-tokens-" + (body.get("request_id") or "x")
            sp = body.get("sampling_params") or {}
            ids = self.token_ids[: sp.get("max_tokens") or len(self.token_ids)]
            finish = "stop" if len(ids) == len(self.token_ids) else "length"
            usage = {"prompt_tokens": len(body["token_ids"]), "completion_tokens": len(ids),
                     "total_tokens": len(body["token_ids"]) + len(ids)}
            if not body.get("stream"):
                return Response(orjson.dumps({
                    "request_id": rid, "model": "scripted", "created": int(time.time()), "usage": usage,
                    "output_mode": "tokens", "choices": [{"index": 0, "finish_reason": finish, "stop_reason": None,
                                                          "token_ids": ids, "logprobs": None}]}),
                                media_type="application/json")

            async def events() -> AsyncIterator[bytes]:
                if fault == "garbage":
                    yield b"data: this is not json\n\n"
                    return
                if fault == "wrong_shape":
                    yield b'data: {"tokens": [1, 2, 3]}\n\n'
                    return
                for start in range(0, len(ids), self.step):
                    part = ids[start:start + self.step]
                    last = start + self.step >= len(ids)
                    yield self._chunk(rid, part, finish if last else None)
                    if fault == "hang_mid_stream":
                        await asyncio.sleep(3600)
                    if fault == "die_mid_stream":
                        raise EngineDied("scripted engine died mid-stream")
                yield b"data: " + orjson.dumps({"request_id": rid, "usage": usage, "output_mode": "tokens",
                                                "choices": []}) + b"\n\n"
                yield b"data: [DONE]\n\n"

            return StreamingResponse(events(), media_type="text/event-stream")

        async def abort(request: Request) -> Response:
            self.aborted.extend(orjson.loads(await request.body()).get("request_ids", []))
            return Response(b"")

        async def health(request: Request) -> Response:
            if self.fault == "unhealthy":
                return Response(b"{}", status_code=503, media_type="application/json")
            return Response(b"{}", media_type="application/json")

        return Starlette(routes=[Route("/inference/v1/generate", generate, methods=["POST"]),
                                 Route("/abort_requests", abort, methods=["POST"]),
                                 Route("/health", health, methods=["GET"])])

    def start(self) -> ScriptedEngine:
        """Serve (again, on the same port after :meth:`stop`)."""
        sock = socket.socket()
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(("127.0.0.1", self.port))
        self.port = sock.getsockname()[1]
        self._server = uvicorn.Server(uvicorn.Config(self._app(), log_level="critical", lifespan="off",
                                                     timeout_graceful_shutdown=1))
        self._thread = threading.Thread(target=self._server.run, kwargs={"sockets": [sock]}, daemon=True)
        self._thread.start()
        self.url = f"http://127.0.0.1:{self.port}"
        server = self._server
        wait_until(lambda: server.started, "the scripted engine's server to start", timeout=10, interval=0.01)
        return self

    def stop(self) -> None:
        """Go down: stop listening and drop every connection (a dead engine)."""
        assert self._server is not None and self._thread is not None
        self._server.should_exit = True
        self._server.force_exit = True
        self._thread.join(10)
        self._server = None

    def __enter__(self) -> ScriptedEngine:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        if self._server is not None:
            self.stop()
