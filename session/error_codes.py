"""The wire error codes and their HTTP statuses: the one table (docs/protocol.md §7).

The session machine stamps its ``error`` frames from :data:`STATUS_OF`, the server names the code of
an error it translated from an HTTP status with :func:`code_for_status`, and ``client_sdk`` does the
same for an error that came back over HTTP (its fallback transport, a refused upgrade), so a problem
carries the same code on every path. ``tests/session/test_error_codes.py`` checks this table against
docs/protocol.md §7.
"""

from __future__ import annotations

# Every code an ``error`` frame or the client can report, with the HTTP status of the same problem.
STATUS_OF: dict[str, int] = {
    "invalid_frame": 400,
    "unknown_type": 400,
    "duplicate_id": 409,
    "unknown_id": 404,
    "not_enabled": 404,
    "too_many_requests": 429,
    "rate_limited": 429,
    "model_not_found": 404,
    "bad_state": 400,
    "invalid_request": 400,
    "unauthorized": 401,
    "forbidden": 403,
    "not_found": 404,
    "too_large": 413,
    "cancelled": 499,
    "internal_error": 500,
    "engine_unavailable": 502,
    "engine_error": 502,
    "overloaded": 503,
    "engine_timeout": 504,
    "shutting_down": 503,
    "session_closed": 503,
}

# The code of an error known only by its HTTP status (an HTTP endpoint's answer, or an exception
# the server translated to a status). 422 is what pydantic-style validators answer: the same
# problem as a 400. 409 is absent on purpose: no HTTP endpoint answers it, and its only code,
# ``duplicate_id``, is about request ids, which exist on WebSocket sessions alone.
CODE_OF_STATUS: dict[int, str] = {
    400: "invalid_request",
    401: "unauthorized",
    403: "forbidden",
    404: "not_found",
    413: "too_large",
    422: "invalid_request",
    429: "rate_limited",  # over HTTP a 429 is always the client's rate / concurrency limit
    500: "internal_error",
    502: "engine_unavailable",
    503: "overloaded",
    504: "engine_timeout",
}

# Refusals for load: the client did nothing wrong (it may retry), so a session does not count them
# towards its consecutive-error close (docs/protocol.md §3, §7).
LOAD_REFUSALS: frozenset[str] = frozenset({"too_many_requests", "rate_limited"})


def code_for_status(status: int) -> str:
    """The code of an error known only by its HTTP status (``internal_error`` / ``invalid_request``
    for a status the table does not name)."""
    return CODE_OF_STATUS.get(status, "internal_error" if status >= 500 else "invalid_request")


def status_of(code: str) -> int:
    """The HTTP status of a code (400 for a code the table does not name)."""
    return STATUS_OF.get(code, 400)
