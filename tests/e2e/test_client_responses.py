"""client_sdk's ``responses.create`` against a real ``tokenwire serve`` process (the tiny qwen3 model,
greedy): over the session's ``response`` frames, async and sync, the streamed text equals the
HTTP JSON answer of ``POST /v1/responses`` for the same body, every event validates against the
``openai`` SDK's own types, a stored response chains from the session to HTTP, and cancel ends the
stream with ``status == "cancelled"``."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from openai.types.responses import Response as SdkResponse
from openai.types.responses import ResponseStreamEvent
from pydantic import TypeAdapter

import client_sdk
from client_sdk.response_types import Response, ResponseTextDeltaEvent
from tests.e2e.client_support import serve_args
from tests.support.server_proc import ServerProcess

pytestmark = pytest.mark.slow

EVENTS: TypeAdapter[Any] = TypeAdapter(ResponseStreamEvent)
BODY: dict[str, Any] = {"input": "Tell me a story about a robot.", "max_output_tokens": 24, "temperature": 0}


@pytest.fixture(scope="module")
def server(asset: Callable[[str], Path]) -> Iterator[ServerProcess]:
    with ServerProcess(serve_args(asset("tiny-qwen3"))) as srv:
        yield srv


def http_text(url: str, body: dict[str, Any]) -> str:
    r = httpx.post(url + "/v1/responses", json=body, timeout=60)
    assert r.status_code == 200, r.text
    return SdkResponse.model_validate(r.json()).output_text


def test_streamed_text_equals_the_http_answer_async_and_sync(server: ServerProcess) -> None:
    async def main() -> tuple[list[Any], Response, str]:
        async with client_sdk.connect(server.url) as client:
            assert client.transport == "websocket" and "response" in client.info.frames
            stream = await client.responses.create(**BODY, stream=True)
            events = [event async for event in stream]
            return events, await client.responses.create(**BODY), client.info.model

    events, full, model = asyncio.run(main())
    for event in events:
        EVENTS.validate_python(event.model_dump(mode="json"))
    text = "".join(e.delta for e in events if isinstance(e, ResponseTextDeltaEvent))
    expected = http_text(server.url, BODY)
    assert text and text == full.output_text == expected
    assert full.status == "incomplete" and full.usage is not None and full.usage.output_tokens == 24
    assert full.model == model
    with client_sdk.Client(server.url) as sync:
        streamed = "".join(e.delta for e in sync.responses.create(**BODY, stream=True)
                           if isinstance(e, ResponseTextDeltaEvent))
        assert streamed == sync.responses.create(**BODY).output_text == expected


def test_a_session_response_chains_over_http(server: ServerProcess) -> None:
    async def main() -> Response:
        async with client_sdk.connect(server.url) as client:
            return await client.responses.create(input="My name is Ada.", max_output_tokens=8, temperature=0)

    first = asyncio.run(main())
    r = httpx.post(server.url + "/v1/responses", timeout=60,
                   json={"previous_response_id": first.id, "input": "What is my name?", "max_output_tokens": 8})
    assert r.status_code == 200, r.text
    items = httpx.get(server.url + f"/v1/responses/{first.id}/input_items", timeout=30).json()["data"]
    assert items[0]["content"][0]["text"] == "My name is Ada."
    assert r.json()["usage"]["input_tokens"] > (first.usage.input_tokens if first.usage else 0)


def test_cancel_ends_the_stream_cancelled(server: ServerProcess) -> None:
    async def main() -> tuple[str | None, int]:
        async with client_sdk.connect(server.url) as client:
            stream = await client.responses.create(input="Count to a thousand.", max_output_tokens=2000,
                                                   temperature=0, stream=True)
            seen = 0
            async for event in stream:
                seen += 1
                if isinstance(event, ResponseTextDeltaEvent):
                    stream.cancel()
            return stream.status, seen

    status, seen = asyncio.run(main())
    assert status == "cancelled" and seen > 0
