"""``POST /v1/chat/completions/render``, ``/v1/completions/render``, ``/v1/messages/render``.

The body is validated into the session request model (a wrong type is a 400 naming the field),
then rendered: on the event loop when the body is small, else on a worker thread
(``server/render_work.py`` decides it, for these routes and the pipeline alike).

The per-process :class:`~session.render.Renderer` is built once, at start-up
(``server/services.py``: it copies the tokenizer and compiles the template). Errors are raised and
translated once, in ``server.errors``.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, TypeVar

import orjson
from pydantic import BaseModel
from starlette.requests import Request
from starlette.responses import Response

from engine.protocol import GenerateRequest
from server.gating import RouteGroup
from server.http import read_json, validate
from server.render_work import render_work
from server.routing import Route
from server.services import services_of
from session.protocol import ChatCompletionRequest, CompletionRequest, MessagesRequest
from session.render import Renderer

M = TypeVar("M", bound=BaseModel)


async def _render(request: Request, model: type[M], work: Callable[[Renderer, M], Any]) -> Response:
    req = validate(model, await read_json(request))
    renderer = services_of(request).renderer
    result = await render_work(functools.partial(work, renderer), req, len(await request.body()))
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
