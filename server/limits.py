"""Abuse limits: request rate and concurrency per client (HTTP and WebSocket request frames share the
budget; 429 / ``rate_limited``), request body size (413) and upload time (408). :class:`Limiter`
is sans-I/O; :class:`LimitMiddleware` applies it to HTTP. Every limit, its flag and its answer:
docs/reliability.md, "Limits and abuse".
"""

from __future__ import annotations

import contextlib
import hashlib
import math
import time
from collections import OrderedDict
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import anyio
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from server.errors import ApiError, error_response, flavor_of

MAX_BODY_BYTES = 64 * 1024 * 1024
MAX_CLIENTS = 100_000  # clients remembered (least recently seen forgotten first)
# A resumed stream recomputes the output it covers before its first new token (one forward per
# chunk, or one decode step per token: docs/engine.md, "Exactness"), from a frame a few bytes per
# token: it counts as one request more per this many covered tokens (docs/reliability.md).
RESUME_TOKENS_PER_REQUEST = 256


class RateLimited(ApiError):
    def __init__(self, message: str, retry_after: float) -> None:
        super().__init__(429, message)
        self.retry_after = max(1, math.ceil(retry_after))


@dataclass(slots=True)
class _Client:
    tokens: float
    updated: float
    in_flight: int = 0


class Limiter:
    """Rate (token bucket) and concurrency per client key. ``now`` is any monotonic clock."""

    def __init__(self, *, rate_per_minute: float = 0, max_concurrent: int = 0, max_clients: int = MAX_CLIENTS) -> None:
        self.rate = rate_per_minute / 60.0  # tokens per second
        self.burst = max(1.0, rate_per_minute)  # a minute's worth
        self.max_concurrent = max_concurrent
        self.max_clients = max_clients
        self._clients: OrderedDict[str, _Client] = OrderedDict()

    @property
    def enabled(self) -> bool:
        return self.rate > 0 or self.max_concurrent > 0

    def acquire(self, key: str, now: float, weight: int = 1) -> int:
        """Take ``weight`` requests for ``key`` (a resumed stream's :func:`resume_weight`; each
        limit takes at most its own size, so a heavy request can always run alone); raises
        :class:`RateLimited`. Returns the concurrency slots held: pass them to :meth:`release`."""
        client = self._clients.get(key)
        if client is None:
            client = self._clients[key] = _Client(self.burst, now)
            while len(self._clients) > self.max_clients:
                self._clients.popitem(last=False)
        self._clients.move_to_end(key)
        weight = max(1, weight)
        held = min(weight, self.max_concurrent) if self.max_concurrent else weight
        what = "" if weight == 1 else f" (this resumed stream counts as {weight} requests: 1 + 1 per " \
            f"{RESUME_TOKENS_PER_REQUEST} tokens it covers)"
        if self.max_concurrent and client.in_flight + held > self.max_concurrent:
            raise RateLimited(f"Too many concurrent requests: at most {self.max_concurrent} in flight per client"
                              f"{what}; retry when one finishes.", 1)
        if self.rate:
            cost = min(float(weight), self.burst)
            client.tokens = min(self.burst, client.tokens + (now - client.updated) * self.rate)
            client.updated = now
            if client.tokens < cost:
                raise RateLimited(f"Rate limit exceeded: at most {self.burst:g} requests per minute per client"
                                  f"{what}; retry later.", (cost - client.tokens) / self.rate)
            client.tokens -= cost
        client.in_flight += held
        return held

    def release(self, key: str, held: int = 1) -> None:
        client = self._clients.get(key)
        if client is not None and client.in_flight > 0:
            client.in_flight = max(0, client.in_flight - held)


def resume_weight(resume: object) -> int:
    """How many requests a stream counts as against the limits: 1, and for a resume (a ``resume``
    object whose ``output_token_ids`` the stream covers) 1 more per :data:`RESUME_TOKENS_PER_REQUEST`
    covered tokens (a malformed one counts 1: the pipeline refuses it with a 400)."""
    ids = resume.get("output_token_ids") if isinstance(resume, dict) else None
    return 1 + len(ids) // RESUME_TOKENS_PER_REQUEST if isinstance(ids, list) else 1


