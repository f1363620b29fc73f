"""Small HTTP helpers shared by every route: body parsing and JSON responses."""

from __future__ import annotations

import logging
from collections.abc import Awaitable
from typing import Any, TypeVar

import anyio
import orjson
from pydantic import BaseModel, ValidationError
from starlette.requests import Request
from starlette.responses import Response

from engine.json_depth import SHOWN, field_name, too_deep, too_deep_message
from server import metrics
from server.errors import ApiError, describe_validation_error
from session.protocol.anthropic import MessagesRequest
from session.protocol.openai import ChatCompletionRequest, CompletionRequest
from session.protocol.responses import ResponsesRequest

M = TypeVar("M", bound=BaseModel)
log = logging.getLogger("tokenwire")

# Request models whose unknown top-level fields are accepted and ignored (as OpenAI-compatible
# servers do), by API: each such field is counted, and named in a WARNING once per process.
IGNORING_MODELS: dict[type[BaseModel], str] = {ChatCompletionRequest: "chat", CompletionRequest: "completion",
                                               MessagesRequest: "messages", ResponsesRequest: "responses"}
MAX_NAMED_FIELDS = 1024  # field names remembered as already logged (then no more are named)
_named_fields: set[str] = set()

MAX_BODY_BYTES = 64 * 1024 * 1024


async def read_json(request: Request, *, expect: type = dict) -> Any:
    """The request body as JSON. 415 for a missing or non-JSON content type, 413 past the size
    limit, 400 for invalid JSON, a top-level value of the wrong kind or nesting past
    :data:`~engine.json_depth.MAX_JSON_DEPTH` levels.

    The content type is required: a web page may POST ``text/plain`` (or no type at all) to any
    server without a CORS preflight, and a server that read such a body as JSON would start
    generations or abort requests for any page the user visits. ``application/json`` needs the
    preflight, which this server does not grant to other origins."""
    ctype = request.headers.get("content-type")
    if ctype is None or not is_json_media_type(ctype):
        raise ApiError(415, not_json_message(ctype))
    length = request.headers.get("content-length")
    if length is not None and length.isdigit() and int(length) > MAX_BODY_BYTES:
        raise ApiError(413, f"Request body too large (limit {MAX_BODY_BYTES} bytes).")
    body = await request.body()
    if len(body) > MAX_BODY_BYTES:
        raise ApiError(413, f"Request body too large (limit {MAX_BODY_BYTES} bytes).")
    if not body:
        raise ApiError(400, "Request body is empty; send a JSON object.")
    try:
        data = orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        raise ApiError(400, f"Request body is not valid JSON ({exc.msg} at position {exc.pos}).") from None
    if not isinstance(data, expect):
        kind = "object" if expect is dict else "array"
        raise ApiError(400, f"Request body must be a JSON {kind}.")
    deep = too_deep(data, raw=body)
    if deep is not None:  # before any part of it is serialized again (engine/json_depth.py)
        raise ApiError(400, too_deep_message(field_name(deep)), param=field_name(deep[:SHOWN]))
    return data


def is_json_media_type(value: str) -> bool:
    """``application/json`` or a ``+json`` type (parameters such as ``charset`` aside)."""
    media = value.split(";")[0].strip().lower()
    return media == "application/json" or (media.startswith("application/") and media.endswith("+json"))


def not_json_message(ctype: str | None) -> str:
    given = "no Content-Type" if ctype is None else f"Content-Type {ctype.split(';')[0].strip()[:100]!r}"
    return f"The request has {given}; send the JSON body with 'Content-Type: application/json'."


async def parse_body(request: Request, model: type[M]) -> M:
    data = await read_json(request)
    return validate(model, data)


def validate(model: type[M], data: Any) -> M:
    try:
        result = model.model_validate(data)
    except ValidationError as exc:
        message, param = describe_validation_error(exc)
        raise ApiError(400, message, param=param) from None
    api = IGNORING_MODELS.get(model)
    if api is not None and result.model_extra:
        note_ignored_fields(api, list(result.model_extra))
    return result


def note_ignored_fields(api: str, names: list[str]) -> None:
    """Count ``names`` (unknown fields of a request to ``api``), and log the ones not named yet by
    this process (vLLM 0.32 logs every request's ignored fields, at DEBUG; a WARNING per request
    would let one client flood the log)."""
    metrics.ignored_fields(api, len(names))
    room = MAX_NAMED_FIELDS - len(_named_fields)  # one request of many names must not pass the bound either
    new = list(dict.fromkeys(name[:100] for name in names if name[:100] not in _named_fields))[:max(0, room)]
    if new:
        _named_fields.update(new)
        log.warning("The following fields were present in a %s request but ignored: %s (each field is "
                    "named once; tokenwire_ignored_request_fields_total counts them all)", api, new)


def json_response(data: Any, status: int = 200) -> Response:
    if isinstance(data, BaseModel):
        data = data.model_dump(mode="json")
    return Response(orjson.dumps(data, option=orjson.OPT_NON_STR_KEYS), status_code=status,
                    media_type="application/json")


GONE: Any = object()  # what until_disconnect returns when the client disconnected first


async def until_disconnect(request: Request, work: Awaitable[Any]) -> Any:
    """Run ``work`` and return its result, or cancel it and return :data:`GONE` when the client
    disconnects first (so a vanished client's engine work is aborted, not run to the end).
    Exceptions of ``work`` propagate unwrapped. For answers that are not streamed: Starlette
    notices a disconnect only while it sends a streaming body."""
    outcome: list[tuple[bool, Any]] = []
    async with anyio.create_task_group() as tg:
        async def run() -> None:
            try:
                outcome.append((True, await work))
            except Exception as exc:
                outcome.append((False, exc))
            tg.cancel_scope.cancel()

        async def watch() -> None:
            while True:
                message = await request.receive()
                if message["type"] == "http.disconnect":
                    tg.cancel_scope.cancel()
                    return

        tg.start_soon(run)
        tg.start_soon(watch)
    if not outcome:
        return GONE
    ok, value = outcome[0]
    if not ok:
        raise value
    return value
