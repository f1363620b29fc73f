"""The listening socket, bound before anything slow (the model, the tokenizer) is loaded: a port in
use is then a one-line startup error at once, not after seconds of loading, and ``--port 0`` can
print the port it got. It starts listening only when the server is ready, so a client never waits
on a backlog while the model loads."""

from __future__ import annotations

import errno
import socket


def bind(host: str, port: int, *, send_buffer: int = 0, reuse_port: bool = False) -> socket.socket:
    """A TCP socket bound to ``host:port`` (not yet listening); ``ValueError`` says why it cannot be.
    ``reuse_port``: with ``SO_REUSEPORT``, so that each ``--workers`` process listens on a socket of
    its own on the same port and the kernel spreads new connections over them (server/workers.py)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    try:
        sock = socket.socket(family, socket.SOCK_STREAM)
    except OSError as exc:
        raise ValueError(f"cannot open a socket for --host {host}: {exc.strerror}") from None
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        if reuse_port:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        if send_buffer:  # accepted connections inherit it (Linux, BSD)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, send_buffer)
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        why = "the port is in use" if exc.errno == errno.EADDRINUSE else exc.strerror or str(exc)
        raise ValueError(f"cannot bind {host}:{port}: {why} (choose another --port, or 0 for a free one)") from None
    except (OverflowError, TypeError) as exc:  # a port outside 0-65535 (the CLI checks it first)
        sock.close()
        raise ValueError(f"cannot bind {host}:{port}: {exc}") from None
    sock.set_inheritable(True)
    return sock


def listen(sock: socket.socket, backlog: int = 2048) -> None:
    """Start accepting connections on a socket from :func:`bind`."""
    try:
        sock.listen(backlog)
    except OSError as exc:  # another process bound the same port and listened first
        host, port = sock.getsockname()[:2]
        sock.close()
        raise ValueError(f"cannot listen on {host}:{port}: {exc.strerror}") from None

