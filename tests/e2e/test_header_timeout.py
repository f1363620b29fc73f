"""Slow headers on a real ``launch render`` process (issue 39 item 10): 100 raw sockets that send a
partial request (or nothing) are answered 408 and closed once ``--header-timeout`` passes, each
counted in ``tokenwire_header_timeouts_total``; the server answers other clients meanwhile, a
request whose headers come in time is served, a kept-alive connection that starts another
request and stalls is closed alike, and a WebSocket session outlives the deadline."""

from __future__ import annotations

import re
import socket
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import orjson
import pytest

from tests.support.server_proc import ServerProcess
from tests.support.waiting import wait_until
from tests.support.ws_fuzz import open_session

pytestmark = pytest.mark.slow

TIMEOUT = 1.0  # --header-timeout
SLOW = 100


@pytest.fixture(scope="module")
def server(asset: Callable[[str], Path]) -> Iterator[ServerProcess]:
    with ServerProcess(["launch", "render", str(asset("qwen3")), "--header-timeout", str(TIMEOUT)]) as srv:
        yield srv


def connect(server: ServerProcess) -> socket.socket:
    host, port = server.url.removeprefix("http://").rsplit(":", 1)
    sock = socket.create_connection((host, int(port)), timeout=60)
    return sock


def header_timeouts(server: ServerProcess) -> float:
    text = httpx.get(server.url + "/metrics", timeout=30).text
    m = re.search(r"^tokenwire_header_timeouts_total (\S+)$", text, re.M)
    assert m is not None, "tokenwire_header_timeouts_total is not exported"
    return float(m.group(1))


def read_all(sock: socket.socket) -> bytes:
    """Everything the server sends until it closes the connection (the socket's timeout bounds it)."""
    out = b""
    while chunk := sock.recv(65536):
        out += chunk
    return out


def read_response(sock: socket.socket) -> bytes:
    """One response with a Content-Length body."""
    data = b""
    while b"\r\n\r\n" not in data:
        data += sock.recv(65536)
    head, body = data.split(b"\r\n\r\n", 1)
    m = re.search(rb"(?im)^content-length: *(\d+)", head)
    assert m is not None, head
    while len(body) < int(m.group(1)):
        body += sock.recv(65536)
    return head + b"\r\n\r\n" + body


def test_partial_requests_are_answered_408_and_closed_after_the_header_timeout(server: ServerProcess) -> None:
    before = header_timeouts(server)
    partial = [b"", b"GET /health HTTP/1.1\r\n", b"POST /v1/chat/completions/render HTTP/1.1\r\nHost: x\r\nContent-"]
    socks = [connect(server) for _ in range(SLOW)]
    for k, sock in enumerate(socks):
        if partial[k % 3]:
            sock.sendall(partial[k % 3])
    # the server goes on serving meanwhile
    assert httpx.get(server.url + "/health", timeout=30).status_code == 200
    answers = [read_all(sock) for sock in socks]  # returns once the server closed each one
    for sock in socks:
        sock.close()
    assert all(a.startswith(b"HTTP/1.1 408 ") for a in answers), {a[:40] for a in answers}
    body = orjson.loads(answers[0].split(b"\r\n\r\n", 1)[1])
    assert body["error"]["message"] == f"The request headers did not arrive within {TIMEOUT:g} s."
    wait_until(lambda: header_timeouts(server) == before + SLOW, f"{SLOW} header timeouts counted", timeout=30,
               detail=lambda: header_timeouts(server) - before)


def test_headers_in_time_are_served_and_a_stalled_second_request_is_closed(server: ServerProcess) -> None:
    before = header_timeouts(server)
    sock = connect(server)
    sock.sendall(b"GET /health HTTP/1.1\r\nHost: localhost\r\n")  # headers in two parts, in time
    sock.sendall(b"\r\n")
    first = read_response(sock)  # whole, before the next request: a pipelined one would wait its turn
    assert first.startswith(b"HTTP/1.1 200 ") and b'"status":"ok"' in first, first
    sock.sendall(b"GET /health HTTP/1.1\r\n")  # a second request on the kept-alive connection, stalled
    rest = read_all(sock)
    sock.close()
    assert rest.startswith(b"HTTP/1.1 408 "), rest
    wait_until(lambda: header_timeouts(server) == before + 1, "the stalled request counted", timeout=30)


def test_a_websocket_session_outlives_the_header_timeout(server: ServerProcess) -> None:
    ws = open_session(server.ws_url)
    time.sleep(2 * TIMEOUT)  # past the deadline the upgrade request's timer would have set
    ws.send(orjson.dumps({"type": "ping", "event_id": "alive"}).decode())
    assert orjson.loads(ws.recv(timeout=30))["type"] == "pong"
    ws.close()
