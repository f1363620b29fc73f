"""Client options and URL handling."""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal
from urllib.parse import urlsplit, urlunsplit

SESSION_PATH = "/v1/session"
API_KEY_ENV = "TOKENWIRE_API_KEY"

TransportChoice = Literal["auto", "websocket", "http"]


@dataclass(frozen=True, slots=True)
class Options:
    """How a client connects and behaves. Times are in seconds.

    - ``transport``: ``"auto"`` opens a WebSocket session and falls back to HTTP when the upgrade is
      refused by something other than tokenwire itself (a proxy); ``"websocket"`` never falls back;
      ``"http"`` uses the HTTP endpoints only.
    - ``timeout``: the longest wait for the next frame of a request (then the request is cancelled
      and :class:`~client_sdk.errors.RequestTimeout` raised); ``None`` waits forever.
    - ``connect_timeout``: opening one connection (upgrade and ``session.created``).
    - ``reconnect``: reopen a dropped session (next replica URL first), with exponential backoff
      from ``backoff_initial`` to ``backoff_max``, at most ``max_reconnect_attempts`` tries.
    - ``resumable``: make pipeline streams resumable by default (WebSocket only).
    - ``keepalive_interval``: send a ``ping`` frame this often (default: a third of the server's
      ``idle_timeout_s``, at most 30 s); ``ping_timeout``: a missing ``pong`` after this long
      means the connection is dead. ``0`` turns keep-alive pings off.
    """

    api_key: str | None = None
    transport: TransportChoice = "auto"
    timeout: float | None = 600.0
    connect_timeout: float = 10.0
    reconnect: bool = True
    max_reconnect_attempts: int = 8
    backoff_initial: float = 0.1
    backoff_max: float = 5.0
    resumable: bool = False
    keepalive_interval: float | None = None
    ping_timeout: float = 20.0
    max_frame_bytes: int = 64 * 1024 * 1024
    headers: Mapping[str, str] = field(default_factory=dict)

    @staticmethod
    def resolve_key(api_key: str | None) -> str | None:
        return api_key if api_key is not None else (os.environ.get(API_KEY_ENV) or None)


def base_urls(url: str | Sequence[str]) -> list[str]:
    """The server base URLs (``http(s)://host:port``) from one URL or a list of replicas, given as
    ``http(s)://`` or ``ws(s)://``, with or without the session path."""
    items = [url] if isinstance(url, str) else list(url)
    if not items:
        raise ValueError("connect() needs at least one server URL")
    return [http_base(u) for u in items]


def http_base(url: str) -> str:
    parts = urlsplit(url.strip())
    scheme = {"ws": "http", "wss": "https"}.get(parts.scheme, parts.scheme)
    if scheme not in ("http", "https") or not parts.netloc:
        raise ValueError(f"not a server URL: {url!r} (use http://host:port or ws://host:port)")
    path = parts.path.rstrip("/")
    if path.endswith(SESSION_PATH):
        path = path[: -len(SESSION_PATH)]
    return urlunsplit((scheme, parts.netloc, path, "", ""))


def ws_url(base: str) -> str:
    parts = urlsplit(base)
    scheme = "wss" if parts.scheme == "https" else "ws"
    return urlunsplit((scheme, parts.netloc, parts.path.rstrip("/") + SESSION_PATH, "", ""))
