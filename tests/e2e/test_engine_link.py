"""The multiplexed engine link (``launch render --engine-url ws://``) against a real tokens-only
engine process: the same answers as the HTTP link, more requests than one link carries, aborts
that reach the engine, the engine's batch frames, and an engine that goes away."""

from __future__ import annotations

import asyncio
import socket
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest
from websockets.asyncio.client import connect

from tests.e2e.ws_client import SessionClient, chat_text
from tests.support.server_proc import ServerProcess

pytestmark = pytest.mark.slow  # real servers loading models: the full suite only, not the fast loop

NO_TORCH = "import sys\nsys.modules['torch'] = None\n"


@pytest.fixture(scope="module")
def servers(asset: Callable[[str], Path]) -> Iterator[tuple[ServerProcess, ServerProcess, ServerProcess]]:
    """(engine, front end over the ws link, front end over HTTP); the engine allows 16 requests per
    session, so 40 streams need three links."""
    model = asset("tiny-qwen3")
    with ServerProcess(["serve", str(model), "--tokens-only", "--dtype", "float32",
                        "--ws-max-in-flight", "16"]) as engine:
        ws_url = "ws" + engine.url[len("http"):]
        with ServerProcess(["launch", "render", str(model), "--engine-url", ws_url], preamble=NO_TORCH) as link, \
                ServerProcess(["launch", "render", str(model), "--engine-url", engine.url],
                              preamble=NO_TORCH) as http:
            yield engine, link, http


def body(i: int, tokens: int = 12) -> dict[str, Any]:
    return {"messages": [{"role": "user", "content": f"Say something about {i}"}], "max_tokens": tokens,
            "temperature": 0}


async def sse_text(client: httpx.AsyncClient, url: str, payload: dict[str, Any]) -> tuple[str, str | None]:
    text, finish = "", None
    async with client.stream("POST", url + "/v1/chat/completions", json={**payload, "stream": True}) as r:
        assert r.status_code == 200, await r.aread()
        async for line in r.aiter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            for choice in orjson.loads(line[6:])["choices"]:
                text += choice["delta"].get("content") or ""
                finish = choice.get("finish_reason") or finish
    return text, finish


def test_the_link_answers_what_the_http_engine_link_answers(servers: tuple[ServerProcess, ...]) -> None:
    _, link, http = servers
    for i in range(3):
        a = httpx.post(link.url + "/v1/chat/completions", json=body(i), timeout=120).json()
        b = httpx.post(http.url + "/v1/chat/completions", json=body(i), timeout=120).json()
        assert a["choices"][0]["message"] == b["choices"][0]["message"]
        assert a["usage"] == b["usage"]

    async def both() -> None:
        async with httpx.AsyncClient(timeout=120) as client:
            for i in range(3):
                assert await sse_text(client, link.url, body(i)) == await sse_text(client, http.url, body(i))

    asyncio.run(both())


def test_forty_concurrent_streams_over_several_links_each_get_their_own_tokens_in_order(
        servers: tuple[ServerProcess, ...]) -> None:
    _, link, http = servers
    want = {i: httpx.post(http.url + "/v1/chat/completions", json=body(i % 5, 24), timeout=120).json()
            ["choices"][0]["message"]["content"] for i in range(5)}

    async def run() -> list[tuple[str, str | None]]:
        async with httpx.AsyncClient(timeout=300, limits=httpx.Limits(max_connections=64)) as client:
            return await asyncio.gather(*(sse_text(client, link.url, body(i % 5, 24)) for i in range(40)))

    results = asyncio.run(run())
    for i, (text, finish) in enumerate(results):
        assert (text, finish) == (want[i % 5], "length"), i
    stats = httpx.get(link.url + "/health", timeout=10).json()
    assert stats["engine"] == "LinkEngine"


def test_websocket_chats_through_the_link_equal_the_http_answers(servers: tuple[ServerProcess, ...]) -> None:
    _, link, http = servers
    want = httpx.post(http.url + "/v1/chat/completions", json=body(7), timeout=120).json()

    async def run() -> str:
        client = await SessionClient.open(link.ws_url)
        await client.send(type="chat", id="c", body=body(7))
        frames = await client.until("c", "chat.done")
        await client.close()
        return chat_text(frames)

    assert asyncio.run(run()) == want["choices"][0]["message"]["content"]


