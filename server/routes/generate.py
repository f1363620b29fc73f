"""``POST /inference/v1/generate``, ``POST /abort_requests`` and ``GET /engine/stats``, in vLLM 0.32's
tokens-only shapes. A client that goes away has its generation aborted (the engine stream is
closed on the way out); errors before the first token are HTTP errors, after it an SSE ``error``
event. The shapes: docs/engine.md, "HTTP (vLLM 0.32 shapes)"; what the outputs become is
``server.generate_output``'s, the SSE bytes ``server.sse``'s.
"""

from __future__ import annotations

import logging
import secrets
from collections.abc import AsyncIterator

from starlette.requests import Request
from starlette.responses import Response, StreamingResponse

from engine.interface import Engine, EngineOutput, EngineStream
from engine.protocol import AbortRequest, GenerateRequest, GenerateResponse, generate_response_id
from server import metrics
from server.context import ServerContext
from server.errors import ApiError, openai_error_body, to_api_error
from server.gating import RouteGroup
from server.generate_output import GenerateOutputs
from server.http import GONE, json_response, parse_body, until_disconnect
from server.routing import Route
from server.services import ctx_of, services_of
from server.sse import DONE, sse
from session.errors import not_served_message
from session.protocol.generation_defaults import with_default_max_tokens

log = logging.getLogger("tokenwire.generate")


def _ctx(request: Request) -> ServerContext:
    return ctx_of(request)


def _engine(ctx: ServerContext) -> Engine:
    if ctx.engine is None:
        raise ApiError(503, "No engine is configured on this server; start it with `tokenwire serve` "
                            "or `tokenwire launch render --engine-url URL`.")
    return ctx.engine


async def generate(request: Request) -> Response:
    ctx = _ctx(request)
    engine = _engine(ctx)
    req = await parse_body(request, GenerateRequest)
    if req.model is not None and req.model != ctx.model_name:
        raise ApiError(404, not_served_message(req.model, ctx.model_name), param="model",
                       error_type="NotFoundError")
    # the model's default output limit where sampling_params name none, as vLLM's tokens-only serving
    req = with_default_max_tokens(req, services_of(request).renderer.generation_defaults, ctx.max_model_len)
    if req.request_id is None:
        req = req.model_copy(update={"request_id": secrets.token_hex(8)})
    assert req.request_id is not None
    outputs = GenerateOutputs(req, generate_response_id(req.request_id))
    stream = metrics.generate(engine, req)
    if req.stream:
        # Wait for the first step before sending headers, so admission and validation errors are
        # still plain HTTP errors; a client that leaves meanwhile aborts the request.
        first = await until_disconnect(request, _first(stream))
        if first is GONE:
            await stream.aclose()
            return Response(status_code=499)
        return StreamingResponse(_sse(stream, first, req, outputs), media_type="text/event-stream",
                                 headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"})
    collected = await until_disconnect(request, _collect(stream, outputs))
    if collected is GONE:  # the client left; the engine request was aborted on the way out
        return Response(status_code=499)
    return json_response(outputs.response(ctx.model_name))


async def _first(stream: EngineStream) -> EngineOutput | None:
    try:
        return await anext(stream)
    except StopAsyncIteration:
        return None
    except BaseException:
        await stream.aclose()
        raise


async def _collect(stream: EngineStream, outputs: GenerateOutputs) -> GenerateOutputs:
    try:
        async for out in stream:
            outputs.add(out)
    finally:
        await stream.aclose()
    return outputs


async def _sse(stream: EngineStream, first: EngineOutput | None, req: GenerateRequest,
               outputs: GenerateOutputs) -> AsyncIterator[bytes]:
    opts = req.stream_options
    include_usage = bool(opts and opts.include_usage)
    continuous = include_usage and bool(opts and opts.continuous_usage_stats)
    try:
        pending = first
        while pending is not None:
            chunk = outputs.chunk(pending, running_usage=continuous)
            if chunk is not None:
                yield sse(chunk)
            if pending.finished:
                break
            pending = await anext(stream, None)
        if include_usage:
            yield sse(outputs.usage_chunk())
    except Exception as exc:  # after the headers went out: an SSE error event, never exception text
        yield sse(openai_error_body(to_api_error(exc)))
    finally:
        await stream.aclose()
    yield DONE


async def abort_requests(request: Request) -> Response:
    ctx = _ctx(request)
    body = await parse_body(request, AbortRequest)
    if ctx.engine is not None and body.request_ids:
        await ctx.engine.abort(body.request_ids)
    return Response(status_code=200)


async def engine_stats(request: Request) -> Response:
    ctx = _ctx(request)
    engine = _engine(ctx)
    health = await engine.health()
    return json_response({"engine": type(engine).__name__, "ok": health.ok, "detail": health.detail,
                          "live_sequences": engine.live_sequences(), "stats": health.stats})


def routes() -> list[Route]:
    return [
        Route("/inference/v1/generate", generate, RouteGroup.GENERATE,
              summary="Generate token ids from token ids (vLLM tokens-only API)",
              request_model=GenerateRequest, response_model=GenerateResponse, streams=("POST",), tags=("generate",)),
        Route("/abort_requests", abort_requests, RouteGroup.ABORT,
              summary="Abort running generate requests by id (unknown ids are ignored)",
              request_model=AbortRequest, tags=("generate",)),
        Route("/inference/v1/abort_requests", abort_requests, RouteGroup.ABORT,
              summary="Same as /abort_requests (vLLM 0.32's path)", request_model=AbortRequest,
              tags=("generate",)),
        Route("/engine/stats", engine_stats, RouteGroup.GENERATE, ("GET",),
              summary="Engine counters: running, waiting and live sequences, KV memory, dtype",
              tags=("generate",)),
    ]

