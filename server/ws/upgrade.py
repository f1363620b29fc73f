"""Decide a WebSocket upgrade before accepting it: Origin, API key, protocol version.

Pure functions of the request's headers, subprotocols and query string, so the decision is tested
without a socket. A refusal becomes a real HTTP response (401 / 403 / 400) through the ASGI
``websocket.http.response`` extension: a refused client is never accepted and then closed.

- **Host**: one of the server's names (``--allowed-host``, server/hosts.py), else 400: a page on a
  re-pointed DNS name (DNS rebinding) would otherwise pass the same-host Origin check below.
- **Origin**: absent (non-browser clients) is allowed. With ``--allowed-origin`` the Origin must be
  one of them (``*`` allows any); without, it must name the host the client connected to.
- **API key** (when the server has keys): ``Authorization: Bearer KEY``, ``x-api-key: KEY`` or, from
  a browser, the subprotocol ``tokenwire.auth.<base64url(KEY), no padding>`` offered next to
  ``tokenwire.v1``. Missing: 401; wrong: 403.
- **Version**: the highest ``tokenwire.vN`` subprotocol offered that the server speaks (it is
  selected in the handshake), else the ``v`` query parameter, else 1.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from urllib.parse import parse_qs, urlsplit

from server.hosts import ANY as ANY_HOST
from server.hosts import host_allowed
from server.hosts import refusal as host_refusal
from session.client_frames import AUTH_SUBPROTOCOL_PREFIX, SUBPROTOCOL_PREFIX, SUPPORTED_VERSIONS, subprotocol


@dataclass(frozen=True, slots=True)
class Accepted:
    version: int
    subprotocol: str | None  # the subprotocol to select in the handshake (None: select none)
    # the API key the client gave, from a header or the auth subprotocol (the limiter's client key)
    api_key: str | None = field(default=None, compare=False, repr=False)


@dataclass(frozen=True, slots=True)
class Refused:
    status: int
    message: str


def decide(headers: Mapping[str, str], subprotocols: Sequence[str], query: str, *,
           allowed_origins: Sequence[str], key_ok: Callable[[str | None], bool],
           keys_required: bool, allowed_hosts: Sequence[str] = (ANY_HOST,)) -> Accepted | Refused:
    host = headers.get("host")
    if not host_allowed(host, allowed_hosts):
        return Refused(400, host_refusal(host or ""))
    origin = headers.get("origin")
    if origin is not None and not origin_allowed(origin, headers.get("host", ""), allowed_origins):
        return Refused(403, f"Origin {origin[:200]!r} is not allowed to open a session on this server.")
    offered_versions, auth_key, bad_auth = _read_subprotocols(subprotocols)
    key = _header_key(headers) or auth_key
    if keys_required:
        if key is None:
            if bad_auth:
                return Refused(401, "The tokenwire.auth subprotocol must carry the API key as "
                                    "base64url without padding.")
            return Refused(401, "Missing API key; send 'Authorization: Bearer <key>' or, from a browser, "
                                "the subprotocol 'tokenwire.auth.<base64url key>' next to 'tokenwire.v1'.")
        if not key_ok(key):
            return Refused(403, "Invalid API key.")
    decision = _negotiate(offered_versions, auth_key is not None or bad_auth, query)
    return replace(decision, api_key=key) if isinstance(decision, Accepted) else decision


def _negotiate(offered: list[int] | None, used_auth_subprotocol: bool, query: str) -> Accepted | Refused:
    supported = ", ".join(subprotocol(v) for v in SUPPORTED_VERSIONS)
    if offered is not None:
        usable = [v for v in offered if v in SUPPORTED_VERSIONS]
        if not usable:
            return Refused(400, f"The offered protocol versions are not supported; this server speaks "
                                f"{supported}.")
        version = max(usable)
        return Accepted(version, subprotocol(version))
    if used_auth_subprotocol:
        return Refused(400, f"Offer a protocol version subprotocol ({supported}) next to tokenwire.auth.*; "
                            "a browser needs the server to select one.")
    values = parse_qs(query).get("v")
    if not values:
        return Accepted(SUPPORTED_VERSIONS[-1], None)
    raw = values[-1]
    if not raw.isdigit() or int(raw) not in SUPPORTED_VERSIONS:
        return Refused(400, f"Protocol version v={raw[:16]!r} is not supported; this server speaks "
                            f"{', '.join(str(v) for v in SUPPORTED_VERSIONS)}.")
    return Accepted(int(raw), None)


def _read_subprotocols(subprotocols: Sequence[str]) -> tuple[list[int] | None, str | None, bool]:
    versions: list[int] | None = None
    key: str | None = None
    bad_auth = False
    for item in subprotocols:
        if item.startswith(AUTH_SUBPROTOCOL_PREFIX):
            decoded = _b64url_text(item[len(AUTH_SUBPROTOCOL_PREFIX):])
            key, bad_auth = (decoded, bad_auth) if decoded else (key, True)
        elif item.startswith(SUBPROTOCOL_PREFIX):
            number = item[len(SUBPROTOCOL_PREFIX):]
            versions = versions if versions is not None else []
            if number.isdigit():
                versions.append(int(number))
    return versions, key, bad_auth


def _b64url_text(text: str) -> str | None:
    try:
        return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4)).decode("utf-8") or None
    except (binascii.Error, ValueError):
        return None


def _header_key(headers: Mapping[str, str]) -> str | None:
    scheme, _, token = headers.get("authorization", "").partition(" ")
    if scheme.lower() == "bearer" and token.strip():
        return token.strip()
    return headers.get("x-api-key") or None


def origin_allowed(origin: str, host: str, allowed: Sequence[str]) -> bool:
    origin = origin.strip().rstrip("/").lower()
    if allowed:
        return "*" in allowed or origin in {a.strip().rstrip("/").lower() for a in allowed}
    netloc = urlsplit(origin).netloc
    return bool(netloc) and netloc == host.strip().lower()


def auth_subprotocol(key: str) -> str:
    """The subprotocol a browser offers to carry ``key`` (next to ``tokenwire.v1``)."""
    return AUTH_SUBPROTOCOL_PREFIX + base64.urlsafe_b64encode(key.encode()).rstrip(b"=").decode()
