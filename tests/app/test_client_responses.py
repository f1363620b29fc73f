"""client_sdk's ``responses.create`` against the front end of ``launch render --engine-url`` over the
scripted engine (tests/support/responses_front.py's: qwen3 tokenizer, hermes and qwen3 parsers), served by
uvicorn on a thread: over the session's ``response`` frames and over the HTTP fallback, async and
sync. Every event the client yields, dumped, validates against the ``openai`` SDK's own types; the
streamed response equals the non-streaming one and the HTTP JSON answer; a tool round trip chains
with ``previous_response_id``; a bad body raises naming the field."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
import pytest
from openai.types.responses import Response as SdkResponse

import client_sdk
from client_sdk.response_types import (
    FunctionCallItem,
    ReasoningItem,
    Response,
    ResponseLifecycleEvent,
    ResponseMessage,
    ResponseTextDeltaEvent,
)
from tests.conftest import tokenizer_of
from tests.support import responses_front
from tests.support.responses_front import ANSWER, EVENTS, WEATHER, ids_of, shape
from tests.support.scripted_engine import ScriptedEngine

BODY: dict[str, Any] = {"input": "Weather in Paris?", "tools": [WEATHER]}

engine, served = responses_front.engine, responses_front.served  # the shared fixtures, by name


def http_answer(url: str, body: dict[str, Any]) -> dict[str, Any]:
    r = httpx.post(url + "/v1/responses", json=body, timeout=30)
    assert r.status_code == 200, r.text
    data: dict[str, Any] = r.json()
    return data


def check_stream(events: list[Any], full: Response, http: dict[str, Any]) -> None:
    for event in events:
        EVENTS.validate_python(event.model_dump(mode="json"))  # the openai SDK's own event types
    assert [e.sequence_number for e in events] == list(range(len(events)))
    assert events[0].type == "response.created" and events[-1].type == "response.completed"
    final = events[-1]
    assert isinstance(final, ResponseLifecycleEvent)
    SdkResponse.model_validate(final.response.model_dump(mode="json"))
    SdkResponse.model_validate(full.model_dump(mode="json"))
    text = "".join(e.delta for e in events if isinstance(e, ResponseTextDeltaEvent))
    assert text == final.response.output_text == full.output_text == "\n\nLet me check.\n"
    assert shape([i.model_dump() for i in final.response.output]) == shape([i.model_dump() for i in full.output])
    assert shape([i.model_dump() for i in full.output]) == shape(http["output"])
    assert full.usage is not None and final.response.usage is not None
    assert full.usage.model_dump() == final.response.usage.model_dump() == http["usage"] | {
        "input_tokens_details": full.usage.input_tokens_details.model_dump(),
        "output_tokens_details": full.usage.output_tokens_details.model_dump()}


@pytest.mark.parametrize("transport", ["websocket", "http"])
def test_async_streams_typed_events_equal_to_the_http_answer(served: str, transport: str) -> None:
    async def main() -> tuple[list[Any], Response, str]:
        async with client_sdk.connect(served, transport=transport) as client:  # type: ignore[arg-type]
            assert "response" in client.info.frames
            stream = await client.responses.create(**BODY, stream=True)
            events = [event async for event in stream]
            assert stream.status == "completed"
            full = await client.responses.create(**BODY)
            return events, full, client.transport

    events, full, used = asyncio.run(main())
    assert used == transport
    check_stream(events, full, http_answer(served, BODY))
    reasoning, message, call = full.output
    assert isinstance(reasoning, ReasoningItem) and isinstance(message, ResponseMessage)
    assert isinstance(call, FunctionCallItem) and call.name == "get_weather" and call.call_id.startswith("call_")


def test_sync_client_streams_and_answers(served: str) -> None:
    with client_sdk.Client(served) as client:
        assert client.transport == "websocket"
        events = list(client.responses.create(**BODY, stream=True))
        full = client.responses.create(**BODY)
    assert isinstance(full, Response)
    check_stream(events, full, http_answer(served, BODY))


def test_a_tool_round_trip_chains_with_previous_response_id(served: str, engine: ScriptedEngine) -> None:
    async def main() -> Response:
        async with client_sdk.connect(served) as client:
            first = await client.responses.create(**BODY)
            call = first.output[-1]
            assert isinstance(call, FunctionCallItem)
            engine.token_ids = ids_of(ANSWER)
            return await client.responses.create(
                previous_response_id=first.id, tools=[WEATHER],
                input=[{"type": "function_call_output", "call_id": call.call_id, "output": "sunny"}])

    before = engine.token_ids
    try:
        second = asyncio.run(main())
    finally:
        engine.token_ids = before
    assert second.output_text == "\n\nIt is sunny in Paris."  # as the qwen3 parser splits it over HTTP too
    prompt = tokenizer_of("qwen3").decode(engine.requests[-1]["token_ids"])
    assert "Weather in Paris?" in prompt and "sunny" in prompt  # the stored first turn, then the output


@pytest.mark.parametrize("transport", ["websocket", "http"])
def test_a_bad_body_raises_naming_the_field(served: str, transport: str) -> None:
    async def main() -> None:
        async with client_sdk.connect(served, transport=transport) as client:  # type: ignore[arg-type]
            with pytest.raises(client_sdk.BadRequestError) as info:
                await client.responses.create(input=[{"type": "function_call_output", "call_id": "call_1",
                                                      "output": "x"}])
            assert info.value.param == "input.0.call_id" and "No tool call found" in str(info.value)
            with pytest.raises(client_sdk.BadRequestError) as info:
                await client.responses.create(input="hi", stream=True, max_output_tokens=0)
            assert info.value.param == "max_output_tokens"

    asyncio.run(main())
