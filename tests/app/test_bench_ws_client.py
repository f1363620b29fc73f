"""The streaming benchmark's lean WebSocket client (``bench.loopback.WsStream``) against the
``websockets`` library's server on a real socket: the upgrade with the subprotocol, masked client
frames (the server fails a connection whose client does not mask), every payload length encoding,
a fragmented message, pings answered, and the server's close ending ``recv``."""

from __future__ import annotations

from typing import Any

import anyio
import pytest
from websockets.asyncio.server import ServerConnection, serve

from bench.loopback import WsStream


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


SIZES = [0, 5, 125, 126, 300, 65535, 65536, 70_000]


@pytest.mark.anyio
async def test_the_lean_client_speaks_the_protocol_to_a_library_server() -> None:
    seen: dict[str, Any] = {}

    async def handler(conn: ServerConnection) -> None:
        seen["subprotocol"] = conn.subprotocol
        for _ in SIZES:  # echo: the server unmasks what the client masked
            await conn.send(await conn.recv())
        await conn.send(["frag", "mented ", "message"])  # one message in three frames
        pong = await conn.ping(b"are you there")
        with anyio.fail_after(5):  # fails the test if the client never answers the ping
            await pong
        seen["pong"] = True
        await conn.send("after the ping")
        await conn.close(1000, "bye")

    async with serve(handler, "127.0.0.1", 0, subprotocols=["tokenwire.v1"], compression=None,  # type: ignore[list-item]
                     max_size=1 << 20) as server:
        port = server.sockets[0].getsockname()[1]
        ws = await WsStream.connect(f"ws://127.0.0.1:{port}/v1/session", "tokenwire.v1")
        with anyio.fail_after(20):
            for n in SIZES:
                payload = bytes(65 + (i * 7 + n) % 26 for i in range(n))  # text: ASCII, exactly n bytes
                await ws.send(payload)
                assert await ws.recv() == payload, f"a {n}-byte message came back changed"
            assert await ws.recv() == b"fragmented message"
            assert await ws.recv() == b"after the ping"
            assert await ws.recv() is None  # the server's close
        await ws.close()
    assert seen == {"subprotocol": "tokenwire.v1", "pong": True}


@pytest.mark.anyio
async def test_a_refused_upgrade_is_an_error_that_says_so() -> None:
    async def handler(conn: ServerConnection) -> None:
        await conn.close()

    async with serve(handler, "127.0.0.1", 0, subprotocols=["tokenwire.v1"],  # type: ignore[list-item]
                     process_request=lambda conn, request: conn.respond(403, "no\n")) as server:
        port = server.sockets[0].getsockname()[1]
        with pytest.raises(RuntimeError, match="WebSocket upgrade refused"):
            await WsStream.connect(f"ws://127.0.0.1:{port}/v1/session", "tokenwire.v1")
