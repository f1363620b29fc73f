"""``POST /v1/chat/completions/render``, ``/v1/completions/render``, ``/v1/messages/render``.

The body is validated into the session request model (a wrong type is a 400 naming the field),
then rendered. Chat templates and tokenization are CPU work, so renders run on a worker thread,
except small ones: a request body of at most ``INLINE_MAX_BODY_BYTES`` renders on the event loop,
because for those the thread hop costs more than the render (measured on this 2-core machine
class: a short chat renders in about 0.15-0.3 ms, a 1 KiB one in about 0.5 ms, while the hop
through ``anyio.to_thread`` added about 0.3 ms of p50 latency and halved requests/s at
concurrency 1; see docs/render.md).

The per-process :class:`~session.render.Renderer` is built once, at start-up
(``server/services.py``: it copies the tokenizer and compiles the template). Errors are raised and
translated once, in ``server.errors``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import anyio.to_thread
import orjson
from pydantic import BaseModel
from starlette.requests import Request
from starlette.responses import Response

from engine.protocol import GenerateRequest
from server.gating import RouteGroup
from server.http import read_json, validate
from server.routing import Route
from server.services import services_of
from session.protocol import ChatCompletionRequest, CompletionRequest, MessagesRequest
from session.render import Renderer

INLINE_MAX_BODY_BYTES = 1024

M = TypeVar("M", bound=BaseModel)


async def _render(request: Request, model: type[M], work: Callable[[Renderer, M], Any]) -> Response:
    req = validate(model, await read_json(request))
    renderer = services_of(request).renderer
    if len(await request.body()) <= INLINE_MAX_BODY_BYTES:
        result = work(renderer, req)
    else:
        result = await anyio.to_thread.run_sync(work, renderer, req)
    return Response(orjson.dumps(result), media_type="application/json")


def _chat(renderer: Renderer, req: ChatCompletionRequest) -> dict[str, Any]:
    return renderer.render_chat(req).to_wire()


def _completion(renderer: Renderer, req: CompletionRequest) -> list[dict[str, Any]]:
    return [g.to_wire() for g in renderer.render_completion(req)]


def _messages(renderer: Renderer, req: MessagesRequest) -> dict[str, Any]:
    return renderer.render_messages(req).to_wire()


async def render_chat(request: Request) -> Response:
    return await _render(request, ChatCompletionRequest, _chat)


async def render_completion(request: Request) -> Response:
    return await _render(request, CompletionRequest, _completion)


async def render_messages(request: Request) -> Response:
    return await _render(request, MessagesRequest, _messages)


def routes() -> list[Route]:
    g = RouteGroup.RENDER
    return [
        Route("/v1/chat/completions/render", render_chat, g, summary="Render a chat request to token ids",
              request_model=ChatCompletionRequest, response_model=GenerateRequest, tags=("render",)),
        Route("/v1/completions/render", render_completion, g,
              summary="Render a completion request: one GenerateRequest per prompt",
              request_model=CompletionRequest, response_model=list[GenerateRequest], tags=("render",)),
        Route("/v1/messages/render", render_messages, g, summary="Render an Anthropic messages request",
              request_model=MessagesRequest, response_model=GenerateRequest, tags=("render",)),
    ]
