"""gpt-oss's harmony prompts (session/render/harmony.py): the rules as vLLM 0.32 applies them, in
vectors written from vLLM's and oss-harmony's output (the ids themselves are checked against vLLM's
render server by tests/app/test_parsers_vllm_parity.py, ``gpt_oss`` render cases)."""

from __future__ import annotations

from typing import Any

import pytest

from session.errors import RenderError
from session.protocol.openai import ChatCompletionRequest
from session.render.harmony import (
    HarmonyRender,
    _float,
    harmony_messages,
    render_pieces,
    render_text,
    schema_to_typescript,
)
from tests.conftest import tokenizer_of

DATE = "2025-08-05"
SYSTEM = ("<|start|>system<|message|>You are ChatGPT, a large language model trained by OpenAI.\n"
          f"Knowledge cutoff: 2024-06\nCurrent date: {DATE}\n\nReasoning: medium\n\n"
          "# Valid channels: analysis, commentary, final. Channel must be included for every message.")
TOOLS = [{"type": "function", "function": {"name": "get_weather", "description": "Get the weather.\nSecond line",
          "parameters": {"type": "object", "properties": {
              "city": {"type": "string", "description": "City"},
              "unit": {"type": "string", "enum": ["c", "f"], "default": "c"},
              "days": {"type": "integer"}}, "required": ["city"]}}}]


def text(**req: Any) -> str:
    return render_text(ChatCompletionRequest.model_validate(req), start_date=DATE)


def test_a_plain_chat() -> None:
    assert text(messages=[{"role": "user", "content": "Hi"}]) == (
        f"{SYSTEM}<|end|><|start|>user<|message|>Hi<|end|><|start|>assistant")


def test_instructions_tools_and_earlier_analysis_dropped() -> None:
    got = text(messages=[{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"},
                         {"role": "assistant", "content": "Hello", "reasoning": "think"},
                         {"role": "user", "content": "Weather?"}], tools=TOOLS)
    assert got == (
        f"{SYSTEM}\nCalls to these tools must go to the commentary channel: 'functions'.<|end|>"
        "<|start|>developer<|message|># Instructions\n\nBe brief.\n\n# Tools\n\n## functions\n\n"
        "namespace functions {\n\n// Get the weather.\n// Second line\ntype get_weather = (_: {\n// City\n"
        'city: string,\nunit?: "c" | "f", // default: c\ndays?: number,\n}) => any;\n\n} // namespace functions'
        "<|end|><|start|>user<|message|>Hi<|end|><|start|>assistant<|channel|>final<|message|>Hello<|end|>"
        "<|start|>user<|message|>Weather?<|end|><|start|>assistant")


def test_tool_calls_and_results() -> None:
    got = text(messages=[
        {"role": "user", "content": "Weather?"},
        {"role": "assistant", "content": "Let me check.", "reasoning": "need tool", "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}},
            {"id": "c2", "type": "function", "function": {"name": "get_time", "arguments": ""}}]},
        {"role": "tool", "tool_call_id": "c1", "content": "sunny"},
        {"role": "tool", "tool_call_id": "zz", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]}],
        reasoning_effort="high")
    assert got == (
        SYSTEM.replace("medium", "high") + "<|end|><|start|>user<|message|>Weather?<|end|>"
        "<|start|>assistant<|channel|>commentary<|message|>Let me check.<|end|>"
        "<|start|>assistant<|channel|>analysis<|message|>need tool<|end|>"
        '<|start|>assistant to=functions.get_weather<|channel|>commentary json<|message|>{"city": "Paris"}<|call|>'
        "<|start|>assistant to=functions.get_time<|channel|>commentary json<|message|><|call|>"
        "<|start|>functions.get_weather<|channel|>commentary to=assistant<|message|>sunny<|end|>"
        "<|start|>functions.<|channel|>commentary to=assistant<|message|>ab<|end|><|start|>assistant")


def test_later_system_messages_are_developer_instructions_and_the_switch_moves_them() -> None:
    req = ChatCompletionRequest.model_validate({"messages": [
        {"role": "developer", "content": "First."}, {"role": "user", "content": "Hi"},
        {"role": "system", "content": "Later."}]})
    plain = render_text(req, start_date=DATE)
    assert "<|start|>developer<|message|># Instructions\n\nFirst.<|end|>" in plain
    assert "<|start|>developer<|message|># Instructions\n\nLater.<|end|><|start|>assistant" in plain
    switched = render_text(req, start_date=DATE, system_instructions=True)
    assert switched.startswith("<|start|>system<|message|>You are ChatGPT, a large language model trained by "
                               "OpenAI.\nFirst.\nKnowledge cutoff")
    assert "<|start|>developer" not in switched
    assert switched.count("<|start|>system") == 2  # the later one is a whole system message


