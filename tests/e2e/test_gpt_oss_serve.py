"""gpt-oss end to end: the official ``openai`` SDK (and client_sdk over a WebSocket session) against
real tokenwire processes on the tiny random ``GptOssForCausalLM`` (issue 36).

- ``tokenwire serve`` runs the tiny model on the local engine, through the plain transformers path
  (gpt-oss's attention sinks have no SDPA path; the log says so). Its random weights give random
  text, so the checks are on the protocol: a chat with tools streams and finishes, the prompt is
  harmony's, and ``<|call|>`` / ``<|return|>`` / ``<|endoftext|>`` end a generation as vLLM's
  ``generation_config`` makes them (``logit_bias`` forces each).
- A known harmony output (analysis, then a ``functions.get_weather`` call; or analysis, then a final
  answer) comes from the scripted tokens-only engine (tests/support/scripted_engine.py) behind
  ``tokenwire launch render --engine-url`` on the same model directory: reasoning, content and the
  tool call as the SDKs type them.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest

import client_sdk
from tests.support.scripted_engine import ScriptedEngine
from tests.support.server_proc import ServerProcess

pytestmark = pytest.mark.slow

MODEL = "tiny-gpt-oss"
PARSERS = ["--tool-call-parser", "openai", "--reasoning-parser", "openai_gptoss", "--enable-auto-tool-choice"]
TOOLS: Any = [{"type": "function", "function": {
    "name": "get_weather", "description": "Get the weather for a city.",
    "parameters": {"type": "object", "properties": {"city": {"type": "string", "description": "City name"}},
                   "required": ["city"]}}}]
ASK: Any = [{"role": "user", "content": "What's the weather in Paris?"}]
CALL_SCRIPT = ("<|channel|>analysis<|message|>The user wants the weather in Paris.<|end|>"
               "<|start|>assistant<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>"
               '{"city": "Paris"}<|call|>')
ANSWER_SCRIPT = ("<|channel|>analysis<|message|>Simple greeting.<|end|>"
                 "<|start|>assistant<|channel|>final<|message|>Hello there!<|return|>")
RETURN, ENDOFTEXT, CALL = 200002, 199999, 200012


@pytest.fixture(scope="module")
def server(asset: Callable[[str], Path]) -> Iterator[ServerProcess]:
    with ServerProcess(["serve", asset(MODEL), *PARSERS, "--enable-scale-out"]) as srv:
        yield srv


@pytest.fixture(scope="module")
def oai(server: ServerProcess) -> openai.OpenAI:
    return openai.OpenAI(base_url=server.url + "/v1", api_key="none", max_retries=0)


@pytest.fixture(scope="module")
def scripted(asset: Callable[[str], Path], tokenizer: Callable[[str], Any]) -> Iterator[tuple[ScriptedEngine,
                                                                                               ServerProcess]]:
    ids = tokenizer(MODEL).encode(CALL_SCRIPT, add_special_tokens=False)
    with ScriptedEngine(ids, step=2) as engine, ServerProcess(
            ["launch", "render", str(asset(MODEL)), "--engine-url", engine.url, *PARSERS]) as srv:
        yield engine, srv


def test_the_log_says_the_plain_transformers_path(server: ServerProcess) -> None:
    log = "\n".join(server.lines)
    assert "has no SDPA attention in transformers" in log
    assert "attention: the model's own eager attention for prefill and decode" in log
    assert "decode forward: model forward (gpt_oss has no lean decode)" in log


def test_a_chat_with_tools_streams_and_finishes(oai: openai.OpenAI) -> None:
    chunks = list(oai.chat.completions.create(model=MODEL, messages=ASK, tools=TOOLS, max_tokens=24, stream=True,
                                              reasoning_effort="low", stream_options={"include_usage": True}))
    assert chunks[0].choices[0].delta.role == "assistant"
    finishes = [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason]
    assert len(finishes) == 1 and finishes[0] in ("length", "stop", "tool_calls")
    assert chunks[-1].choices == [] and chunks[-1].usage is not None
    assert 1 <= chunks[-1].usage.completion_tokens <= 24
    full = oai.chat.completions.create(model=MODEL, messages=ASK, tools=TOOLS, max_tokens=24, temperature=0)
    assert full.choices[0].finish_reason in ("length", "stop", "tool_calls")
    assert full.usage is not None and full.usage.completion_tokens <= 24


def test_the_prompt_is_harmonys(server: ServerProcess, tokenizer: Callable[[str], Any]) -> None:
    body = {"model": MODEL, "messages": [{"role": "system", "content": "Be brief."}, *ASK], "tools": TOOLS,
            "reasoning_effort": "high"}
    r = httpx.post(server.url + "/v1/chat/completions/render", json=body, timeout=30)
    assert r.status_code == 200, r.text
    text = tokenizer(MODEL).decode(r.json()["token_ids"])
    assert text.startswith("<|start|>system<|message|>You are ChatGPT, a large language model trained by OpenAI.\n"
                           "Knowledge cutoff: 2024-06\nCurrent date: ")
    assert "Reasoning: high" in text and "Calls to these tools must go to the commentary channel: 'functions'." in text
    assert "<|start|>developer<|message|># Instructions\n\nBe brief.\n\n# Tools" in text
    assert "type get_weather = (_: {\n// City name\ncity: string,\n}) => any;" in text
    assert text.endswith("<|start|>user<|message|>What's the weather in Paris?<|end|><|start|>assistant")
    none = httpx.post(server.url + "/v1/chat/completions", json={**body, "reasoning_effort": "none"}, timeout=30)
    assert none.status_code == 400 and "reasoning_effort" in none.text


@pytest.mark.parametrize(("token", "stop_reason"), [(RETURN, None), (CALL, CALL), (ENDOFTEXT, ENDOFTEXT)])
def test_harmonys_end_tokens_end_a_generation(server: ServerProcess, token: int, stop_reason: int | None) -> None:
    prompt = [200006, 1428, 200008, 12194, 200007, 200006, 173781]  # <|start|>user<|message|>Hello<|end|>…assistant
    body = {"model": MODEL, "prompt": prompt, "max_tokens": 8, "logit_bias": {str(token): 100},
            "return_token_ids": True}
    choice = httpx.post(server.url + "/v1/completions", json=body, timeout=60).json()["choices"][0]
    assert choice["finish_reason"] == "stop" and choice["stop_reason"] == stop_reason
    assert choice["token_ids"] == [token]
    held = httpx.post(server.url + "/v1/completions", json={**body, "min_tokens": 3}, timeout=60).json()["choices"][0]
    assert held["finish_reason"] == "stop" and len(held["token_ids"]) == 4 and held["token_ids"][-1] == token


def test_the_sdk_gets_reasoning_and_a_tool_call(scripted: tuple[ScriptedEngine, ServerProcess],
                                                tokenizer: Callable[[str], Any]) -> None:
    engine, srv = scripted
    engine.token_ids = tokenizer(MODEL).encode(CALL_SCRIPT, add_special_tokens=False)
    oai = openai.OpenAI(base_url=srv.url + "/v1", api_key="none", max_retries=0)
    full = oai.chat.completions.create(model=MODEL, messages=ASK, tools=TOOLS, reasoning_effort="low")
    msg = full.choices[0].message
    assert (msg.model_extra or {}).get("reasoning") == "The user wants the weather in Paris."
    assert msg.tool_calls is not None and len(msg.tool_calls) == 1
    call = msg.tool_calls[0]
    assert call.type == "function" and call.function.name == "get_weather"
    assert json.loads(call.function.arguments) == {"city": "Paris"}
    assert full.choices[0].finish_reason == "tool_calls" and not msg.content
    prompt = tokenizer(MODEL).decode(engine.requests[-1]["token_ids"])
    assert "Reasoning: low" in prompt and prompt.endswith("<|start|>assistant")
    chunks = list(oai.chat.completions.create(model=MODEL, messages=ASK, tools=TOOLS, stream=True))
    reasoning = "".join((c.choices[0].delta.model_extra or {}).get("reasoning") or "" for c in chunks if c.choices)
    calls = [tc for c in chunks if c.choices for tc in c.choices[0].delta.tool_calls or []]
    assert reasoning == "The user wants the weather in Paris."
    assert [tc.function.name for tc in calls if tc.function and tc.function.name] == ["get_weather"]
    assert "".join(tc.function.arguments or "" for tc in calls if tc.function) == call.function.arguments
    assert [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason] == ["tool_calls"]


def test_the_sdk_gets_reasoning_and_an_answer_after_a_tool_result(scripted: tuple[ScriptedEngine, ServerProcess],
                                                                  tokenizer: Callable[[str], Any]) -> None:
    engine, srv = scripted
    engine.token_ids = tokenizer(MODEL).encode(ANSWER_SCRIPT, add_special_tokens=False)
    oai = openai.OpenAI(base_url=srv.url + "/v1", api_key="none", max_retries=0)
    history: list[Any] = [*ASK, {"role": "assistant", "content": None, "reasoning": "Need the tool.", "tool_calls": [
        {"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}}]},
        {"role": "tool", "tool_call_id": "call_1", "content": "sunny, 21C"}]
    chunks = list(oai.chat.completions.create(model=MODEL, messages=history, tools=TOOLS, stream=True))
    content = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    reasoning = "".join((c.choices[0].delta.model_extra or {}).get("reasoning") or "" for c in chunks if c.choices)
    assert (content, reasoning) == ("Hello there!", "Simple greeting.")
    assert [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason] == ["stop"]
    prompt = tokenizer(MODEL).decode(engine.requests[-1]["token_ids"])
    assert ("<|start|>assistant to=functions.get_weather<|channel|>commentary json<|message|>"
            '{"city": "Paris"}<|call|>') in prompt
    assert "<|start|>functions.get_weather<|channel|>commentary to=assistant<|message|>sunny, 21C<|end|>" in prompt
    assert "<|channel|>analysis<|message|>Need the tool.<|end|>" in prompt  # no final after it: kept


def test_a_websocket_session_through_client_sdk(scripted: tuple[ScriptedEngine, ServerProcess],
                                                tokenizer: Callable[[str], Any]) -> None:
    engine, srv = scripted
    engine.token_ids = tokenizer(MODEL).encode(CALL_SCRIPT, add_special_tokens=False)
    body: dict[str, Any] = {"messages": ASK, "tools": TOOLS, "max_tokens": 200}

    async def main() -> list[Any]:
        async with client_sdk.connect(srv.url) as client:
            assert client.transport == "websocket"
            stream = await client.chat.completions.create(**body, stream=True)
            chunks = [chunk async for chunk in stream]
            assert stream.status == "completed"
            return chunks

    chunks = asyncio.run(main())
    reasoning = "".join(c.choices[0].delta.reasoning or "" for c in chunks if c.choices)
    calls = [tc for c in chunks if c.choices for tc in c.choices[0].delta.tool_calls or ()]
    assert reasoning == "The user wants the weather in Paris."
    assert calls[0].function is not None and calls[0].function.name == "get_weather"
    assert json.loads("".join(tc.function.arguments or "" for tc in calls if tc.function)) == {"city": "Paris"}
    assert [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason] == ["tool_calls"]


PERSON: Any = {"type": "object", "properties": {"name": {"type": "string"}, "age": {"type": "integer", "minimum": 0}},
               "required": ["name", "age"]}


@pytest.mark.parametrize("stream", [False, True])
def test_a_json_schema_answer_is_the_final_message_and_validates(oai: openai.OpenAI, stream: bool) -> None:
    import jsonschema

    fmt: Any = {"type": "json_schema", "json_schema": {"name": "person", "schema": PERSON}}
    for seed in range(3):
        kwargs: Any = {"model": MODEL, "messages": ASK, "response_format": fmt, "max_tokens": 48, "temperature": 1.0,
                       "seed": seed}
        if stream:
            chunks = list(oai.chat.completions.create(**kwargs, stream=True))
            content = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
            calls = [tc for c in chunks if c.choices for tc in c.choices[0].delta.tool_calls or ()]
            args = "".join(tc.function.arguments or "" for tc in calls if tc.function)
            names = [tc.function.name for tc in calls if tc.function and tc.function.name]
        else:
            message = oai.chat.completions.create(**kwargs).choices[0].message
            content = message.content or ""
            names = [c.function.name for c in message.tool_calls or ()]  # type: ignore[union-attr]
            args = "".join(c.function.arguments for c in message.tool_calls or ())  # type: ignore[union-attr]
        # the final message is the document; a model that writes `final json` (no <|constrain|>) gets
        # it back as a call of a tool named "json", as from vLLM 0.32
        doc = json.loads(content) if content else json.loads(args)
        assert content or names == ["json"]
        jsonschema.validate(doc, PERSON)


def test_required_and_named_tool_choice_give_one_call(oai: openai.OpenAI) -> None:
    strict: Any = [{"type": "function", "function": {**TOOLS[0]["function"], "strict": True}}]
    for choice in ("required", {"type": "function", "function": {"name": "get_weather"}}):
        for seed in range(2):
            out = oai.chat.completions.create(model=MODEL, messages=ASK, tools=strict, tool_choice=choice,  # type: ignore[arg-type]
                                              max_tokens=48, temperature=1.0, seed=seed).choices[0]
            # vLLM: "tool_calls" for a required call, "stop" for a named one
            assert out.finish_reason == ("tool_calls" if choice == "required" else "stop")
            calls = out.message.tool_calls or []
            assert [c.function.name for c in calls] == ["get_weather"]  # type: ignore[union-attr]
            assert isinstance(json.loads(calls[0].function.arguments)["city"], str)  # type: ignore[union-attr]
