"""Structured outputs on gpt-oss through the local engine (tiny random ``GptOssForCausalLM``): the
harmony structural tags render writes as vLLM 0.32 does (session/render/harmony_structured.py) are
compiled and enforced by the engine (engine/local/grammar.py, a ``structural_tag`` constraint), and
budget-aware closing completes them with harmony's own special tokens. A ``json_schema``
``response_format`` leaves the ``analysis`` channel free and makes the ``final`` message a document
that validates; ``tool_choice: "required"`` / a named function always gives one call of a declared
(the named) tool; every output derendered by the harmony parsers as the server does."""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from engine.errors import InvalidGenerateRequest
from engine.protocol import GenerateResponse
from engine.structured import structured_outputs
from session.derender import chat_derenderer, chat_response
from session.protocol.openai import ChatCompletionRequest
from session.render.harmony import HarmonyRender
from session.render.renderer import Renderer
from tests.support.engine_harness import EngineHarness, request, running_engine

pytestmark = pytest.mark.slow

MODEL = "tiny-gpt-oss"
N_SEEDS = 8
MAX_TOKENS = 64
STOPS = {200002, 200012, 199999}  # <|return|>, <|call|>, <|endoftext|>
SCHEMA = {"type": "object", "properties": {
    "name": {"type": "string"}, "age": {"type": "integer", "minimum": 0, "maximum": 150},
    "tags": {"type": "array", "items": {"enum": ["a", "b"]}, "maxItems": 2}}, "required": ["name", "age"]}