@contextlib.contextmanager
def admitted(limiter: Limiter, key: str, weight: int = 1) -> Iterator[None]:
    """Hold ``weight`` of ``key``'s requests for the block (:meth:`Limiter.acquire`; raises
    :class:`RateLimited` when refused)."""
    if not limiter.enabled:
        yield
        return
    held = limiter.acquire(key, time.monotonic(), weight)
    try:
        yield
    finally:
        limiter.release(key, held)


def client_key(headers: dict[bytes, bytes], client: Any) -> str:
    """An HTTP request's client: the API key in its headers, else its address."""
    scheme, _, token = headers.get(b"authorization", b"").partition(b" ")
    key = token.strip() if scheme.lower() == b"bearer" else headers.get(b"x-api-key", b"")
    return key_of(key, client)


def key_of(api_key: bytes | str | None, client: Any) -> str:
    """The limiter's client key: the API key given (hashed: raw keys are not kept), else the
    client's address. A WebSocket session passes the key it was admitted with (a header, or the
    browser's auth subprotocol); callers pass ``None`` when the server checks no keys."""
    if api_key:
        raw = api_key.encode() if isinstance(api_key, str) else api_key
        return "key:" + hashlib.sha256(raw).hexdigest()[:32]
    return "addr:" + (str(client[0]) if client else "unknown")


class LimitMiddleware:
    """Per-client limits and the request body rules for HTTP (module docstring)."""

    def __init__(self, app: ASGIApp, limiter: Limiter, *, body_timeout: float,
                 max_body_bytes: int = MAX_BODY_BYTES, exempt: Any = None, by_key: bool = True) -> None:
        self.app = app
        self.limiter = limiter
        # keys are the client only when the server checks them (``--api-key``): an unchecked key
        # is any string a client likes, and a new one each request would be a new budget
        self.by_key = by_key
        self.body_timeout = body_timeout
        self.max_body_bytes = max_body_bytes
        self.exempt = exempt or (lambda path: False)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or self.exempt(scope["path"]):
            await self.app(scope, receive, send)
            return
        headers = dict(scope["headers"])
        length = headers.get(b"content-length", b"")
        if length.isdigit() and int(length) > self.max_body_bytes:
            await self._refuse(scope, receive, send, ApiError(
                413, f"Request body too large (limit {self.max_body_bytes} bytes)."))
            return
        key = client_key(headers, scope.get("client")) if self.by_key else key_of(None, scope.get("client"))
        if self.limiter.enabled:
            try:
                self.limiter.acquire(key, time.monotonic())
            except RateLimited as exc:
                await self._refuse(scope, receive, send, exc, {"Retry-After": str(exc.retry_after)})
                return
        try:
            await self.app(scope, self._bounded(receive), send)
        finally:
            if self.limiter.enabled:
                self.limiter.release(key)

    def _bounded(self, receive: Receive) -> Receive:
        """``receive`` that refuses a body past the size limit (413) or the upload deadline (408)."""
        deadline = anyio.current_time() + self.body_timeout if self.body_timeout else math.inf
        received = 0
        complete = False

        async def bounded() -> Message:
            nonlocal received, complete
            if complete:  # after the body: the disconnect watchers wait as long as they like
                return await receive()
            with anyio.move_on_after(deadline - anyio.current_time()) as scope:
                message = await receive()
            if scope.cancelled_caught:
                raise ApiError(408, f"The request body did not arrive within {self.body_timeout:g} s.",
                               error_type="RequestTimeout")
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > self.max_body_bytes:
                    raise ApiError(413, f"Request body too large (limit {self.max_body_bytes} bytes).")
                complete = not message.get("more_body", False)
            return message

        return bounded

    @staticmethod
    async def _refuse(scope: Scope, receive: Receive, send: Send, err: ApiError,
                      headers: dict[str, str] | None = None) -> None:
        response = error_response(err, flavor=flavor_of(scope["path"]))
        response.headers.update(headers or {})
        await response(scope, receive, send)
