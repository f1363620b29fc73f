"""A scripted vLLM-compatible tokens-only engine on a real socket, for end-to-end tests that need
specific model output (tool calls, reasoning) which the tiny random models cannot produce.

It speaks the real ``/inference/v1/generate`` protocol (JSON and SSE, usage chunk, ``[DONE]``), so
``tokenwire launch render --engine-url`` talks to it exactly as to ``serve --tokens-only`` or vLLM;
only the token ids are scripted. Every request gets the script (cut at ``max_tokens``)."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import AsyncIterator

import orjson
import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse
from starlette.routing import Route


class ScriptedEngine:
    def __init__(self, token_ids: list[int], *, step: int = 3) -> None:
        self.token_ids = token_ids
        self.step = step
        self.requests: list[dict] = []
        self.aborted: list[str] = []
        self.url = ""
        self._server: uvicorn.Server | None = None
        self._thread: threading.Thread | None = None

    def _app(self) -> Starlette:
        async def generate(request: Request) -> Response:
            body = orjson.loads(await request.body())
            self.requests.append(body)
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
                for start in range(0, len(ids), self.step):
                    part = ids[start:start + self.step]
                    last = start + self.step >= len(ids)
                    yield b"data: " + orjson.dumps({
                        "request_id": rid, "usage": None, "output_mode": "tokens",
                        "choices": [{"index": 0, "finish_reason": finish if last else None, "stop_reason": None,
                                     "token_ids": part, "logprobs": None}]}) + b"\n\n"
                yield b"data: " + orjson.dumps({"request_id": rid, "usage": usage, "output_mode": "tokens",
                                                "choices": []}) + b"\n\n"
                yield b"data: [DONE]\n\n"

            return StreamingResponse(events(), media_type="text/event-stream")

        async def abort(request: Request) -> Response:
            self.aborted.extend(orjson.loads(await request.body()).get("request_ids", []))
            return Response(b"")

        async def health(request: Request) -> Response:
            return Response(b"{}", media_type="application/json")

        return Starlette(routes=[Route("/inference/v1/generate", generate, methods=["POST"]),
                                 Route("/abort_requests", abort, methods=["POST"]),
                                 Route("/health", health, methods=["GET"])])

    def __enter__(self) -> ScriptedEngine:
        sock = socket.socket()
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
        self._server = uvicorn.Server(uvicorn.Config(self._app(), log_level="warning", lifespan="off"))
        self._thread = threading.Thread(target=self._server.run, kwargs={"sockets": [sock]}, daemon=True)
        self._thread.start()
        self.url = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 10
        while not self._server.started and time.monotonic() < deadline:
            time.sleep(0.01)
        return self

    def __exit__(self, *exc: object) -> None:
        assert self._server is not None and self._thread is not None
        self._server.should_exit = True
        self._thread.join(10)
