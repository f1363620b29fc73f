"""``POST /inference/v1/generate``, ``POST /abort_requests`` and ``GET /engine/stats``.

Generate speaks vLLM 0.32's tokens-only shapes: the body is a ``GenerateRequest`` (render's
output verbatim, or just ``{token_ids, sampling_params}``); the answer is a ``GenerateResponse``
with id ``generate-tokens-<request id>``, or with ``"stream": true`` one SSE event per engine
step carrying that step's new tokens, then (with ``stream_options.include_usage``) a usage-only
event with ``choices: []``, then ``data: [DONE]``.

A client that goes away mid-request has its generation aborted: for SSE, Starlette cancels the
stream when the client disconnects; for JSON, :func:`server.http.until_disconnect` watches the socket
while the engine works. Engine errors raised before the first token are HTTP errors (translated
once in ``server.errors``); an error after the stream started is an SSE ``error`` event.

``/abort_requests`` (``{"request_ids": [...]}``) answers 200 with an empty body, also for
unknown ids; it exists in ``--tokens-only`` mode only (vLLM 0.32 also serves it under
``/inference/v1/abort_requests``, and so do we).
"""

from __future__ import annotations

import logging
import secrets
from collections.abc import AsyncIterator

import anyio
import orjson
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse

from engine.interface import Engine, EngineOutput
from engine.protocol import (
    AbortRequest,
    ChoiceLogprobs,
    GenerateChoice,
    GenerateRequest,
    GenerateResponse,
    GenerateStreamResponse,
    UsageInfo,
    generate_response_id,
)
from server import metrics
from server.context import ServerContext
from server.errors import ApiError, openai_error_body, to_api_error
from server.gating import RouteGroup
from server.http import GONE, json_response, parse_body, until_disconnect
from server.routing import Route
from server.services import ctx_of

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
        raise ApiError(404, f"The model `{req.model}` does not exist.", param="model",
                       error_type="NotFoundError")
    if req.request_id is None:
        req = req.model_copy(update={"request_id": secrets.token_hex(8)})
    assert req.request_id is not None
    response_id = generate_response_id(req.request_id)
    outputs = metrics.generate(engine, req)
    if req.stream:
        # Wait for the first step before sending headers, so admission and validation errors are
        # still plain HTTP errors; a client that leaves meanwhile aborts the request.
        first = await until_disconnect(request, _first(outputs))
        if first is GONE:
            await _close(outputs)
            return Response(status_code=499)
        return StreamingResponse(_sse(outputs, first, req, response_id), media_type="text/event-stream",
                                 headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"})
    collected = await until_disconnect(request, _collect(outputs))
    if collected is GONE:  # the client left; the engine request was aborted on the way out
        return Response(status_code=499)
    return json_response(_response(collected, req, response_id, ctx.model_name))




async def _first(outputs: AsyncIterator[EngineOutput]) -> EngineOutput | None:
    try:
        return await anext(outputs)
    except StopAsyncIteration:
        return None
    except BaseException:
        await _close(outputs)
        raise


async def _close(outputs: AsyncIterator[EngineOutput]) -> None:
    aclose = getattr(outputs, "aclose", None)
    if aclose is not None:
        with anyio.CancelScope(shield=True):
            await aclose()


async def _collect(outputs: AsyncIterator[EngineOutput]) -> list[EngineOutput]:
    out: list[EngineOutput] = []
    try:
        async for item in outputs:
            out.append(item)
    finally:
        await _close(outputs)
    return out


def _response(outputs: list[EngineOutput], req: GenerateRequest, response_id: str, model: str) -> GenerateResponse:
    want_logprobs = req.sampling_params.logprobs is not None
    choices: dict[int, GenerateChoice] = {}
    usage: UsageInfo | None = None
    for out in outputs:
        for delta in out.choices:
            choice = choices.get(delta.index)
            if choice is None:
                choice = choices[delta.index] = GenerateChoice(
                    index=delta.index, token_ids=[],
                    logprobs=ChoiceLogprobs(content=[]) if want_logprobs else None)
            assert choice.token_ids is not None
            choice.token_ids.extend(delta.token_ids)
            if choice.logprobs is not None and delta.logprobs:
                choice.logprobs.content.extend(delta.logprobs)
            if delta.finish_reason is not None:
                choice.finish_reason, choice.stop_reason = delta.finish_reason, delta.stop_reason
        usage = out.usage or usage
    if usage is None:
        completion = sum(len(c.token_ids or ()) for c in choices.values())
        usage = UsageInfo.of(len(req.token_ids), completion)
    return GenerateResponse(request_id=response_id, model=model, usage=usage,
                            choices=[choices[i] for i in sorted(choices)])


def _chunk(out: EngineOutput, response_id: str, want_logprobs: bool, usage: UsageInfo | None) -> bytes:
    choices = [GenerateChoice(index=c.index, finish_reason=c.finish_reason, stop_reason=c.stop_reason,
                              token_ids=c.token_ids,
                              logprobs=ChoiceLogprobs(content=c.logprobs or []) if want_logprobs else None)
               for c in out.choices]
    body = GenerateStreamResponse(request_id=response_id, usage=usage, choices=choices)
    return b"data: " + orjson.dumps(body.model_dump(mode="json")) + b"\n\n"


def _usage_chunk(usage: UsageInfo, response_id: str) -> bytes:
    body = {"request_id": response_id, "usage": usage.model_dump(mode="json", exclude_none=True),
            "output_mode": "tokens", "choices": []}
    return b"data: " + orjson.dumps(body) + b"\n\n"


async def _sse(outputs: AsyncIterator[EngineOutput], first: EngineOutput | None, req: GenerateRequest,
               response_id: str) -> AsyncIterator[bytes]:
    opts = req.stream_options
    include_usage = bool(opts and opts.include_usage)
    continuous = include_usage and bool(opts and opts.continuous_usage_stats)
    want_logprobs = req.sampling_params.logprobs is not None
    prompt_tokens = len(req.token_ids)
    completion = 0
    usage: UsageInfo | None = None
    try:
        pending = first
        while pending is not None:
            completion += sum(len(c.token_ids) for c in pending.choices)
            usage = pending.usage or usage
            if pending.choices:
                running = UsageInfo.of(prompt_tokens, completion) if continuous else None
                yield _chunk(pending, response_id, want_logprobs, running)
            if pending.finished:
                break
            pending = await anext(outputs, None)
        if include_usage:
            yield _usage_chunk(usage or UsageInfo.of(prompt_tokens, completion), response_id)
    except Exception as exc:  # after the headers went out: an SSE error event, never exception text
        err = to_api_error(exc)
        yield b"data: " + orjson.dumps(openai_error_body(err)) + b"\n\n"
    finally:
        await _close(outputs)
    yield b"data: [DONE]\n\n"


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
              request_model=GenerateRequest, response_model=GenerateResponse, streams=True, tags=("generate",)),
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
