"""A client that leaves mid-stream frees its engine row, whichever path it streams over and whichever
engine serves it (the one close behaviour, docs/engine.md "Closing a stream").

Paths: SSE ``/v1/chat/completions``, and a WebSocket session whose socket is dropped (no close
handshake) mid-chat, for every engine: the local engine (``serve``), and a front end (``launch
render``) over the HTTP engine (``--engine-url http://``) and over the engine link (``--engine-url
ws://``) in front of a real ``serve --tokens-only`` engine. Where the generate stage is served (the
local engine's ``/inference/v1/generate`` and ``generate`` frames; a front end serves neither, its
engine streams are the HTTP and link cases above): SSE ``/inference/v1/generate`` and a dropped
socket mid-``generate``. Each case first sees the
engine hold the request's row (``live_sequences`` > 0), then leaves, then waits for the engine (and
the front end's own count of requests in flight) to reach 0.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.e2e.ws_client import SessionClient
from tests.support.server_proc import ServerProcess
from tests.support.waiting import wait_until

pytestmark = pytest.mark.slow

MODEL = "tiny-qwen3"
LONG = 3000  # tokens: far more than a case reads before it leaves
CHAT = {"messages": [{"role": "user", "content": "Tell me a long story."}], "max_tokens": LONG,
        "temperature": 0, "ignore_eos": True}
GENERATE = {"token_ids": [1, 2, 3], "sampling_params": {"max_tokens": LONG, "ignore_eos": True}}


@pytest.fixture(scope="module")
def topologies(asset: Callable[[str], Path]) -> Iterator[dict[str, tuple[ServerProcess, ServerProcess]]]:
    """name → (the server the client talks to, the process that runs the engine)."""
    model = asset(MODEL)
    with ServerProcess(["serve", str(model), "--dtype", "float32", "--enable-scale-out"]) as local, \
            ServerProcess(["serve", str(model), "--tokens-only", "--dtype", "float32"]) as engine:
        ws_url = "ws" + engine.url[len("http"):]
        with ServerProcess(["launch", "render", str(model), "--engine-url", engine.url]) as http_front, \
                ServerProcess(["launch", "render", str(model), "--engine-url", ws_url]) as link_front:
            yield {"local": (local, local), "http": (http_front, engine), "link": (link_front, engine)}


def live(server: ServerProcess) -> int:
    n: int = httpx.get(server.url + "/health", timeout=10).json()["live_sequences"]
    return n


async def leave_sse(server: ServerProcess, engine: ServerProcess, path: str, body: dict[str, Any]) -> int:
    """Read three events of an SSE stream, check the engine holds the row, and drop the connection."""
    async with httpx.AsyncClient(base_url=server.url, timeout=120) as client, \
            client.stream("POST", path, json=body) as r:
        assert r.status_code == 200, await r.aread()
        events = 0
        async for line in r.aiter_lines():
            events += line.startswith("data: ")
            if events == 3:
                break
        return live(engine)


async def leave_websocket(server: ServerProcess, engine: ServerProcess, kind: str, body: dict[str, Any]) -> int:
    """Read three deltas of a ``kind`` request on a session, check the engine holds the row, and
    drop the TCP connection without a close handshake."""
    client = await SessionClient.open(server.ws_url)
    await client.send(type=kind, id="long", body=body)
    deltas = 0
    while deltas < 3:
        frame = await client.next()
        assert frame["type"] != "error", frame
        deltas += frame["type"] == f"{kind}.delta"
    held = live(engine)
    client.ws.transport.abort()
    return held


@pytest.mark.parametrize(("topology", "path"), [
    *((topology, path) for topology in ("local", "http", "link") for path in ("sse chat", "websocket chat")),
    ("local", "sse generate"), ("local", "websocket generate")])
def test_a_client_that_leaves_mid_stream_frees_the_engine_row(
        topologies: dict[str, tuple[ServerProcess, ServerProcess]], topology: str, path: str) -> None:
    server, engine = topologies[topology]
    wait_until(lambda: live(engine) == 0 and live(server) == 0, "no request in flight before the case", timeout=30)
    if path == "sse chat":
        held = asyncio.run(leave_sse(server, engine, "/v1/chat/completions", {**CHAT, "stream": True}))
    elif path == "sse generate":
        held = asyncio.run(leave_sse(server, engine, "/inference/v1/generate", {**GENERATE, "stream": True}))
    elif path == "websocket chat":
        held = asyncio.run(leave_websocket(server, engine, "chat", CHAT))
    else:
        held = asyncio.run(leave_websocket(server, engine, "generate", GENERATE))
    assert held >= 1, "the engine held no row while the stream ran"
    wait_until(lambda: live(engine) == 0, "the engine to free the row after the client left", timeout=30,
               detail=lambda: f"engine live_sequences {live(engine)}")
    wait_until(lambda: live(server) == 0, "the front end to end the request after the client left", timeout=30,
               detail=lambda: f"front end live_sequences {live(server)}")