def wait_idle(engine: ServerProcess, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    live = None
    while time.monotonic() < deadline:
        live = httpx.get(engine.url + "/health", timeout=10).json()["live_sequences"]
        if live == 0:
            return
        time.sleep(0.1)
    pytest.fail(f"the engine still holds {live} sequences {timeout:g} s after the clients left")


def wait_busy(engine: ServerProcess, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if httpx.get(engine.url + "/health", timeout=10).json()["live_sequences"]:
            return
        time.sleep(0.02)
    pytest.fail(f"the engine started no sequence within {timeout:g} s")


def test_a_client_that_leaves_mid_stream_aborts_its_request_at_the_engine(servers: tuple[ServerProcess, ...]) -> None:
    engine, link, _ = servers

    async def leave_early() -> int:
        got = 0
        async with httpx.AsyncClient(timeout=120) as client, \
                client.stream("POST", link.url + "/v1/chat/completions",
                              json={**body(1, 2000), "stream": True, "max_tokens": 2000}) as r:
            async for line in r.aiter_lines():
                if line.startswith("data: "):
                    got += 1
                if got == 5:
                    break
        return got

    assert asyncio.run(leave_early()) == 5
    wait_idle(engine)


def test_the_engine_sends_a_steps_deltas_as_batch_frames_in_seq_order(servers: tuple[ServerProcess, ...]) -> None:
    engine, _, _ = servers
    prompt = httpx.post(engine.url + "/v1/chat/completions/render", json=body(3), timeout=60).json()["token_ids"]

    async def run() -> tuple[list[dict[str, Any]], int]:
        frames: list[dict[str, Any]] = []
        batches = 0
        async with connect(engine.ws_url + "/v1/session", subprotocols=["tokenwire.v1", "tokenwire.batch"],  # type: ignore[list-item]
                           max_size=1 << 24) as ws:
            frames.append(orjson.loads(await ws.recv()))
            for k in range(8):
                await ws.send(orjson.dumps({"type": "generate", "id": f"g{k}", "body": {
                    "token_ids": prompt, "sampling_params": {"max_tokens": 16, "temperature": 0}}}).decode())
            done = 0
            while done < 8:
                message = orjson.loads(await ws.recv())
                inner = message["frames"] if message["type"] == "batch" else [message]
                batches += message["type"] == "batch"
                frames += inner
                done += sum(f["type"] == "generate.done" for f in inner)
        return frames, batches

    frames, batches = asyncio.run(run())
    assert [f["seq"] for f in frames] == list(range(1, len(frames) + 1))
    assert batches > 0, "eight requests decoded in the same steps never shared a message"
    for k in range(8):
        mine = [f for f in frames if f.get("id") == f"g{k}"]
        ids = [t for f in mine if f["type"] == "generate.delta" for c in f["chunk"]["choices"] for t in c["token_ids"]]
        assert len(ids) == 16 and mine[-1]["type"] == "generate.done" and mine[-1]["status"] == "completed"


def test_a_gone_engine_is_a_502_with_a_message_not_a_500(asset: Callable[[str], Path]) -> None:
    model = asset("tiny-qwen3")
    with ServerProcess(["serve", str(model), "--tokens-only", "--dtype", "float32"]) as engine:
        ws_url = "ws" + engine.url[len("http"):]
        with ServerProcess(["launch", "render", str(model), "--engine-url", ws_url], preamble=NO_TORCH) as link:
            assert httpx.post(link.url + "/v1/chat/completions", json=body(0), timeout=120).status_code == 200
            engine.stop()
            r = httpx.post(link.url + "/v1/chat/completions", json=body(0), timeout=120)
            assert r.status_code == 502, r.text
            assert "remote engine" in r.json()["error"]["message"]
            assert httpx.get(link.url + "/health", timeout=10).json()["status"] != "ok"


# --- the step-wise path: a session's chats reported from the link reader, no task per step -------

def test_a_thousand_sessions_on_one_front_end_stream_their_own_text_in_seq_order(
        servers: tuple[ServerProcess, ...]) -> None:
    """1,000 sessions open on the link front end at once, 100 of them streaming (each chat's deltas
    derendered and framed from the engine link's reader), every text equal to the HTTP link's
    answer, ``seq`` checked on every frame by the client."""
    _, link, http = servers
    want = {i: httpx.post(http.url + "/v1/chat/completions", json=body(i, 16), timeout=120).json()
            ["choices"][0]["message"]["content"] for i in range(5)}

    async def run() -> list[str]:
        clients: list[SessionClient] = []
        for start in range(0, 1000, 100):
            clients += await asyncio.gather(*(SessionClient.open(link.ws_url) for _ in range(start, start + 100)))

        async def chat(k: int, client: SessionClient) -> str:
            await client.send(type="chat", id=f"c{k}", body=body(k % 5, 16))
            return chat_text(await client.until(f"c{k}", "chat.done"))

        try:
            return await asyncio.gather(*(chat(k, clients[k * 10]) for k in range(100)))
        finally:
            await asyncio.gather(*(c.close() for c in clients))

    texts = asyncio.run(run())
    assert texts == [want[k % 5] for k in range(100)]


def test_a_cancel_mid_stream_ends_the_chat_and_frees_the_engine(servers: tuple[ServerProcess, ...]) -> None:
    engine, link, _ = servers

    async def run() -> list[dict[str, Any]]:
        client = await SessionClient.open(link.ws_url)
        await client.send(type="chat", id="long", body=body(2, 3000))
        seen = 0
        while seen < 3:
            frame = await client.next()
            seen += frame["type"] == "chat.delta"
        await client.send(type="cancel", id="long")
        frames = await client.until("long", "chat.done")
        await client.close()
        return frames

    frames = asyncio.run(run())
    assert frames[-1]["type"] == "chat.done" and frames[-1]["status"] == "cancelled"
    wait_idle(engine)


def test_a_session_that_does_not_read_gets_coalesced_deltas_with_the_exact_text(
        servers: tuple[ServerProcess, ...]) -> None:
    """Four resumable 300-token chats on a session whose client reads nothing for a while through a
    small receive buffer: past the server's socket buffer the session queues and merges deltas, and
    every stream's text and token ids are still exactly the HTTP link's."""
    engine, link, http = servers
    want = {i: httpx.post(http.url + "/v1/chat/completions", json=body(i, 300), timeout=120).json()
            ["choices"][0]["message"]["content"] for i in range(4)}
    host, port = link.url.removeprefix("http://").rsplit(":", 1)

    async def run() -> tuple[dict[int, str], int, int]:
        sock = socket.socket()
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        sock.connect((host, int(port)))
        client = await SessionClient.open(link.ws_url, sock=sock, max_queue=1)
        for i in range(4):
            await client.send(type="chat", id=f"r{i}", body=body(i, 300), resumable=True)
        await asyncio.to_thread(wait_busy, engine)
        # Nothing is read until the engine has produced all four streams (within the server's
        # keepalive: a client that answers no ping for 20 s is closed).
        await asyncio.to_thread(wait_idle, engine, 15.0)
        done: dict[int, list[dict[str, Any]]] = {i: [] for i in range(4)}
        finished = 0
        while finished < 4:
            frame = await client.next()
            if frame.get("id", "").startswith("r"):
                done[int(frame["id"][1:])].append(frame)
                finished += frame["type"] == "chat.done"
        await client.close()
        deltas = [f for fs in done.values() for f in fs if f["type"] == "chat.delta"]
        tokens = sum(len(f["output_token_ids"]) for f in deltas)
        return {i: chat_text(fs) for i, fs in done.items()}, len(deltas), tokens

    texts, deltas, tokens = asyncio.run(run())
    assert texts == want
    assert tokens == 4 * 300
    assert deltas < tokens / 2, "the deltas were not merged while the client did not read"
