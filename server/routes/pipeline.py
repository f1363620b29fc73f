"""The full-pipeline endpoints: OpenAI ``/v1/chat/completions``, ``/v1/completions`` and Anthropic
``/v1/messages``, JSON or SSE (``"stream": true``).

The routes only shuttle bytes (framed by ``server.sse``); ``server.pipeline`` composes the stages.
A client that disconnects mid-stream closes the response iterator, which closes the pipeline
stream, which closes its engine streams: each aborts its request at the engine
(``EngineStream.aclose``, docs/engine.md "Closing a stream").
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any, Literal

import orjson
from pydantic import BaseModel, ConfigDict
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse
from starlette.types import Send

from server.errors import error_response
from server.gating import RouteGroup
from server.http import GONE, json_response, read_json, until_disconnect
from server.pipeline.stream import PipelineStream
from server.routing import Route
from server.services import services_of
from server.sse import DONE, sse
from session.client_frames import Kind
from session.protocol.anthropic import MessagesRequest
from session.protocol.openai import ChatCompletionRequest, CompletionRequest
from session.protocol.openai_responses import ChatCompletionResponse, CompletionResponse

SSE_HEADERS = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}


class AnthropicUsage(BaseModel):
    input_tokens: int
    output_tokens: int


class AnthropicMessage(BaseModel):
    """The non-streaming ``/v1/messages`` answer (``session.derender.anthropic_out`` builds it; this model only
    declares its shape in the OpenAPI document). ``content`` holds ``text``, ``thinking`` and
    ``tool_use`` blocks."""

    model_config = ConfigDict(extra="allow")

    id: str
    type: Literal["message"]
    role: Literal["assistant"]
    model: str
    content: list[dict[str, Any]]
    stop_reason: str | None
    stop_sequence: str | None
    usage: AnthropicUsage


async def _serve(request: Request, kind: Kind) -> Response:
    pipeline = services_of(request).pipeline
    body = await read_json(request)
    if not body.get("stream"):
        answer = await until_disconnect(request, pipeline.complete(kind, body))
        if answer is GONE:  # the client left: its engine requests were aborted on the way out
            return Response(status_code=499)
        return json_response(answer)
    # Validate, render and admit before the first byte, so errors are plain HTTP errors.
    stream = await pipeline.open_stream(kind, body)
    flavor = "anthropic" if kind == "messages" else "openai"
    return _PipelineResponse(stream, flavor=flavor)


class _PipelineResponse(StreamingResponse):
    """The SSE answer of one pipeline stream, read inside the stream's own task group
    (:meth:`PipelineStream.running`), entered and left by the task that sends the response."""

    def __init__(self, stream: PipelineStream, *, flavor: str) -> None:
        super().__init__(_sse(stream.events(), flavor=flavor), media_type="text/event-stream", headers=SSE_HEADERS)
        self._stream = stream

    async def stream_response(self, send: Send) -> None:
        async with self._stream.running():
            await super().stream_response(send)


async def _sse(events: AsyncIterator[dict[str, Any]], *, flavor: str) -> AsyncIterator[bytes]:
    named = flavor == "anthropic"  # Anthropic events carry an ``event:`` line; OpenAI's are data-only
    try:
        async for payload in events:
            yield sse(payload, named=named)
    except Exception as exc:  # mid-stream failure: tell the client in the stream's own error shape
        yield sse(orjson.loads(error_response(exc, flavor=flavor).body), named=named)
    finally:
        await events.aclose()  # type: ignore[attr-defined]
    if not named:  # after an error event too, as vLLM: a client reading to [DONE] is not left waiting
        yield DONE


async def chat_completions(request: Request) -> Response:
    return await _serve(request, "chat")


async def completions(request: Request) -> Response:
    return await _serve(request, "completion")


async def messages(request: Request) -> Response:
    return await _serve(request, "messages")


def routes() -> list[Route]:
    g = RouteGroup.PIPELINE
    return [
        Route("/v1/chat/completions", chat_completions, g, summary="OpenAI chat completions (JSON or SSE)",
              request_model=ChatCompletionRequest, response_model=ChatCompletionResponse, streams=("POST",),
              tags=("openai",)),
        Route("/v1/completions", completions, g, summary="OpenAI completions (JSON or SSE)",
              request_model=CompletionRequest, response_model=CompletionResponse, streams=("POST",), tags=("openai",)),
        Route("/v1/messages", messages, g, summary="Anthropic messages (JSON or SSE)",
              request_model=MessagesRequest, response_model=AnthropicMessage, streams=("POST",), tags=("anthropic",)),
    ]
