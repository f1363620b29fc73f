"""Which ``Host`` names this server answers (``--allowed-host``; IP literals and ``localhost`` always):
the guard against DNS rebinding. Why, and the CLI's defaults by bind address and API key
(:func:`default_allowed_hosts`): docs/serve.md, "Browsers and other sites".
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
