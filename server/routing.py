"""The shape of an HTTP route: what ``server/app.py`` registers and ``server/openapi.py`` documents.

Each module under ``server/routes/`` exposes ``routes() -> list[Route]``; ``server/app.py`` lists
those modules explicitly and registers the routes whose group the gating enables, and the OpenAPI
document is built from the same list, so the spec and the server cannot disagree about which
routes exist. This type lives outside ``server/routes/`` because nothing but the app may import a
route module (tests/project/test_import_rules.py).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from starlette.requests import Request
from starlette.responses import Response

from server.gating import RouteGroup

Endpoint = Callable[[Request], Awaitable[Response]]


@dataclass(frozen=True, slots=True)
class Query:
    """A query parameter a route reads, as the OpenAPI document states it: its name, the methods that
    read it, and the JSON schema of the values the route accepts (others answer 400 naming it)."""

    name: str
    schema: dict[str, Any]
    description: str = ""
    methods: tuple[str, ...] = ("GET",)


@dataclass(frozen=True, slots=True)
class Route:
    path: str
    endpoint: Endpoint
    group: RouteGroup
    methods: tuple[str, ...] = ("POST",)
    summary: str = ""
    request_model: Any = None  # a pydantic model (or TypeAdapter-able type) for the body
    response_model: Any = None  # the JSON answer's model, or {method: model} where the methods differ
    streams: tuple[str, ...] = ()  # the methods that answer text/event-stream when asked (stream: true)
    query: tuple[Query, ...] = ()  # the query parameters it reads
    tags: tuple[str, ...] = ()
    responses: tuple[tuple[int, str, Any], ...] = ()  # other JSON answers: (status, description, model)
    content_type: str | None = None  # the media type of a non-JSON answer (e.g. text/plain)
