"""Clients that misbehave against a real ``serve`` process (tiny-qwen3, local engine): they vanish
mid-stream (HTTP SSE, HTTP JSON, WebSocket with and without a close frame) or read slowly.

A vanished client's generation is aborted at the engine (``/health`` ``live_sequences`` returns to 0
and the engine stops producing its tokens); a slow reader gets its deltas coalesced into fewer
frames whose text is exactly the non-streaming answer, and never holds the server up."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest

from tests.support.server_proc import ServerProcess
from tests.support.waiting import wait_until
from tests.support.ws_fuzz import open_session

pytestmark = pytest.mark.slow

LONG = {"messages": [{"role": "user", "content": "Write a long story."}], "max_tokens": 3000, "ignore_eos": True,
        "temperature": 0}


@pytest.fixture(scope="module")
def server(asset: Callable[[str], Path]) -> Iterator[ServerProcess]:
    args = ["serve", str(asset("tiny-qwen3")), "--enable-scale-out", "--dtype", "float32", "--max-model-len", "4096"]
    with ServerProcess(args, startup_timeout=180) as srv:
        yield srv


def engine_stats(srv: ServerProcess) -> dict[str, Any]:
    return httpx.get(srv.url + "/engine/stats", timeout=10).json()  # type: ignore[no-any-return]


def wait_idle(srv: ServerProcess, timeout: float = 20.0, *, what: str = "the engine to hold no sequence") -> dict[str, Any]:
    """Until the engine holds no sequence; the stats then. Fails (naming ``what``) past ``timeout``."""
    last: dict[str, Any] = {}

    def idle() -> dict[str, Any] | None:
        last.update(engine_stats(srv))
        return dict(last) if last["live_sequences"] == 0 else None

    return wait_until(idle, what, timeout=timeout, detail=lambda: f"{last.get('live_sequences')} live")


def wait_busy(srv: ServerProcess, count: int, timeout: float = 30.0) -> None:
    wait_until(lambda: engine_stats(srv)["live_sequences"] >= count, f"{count} requests to reach the engine",
               timeout=timeout, interval=0.02)


def generated(srv: ServerProcess) -> int:
    return int(engine_stats(srv)["stats"]["generated_tokens"])


def test_sse_clients_that_vanish_mid_stream_free_the_engine(server: ServerProcess) -> None:
    before = generated(server)
    paths = [("/v1/chat/completions", LONG), ("/v1/messages", {**LONG, "ignore_eos": None}),
             ("/v1/completions", {"prompt": "Once upon a time", "max_tokens": 3000, "ignore_eos": True})]
    for path, body in paths * 2:
        with httpx.Client(base_url=server.url, timeout=30) as client, \
                client.stream("POST", path, json={**body, "stream": True}) as r:
            assert r.status_code == 200
            lines = r.iter_lines()
            for _ in range(6):
                next(lines)
        # leaving the block closes the connection mid-stream
    stats = wait_idle(server)
    assert stats["live_sequences"] == 0
    assert generated(server) - before < 6 * 3000 / 2  # aborted, not run to max_tokens


def test_a_json_client_that_vanishes_frees_the_engine(server: ServerProcess) -> None:
    before = generated(server)
    for path, body in [("/v1/chat/completions", LONG), ("/v1/completions",
                                                        {"prompt": "Once upon", "max_tokens": 3000, "ignore_eos": True})]:
        with pytest.raises(httpx.ReadTimeout):
            httpx.post(server.url + path, json=body, timeout=httpx.Timeout(30, read=1.0))
    stats = wait_idle(server)
    assert stats["live_sequences"] == 0
    assert generated(server) - before < 2 * 3000 / 2


def test_websocket_clients_that_vanish_free_the_engine(server: ServerProcess) -> None:
    before = generated(server)
    for clean_close in (True, False):
        ws = open_session(server.ws_url)
        for k in range(4):
            ws.send(orjson.dumps({"type": "chat", "id": f"c{k}", "body": LONG}).decode())
        wait_busy(server, 4)
        for _ in range(8):
            ws.recv(timeout=30)
        if clean_close:
            ws.close()
        else:  # the TCP connection drops: no close frame
            ws.socket.shutdown(socket.SHUT_RDWR)
            ws.socket.close()
        stats = wait_idle(server)
        assert stats["live_sequences"] == 0
    assert generated(server) - before < 8 * 3000 / 2


def small_buffer_socket(srv: ServerProcess) -> socket.socket:
    """A connected socket with a small receive buffer: a client that does not read soon pushes back
    on the server (loopback buffers would otherwise absorb a whole answer)."""
    host, port = srv.url.removeprefix("http://").rsplit(":", 1)
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.connect((host, int(port)))
    return sock


def test_a_slow_websocket_reader_gets_coalesced_deltas_with_the_exact_text(server: ServerProcess) -> None:
    # Four 400-token streams on one session whose client reads nothing until they are produced (a few
    # MB of frames), then all of it. The pause stays under the server's keepalive (a ping every 20 s,
    # 20 s to answer): a client that reads nothing for longer is, rightly, closed 1011 as unresponsive
    # (an earlier form of this test paused for a whole 1,500-token answer and lost that race on a
    # loaded machine).
    chat = {**LONG, "max_tokens": 400}
    ws = open_session(server.ws_url, sock=small_buffer_socket(server), max_queue=1)
    try:  # resumable: the frames carry the token ids they cover
        for k in range(4):
            ws.send(orjson.dumps({"type": "chat", "id": f"s{k}", "body": chat, "resumable": True}).decode())
        wait_busy(server, 4)
        # Reading nothing while the four streams are produced, for at most 17 s: a client that answers
        # no ping is closed after 20 s (+ up to 20 s more), so a longer wait would test the keepalive.
        wait_idle(server, timeout=17, what="the engine to finish the four streams while the client reads "
                                           "nothing (a loaded machine: the test needs them produced first)")
        frames: dict[str, list[dict[str, Any]]] = {f"s{k}": [] for k in range(4)}
        done = 0
        while done < 4:
            frame = orjson.loads(ws.recv(timeout=60))
            frames[frame["id"]].append(frame)
            done += frame["type"] == "chat.done"
    finally:
        ws.close()
    request = {k: v for k, v in chat.items() if k != "ignore_eos"}
    delta_frames = tokens = 0
    for mine in frames.values():
        deltas = [f for f in mine if f["type"] == "chat.delta"]
        text = "".join(ch["choices"][0]["delta"].get("content") or "" for f in deltas for ch in f["chunks"]
                       if ch.get("choices"))
        ids = [t for f in deltas for t in f["output_token_ids"]]
        one_shot = httpx.post(server.url + "/v1/chat/completions/derender", timeout=60, json={
            "chat_request": request, "prompt_token_ids": [0],
            "generate_response": {"request_id": "x", "choices": [{"index": 0, "token_ids": ids,
                                                                   "finish_reason": "length"}]}}).json()
        assert len(ids) == 400 and text == one_shot["choices"][0]["message"]["content"]
        delta_frames, tokens = delta_frames + len(deltas), tokens + len(ids)
    # merged, not one frame per token: past the 128 KiB socket send buffer (--socket-send-buffer; the
    # kernel's autotuning let 4 MiB of stale deltas queue before) the session coalesces
    assert delta_frames < tokens / 2


def test_a_reader_that_never_reads_does_not_hold_up_other_sessions(server: ServerProcess) -> None:
    stuck = open_session(server.ws_url)
    stop = threading.Event()

    def flood() -> None:  # sends pings and never reads the pongs
        frame = orjson.dumps({"type": "ping"}).decode()
        while not stop.is_set():
            try:
                stuck.send(frame)
            except Exception:
                return

    flooder = threading.Thread(target=flood, daemon=True)
    flooder.start()
    try:
        time.sleep(1.0)
        ws = open_session(server.ws_url)
        ws.send(orjson.dumps({"type": "chat", "id": "ok", "body": {**LONG, "max_tokens": 8}}).decode())
        while (frame := orjson.loads(ws.recv(timeout=30)))["type"] != "chat.done":
            pass
        assert frame["status"] == "completed"
        ws.close()
    finally:
        stop.set()
        stuck.socket.shutdown(socket.SHUT_RDWR)
        stuck.socket.close()
        flooder.join(10)
    assert wait_idle(server)["live_sequences"] == 0
