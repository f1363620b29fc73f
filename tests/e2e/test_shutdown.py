"""Graceful shutdown of a real ``serve`` process (server/shutdown.py): SIGTERM stops accepting, lets
streams in flight finish up to ``--shutdown-timeout``, ends the rest with a clear 503
``shutting_down`` error (HTTP error, SSE error event, WebSocket error frame), closes sessions with
1012, and the process exits 0.

Each test shuts down a server of its own; both servers start side by side when the module begins
(two processes loading at once take about as long as one)."""

from __future__ import annotations

import signal
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest
from websockets.exceptions import ConnectionClosed
from websockets.sync.client import ClientConnection

from tests.e2e.deploy_support import side_by_side
from tests.support.server_proc import ServerProcess
from tests.support.ws_fuzz import open_session

pytestmark = pytest.mark.slow

CHAT = {"messages": [{"role": "user", "content": "Tell me a story."}], "temperature": 0, "ignore_eos": True}


TIMEOUTS = {"drain": 60.0, "past-timeout": 1.0}  # each test's server: its --shutdown-timeout


def server(asset: Callable[[str], Path], timeout: float) -> ServerProcess:
    return ServerProcess(["serve", str(asset("tiny-qwen3")), "--dtype", "float32", "--max-model-len", "4096",
                          "--shutdown-timeout", str(timeout)], startup_timeout=180)


@pytest.fixture(scope="module")
def servers(asset: Callable[[str], Path]) -> Iterator[dict[str, ServerProcess]]:
    """One fresh server per test (each is shut down by its test), started side by side."""
    procs = {name: server(asset, timeout) for name, timeout in TIMEOUTS.items()}
    try:
        side_by_side(*(srv.start for srv in procs.values()))
        yield procs
    finally:
        side_by_side(*(srv.stop for srv in procs.values()))


class SseReader(threading.Thread):
    """Reads one streaming chat to its end in the background, after its first event."""

    def __init__(self, srv: ServerProcess, max_tokens: int) -> None:
        super().__init__(daemon=True)
        self.events: list[Any] = []
        self.first = threading.Event()
        self.client = httpx.Client(base_url=srv.url, timeout=60)
        self.stream = self.client.stream("POST", "/v1/chat/completions",
                                         json={**CHAT, "max_tokens": max_tokens, "stream": True})

    def run(self) -> None:
        with self.stream as r:
            assert r.status_code == 200
            for line in r.iter_lines():
                if line.startswith("data: "):
                    self.events.append("[DONE]" if line == "data: [DONE]" else orjson.loads(line[6:]))
                    self.first.set()
        self.client.close()


def ws_frames_until_close(ws: ClientConnection) -> tuple[list[dict[str, Any]], int | None]:
    frames = []
    try:
        while True:
            frames.append(orjson.loads(ws.recv(timeout=60)))
    except ConnectionClosed as exc:
        return frames, exc.rcvd.code if exc.rcvd is not None else None


def ws_started(ws: ClientConnection, rid: str, max_tokens: int) -> list[dict[str, Any]]:
    ws.send(orjson.dumps({"type": "chat", "id": rid, "body": {**CHAT, "max_tokens": max_tokens}}).decode())
    first = [orjson.loads(ws.recv(timeout=60))]
    while first[-1]["type"] != "chat.delta":
        first.append(orjson.loads(ws.recv(timeout=60)))
    return first


def wait_refusing(srv: ServerProcess) -> None:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            httpx.get(srv.url + "/health", timeout=5)
        except httpx.ConnectError:
            return
        time.sleep(0.02)
    raise AssertionError("the server still accepts connections after SIGTERM")


def text_of(events: list[Any]) -> str:
    return "".join(e["choices"][0]["delta"].get("content") or "" for e in events
                   if isinstance(e, dict) and e.get("choices"))


def test_sigterm_lets_streams_in_flight_finish_refuses_new_work_and_exits_0(servers: dict[str, ServerProcess]) -> None:
    srv = servers["drain"]
    try:
        expected = httpx.post(srv.url + "/v1/chat/completions", json={**CHAT, "max_tokens": 400}, timeout=120).json()
        sse = SseReader(srv, 400)
        sse.start()
        assert sse.first.wait(60)
        ws = open_session(srv.ws_url)
        head = ws_started(ws, "c", 400)
        srv.proc.send_signal(signal.SIGTERM)  # type: ignore[union-attr]
        wait_refusing(srv)  # new connections are refused: the server is draining
        ws.send(orjson.dumps({"type": "chat", "id": "late", "body": {**CHAT, "max_tokens": 4}}).decode())
        frames, code = ws_frames_until_close(ws)
        sse.join(120)
        assert srv.proc.wait(60) == 0  # type: ignore[union-attr]
    finally:
        srv.stop()
    late = [f for f in frames if f.get("id") == "late"]
    assert [(f["type"], f["error"]["code"], f["error"]["status"]) for f in late] == [("error", "shutting_down", 503)]
    mine = [f for f in head + frames if f.get("id") == "c"]
    assert mine[-1] == {**mine[-1], "type": "chat.done", "status": "completed"}
    assert code == 1012
    text = "".join(ch["choices"][0]["delta"].get("content") or "" for f in mine if f["type"] == "chat.delta"
                   for ch in f["chunks"] if ch.get("choices"))
    assert text == expected["choices"][0]["message"]["content"] == text_of(sse.events)
    assert sse.events[-1] == "[DONE]"


def test_past_the_shutdown_timeout_work_in_flight_ends_with_a_clear_error(servers: dict[str, ServerProcess]) -> None:
    srv = servers["past-timeout"]
    try:
        sse = SseReader(srv, 3500)
        sse.start()
        assert sse.first.wait(60)
        ws = open_session(srv.ws_url)
        ws_started(ws, "c", 3500)
        json_answer: list[httpx.Response] = []
        waiter = threading.Thread(target=lambda: json_answer.append(httpx.post(
            srv.url + "/v1/chat/completions", json={**CHAT, "max_tokens": 3500}, timeout=60)), daemon=True)
        waiter.start()
        deadline = time.monotonic() + 60
        while httpx.get(srv.url + "/health").json()["live_sequences"] < 3:  # all three reached the engine
            assert time.monotonic() < deadline
            time.sleep(0.02)
        srv.proc.send_signal(signal.SIGTERM)  # type: ignore[union-attr]
        frames, code = ws_frames_until_close(ws)
        sse.join(60)
        waiter.join(60)
        assert srv.proc.wait(60) == 0  # type: ignore[union-attr]
    finally:
        srv.stop()
    error = {"message": "The server is shutting down; retry the request (on another replica).",
             "type": "ServiceUnavailableError", "param": None, "code": 503}
    assert sse.events[-2:] == [{"error": error}, "[DONE]"]  # the error event, then [DONE] as vLLM
    assert json_answer and json_answer[0].status_code == 503 and json_answer[0].json() == {"error": error}
    last = [f for f in frames if f.get("id") == "c"][-1]
    assert (last["type"], last["error"]["code"], last["error"]["message"]) == ("error", "shutting_down",
                                                                               error["message"])
    assert code == 1012
