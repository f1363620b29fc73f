"""Translate errors once, at the HTTP boundary, into each API's error envelope.

Internal exception text never reaches a client: unknown exceptions are logged with their
traceback and answered with a generic 500.
"""

from __future__ import annotations

import logging
from typing import Any

import orjson
from pydantic import ValidationError
from starlette.responses import Response

from engine.errors import EngineError
from session.errors import SessionError

log = logging.getLogger("tokenwire.errors")

_TYPE_BY_STATUS = {
    400: "BadRequestError",
    401: "AuthenticationError",
    403: "PermissionDeniedError",
    404: "NotFoundError",
    405: "MethodNotAllowed",
    413: "RequestTooLarge",
    415: "UnsupportedMediaType",
    429: "RateLimitError",
    500: "InternalServerError",
    502: "BadGatewayError",
    503: "ServiceUnavailableError",
    504: "GatewayTimeoutError",
}
_ANTHROPIC_TYPE_BY_STATUS = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    413: "request_too_large",
    429: "rate_limit_error",
    500: "api_error",
    502: "api_error",
    503: "overloaded_error",
    504: "api_error",
}


class ApiError(Exception):
    """An error with an HTTP status, raised by route code for bad input it detects itself."""

    def __init__(self, status: int, message: str, *, param: str | None = None,
                 error_type: str | None = None, code: str | None = None) -> None:
        super().__init__(message)
        self.code = code  # a string code where the API names one (previous_response_not_found); else the status
        self.status = status
        self.message = message
        self.param = param
        self.error_type = error_type or _TYPE_BY_STATUS.get(status, "BadRequestError")


def describe_validation_error(exc: ValidationError, *, prefix: str = "") -> tuple[str, str | None]:
    """A client-readable message naming each bad field, and the first field as ``param``."""
    parts: list[str] = []
    first: str | None = None
    for err in exc.errors(include_url=False, include_input=False)[:8]:
        loc = ".".join(str(p) for p in err.get("loc", ()) if not _is_union_tag(p))
        loc = f"{prefix}{loc}" if loc else (prefix.rstrip(".") or "body")
        first = first or loc
        parts.append(f"{loc}: {err.get('msg', 'invalid value')}")
    more = exc.error_count() - len(parts)
    if more > 0:
        parts.append(f"(and {more} more)")
    return "; ".join(parts) or "invalid request body", first


def _is_union_tag(part: object) -> bool:
    # pydantic puts union member names / function-validator tags into locations
    return isinstance(part, str) and (part[:1].isupper() or part.startswith("function-"))


def to_api_error(exc: BaseException) -> ApiError:
    """Map any exception to an :class:`ApiError` (the one place this is decided)."""
    if isinstance(exc, ApiError):
        return exc
    if isinstance(exc, SessionError):
        return ApiError(exc.status, exc.message, param=exc.param, error_type=exc.error_type)
    if isinstance(exc, EngineError):
        return ApiError(exc.status, exc.message, param=exc.param)
    if isinstance(exc, ValidationError):
        message, param = describe_validation_error(exc)
        return ApiError(400, message, param=param)
    log.exception("internal error", exc_info=exc)
    return ApiError(500, "Internal server error; see the server log for details.")


def openai_error_body(err: ApiError) -> dict[str, Any]:
    return {"error": {"message": err.message, "type": err.error_type, "param": err.param,
                      "code": err.code or err.status}}


def anthropic_error_body(err: ApiError) -> dict[str, Any]:
    kind = _ANTHROPIC_TYPE_BY_STATUS.get(err.status, "api_error")
    return {"type": "error", "error": {"type": kind, "message": err.message}}


def flavor_of(path: str) -> str:
    """Which API's error envelope answers on ``path``: Anthropic's on ``/v1/messages*``."""
    return "anthropic" if path.startswith("/v1/messages") else "openai"


def error_response(exc: BaseException, *, flavor: str = "openai") -> Response:
    err = to_api_error(exc)
    body = anthropic_error_body(err) if flavor == "anthropic" else openai_error_body(err)
    return Response(orjson.dumps(body), status_code=err.status, media_type="application/json")
