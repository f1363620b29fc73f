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

import json
import logging
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio.to_thread
import orjson
from starlette.requests import Request
from starlette.responses import Response

from server import metrics
from server.context import ServerContext
from server.gating import RouteGroup
from server.http import read_json, validate
from server.routes import Route
from session.derender import INLINE_BODY_BYTES, DerenderService, resolve_parsers
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
from session.state import StateCodec

log = logging.getLogger("tokenwire")


def state_codec_of(ctx: ServerContext) -> StateCodec:
    """The process's state codec (a ``ctx.service`` factory): ``--state-secret`` /
    ``TOKENWIRE_STATE_SECRET`` (and the previous secret while rotating), else a random per-process
    secret and a WARNING."""
    return StateCodec.from_secret(ctx.settings.state_secret, previous=ctx.settings.previous_state_secret)


def model_vocab_size(model_dir: Path) -> int | None:
    """The model's ``vocab_size`` from its ``config.json`` (a vision-language model's
    ``text_config``), or None without one. Real models pad it past the tokenizer's ids; those
    extra ids are valid output ids that decode to nothing."""
    try:
        config = json.loads((model_dir / "config.json").read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(config, dict):
        return None
    text = config.get("text_config")
    for section in (config, text if isinstance(text, dict) else {}):
        value = section.get("vocab_size")
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            return value
    return None


def derender_service_of(ctx: ServerContext) -> DerenderService:
    """The process's derender service (a ``ctx.service`` factory): the model's tokenizer, the
    configured parsers, the state codec and the model's ``vocab_size`` (the bound on token ids).
    Shared by the HTTP routes and WebSocket frames."""
    s = ctx.settings
    parsers = resolve_parsers(s.tool_call_parser, s.reasoning_parser,
                              enable_auto_tool_choice=s.enable_auto_tool_choice)
    service = DerenderService(ctx.tokenizer, model_name=ctx.model_name, max_model_len=ctx.max_model_len,
                              parsers=parsers, codec=ctx.service(state_codec_of),
                              vocab_size=model_vocab_size(s.model_dir))
    return metrics.time_methods(service, metrics.DERENDER_SECONDS,  # type: ignore[no-any-return]
                                ("chat", "chat_stream", "completion", "completion_stream"))  # step calls *_stream


def prepare(ctx: ServerContext) -> None:
    """At app creation (before serving): build the service, so unknown parser names fail startup
    (``ValueError``: the CLI prints it and exits) and a missing ``--state-secret`` is warned about
    now, not at the first request."""
    if RouteGroup.DERENDER in ctx.gating:
        ctx.service(derender_service_of)


def _ctx(request: Request) -> ServerContext:
    from server.app import ctx_of

    return ctx_of(request)


async def _run(request: Request, work: Callable[[], dict[str, Any]]) -> Response:
    body = await request.body()
    if len(body) > INLINE_BODY_BYTES:
        result = await anyio.to_thread.run_sync(work)
    else:
        result = work()
    return Response(orjson.dumps(result), media_type="application/json")


async def derender_chat(request: Request) -> Response:
    ctx = _ctx(request)
    raw = await read_json(request)
    service = ctx.service(derender_service_of)  # built by prepare() at startup

    def work() -> dict[str, Any]:
        if raw.get("stream") is True:
            return service.step("chat", raw, now=int(time.time()))
        return service.chat(validate(DerenderChatRequest, raw))

    return await _run(request, work)


async def derender_completion(request: Request) -> Response:
    ctx = _ctx(request)
    raw = await read_json(request)
    service = ctx.service(derender_service_of)  # built by prepare() at startup

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
