"""Which ``Host`` names this server answers: the guard against DNS rebinding.

A web page on ``http://rebind.example:8000`` whose name an attacker re-points at ``127.0.0.1`` is
same-origin with a tokenwire on the victim's loopback as far as the browser knows: it may read the
answers and open WebSocket sessions (``Origin`` then equals ``Host``). Only the ``Host`` header
tells the two apart, so every HTTP request and WebSocket upgrade must name this server.

``Settings.allowed_hosts`` (``--allowed-host``, repeatable) lists the names; ``*`` allows any.
IP literals (``127.0.0.1:8000``, ``[::1]``) and ``localhost`` / ``*.localhost`` are always allowed:
a browser reaches them without DNS, so they cannot be re-pointed. A request without ``Host``
(HTTP/1.0 tools, some health checkers) is allowed: browsers always send one.

The CLI's default (:func:`default_allowed_hosts`):

- with an API key: any name (a rebinding page cannot supply the key);
- bound to loopback: loopback names only;
- bound to every interface (``0.0.0.0`` / ``::``): also this machine's host name (and its fully
  qualified name); any other name clients use (a DNS alias, a load balancer's name, a Kubernetes
  Service) needs ``--allowed-host``;
- bound to a named interface: also that name.
"""

from __future__ import annotations

import ipaddress
import socket
from collections.abc import Sequence
from urllib.parse import urlsplit

ANY = "*"
WILDCARD_BINDS = frozenset({"", "0.0.0.0", "::", "[::]"})


def host_name(header: str) -> str | None:
    """The name in a ``Host`` header (lowercase, no port, brackets or trailing dot); None if unreadable."""
    try:
        name = urlsplit("//" + header.strip()).hostname
    except ValueError:
        return None
    return name.rstrip(".") if name else None


def _always(name: str) -> bool:
    if name == "localhost" or name.endswith(".localhost"):
        return True
    try:
        ipaddress.ip_address(name)
    except ValueError:
        return False
    return True


def host_allowed(header: str | None, allowed: Sequence[str]) -> bool:
    if header is None or ANY in allowed:
        return True
    name = host_name(header)
    if name is None:
        return False
    return _always(name) or name in {a.strip().rstrip(".").lower() for a in allowed}


def default_allowed_hosts(bind_host: str, *, api_keys: bool) -> tuple[str, ...]:
    """The ``--allowed-host`` list when none is given (module docstring)."""
    if api_keys:
        return (ANY,)
    bind = bind_host.strip().lower()
    if bind in WILDCARD_BINDS:
        names = {socket.gethostname().lower(), socket.getfqdn().lower()}
        return tuple(sorted(n.rstrip(".") for n in names if n))
    name = host_name(bind)
    return (name,) if name and not _always(name) else ()


def refusal(header: str) -> str:
    """The message for a refused ``Host``: what was sent and how to allow it."""
    name = host_name(header)
    shown = header[:200]
    hint = f"start the server with --allowed-host {name}" if name else "send the server's own host name"
    return (f"Host {shown!r} is not a name of this server; browsers' pages on other names are refused "
            f"(DNS rebinding). To reach it by this name, {hint}.")
