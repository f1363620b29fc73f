"""API keys (``--api-key`` / ``TOKENWIRE_API_KEY``): one check for every transport.

:class:`ApiKeyMiddleware` checks HTTP requests (``Authorization: Bearer KEY`` or ``x-api-key``);
the WebSocket route checks its upgrade itself with :func:`api_key_ok` (server/ws/endpoint.py), so
it can refuse before accepting. Paths in :data:`PUBLIC_PATHS` (and under ``PUBLIC_PREFIXES``)
need no key.
"""

from __future__ import annotations

import hmac

from starlette.types import ASGIApp, Receive, Scope, Send

from server.errors import ApiError, error_response, flavor_of

# Paths anyone may read without an API key.
PUBLIC_PATHS = frozenset({"/health", "/version", "/", "/openapi.json", "/metrics"})
PUBLIC_PREFIXES = ("/static/",)


def is_public(path: str) -> bool:
    return path in PUBLIC_PATHS or path.startswith(PUBLIC_PREFIXES)


def api_key_ok(keys: tuple[str, ...], given: str | None) -> bool:
    """Whether ``given`` is one of ``keys`` (compared in constant time); True when no key is set."""
    if not keys:
        return True
    return given is not None and any(hmac.compare_digest(given.encode(), k.encode()) for k in keys)


class ApiKeyMiddleware:
    """Checks ``Authorization: Bearer KEY`` (or ``x-api-key``) on HTTP requests. WebSocket
    upgrades are checked by the WebSocket route itself, so it can refuse before accepting."""

    def __init__(self, app: ASGIApp, keys: tuple[str, ...]) -> None:
        self.app = app
        self.keys = tuple(k.encode() for k in keys)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or not self.keys or is_public(scope["path"]):
            await self.app(scope, receive, send)
            return
        headers = dict(scope["headers"])
        given = _bearer(headers.get(b"authorization", b"")) or headers.get(b"x-api-key", b"")
        flavor = flavor_of(scope["path"])
        if not given:
            response = error_response(ApiError(401, "Missing API key; send 'Authorization: Bearer <key>'."),
                                      flavor=flavor)
        elif not any(hmac.compare_digest(given, k) for k in self.keys):
            response = error_response(ApiError(401, "Invalid API key."), flavor=flavor)
        else:
            await self.app(scope, receive, send)
            return
        await response(scope, receive, send)


def _bearer(value: bytes) -> bytes:
    scheme, _, token = value.partition(b" ")
    return token.strip() if scheme.lower() == b"bearer" else b""
