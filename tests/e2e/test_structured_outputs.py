"""Structured outputs against a real ``tokenwire serve`` process on a tiny random model: through
the official ``openai`` SDK (``response_format`` json_schema / json_object, ``tool_choice``
required and named, a refused schema) and through the WebSocket ``chat`` frame (client_sdk),
streamed and not."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import jsonschema
import openai
import pytest

import client_sdk
from tests.e2e.client_support import serve_args
from tests.support.server_proc import ServerProcess
from tests.support.structured_suite import MAX_TOKENS, SCHEMAS, TOOLS

pytestmark = pytest.mark.slow

USER = [{"role": "user", "content": "Answer with JSON."}]
SEEDS = range(12)
# JSON mode and "required" end by budget-aware closing on these random models (long strings, ever
# more calls); a smaller budget than the schema suite's keeps the batch short (the unit engine test
# has the full budgets)
CLOSING_MAX_TOKENS = 160
E2E_SCHEMAS = ("nested_objects", "optional_fields", "array_of_objects", "union_and_null")


@pytest.fixture(scope="module")
def server(asset: Callable[[str], Path]) -> Iterator[ServerProcess]:
    with ServerProcess(serve_args(asset("tiny-qwen3"), "--max-num-seqs", "32")) as srv:
        yield srv


def with_sdk(server: ServerProcess, fn: Callable[[openai.AsyncOpenAI], Awaitable[Any]]) -> Any:
    """Run ``fn(client)`` on a fresh event loop with an SDK client bound to it."""
    async def main() -> Any:
        async with openai.AsyncOpenAI(base_url=server.url + "/v1", api_key="none", max_retries=0,
                                      timeout=300) as oai:
            return await fn(oai)
    return asyncio.run(main())


def fmt(name: str) -> dict[str, Any]:
    return {"type": "json_schema", "json_schema": {"name": name, "schema": SCHEMAS[name], "strict": True}}


async def gather(*coros: Any) -> list[Any]:
    return list(await asyncio.gather(*coros))


@pytest.mark.parametrize("name", E2E_SCHEMAS)
def test_openai_sdk_json_schema_answers_validate(server: ServerProcess, name: str) -> None:
    answers = with_sdk(server, lambda oai: gather(*[
        oai.chat.completions.create(model="tiny-qwen3", messages=USER, response_format=fmt(name),
                                    seed=s, temperature=1.0, max_tokens=MAX_TOKENS) for s in SEEDS]))
    for answer in answers:
        choice = answer.choices[0]
        assert choice.finish_reason == "stop"
        jsonschema.validate(json.loads(choice.message.content or ""), SCHEMAS[name])


def test_openai_sdk_streamed_json_schema_answer_validates(server: ServerProcess) -> None:
    async def one(oai: openai.AsyncOpenAI, seed: int) -> str:
        stream = await oai.chat.completions.create(model="tiny-qwen3", messages=USER,
                                                   response_format=fmt("array_of_objects"), seed=seed,
                                                   temperature=1.0, max_tokens=MAX_TOKENS, stream=True)
        return "".join([c.choices[0].delta.content or "" async for c in stream if c.choices])

    for text in with_sdk(server, lambda oai: gather(*[one(oai, s) for s in SEEDS])):
        jsonschema.validate(json.loads(text), SCHEMAS["array_of_objects"])


def test_openai_sdk_json_object_answers_always_parse(server: ServerProcess) -> None:
    answers = with_sdk(server, lambda oai: gather(*[
        oai.chat.completions.create(model="tiny-qwen3", messages=USER, response_format={"type": "json_object"},
                                    seed=s, temperature=1.0, max_tokens=CLOSING_MAX_TOKENS) for s in SEEDS]))
    for answer in answers:  # budget-aware closing: never a truncated document
        assert answer.choices[0].finish_reason == "stop"
        assert isinstance(json.loads(answer.choices[0].message.content or ""), dict)
        assert answer.usage is not None and answer.usage.completion_tokens <= CLOSING_MAX_TOKENS


def test_openai_sdk_required_tool_choice_always_calls_a_declared_tool(server: ServerProcess) -> None:
    answers = with_sdk(server, lambda oai: gather(*[
        oai.chat.completions.create(model="tiny-qwen3", messages=[{"role": "user", "content": "Weather in Oslo?"}],
                                    tools=TOOLS, tool_choice="required", seed=s, temperature=1.0,
                                    max_tokens=CLOSING_MAX_TOKENS) for s in SEEDS]))
    params = {t["function"]["name"]: t["function"]["parameters"] for t in TOOLS}
    for answer in answers:
        choice = answer.choices[0]
        # any number of calls may follow (vLLM's schema); closing ends the array within max_tokens
        assert choice.finish_reason == "tool_calls"
        complete = list(choice.message.tool_calls or [])
        assert complete
        for call in complete:
            assert call.type == "function" and call.function.name in params
            jsonschema.validate(json.loads(call.function.arguments), params[call.function.name])


def test_openai_sdk_named_tool_choice_calls_that_tool(server: ServerProcess) -> None:
    named = {"type": "function", "function": {"name": "add"}}
    answer = with_sdk(server, lambda oai: oai.chat.completions.create(
        model="tiny-qwen3", messages=[{"role": "user", "content": "2+3?"}], tools=TOOLS,
        tool_choice=named, seed=3, temperature=1.0, max_tokens=MAX_TOKENS))
    calls = answer.choices[0].message.tool_calls or []
    assert [c.function.name for c in calls] == ["add"]
    jsonschema.validate(json.loads(calls[0].function.arguments), TOOLS[1]["function"]["parameters"])


def test_openai_sdk_unsupported_schema_is_a_400_naming_the_keyword(server: ServerProcess) -> None:
    bad = {"type": "json_schema", "json_schema": {"name": "x", "schema": {
        "type": "object", "properties": {"tags": {"type": "array", "uniqueItems": True}}}}}
    with pytest.raises(openai.BadRequestError) as info:
        with_sdk(server, lambda oai: oai.chat.completions.create(model="tiny-qwen3", messages=USER, response_format=bad,
                                                max_tokens=8))
    assert "uniqueItems" in str(info.value.message)
    assert "properties.tags" in str(info.value.message)


def test_websocket_chat_frame_answers_validate_streamed_and_not(server: ServerProcess) -> None:
    body = {"messages": USER, "response_format": fmt("nested_objects"), "temperature": 1.0, "max_tokens": MAX_TOKENS}

    async def main() -> tuple[list[str], list[str]]:
        async with client_sdk.connect(server.url) as client:
            assert client.transport == "websocket"

            async def streamed(seed: int) -> str:
                stream = await client.chat.completions.create(**body, seed=seed, stream=True)
                return "".join([c.choices[0].delta.content or "" async for c in stream if c.choices])

            async def whole(seed: int) -> str:
                answer = await client.chat.completions.create(**body, seed=seed)
                assert answer.choices[0].finish_reason == "stop"
                return answer.choices[0].message.content or ""

            return (await gather(*[streamed(s) for s in SEEDS]), await gather(*[whole(s) for s in SEEDS]))

    streamed, whole = asyncio.run(main())
    assert streamed == whole  # the same seeded generations, streamed or not
    for text in streamed:
        jsonschema.validate(json.loads(text), SCHEMAS["nested_objects"])


def test_websocket_chat_frame_json_object_and_required_tool_choice_always_finish(server: ServerProcess) -> None:
    # tight budgets, so budget-aware closing ends most of these answers
    params = {t["function"]["name"]: t["function"]["parameters"] for t in TOOLS}

    async def main() -> tuple[list[Any], list[Any]]:
        async with client_sdk.connect(server.url) as client:
            assert client.transport == "websocket"
            objects = gather(*[client.chat.completions.create(
                messages=USER, response_format={"type": "json_object"}, temperature=1.0, seed=s, max_tokens=48)
                for s in SEEDS])
            calls = gather(*[client.chat.completions.create(
                messages=[{"role": "user", "content": "Weather in Oslo?"}], tools=TOOLS, tool_choice="required",
                temperature=1.0, seed=s, max_tokens=80) for s in SEEDS])
            return await objects, await calls

    objects, calls = asyncio.run(main())
    for answer in objects:
        assert answer.choices[0].finish_reason == "stop"
        assert isinstance(json.loads(answer.choices[0].message.content or ""), dict)
    for answer in calls:
        choice = answer.choices[0]
        assert choice.finish_reason == "tool_calls" and choice.message.tool_calls
        for call in choice.message.tool_calls:
            assert call.function.name in params
            jsonschema.validate(json.loads(call.function.arguments), params[call.function.name])
