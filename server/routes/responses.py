"""The OpenAI Responses API over HTTP: ``POST /v1/responses`` (JSON, or SSE with
``"stream": true``), the stored responses (``GET`` / ``DELETE /v1/responses/{id}``, ``POST
/v1/responses/{id}/cancel``, ``GET /v1/responses/{id}/input_items``), ``POST
/v1/responses/input_tokens`` and the stateless ``POST /v1/responses/render``.

The routes only shuttle bytes; ``server.responses`` does the work (the same service the WebSocket
mode uses, so both send the same events). docs/responses.md.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict
from starlette.convertors import Convertor, register_url_convertor
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse

from engine.protocol import GenerateRequest
from server.errors import ApiError
from server.gating import RouteGroup
from server.http import GONE, json_response, read_json, until_disconnect
from server.limits import client_key, key_of
from server.responses import ResponseStream, responses_of
from server.routing import Query, Route
from server.services import ctx_of
from server.sse import sse
from session.protocol.responses import ResponsesRequest

SSE_HEADERS = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}


class _ResponseId(Convertor[str]):
    """A response id in a path: any segment but the names of the sibling routes (``render``,
    ``input_tokens``), so that ``/v1/responses/render`` is never read as a response's path."""

    regex = r"(?!(?:render|input_tokens)(?:/|$))[^/]+"

    def convert(self, value: str) -> str:
        return value

    def to_string(self, value: str) -> str:
        return value


register_url_convertor("response_id", _ResponseId())
ID = "{response_id:response_id}"


class _Open(BaseModel):
    model_config = ConfigDict(extra="allow")


class ResponseUsage(_Open):
    input_tokens: int
    input_tokens_details: dict[str, int]
    output_tokens: int
    output_tokens_details: dict[str, int]
    total_tokens: int


class ResponseObject(_Open):
    """The ``response`` object (``session.responses.events`` builds it; this model declares
    its shape in the OpenAPI document). ``output`` holds ``reasoning``, ``message`` and
    ``function_call`` items."""

    id: str
    object: Literal["response"]
    created_at: int
    status: Literal["completed", "incomplete", "in_progress", "cancelled", "failed", "queued"]
    model: str
    output: list[dict[str, Any]]
    parallel_tool_calls: bool
    tool_choice: Any
    tools: list[dict[str, Any]]
    usage: ResponseUsage | None


class ResponseDeleted(BaseModel):
    id: str
    object: Literal["response.deleted"]
    deleted: bool


class InputItemList(BaseModel):
    object: Literal["list"]
    data: list[dict[str, Any]]
    first_id: str | None
    last_id: str | None
    has_more: bool


class InputTokenCount(BaseModel):
    object: Literal["response.input_tokens"] = "response.input_tokens"
    input_tokens: int


async def create(request: Request) -> Response:
    service = responses_of(request)
    body = await read_json(request)
    if body.get("background") is True:
        return await _background(request, body)
    if not body.get("stream"):
        answer = await until_disconnect(request, service.create(body))
        if answer is GONE:  # the client left: its engine request was aborted on the way out
            return Response(status_code=499)
        return json_response(answer)
    # Validate, render and admit before the first byte, so errors are plain HTTP errors.
    stream = await service.open_stream(body)
    return StreamingResponse(_sse(stream), media_type="text/event-stream", headers=SSE_HEADERS)


async def _sse(stream: ResponseStream) -> AsyncIterator[bytes]:
    events = stream.events()
    try:
        async for event in events:
            yield sse(event, named=True)  # OpenAI's Responses streams name each event by its type
    finally:
        await events.aclose()  # type: ignore[attr-defined]


async def _background(request: Request, body: dict[str, Any]) -> Response:
    """``background: true``: the response runs in a server task whatever becomes of this request;
    the answer is the response object (``in_progress``), or with ``stream`` its events, read from
    the response's event log (a client that leaves only stops reading)."""
    service = responses_of(request)
    stream = await service.start_background(body, _client(request))
    if not body.get("stream"):
        return json_response(stream.events_out.response("in_progress"))
    events = await service.resume(stream.id, None)
    return StreamingResponse(events, media_type="text/event-stream", headers=SSE_HEADERS)


def _client(request: Request) -> str:
    """The client a background response is counted against (as ``LimitMiddleware`` counts it)."""
    scope = request.scope
    if ctx_of(request).settings.api_keys:
        return client_key(dict(scope["headers"]), scope.get("client"))
    return key_of(None, scope.get("client"))


