"""``POST /v1/chat/completions/render``, ``/v1/completions/render``, ``/v1/messages/render``.

The body is validated into the session request model (a wrong type is a 400 naming the field),
then rendered. Chat templates and tokenization are CPU work, so renders run on a worker thread,
except small ones: a request body of at most ``INLINE_MAX_BODY_BYTES`` renders on the event loop,
because for those the thread hop costs more than the render (measured on this 2-core machine
class: a short chat renders in about 0.15-0.3 ms, a 1 KiB one in about 0.5 ms, while the hop
through ``anyio.to_thread`` added about 0.3 ms of p50 latency and halved requests/s at
concurrency 1; see docs/render.md).

The per-process :class:`~session.render.Renderer` is built once through
``ctx.service(renderer_of)`` -- at startup when the app calls :func:`prepare`, else on a worker
thread by the first request (it copies the tokenizer and compiles the template). Errors are
raised and translated once, in ``server.errors``.
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
from server import metrics
from server.context import ServerContext
from server.gating import RouteGroup
from server.http import read_json, validate
from server.routes import Route
from session.protocol import ChatCompletionRequest, CompletionRequest, MessagesRequest
from session.render import Renderer
from session.render.vision import Vision

INLINE_MAX_BODY_BYTES = 1024

M = TypeVar("M", bound=BaseModel)


def renderer_of(ctx: ServerContext) -> Renderer:
    """The process's renderer (a ``ctx.service`` factory): the model's tokenizer, its chat
    template or ``--chat-template``, the tool-choice flags, and its image processor when the model
    takes images."""
    s = ctx.settings
    renderer = Renderer(ctx.tokenizer, model_name=ctx.model_name, max_model_len=ctx.max_model_len,
                        chat_template=s.chat_template, tool_call_parser=s.tool_call_parser,
                        enable_auto_tool_choice=s.enable_auto_tool_choice,
                        vision=Vision.load(s.model_dir, ctx.tokenizer))
    return metrics.time_methods(renderer, metrics.RENDER_SECONDS,  # type: ignore[no-any-return]
                                ("render_chat", "render_completion", "render_messages"))


def prepare(ctx: ServerContext) -> None:
    """Build the renderer before serving: the first request does not pay for it, and a
    ``--chat-template`` that does not compile stops startup (a ``ValueError``)."""
    ctx.service(renderer_of)


async def _renderer(request: Request) -> Renderer:
    state = request.app.state
    renderer: Renderer | None = getattr(state, "renderer", None)
    if renderer is None:
        from server.app import ctx_of

        renderer = await anyio.to_thread.run_sync(ctx_of(request).service, renderer_of)
        state.renderer = renderer
    return renderer


async def _render(request: Request, model: type[M], work: Callable[[Renderer, M], Any]) -> Response:
    req = validate(model, await read_json(request))
    renderer = await _renderer(request)
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
