"""`tokenwire serve` through the official `openai` and `anthropic` SDKs, on a real server process.

The tiny random model's output is noise, which is what greedy-equality checks need; tool calls
and reasoning come from a scripted tokens-only engine behind `launch render --engine-url` (see
tests/support/scripted_engine.py), since no tiny model produces them."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import anthropic
import httpx
import openai
import pytest

from tests.support.scripted_engine import ScriptedEngine
from tests.support.server_proc import ServerProcess
from tests.support.waiting import wait_until

pytestmark = pytest.mark.slow

MESSAGES = [{"role": "user", "content": "Tell me a story about a robot."}]


@pytest.fixture(scope="module")
def server(asset: Callable[[str], Path]) -> Iterator[ServerProcess]:
    with ServerProcess(["serve", asset("tiny-qwen3"), "--tool-call-parser", "hermes",
                        "--enable-auto-tool-choice"]) as srv:
        yield srv


@pytest.fixture(scope="module")
def oai(server: ServerProcess) -> openai.OpenAI:
    return openai.OpenAI(base_url=server.url + "/v1", api_key="none", max_retries=0)


@pytest.fixture(scope="module")
def claude(server: ServerProcess) -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=server.url, api_key="none", max_retries=0)


def test_chat_streamed_text_equals_non_streamed_for_greedy(oai: openai.OpenAI) -> None:
    full = oai.chat.completions.create(model="tiny-qwen3", messages=MESSAGES, max_tokens=24, temperature=0)
    assert full.object == "chat.completion"
    assert full.choices[0].finish_reason in ("length", "stop")
    assert full.usage is not None and full.usage.completion_tokens <= 24
    chunks = list(oai.chat.completions.create(model="tiny-qwen3", messages=MESSAGES, max_tokens=24,
                                              temperature=0, stream=True, stream_options={"include_usage": True}))
    assert chunks[0].choices[0].delta.role == "assistant"
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == full.choices[0].message.content
    assert chunks[-1].choices == [] and chunks[-1].usage is not None
    assert chunks[-1].usage.completion_tokens == full.usage.completion_tokens
    finishes = [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason]
    assert finishes == [full.choices[0].finish_reason]


def test_completions_streamed_equals_non_streamed(oai: openai.OpenAI) -> None:
    full = oai.completions.create(model="tiny-qwen3", prompt="Once upon a time", max_tokens=16, temperature=0)
    assert full.object == "text_completion"
    streamed = "".join(c.choices[0].text for c in oai.completions.create(
        model="tiny-qwen3", prompt="Once upon a time", max_tokens=16, temperature=0, stream=True) if c.choices)
    assert streamed == full.choices[0].text


def test_n2_with_seed_gives_two_reproducible_choices(oai: openai.OpenAI) -> None:
    kwargs: dict[str, Any] = {"model": "tiny-qwen3", "messages": MESSAGES, "max_tokens": 8, "n": 2, "seed": 7,
                              "temperature": 1.0}
    a = oai.chat.completions.create(**kwargs)
    b = oai.chat.completions.create(**kwargs)
    assert [c.index for c in a.choices] == [0, 1]
    assert [c.message.content for c in a.choices] == [c.message.content for c in b.choices]
    assert all(c.finish_reason in ("length", "stop") for c in a.choices)
    assert a.usage is not None and 2 <= a.usage.completion_tokens <= 16


def test_logprobs_have_one_entry_per_token_with_top_alternatives(oai: openai.OpenAI) -> None:
    r = oai.chat.completions.create(model="tiny-qwen3", messages=MESSAGES, max_tokens=6, temperature=0,
                                    logprobs=True, top_logprobs=2)
    content = r.choices[0].logprobs.content
    assert content is not None and r.usage is not None
    assert len(content) == r.usage.completion_tokens
    for entry in content:
        assert len(entry.top_logprobs) == 2
        assert entry.logprob <= 0.0
        assert entry.top_logprobs[0].logprob >= entry.top_logprobs[1].logprob
        assert entry.token == entry.top_logprobs[0].token  # greedy picks the most likely token


def test_stop_string_cuts_the_text_and_stops_generation(oai: openai.OpenAI) -> None:
    base = oai.chat.completions.create(model="tiny-qwen3", messages=MESSAGES, max_tokens=32, temperature=0)
    text = base.choices[0].message.content or ""
    assert len(text) > 6
    stop = text[len(text) // 2: len(text) // 2 + 2]
    cut = text[: text.index(stop)]
    r = oai.chat.completions.create(model="tiny-qwen3", messages=MESSAGES, max_tokens=32, temperature=0, stop=[stop])
    assert r.choices[0].message.content == cut
    assert r.choices[0].finish_reason == "stop"
    assert r.usage is not None and r.usage.completion_tokens < 32
    streamed = "".join(c.choices[0].delta.content or "" for c in oai.chat.completions.create(
        model="tiny-qwen3", messages=MESSAGES, max_tokens=32, temperature=0, stop=[stop], stream=True) if c.choices)
    assert streamed == cut


def test_tools_on_the_tiny_model_parse_with_the_sdk(oai: openai.OpenAI) -> None:
    r = oai.chat.completions.create(model="tiny-qwen3", messages=MESSAGES, max_tokens=8, temperature=0,
                                    tools=[WEATHER_TOOL], tool_choice="auto")
    assert r.choices[0].message.role == "assistant"


def test_errors_use_the_openai_envelope(oai: openai.OpenAI) -> None:
    with pytest.raises(openai.NotFoundError) as nf:
        oai.chat.completions.create(model="nope", messages=MESSAGES, max_tokens=4)
    assert "does not exist" in str(nf.value)
    with pytest.raises(openai.BadRequestError):
        oai.chat.completions.create(model="tiny-qwen3", messages=MESSAGES, max_tokens=4, temperature=-1)


def test_anthropic_messages_stream_equals_non_streamed(claude: anthropic.Anthropic) -> None:
    full = claude.messages.create(model="tiny-qwen3", max_tokens=20, messages=MESSAGES, extra_body={"temperature": 0})
    assert full.type == "message" and full.role == "assistant"
    assert full.stop_reason in ("max_tokens", "end_turn")
    text = "".join(b.text for b in full.content if b.type == "text")
    with claude.messages.stream(model="tiny-qwen3", max_tokens=20, messages=MESSAGES, extra_body={"temperature": 0}) as stream:
        streamed = "".join(stream.text_stream)
        final = stream.get_final_message()
    assert streamed == text
    assert final.usage.output_tokens == full.usage.output_tokens
    assert final.stop_reason == full.stop_reason


def test_anthropic_stop_sequences_and_error_shape(claude: anthropic.Anthropic) -> None:
    full = claude.messages.create(model="tiny-qwen3", max_tokens=24, messages=MESSAGES, extra_body={"temperature": 0})
    text = "".join(b.text for b in full.content if b.type == "text")
    stop = text[len(text) // 2: len(text) // 2 + 2]
    r = claude.messages.create(model="tiny-qwen3", max_tokens=24, messages=MESSAGES, extra_body={"temperature": 0},
                               stop_sequences=[stop])
    assert r.stop_reason == "stop_sequence" and r.stop_sequence == stop
    assert "".join(b.text for b in r.content if b.type == "text") == text[: text.index(stop)]
    with pytest.raises(anthropic.BadRequestError) as bad:
        claude.messages.create(model="tiny-qwen3", max_tokens=0, messages=MESSAGES)
    assert bad.value.body["type"] == "error"


def test_disconnect_mid_stream_aborts_the_generation(server: ServerProcess) -> None:
    body = {"messages": MESSAGES, "max_tokens": 2000, "temperature": 0, "stream": True,
            "ignore_eos": True}
    with httpx.Client(timeout=30) as http, http.stream("POST", server.url + "/v1/chat/completions", json=body) as r:
        lines = r.iter_lines()
        seen = 0
        for line in lines:
            if line.startswith("data: "):
                seen += 1
            if seen >= 3:
                break
        assert httpx.get(server.url + "/health").json()["live_sequences"] >= 1
    wait_until(lambda: httpx.get(server.url + "/health").json()["live_sequences"] == 0,
               "the engine to hold no sequence after the client left", timeout=5)


# --- tool calls and reasoning through a scripted engine --------------------------------------------

WEATHER_TOOL = {"type": "function", "function": {
    "name": "get_weather", "description": "Get the weather",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}
SCRIPT = ("<think>\nThe user wants the weather.\n</think>\n\nLet me check.\n<tool_call>\n"
          '{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call><|im_end|>')


@pytest.fixture(scope="module")
def tool_server(asset: Callable[[str], Path], tokenizer: Callable[[str], Any]) -> Iterator[ServerProcess]:
    ids = tokenizer("qwen3").encode(SCRIPT, add_special_tokens=False)
    with ScriptedEngine(ids) as engine, ServerProcess(
            ["launch", "render", asset("qwen3"), "--engine-url", engine.url, "--tool-call-parser", "hermes",
             "--enable-auto-tool-choice", "--reasoning-parser", "qwen3"]) as srv:
        yield srv


def test_openai_sdk_tool_call_and_reasoning(tool_server: ServerProcess) -> None:
    oai = openai.OpenAI(base_url=tool_server.url + "/v1", api_key="none", max_retries=0)
    messages = [{"role": "user", "content": "Weather in Paris?"}]
    r = oai.chat.completions.create(model="qwen3", messages=messages, tools=[WEATHER_TOOL], tool_choice="auto")
    msg = r.choices[0].message
    assert msg.tool_calls is not None and len(msg.tool_calls) == 1
    call = msg.tool_calls[0]
    assert call.function.name == "get_weather"
    assert json.loads(call.function.arguments) == {"city": "Paris"}
    assert (msg.model_extra or {}).get("reasoning") == "\nThe user wants the weather.\n"
    chunks = list(oai.chat.completions.create(model="qwen3", messages=messages, tools=[WEATHER_TOOL],
                                              tool_choice="auto", stream=True))
    args = "".join(tc.function.arguments or "" for c in chunks if c.choices for tc in c.choices[0].delta.tool_calls or []
                   if tc.function)
    names = [tc.function.name for c in chunks if c.choices for tc in c.choices[0].delta.tool_calls or []
             if tc.function and tc.function.name]
    assert names == ["get_weather"] and args == call.function.arguments
    assert [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason] == ["tool_calls"]
    content = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert content == (msg.content or "")


def test_anthropic_sdk_tool_use_and_thinking(tool_server: ServerProcess) -> None:
    claude = anthropic.Anthropic(base_url=tool_server.url, api_key="none", max_retries=0)
    tools = [{"name": "get_weather", "description": "Get the weather",
              "input_schema": WEATHER_TOOL["function"]["parameters"]}]
    messages = [{"role": "user", "content": "Weather in Paris?"}]
    full = claude.messages.create(model="qwen3", max_tokens=200, messages=messages, tools=tools)
    kinds = [b.type for b in full.content]
    assert kinds[0] == "thinking" and kinds[-1] == "tool_use"
    tool = full.content[-1]
    assert tool.type == "tool_use" and tool.name == "get_weather" and tool.input == {"city": "Paris"}
    assert full.stop_reason == "tool_use"
    with claude.messages.stream(model="qwen3", max_tokens=200, messages=messages, tools=tools) as stream:
        final = stream.get_final_message()
    assert [b.type for b in final.content] == kinds
    streamed_tool = final.content[-1]
    assert streamed_tool.type == "tool_use" and streamed_tool.input == {"city": "Paris"}
    assert final.stop_reason == "tool_use"
