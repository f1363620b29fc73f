"""``POST /v1/chat/completions/render``, ``/v1/completions/render``, ``/v1/messages/render``.

The body is validated into the session request model (a wrong type is a 400 naming the field),
then rendered on a worker thread: chat templates and tokenization are CPU work that must not
stall the event loop. The per-process :class:`~session.render.Renderer` is built once through
``ctx.service(renderer_of)`` (on the worker thread too: it copies the tokenizer and compiles the
template). Errors are raised and translated once, in ``server.errors``.
"""

from __future__ import annotations

from typing import Any

import anyio.to_thread
import orjson
from starlette.requests import Request
from starlette.responses import Response

from server.context import ServerContext
from server.gating import RouteGroup
from server.http import read_json, validate
from server.routes import Route
from session.protocol import ChatCompletionRequest, CompletionRequest, MessagesRequest
from session.render import Renderer


def renderer_of(ctx: ServerContext) -> Renderer:
    """The process's renderer (a ``ctx.service`` factory): the model's tokenizer, its chat
    template or ``--chat-template``, and the tool-choice flags."""
    s = ctx.settings
    return Renderer(ctx.tokenizer, model_name=ctx.model_name, max_model_len=ctx.max_model_len,
                    chat_template=s.chat_template, tool_call_parser=s.tool_call_parser,
                    enable_auto_tool_choice=s.enable_auto_tool_choice)


def _ctx(request: Request) -> ServerContext:
    from server.app import ctx_of

    return ctx_of(request)


def _json(data: Any) -> Response:
    return Response(orjson.dumps(data), media_type="application/json")


async def render_chat(request: Request) -> Response:
    ctx = _ctx(request)
    req = validate(ChatCompletionRequest, await read_json(request))

    def work() -> dict[str, Any]:
        return ctx.service(renderer_of).render_chat(req).to_wire()

    return _json(await anyio.to_thread.run_sync(work))


async def render_completion(request: Request) -> Response:
    ctx = _ctx(request)
    req = validate(CompletionRequest, await read_json(request))

    def work() -> list[dict[str, Any]]:
        return [g.to_wire() for g in ctx.service(renderer_of).render_completion(req)]

    return _json(await anyio.to_thread.run_sync(work))


async def render_messages(request: Request) -> Response:
    ctx = _ctx(request)
    req = validate(MessagesRequest, await read_json(request))

    def work() -> dict[str, Any]:
        return ctx.service(renderer_of).render_messages(req).to_wire()

    return _json(await anyio.to_thread.run_sync(work))


def routes() -> list[Route]:
    g = RouteGroup.RENDER
    return [
        Route("/v1/chat/completions/render", render_chat, g, summary="Render a chat request to token ids",
              request_model=ChatCompletionRequest, tags=("render",)),
        Route("/v1/completions/render", render_completion, g,
              summary="Render a completion request: one GenerateRequest per prompt",
              request_model=CompletionRequest, tags=("render",)),
        Route("/v1/messages/render", render_messages, g, summary="Render an Anthropic messages request",
              request_model=MessagesRequest, tags=("render",)),
    ]
