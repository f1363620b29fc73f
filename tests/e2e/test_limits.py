"""Abuse limits on a real ``launch render`` process (server/limits.py): per-client rate and concurrency
caps shared by HTTP and WebSocket request frames (429 with ``Retry-After`` / error frame
``rate_limited`` on a session that lives on), request bodies refused by size before they are read
(413) and by upload time (408), WebSocket messages by size before they are read (1009)."""

from __future__ import annotations

import socket
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import orjson
import pytest
from websockets.exceptions import ConnectionClosed

from tests.support.server_proc import ServerProcess
from tests.support.ws_fuzz import auth_subprotocol, open_session

pytestmark = pytest.mark.slow

RENDER = "/v1/chat/completions/render"
CHAT = {"messages": [{"role": "user", "content": "Hi"}]}
RATE = 30  # per minute per client


@pytest.fixture(scope="module")
def server(asset: Callable[[str], Path]) -> Iterator[ServerProcess]:
    args = ["launch", "render", str(asset("qwen3")), "--api-key", "k1", "--api-key", "k2", "--rate-limit", str(RATE),
            "--max-concurrent-requests", "1", "--body-timeout", "1", "--ws-max-frame-bytes", "65536"]
    with ServerProcess(args) as srv:
        yield srv


def headers(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


def test_a_client_past_its_rate_gets_429_with_retry_after_on_http_and_websocket_alike(server: ServerProcess) -> None:
    with httpx.Client(base_url=server.url, timeout=30) as client:
        codes = [client.post(RENDER, json=CHAT, headers=headers("k1")).status_code for _ in range(RATE - 5)]
        assert codes == [200] * (RATE - 5)
        ws = open_session(server.ws_url, additional_headers=headers("k1"))  # the same client, the same budget
        answers = []
        for k in range(8):
            ws.send(orjson.dumps({"type": "render", "id": f"r{k}", "kind": "chat", "body": CHAT}).decode())
            answers.append(orjson.loads(ws.recv(timeout=30)))
        assert [a["type"] for a in answers[:5]] == ["render.done"] * 5
        refused = answers[5:]
        assert all((a["type"], a["error"]["code"], a["error"]["status"]) == ("error", "rate_limited", 429)
                   for a in refused)
        ws.send(orjson.dumps({"type": "ping", "event_id": "alive"}).decode())
        assert orjson.loads(ws.recv(timeout=30))["type"] == "pong"  # the session lives on
        ws.close()
        # the browser form of the same key is the same client (it once fell back to the address)
        browser = open_session(server.ws_url, subprotocols=["tokenwire.v1", auth_subprotocol("k1")])
        browser.send(orjson.dumps({"type": "render", "id": "b", "kind": "chat", "body": CHAT}).decode())
        answer = orjson.loads(browser.recv(timeout=30))
        assert (answer["type"], answer["error"]["code"]) == ("error", "rate_limited")
        browser.close()
        r = client.post(RENDER, json=CHAT, headers=headers("k1"))
        assert r.status_code == 429 and int(r.headers["retry-after"]) >= 1
        assert r.json()["error"]["type"] == "RateLimitError" and "per minute" in r.json()["error"]["message"]
        r = client.post("/v1/messages/render", json={**CHAT, "max_tokens": 5}, headers=headers("k1"))
        assert r.status_code == 429 and r.json()["error"]["type"] == "rate_limit_error"
        assert client.post(RENDER, json=CHAT, headers=headers("k2")).status_code == 200  # another client
        assert client.get("/health").status_code == 200  # public paths are not limited


def slow_upload(server: ServerProcess, key: str, body: bytes) -> socket.socket:
    host, port = server.url.removeprefix("http://").rsplit(":", 1)
    sock = socket.create_connection((host, int(port)))
    sock.sendall(f"POST {RENDER} HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {key}\r\n"
                 f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n".encode() + body[:5])
    return sock


def read_response(sock: socket.socket) -> str:
    """One whole HTTP response from a raw socket (its head and body may come in separate reads)."""
    sock.settimeout(10)
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(65536)
        if not chunk:
            return data.decode()
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    length = next((int(line.split(b":", 1)[1]) for line in head.split(b"\r\n")
                   if line.lower().startswith(b"content-length:")), 0)
    while len(body) < length:
        chunk = sock.recv(65536)
        if not chunk:
            break
        body += chunk
    return (head + b"\r\n\r\n" + body).decode()


def test_an_upload_that_trickles_is_refused_with_408_and_holds_its_concurrency_slot_meanwhile(
        server: ServerProcess) -> None:
    body = orjson.dumps(CHAT)
    sock = slow_upload(server, "k2", body)
    try:
        time.sleep(0.3)
        busy = httpx.post(server.url + RENDER, json=CHAT, headers=headers("k2"), timeout=30)
        assert busy.status_code == 429 and "concurrent" in busy.json()["error"]["message"]
        answer = read_response(sock)
    finally:
        sock.close()
    assert answer.startswith("HTTP/1.1 408")
    assert '"message":"The request body did not arrive within 1 s."' in answer
    time.sleep(2.1)  # the rate budget refills a little
    assert httpx.post(server.url + RENDER, json=CHAT, headers=headers("k2"), timeout=30).status_code == 200


def test_bodies_over_the_limit_are_refused_before_they_are_read(server: ServerProcess) -> None:
    sock = socket.create_connection(server.url.removeprefix("http://").rsplit(":", 1))  # type: ignore[arg-type]
    try:
        sock.sendall(f"POST {RENDER} HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer k2\r\n"
                     f"Content-Type: application/json\r\nContent-Length: {10 ** 12}\r\n\r\n".encode())
        answer = read_response(sock)  # at once: nothing of the terabyte was sent
    finally:
        sock.close()
    assert answer.startswith("HTTP/1.1 413") and "Request body too large" in answer


def test_a_websocket_message_over_the_frame_limit_closes_1009(server: ServerProcess) -> None:
    ws = open_session(server.ws_url, additional_headers=headers("k2"))
    ws.send(orjson.dumps({"type": "ping", "event_id": "x" * 70_000}).decode())
    with pytest.raises(ConnectionClosed) as info:
        ws.recv(timeout=30)
    assert info.value.rcvd is not None and info.value.rcvd.code == 1009
