"""The Responses API through the official ``openai`` SDK on real server processes: ``tokenwire serve``
on the tiny qwen3 model (greedy text: the stream equals the JSON answer; a chain by
``previous_response_id``; ``input_tokens.count``), and ``launch render --engine-url`` over the
scripted engine (tests/support/scripted_engine.py) for a tool-call round trip."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import openai
import pytest

from tests.support.scripted_engine import ScriptedEngine
from tests.support.server_proc import ServerProcess

pytestmark = pytest.mark.slow

WEATHER = {"type": "function", "name": "get_weather", "description": "Get the weather",
           "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}
CALL = ('<think>\nThe user wants the weather.\n</think>\n\n<tool_call>\n'
        '{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call><|im_end|>')
ANSWER = "<think>\nThey have it.\n</think>\n\nIt is sunny in Paris.<|im_end|>"


@pytest.fixture(scope="module")
def oai(asset: Callable[[str], Path]) -> Iterator[openai.OpenAI]:
    with ServerProcess(["serve", asset("tiny-qwen3")]) as srv:
        yield openai.OpenAI(base_url=srv.url + "/v1", api_key="none", max_retries=0)


def test_streamed_text_equals_the_json_answer(oai: openai.OpenAI) -> None:
    kwargs: dict[str, Any] = {"model": "tiny-qwen3", "input": "Tell me a story about a robot.",
                              "max_output_tokens": 16, "temperature": 0}
    full = oai.responses.create(**kwargs)
    assert full.status in ("completed", "incomplete") and full.output_text
    events = list(oai.responses.create(**kwargs, stream=True))
    assert events[0].type == "response.created" and events[-1].type in ("response.completed", "response.incomplete")
    assert "".join(e.delta for e in events if e.type == "response.output_text.delta") == full.output_text
    assert oai.responses.input_tokens.count(model="tiny-qwen3", input=kwargs["input"]).input_tokens \
        == full.usage.input_tokens
    follow = oai.responses.create(model="tiny-qwen3", input="And then?", previous_response_id=full.id,
                                  max_output_tokens=4, temperature=0)
    assert follow.previous_response_id == full.id
    assert follow.usage is not None and full.usage is not None
    assert follow.usage.input_tokens > full.usage.input_tokens + full.usage.output_tokens  # the first turn is in it


def test_tool_call_round_trip(asset: Callable[[str], Path], tokenizer: Callable[[str], Any]) -> None:
    tok = tokenizer("qwen3")
    with ScriptedEngine(tok.encode(CALL, add_special_tokens=False)) as engine, ServerProcess(
            ["launch", "render", asset("qwen3"), "--engine-url", engine.url, "--tool-call-parser", "hermes",
             "--enable-auto-tool-choice", "--reasoning-parser", "qwen3"]) as srv:
        client = openai.OpenAI(base_url=srv.url + "/v1", api_key="none", max_retries=0)
        first = client.responses.create(model="qwen3", input="Weather in Paris?", tools=[WEATHER])  # type: ignore[list-item]
        call = first.output[-1]
        assert call.type == "function_call" and json.loads(call.arguments) == {"city": "Paris"}
        engine.token_ids = tok.encode(ANSWER, add_special_tokens=False)
        with client.responses.stream(model="qwen3", tools=[WEATHER], previous_response_id=first.id,  # type: ignore[list-item]
                                     input=[{"type": "function_call_output", "call_id": call.call_id,
                                             "output": "sunny"}]) as stream:
            final = stream.get_final_response()
        assert final.output_text == "\n\nIt is sunny in Paris."
        assert "<tool_response>\nsunny\n</tool_response>" in tok.decode(engine.requests[-1]["token_ids"])
