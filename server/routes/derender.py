"""``POST /v1/chat/completions/derender`` and ``/v1/completions/derender`` (vLLM's shapes).

Without ``"stream": true`` the body carries whole engine responses and the answer is a
``ChatCompletionResponse`` / ``CompletionResponse``. With it, the body carries one engine chunk
(``generate_chunk``, one choice) and the opaque ``stream_state`` the previous call returned
(``null`` first); the answer is ``{"chunk", "stream_state"}``. The state is signed with the
process's :class:`~session.state.StateCodec` (``--state-secret``), so replicas sharing the secret
continue each other's streams; this route is stateless, so it cannot refuse a replayed state
(docs/derender.md).

A streaming call is :meth:`~session.derender.DerenderService.step`, the one the WebSocket
``derender`` frames make too. Small calls (a streaming step of a few tokens) run on the event loop:
they cost tens of microseconds, less than a thread hop. Bodies over
``session.derender.INLINE_BODY_BYTES`` are validated and derendered on a worker thread.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

import anyio.to_thread
import orjson
from starlette.requests import Request
from starlette.responses import Response

from server.gating import RouteGroup
from server.http import read_json, validate
from server.routing import Route
from server.services import services_of
from session.derender import INLINE_BODY_BYTES, DerenderService
from session.protocol.openai_responses import (
    ChatCompletionResponse,
    CompletionResponse,
    DerenderChatRequest,
    DerenderChatStreamRequest,
    DerenderChatStreamResponse,
    DerenderCompletionRequest,
    DerenderCompletionStreamRequest,
    DerenderCompletionStreamResponse,
)

log = logging.getLogger("tokenwire")


def _service(request: Request) -> DerenderService:
    service = services_of(request).derender
    assert service is not None, "built at start-up wherever these routes are served (server/services.py)"
    return service


async def _run(request: Request, work: Callable[[], dict[str, Any]]) -> Response:
    body = await request.body()
    if len(body) > INLINE_BODY_BYTES:
        result = await anyio.to_thread.run_sync(work)
    else:
        result = work()
    return Response(orjson.dumps(result), media_type="application/json")


async def derender_chat(request: Request) -> Response:
    raw = await read_json(request)
    service = _service(request)

    def work() -> dict[str, Any]:
        if raw.get("stream") is True:
            return service.step("chat", raw, now=int(time.time()))
        return service.chat(validate(DerenderChatRequest, raw))

    return await _run(request, work)


async def derender_completion(request: Request) -> Response:
    raw = await read_json(request)
    service = _service(request)

    def work() -> dict[str, Any]:
        if raw.get("stream") is True:
            return service.step("completion", raw, now=int(time.time()))
        return service.completion(validate(DerenderCompletionRequest, raw))

    return await _run(request, work)


def routes() -> list[Route]:
    g = RouteGroup.DERENDER
    return [
        Route("/v1/chat/completions/derender", derender_chat, g,
              summary="Engine token ids → ChatCompletionResponse; with stream: true, one chunk and the "
                      "signed stream_state to send with the next one",
              request_model=DerenderChatRequest | DerenderChatStreamRequest,
              response_model=ChatCompletionResponse | DerenderChatStreamResponse, tags=("derender",)),
        Route("/v1/completions/derender", derender_completion, g,
              summary="Engine token ids (one response per prompt) → CompletionResponse; with stream: true, "
                      "one chunk and the signed stream_state",
              request_model=DerenderCompletionRequest | DerenderCompletionStreamRequest,
              response_model=CompletionResponse | DerenderCompletionStreamResponse, tags=("derender",)),
    ]
