"""/v1/session over real sockets: permessage-deflate, which uvicorn negotiates (off unless
``--ws-per-message-deflate``). One ``tokenwire launch render`` process (render + derender frames, no
engine) with an API key, an Origin allowlist and a small frame limit, and one with the flag.

The upgrade checks, the frame-level errors and the close codes on the same command line's app are
tests/app/test_ws_frames.py (in process)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.ws_client import SessionClient
from tests.support.server_proc import ServerProcess

pytestmark = pytest.mark.slow  # a real server process: the full suite only, not the fast loop

KEY = "e2e key/+="  # not a valid subprotocol token as is: the browser form base64url-encodes it
MAX_FRAME = 64 * 1024
HEADERS = {"Authorization": f"Bearer {KEY}"}


@pytest.fixture(scope="module")
def server(asset: Callable[[str], Path]) -> Iterator[ServerProcess]:
    args = ["launch", "render", str(asset("tiny-qwen3")), "--allowed-origin", "https://app.example",
            "--ws-max-frame-bytes", str(MAX_FRAME), "--state-secret", "e2e-secret-0123456789-abcdefghijklmnopqrstuvwxyz"]
    with ServerProcess(args, env={"TOKENWIRE_API_KEY": KEY}) as srv:
        yield srv


def run(coro: Any) -> Any:
    return asyncio.run(coro)


def test_permessage_deflate_is_off_by_default_and_on_with_the_flag(server: ServerProcess,
                                                                   asset: Callable[[str], Path]) -> None:
    async def extensions(url: str, **kwargs: Any) -> list[str]:
        client = await SessionClient.open(url, compression="deflate", **kwargs)
        names = [str(ext.name) for ext in client.ws.protocol.extensions]
        await client.send(type="ping")
        assert (await client.next())["type"] == "pong"
        await client.close()
        return names

    assert run(extensions(server.ws_url, additional_headers=HEADERS)) == []
    with ServerProcess(["launch", "render", str(asset("tiny-qwen3")), "--ws-per-message-deflate"]) as deflating:
        assert run(extensions(deflating.ws_url)) == ["permessage-deflate"]