# the query parameters the routes read, as the OpenAPI document states them (the readers below)
STREAM = Query("stream", {"type": "boolean", "default": False},
               "true: a background response's events as SSE (from after starting_after), not the response")
STARTING_AFTER = Query("starting_after", {"type": "integer", "minimum": 0, "maximum": 10**18 - 1},
                       "with stream=true: the sequence number after which the events resume")
LIMIT = Query("limit", {"type": "integer", "minimum": 1, "maximum": 100, "default": 20},
              "how many items a page holds")
ORDER = Query("order", {"enum": ["asc", "desc"], "default": "desc"}, "the items' order")
AFTER = Query("after", {"type": "string"}, "the id of the item the page starts after")


def _starting_after(request: Request) -> int | None:
    raw = request.query_params.get(STARTING_AFTER.name)
    if raw is None:
        return None
    if not (raw.isascii() and raw.isdigit()) or len(raw) > 18:
        raise ApiError(400, f"starting_after must be a sequence number (an integer from 0), got {raw[:20]!r}",
                       param="starting_after", error_type="invalid_request_error")
    return int(raw)


def _wants_stream(request: Request) -> bool:
    raw = request.query_params.get(STREAM.name, "false").lower()
    if raw not in ("true", "false", "1", "0"):
        raise ApiError(400, f"stream must be true or false, got {raw[:20]!r}", param="stream",
                       error_type="invalid_request_error")
    return raw in ("true", "1")


def _response_id(request: Request) -> str:
    return str(request.path_params["response_id"])


async def retrieve_or_delete(request: Request) -> Response:
    service = responses_of(request)
    if request.method == "DELETE":
        return json_response(await service.delete(_response_id(request)))
    after = _starting_after(request)
    if _wants_stream(request):  # a background response's events after `starting_after`
        events = await service.resume(_response_id(request), after)
        return StreamingResponse(events, media_type="text/event-stream", headers=SSE_HEADERS)
    return json_response(await service.get(_response_id(request)))


async def cancel(request: Request) -> Response:
    return json_response(await responses_of(request).cancel(_response_id(request)))


async def input_items(request: Request) -> Response:
    query = request.query_params
    raw = query.get(LIMIT.name, "20")
    if not (raw.isascii() and raw.isdigit()) or len(raw) > 18 or not 1 <= int(raw) <= 100:
        raise ApiError(400, f"limit must be an integer from 1 to 100, got {raw[:20]!r}", param="limit")
    order = query.get(ORDER.name, "desc")
    if order not in ("asc", "desc"):
        raise ApiError(400, f"order must be 'asc' or 'desc', got {order[:20]!r}", param="order")
    page = await responses_of(request).input_items(_response_id(request), after=query.get(AFTER.name),
                                                   limit=int(raw), order=order)
    return json_response(page)


async def input_tokens(request: Request) -> Response:
    count = await responses_of(request).input_tokens(await read_json(request))
    return json_response(InputTokenCount(input_tokens=count))


async def render(request: Request) -> Response:
    rendered = await responses_of(request).render(await read_json(request))
    return json_response(rendered.to_wire())


def routes() -> list[Route]:
    g = RouteGroup.PIPELINE
    tags = ("openai",)
    return [
        Route("/v1/responses", create, g, summary="OpenAI responses (JSON or SSE)", request_model=ResponsesRequest,
              response_model=ResponseObject, streams=("POST",), tags=tags),
        Route("/v1/responses/input_tokens", input_tokens, g,
              summary="OpenAI responses.input_tokens.count: the prompt tokens the request renders to",
              request_model=ResponsesRequest, response_model=InputTokenCount, tags=tags),
        Route(f"/v1/responses/{ID}", retrieve_or_delete, g, methods=("GET", "DELETE"),
              summary="A stored response (GET; with stream=true and starting_after, a background response's "
                      "events as SSE), or delete it (DELETE)",
              response_model={"GET": ResponseObject, "DELETE": ResponseDeleted}, streams=("GET",),
              query=(STREAM, STARTING_AFTER), tags=tags),
        Route(f"/v1/responses/{ID}/cancel", cancel, g, summary="Cancel a stored response still running",
              response_model=ResponseObject, tags=tags),
        Route(f"/v1/responses/{ID}/input_items", input_items, g, methods=("GET",),
              summary="The input items of a stored response", response_model=InputItemList,
              query=(LIMIT, ORDER, AFTER), tags=tags),
        Route("/v1/responses/render", render, RouteGroup.RENDER,
              summary="Render a Responses request into an engine request (stateless, vLLM's shape)",
              request_model=ResponsesRequest, response_model=GenerateRequest, tags=("render",)),
    ]
