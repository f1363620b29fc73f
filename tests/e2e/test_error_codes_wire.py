"""The error codes a client meets on a real ``launch render`` process are the one table's
(session/error_codes.py, docs/protocol.md §7) on both of client_sdk's transports: a client past the
server's ``--rate-limit`` gets ``rate_limited`` / 429 over the HTTP fallback as in the session's
``error`` frame (the SDK's HTTP path once reported it as ``too_many_requests``, the code of a
session's own ``max_in_flight`` refusal)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

import client_sdk
from tests.support.server_proc import ServerProcess

pytestmark = pytest.mark.slow

RATE = 3  # requests per minute per client
USER = [{"role": "user", "content": "Hi"}]


@pytest.fixture(scope="module")
def server(asset: Callable[[str], Path]) -> Iterator[ServerProcess]:
    with ServerProcess(["launch", "render", str(asset("qwen3")), "--rate-limit", str(RATE)]) as srv:
        yield srv


def test_a_client_past_the_rate_limit_gets_rate_limited_over_http_and_websocket_alike(server: ServerProcess) -> None:
    async def refusal(transport: str) -> tuple[int, client_sdk.APIError]:
        """Render until refused (the HTTP connect's own calls, /v1/models and /openapi.json, may count
        too): the renders done, and the refusal."""
        async with client_sdk.connect(server.url, transport=transport) as client:  # type: ignore[arg-type]
            assert client.transport == transport
            for done in range(RATE + 1):
                try:
                    assert (await client.render("chat", messages=USER)).token_ids
                except client_sdk.RateLimitError as exc:
                    return done, exc
        raise AssertionError(f"{RATE + 1} renders over {transport} and no refusal")

    renders, over_http = asyncio.run(refusal("http"))
    assert renders >= 1
    renders, over_ws = asyncio.run(refusal("websocket"))  # the budget is the client's (its address),
    assert renders == 0  # counted over HTTP and WebSocket together
    assert (over_http.code, over_http.status) == ("rate_limited", 429)
    assert (over_ws.code, over_ws.status) == ("rate_limited", 429)
    assert "per minute" in over_http.message and "per minute" in over_ws.message