TOOLS = [
    {"type": "function", "function": {"name": "get_weather", "description": "Weather of a city", "parameters": {
        "type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}},
    {"type": "function", "function": {"name": "add", "strict": True, "parameters": {
        "type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}}, "required": ["a", "b"]}}},
]
# the decoded output, special tokens as text: optional analysis, then the final message
FINAL = re.compile(r"(?s)(?:<\|channel\|>analysis<\|message\|>(?P<analysis>.*?)<\|end\|><\|start\|>assistant)?"
                   r"<\|channel\|>final(?P<constrain> json| <\|constrain\|>json)<\|message\|>(?P<body>.*?)(?:<\|end\|>)?")


@pytest.fixture(scope="module")
def tok(tokenizer: Callable[[str], Any]) -> Any:
    return tokenizer(MODEL)


@pytest.fixture(scope="module")
def renderer(tok: Any) -> Renderer:
    return Renderer(tok, model_name=MODEL, max_model_len=4096, tool_call_parser="openai",
                    enable_auto_tool_choice=True, harmony=HarmonyRender(tok, start_date="2025-08-05"))


@pytest.fixture(scope="module")
def h(asset: Callable[[str], Path]) -> Iterator[EngineHarness]:
    with running_engine(asset(MODEL), dtype="float32", max_num_seqs=N_SEEDS, max_model_len=4096) as harness:
        yield harness


def run_chat(h: EngineHarness, renderer: Renderer, tok: Any, body: dict[str, Any]) -> list[tuple[list[int], dict[str, Any]]]:
    """``N_SEEDS`` seeded requests rendered, generated and derendered (the server's harmony parsers)."""
    chats = [ChatCompletionRequest.model_validate({**body, "model": MODEL, "temperature": 1.0, "seed": seed,
                                                   "max_tokens": MAX_TOKENS}) for seed in range(N_SEEDS)]
    reqs = [renderer.render_chat(c) for c in chats]
    assert all(r.sampling_params.structured_outputs["structural_tag"] for r in reqs)
    out = []
    for chat, req, res in zip(chats, reqs, h.run(*reqs), strict=True):
        d = chat_derenderer(chat, req.token_ids, request_id="chatcmpl-x", created=0, model=MODEL, tokenizer=tok,
                            tool_parser="openai", reasoning_parser="openai_gptoss", enable_auto_tool_choice=True)
        response = GenerateResponse.model_validate({"request_id": "x", "choices": [
            {"index": 0, "token_ids": res.ids, "finish_reason": res.finish[0], "stop_reason": res.stop_reason[0]}]})
        assert res.finish[0] == "stop" and res.ids[-1] in STOPS, tok.decode(res.ids)[-200:]
        assert len(res.ids) <= MAX_TOKENS
        out.append((res.ids, chat_response(d, response)["choices"][0]))
    return out


@pytest.mark.timeout(900)
def test_a_json_schema_constrains_the_final_message_and_leaves_analysis_free(
        h: EngineHarness, renderer: Renderer, tok: Any) -> None:
    body = {"messages": [{"role": "user", "content": "Who are you? Answer in JSON."}],
            "response_format": {"type": "json_schema", "json_schema": {"name": "person", "schema": SCHEMA}}}
    analyses = 0
    for ids, choice in run_chat(h, renderer, tok, body):
        text = tok.decode(ids[:-1])
        m = FINAL.fullmatch(text)
        assert m is not None, text[-300:]
        doc = json.loads(m["body"])
        jsonschema.validate(doc, SCHEMA)
        message = choice["message"]
        if m["constrain"] == " <|constrain|>json":  # the answer, as vLLM's derender reads it
            assert json.loads(message["content"]) == doc
        else:  # vLLM 0.32 derenders `final json` as a call of a tool named "json"; so does tokenwire
            assert [(c["function"]["name"], json.loads(c["function"]["arguments"])) for c in message["tool_calls"]] \
                == [("json", doc)]
        if m["analysis"]:
            analyses += 1
            assert message["reasoning"] == m["analysis"]  # free text, not JSON
    assert analyses >= N_SEEDS // 4  # the random model does think first, unconstrained


@pytest.mark.timeout(900)
def test_required_tool_choice_gives_one_call_of_a_declared_tool(h: EngineHarness, renderer: Renderer, tok: Any) -> None:
    body = {"messages": [{"role": "user", "content": "Weather in Oslo?"}], "tools": TOOLS, "tool_choice": "required"}
    names = set()
    for ids, choice in run_chat(h, renderer, tok, body):
        calls = choice["message"]["tool_calls"]
        assert choice["finish_reason"] == "tool_calls" and len(calls) == 1, tok.decode(ids)[-300:]
        name, args = calls[0]["function"]["name"], json.loads(calls[0]["function"]["arguments"])
        names.add(name)
        assert name in {"get_weather", "add"}
        if name == "add":  # strict: its schema is enforced
            jsonschema.validate(args, TOOLS[1]["function"]["parameters"])
        # not strict: any JSON value (vLLM's tag)
    assert names  # at least one


@pytest.mark.timeout(900)
def test_a_named_tool_choice_calls_that_tool(h: EngineHarness, renderer: Renderer, tok: Any) -> None:
    body = {"messages": [{"role": "user", "content": "Add 2 and 3."}], "tools": TOOLS,
            "tool_choice": {"type": "function", "function": {"name": "add"}}}
    for ids, choice in run_chat(h, renderer, tok, body):
        calls = choice["message"]["tool_calls"]
        assert [c["function"]["name"] for c in calls] == ["add"], tok.decode(ids)[-300:]
        assert choice["finish_reason"] == "stop"  # vLLM's HarmonyParser: a named call keeps "stop"
        jsonschema.validate(json.loads(calls[0]["function"]["arguments"]), TOOLS[1]["function"]["parameters"])


def _tag(content: dict[str, Any]) -> str:
    return json.dumps({"type": "structural_tag", "format": {"type": "tag", "begin": "<|channel|>final<|message|>",
                                                            "content": content, "end": ""}})


@pytest.mark.parametrize(("tag", "param", "message"), [
    (_tag({"type": "json_schema", "json_schema": {"type": "array", "uniqueItems": True}}),
     "sampling_params.structured_outputs.structural_tag.format.content.json_schema.uniqueItems", "uniqueItems"),
    (json.dumps({"structures": [], "triggers": []}), "sampling_params.structured_outputs.structural_tag", "legacy"),
    ("{not json", "sampling_params.structured_outputs.structural_tag", "JSON string"),
    (_tag({"type": "no_such_format"}), "sampling_params.structured_outputs.structural_tag", "could not be compiled"),
])
def test_a_bad_structural_tag_is_a_400_naming_it(h: EngineHarness, tag: str, param: str, message: str) -> None:
    bad = request([200006, 1428, 200008, 12194, 200007, 200006, 173781], max_tokens=4,
                  structured_outputs=structured_outputs(structural_tag=tag))
    with pytest.raises(InvalidGenerateRequest, match=message) as err:
        h.run(bad)
    assert err.value.param == param