@pytest.mark.parametrize(("effort", "message"), [
    ("none", "Harmony does not support reasoning_effort='none'"),
    ("minimal", "reasoning_effort='minimal' is not supported by Harmony. Supported values are: high, medium, low."),
])
def test_efforts_harmony_refuses(effort: str, message: str) -> None:
    with pytest.raises(RenderError) as err:
        text(messages=[{"role": "user", "content": "Hi"}], reasoning_effort=effort)
    assert err.value.message == message and err.value.param == "reasoning_effort"


def test_an_unknown_role_is_refused() -> None:
    with pytest.raises(RenderError, match="harmony has no role 'function'"):
        text(messages=[{"role": "function", "content": "x", "name": "f"}])


def test_user_parts_are_separate_texts_and_marker_text_stays_text() -> None:
    req = ChatCompletionRequest.model_validate({"messages": [{"role": "user", "content": [
        {"type": "text", "text": "<|start|>"}, {"type": "text", "text": "b"}]}]})
    prompt = render_pieces(harmony_messages(req, start_date=DATE, system_instructions=False))
    assert prompt.pieces[-6:-2] == ("<|message|>", "<|start|>", "b", "<|end|>")
    tok = tokenizer_of("gpt-oss")
    ids = HarmonyRender(tok, start_date=DATE).encode(prompt)
    start = tok.convert_tokens_to_ids("<|start|>")
    ordinary = [27, 91, 5236, 91, 29]  # "<|start|>" as the library's encode_ordinary spells it
    b = tok.encode("b", add_special_tokens=False)
    assert ids[-(len(ordinary) + len(b) + 4):] == [tok.convert_tokens_to_ids("<|message|>"), *ordinary, *b,
                                                    tok.convert_tokens_to_ids("<|end|>"), start,
                                                    *tok.encode("assistant", add_special_tokens=False)][-(len(ordinary) + len(b) + 4):]


def test_the_date_comes_from_the_pin_or_the_clock() -> None:
    tok = tokenizer_of("gpt-oss")
    req = ChatCompletionRequest.model_validate({"messages": [{"role": "user", "content": "Hi"}]})
    clocked = HarmonyRender(tok, today=lambda: "2030-01-02")
    assert "Current date: 2030-01-02" in tok.decode(clocked.ids(req))
    pinned = HarmonyRender.from_environ(tok, {"VLLM_SYSTEM_START_DATE": "2024-12-31"})
    assert "Current date: 2024-12-31" in tok.decode(pinned.ids(req))
    with pytest.raises(ValueError, match="VLLM_GPT_OSS_HARMONY_SYSTEM_INSTRUCTIONS"):
        HarmonyRender.from_environ(tok, {"VLLM_GPT_OSS_HARMONY_SYSTEM_INSTRUCTIONS": "yes"})


@pytest.mark.parametrize(("schema", "want"), [
    ({}, "any"),
    ({"type": ["string", "integer", 3]}, "string | number"),
    ({"type": "array"}, "Array<any>"),
    ({"type": "array", "items": {"type": "boolean"}}, "boolean[]"),
    ({"type": "string", "enum": ["a", 1, "b"]}, '"a" | "b"'),
    ({"type": "null"}, "any"),
    ({"type": "object"}, "{\n}"),
    ({"oneOf": [{"type": "string", "description": "s", "default": "x"}, {"type": "integer", "default": [1.5e-7]}]},
     '\n | string // s default: "x"\n | number // default: [1.5e-7]'),
    ({"type": "object", "description": "Top", "properties": {"a": {"type": "object", "properties": {
        "b": {"type": "number", "nullable": True, "default": 1e16}}}}},
     "// Top\n{\na?: {\n    b?: number | null, // default: 1e+16\n    },\n}"),
    ({"type": "object", "properties": {"p": {"description": "Cabin", "default": "economy", "oneOf": [
        {"type": "string", "enum": ["economy"], "description": "Cabin"}, {"type": "null", "default": None}]}}},
     '{\n// default: "economy"\np?:\n | "economy"\n | any // default: null\n,\n}'),
    ({"type": "object", "properties": {"t": {"type": "string", "title": "T", "examples": ["e", 2]}}},
     '{\n// T\n//\n// Examples:\n// - "e"\nt?: string,\n}'),
])
def test_schemas_as_typescript(schema: dict[str, Any], want: str) -> None:
    assert schema_to_typescript(schema, "") == want


@pytest.mark.parametrize(("x", "want"), [
    (1.0, "1.0"), (0.1, "0.1"), (1e15, "1000000000000000.0"), (1e16, "1e+16"), (1.5e300, "1.5e+300"),
    (1e-5, "0.00001"), (2.5e-5, "0.000025"), (1e-6, "1e-6"), (-0.0, "-0.0"), (123.456, "123.456"),
    (1.2345678901234568e20, "1.2345678901234568e+20"),
])
def test_floats_print_as_pydantic_writes_them(x: float, want: str) -> None:
    assert _float(x) == want
