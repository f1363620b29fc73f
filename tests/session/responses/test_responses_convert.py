"""The Responses → chat conversion's own rules (session/responses/convert.py) beyond what the vLLM
parity recordings show: tool choices (allowed_tools, a namespaced name, ambiguity, left-out tools),
duplicate names, where the earlier turns go, and the errors that name their field."""

from __future__ import annotations

from typing import Any

import pytest

from session.errors import InvalidRequest
from session.protocol.responses import ResponsesRequest
from session.responses.convert import parse_items, to_chat

FN = {"type": "function", "name": "get", "parameters": {"type": "object"}}
NS_A = {"type": "namespace", "name": "a", "tools": [{"type": "function", "name": "run"}]}
NS_B = {"type": "namespace", "name": "b", "tools": [{"type": "function", "name": "run"}]}


def chat(**body: Any) -> dict[str, Any]:
    return to_chat(ResponsesRequest.model_validate({"input": "hi", **body})).body


def test_allowed_tools_keeps_only_those_functions_in_the_prompt() -> None:
    body = chat(tools=[FN, NS_A], tool_choice={"type": "allowed_tools", "mode": "required",
                                               "tools": [{"type": "function", "name": "run"}]})
    assert [t["function"]["name"] for t in body["tools"]] == ["a__run"] and body["tool_choice"] == "required"


def test_a_namespaced_name_resolves_unless_two_namespaces_have_it() -> None:
    assert chat(tools=[NS_A], tool_choice={"type": "function", "name": "run"})["tool_choice"] == {
        "type": "function", "function": {"name": "a__run"}}
    with pytest.raises(InvalidRequest, match="ambiguous") as info:
        chat(tools=[NS_A, NS_B], tool_choice={"type": "function", "name": "run"})
    assert info.value.param == "tool_choice"
    assert chat(tools=[NS_A, NS_B], tool_choice={"type": "function", "name": "b__run"})["tool_choice"] == {
        "type": "function", "function": {"name": "b__run"}}


def test_tools_left_out_leave_no_tools_and_auto_becomes_none() -> None:
    conv = to_chat(ResponsesRequest.model_validate({"input": "hi", "tools": [{"type": "web_search"},
                                                                            {"type": "mcp", "server_label": "x"}]}))
    assert "tools" not in conv.body and conv.body["tool_choice"] == "none"
    assert conv.left_out == ["web_search", "mcp"]


def test_two_tools_with_one_name_are_refused() -> None:
    with pytest.raises(InvalidRequest, match="two tools are named 'a__run'"):
        chat(tools=[NS_A, {**FN, "name": "a__run"}])


def test_earlier_turns_come_after_the_instructions_and_before_the_input() -> None:
    history = parse_items([{"type": "message", "role": "user", "content": "first"},
                           {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "one"}]}])
    req = ResponsesRequest.model_validate({"input": "second", "instructions": "Be kind."})
    messages = to_chat(req, history=history).body["messages"]
    assert messages == [{"role": "system", "content": "Be kind."}, {"role": "user", "content": "first"},
                        {"role": "assistant", "content": "one"}, {"role": "user", "content": "second"}]


def test_errors_in_the_earlier_turns_name_previous_response_id() -> None:
    history = parse_items([{"type": "function_call_output", "call_id": "c1", "output": "x"}])
    with pytest.raises(InvalidRequest) as info:
        to_chat(ResponsesRequest.model_validate({"input": "hi"}), history=history)
    assert info.value.param == "previous_response_id.call_id"


def test_an_image_needs_a_url() -> None:
    with pytest.raises(InvalidRequest) as info:
        chat(input=[{"role": "user", "content": [{"type": "input_image", "file_id": "file_1"}]}])
    assert info.value.param == "input.0.content.0.image_url"
    body = chat(input=[{"role": "user", "content": [{"type": "input_image", "image_url": "data:image/png;base64,AA"}]}])
    assert body["messages"][0]["content"] == [{"type": "image_url",
                                               "image_url": {"url": "data:image/png;base64,AA", "detail": "auto"}}]


def test_sampling_fields_map_to_the_chat_request() -> None:
    body = chat(max_output_tokens=9, temperature=0.3, top_p=0.8, seed=4, reasoning={"effort": "low"},
                text={"format": {"type": "json_object"}}, stream=True)
    assert (body["max_completion_tokens"], body["temperature"], body["top_p"], body["seed"]) == (9, 0.3, 0.8, 4)
    assert body["reasoning_effort"] == "low" and body["response_format"] == {"type": "json_object"}
    assert body["stream_options"] == {"include_usage": True}
