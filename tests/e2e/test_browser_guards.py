"""What a web page can make a real ``launch render`` without an API key do (issue 19 item 6), with
the CLI's defaults:

- DNS rebinding: a page on ``rebind.example`` whose name now points at the loopback address sends
  ``Host: rebind.example:PORT`` (and, on a WebSocket, ``Origin: http://rebind.example:PORT``, which
  the same-host Origin check accepted). Bound to loopback, the server answers only its loopback
  names and IP addresses: 400 on HTTP and at the WebSocket upgrade, naming ``--allowed-host``.
- a POST sent as ``text/plain`` or with no Content-Type (no CORS preflight) is a 415.
- ``--allowed-host rebind.example`` allows that name; with ``--api-key`` any name is allowed (a
  rebinding page cannot supply the key).
"""

from __future__ import annotations

import socket
from collections.abc import Callable, Iterator
from pathlib import Path
from urllib.parse import urlsplit

import httpx
import pytest

from tests.support.server_proc import ServerProcess

pytestmark = pytest.mark.slow

NO_TORCH = "import sys\nsys.modules['torch'] = None\n"
RENDER = "/v1/chat/completions/render"
CHAT = b'{"messages": [{"role": "user", "content": "hi"}]}'


@pytest.fixture(scope="module")
def model(asset: Callable[[str], Path]) -> str:
    return str(asset("qwen3"))


@pytest.fixture(scope="module")
def server(model: str) -> Iterator[ServerProcess]:
    with ServerProcess(["launch", "render", model], preamble=NO_TORCH) as srv:
        yield srv


def _port(srv: ServerProcess) -> int:
    port = urlsplit(srv.url).port
    assert port is not None
    return port


def upgrade_status(srv: ServerProcess, host: str, origin: str | None, extra: str = "") -> int:
    """The status line of a WebSocket upgrade sent with this Host and Origin."""
    lines = ["GET /v1/session HTTP/1.1", f"Host: {host}", "Upgrade: websocket", "Connection: Upgrade",
             "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==", "Sec-WebSocket-Version: 13",
             "Sec-WebSocket-Protocol: tokenwire.v1"]
    if origin:
        lines.append(f"Origin: {origin}")
    if extra:
        lines.append(extra)
    with socket.create_connection(("127.0.0.1", _port(srv)), timeout=10) as sock:
        sock.sendall(("\r\n".join(lines) + "\r\n\r\n").encode())
        head = sock.recv(4096).decode("latin-1")
    return int(head.split(" ", 2)[1])


def test_dns_rebinding_is_refused_on_http_and_at_the_websocket_upgrade(server: ServerProcess) -> None:
    port = _port(server)
    rebound = f"rebind.example:{port}"
    for path in ("/health", "/v1/models"):
        r = httpx.get(server.url + path, headers={"Host": rebound}, timeout=10)
        assert r.status_code == 400, r.text
        assert "--allowed-host rebind.example" in r.json()["error"]["message"]
    r = httpx.post(server.url + RENDER, content=CHAT, headers={"Host": rebound, "Content-Type": "application/json"})
    assert r.status_code == 400
    assert upgrade_status(server, rebound, f"http://{rebound}") == 400
    # the server's own names still work, browsers included
    for host in (f"127.0.0.1:{port}", f"localhost:{port}"):
        assert httpx.get(server.url + "/health", headers={"Host": host}, timeout=10).status_code == 200
        assert upgrade_status(server, host, f"http://{host}") == 101
    assert upgrade_status(server, f"localhost:{port}", "http://rebind.example") == 403  # Origin check as before
    assert "Answering Host names: IP addresses, localhost, no other name" in server.output()


def test_a_post_not_sent_as_json_is_a_415(server: ServerProcess) -> None:
    for headers in ({"Content-Type": "text/plain"}, {"Content-Type": "application/x-www-form-urlencoded"}, {}):
        r = httpx.post(server.url + RENDER, content=CHAT, headers=headers, timeout=10)
        assert r.status_code == 415, (headers, r.text)
        assert "Content-Type: application/json" in r.json()["error"]["message"]
    r = httpx.post(server.url + RENDER, content=CHAT, headers={"Content-Type": "application/json"}, timeout=10)
    assert r.status_code == 200, r.text


def test_allowed_host_and_api_key_widen_the_names(model: str) -> None:
    with ServerProcess(["launch", "render", model, "--allowed-host", "rebind.example"], preamble=NO_TORCH) as srv:
        rebound = f"rebind.example:{_port(srv)}"
        assert httpx.get(srv.url + "/health", headers={"Host": rebound}, timeout=10).status_code == 200
        assert httpx.get(srv.url + "/health", headers={"Host": f"other.example:{_port(srv)}"}).status_code == 400
    with ServerProcess(["launch", "render", model, "--api-key", "k"], preamble=NO_TORCH) as srv:
        rebound = f"rebind.example:{_port(srv)}"
        r = httpx.get(srv.url + "/v1/models", headers={"Host": rebound, "Authorization": "Bearer k"}, timeout=10)
        assert r.status_code == 200
        assert upgrade_status(srv, rebound, f"http://{rebound}", "Authorization: Bearer k") == 101
