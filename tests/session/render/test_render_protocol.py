"""Request models: unknown fields tolerated, wrong types and vLLM's cross-field rules refused with
an error that names the field."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import BaseModel, ValidationError

from session.protocol import ChatCompletionRequest, CompletionRequest, MessagesRequest

M = [{"role": "user", "content": "x"}]
T = [{"type": "function", "function": {"name": "f"}}]


def error_of(model: type[BaseModel], body: dict[str, Any]) -> tuple[str, str]:
    with pytest.raises(ValidationError) as info:
        model.model_validate(body)
    err = info.value.errors(include_url=False)[0]
    return ".".join(str(p) for p in err["loc"]), err["msg"]


def test_unknown_fields_are_tolerated_and_kept() -> None:
    req = ChatCompletionRequest.model_validate({"messages": M, "frobnicate": 1,
                                                 "messages_extra": {"a": 1}})
    assert req.model_extra == {"frobnicate": 1, "messages_extra": {"a": 1}}
    assert CompletionRequest.model_validate({"prompt": "x", "zzz": True}).model_extra == {"zzz": True}
    assert MessagesRequest.model_validate({"max_tokens": 1, "messages": M, "service_tier": "auto"}).model_extra


@pytest.mark.parametrize(("body", "loc", "msg"), [
    ({"messages": [{"role": "user", "content": 3}]}, "messages.0.content", "must be a string, a list of content parts"),
    ({"messages": [{"role": "user", "content": [{"type": "text"}]}]}, "messages.0.content", "part 0 has type 'text'"),
    ({"messages": M, "temperature": "hot"}, "temperature", "valid number"),
    ({"messages": M, "max_tokens": 0}, "max_tokens", "greater than or equal to 1"),
    ({"messages": M, "tool_choice": "auto"}, "tool_choice", "When using `tool_choice`, `tools` must be set."),
    ({"messages": M, "tools": []}, "tools", "`tools` must not be an empty array"),
    ({"messages": M, "tools": T, "tool_choice": "sometimes"}, "tool_choice", "Invalid value for `tool_choice`"),
    ({"messages": M, "tools": T, "tool_choice": {"type": "function", "function": {"name": "g"}}}, "tool_choice",
     "does not match any of the specified `tools`"),
    ({"messages": M, "top_logprobs": 2}, "top_logprobs", "`logprobs` must be set to true"),
    ({"messages": M, "logprobs": True, "top_logprobs": -3}, "top_logprobs", "positive value or -1"),
    ({"messages": M, "continue_final_message": True}, "continue_final_message", "Cannot set both"),
    ({"messages": M, "stream_options": {"include_usage": True}}, "stream_options", "only be defined when `stream=True`"),
    ({"messages": M, "stream": True, "prompt_logprobs": 1}, "prompt_logprobs", "not available when `stream=True`"),
    ({"messages": M, "cache_salt": ""}, "cache_salt", "at least 1 character"),
    ({"messages": M, "truncate_prompt_tokens": -2}, "truncate_prompt_tokens", "greater than or equal to -1"),
    ({}, "messages", "Field required"),
])
def test_chat_request_errors_name_the_field(body: dict[str, Any], loc: str, msg: str) -> None:
    got_loc, got_msg = error_of(ChatCompletionRequest, body)
    assert got_loc == loc
    assert msg in got_msg


@pytest.mark.parametrize(("body", "loc", "msg"), [
    ({"prompt": {"a": 1}}, "prompt", "must be a string, a list of strings"),
    ({"prompt": [1, -2]}, "prompt", "must be a string, a list of strings"),
    ({"prompt": []}, "", "Either prompt or prompt_embeds must be provided and non-empty."),
    ({}, "", "Either prompt or prompt_embeds must be provided and non-empty."),
    ({"prompt": "x", "max_tokens": 0}, "max_tokens", "greater than or equal to 1"),
])
def test_completion_request_errors_name_the_field(body: dict[str, Any], loc: str, msg: str) -> None:
    got_loc, got_msg = error_of(CompletionRequest, body)
    assert got_loc == loc
    assert msg in got_msg


@pytest.mark.parametrize(("body", "loc"), [
    ({"messages": M}, "max_tokens"),
    ({"max_tokens": 5, "messages": [{"role": "robot", "content": "x"}]}, "messages.0.role"),
    ({"max_tokens": 5, "messages": M, "tool_choice": {"type": "sometimes"}}, "tool_choice.type"),
])
def test_messages_request_errors_name_the_field(body: dict[str, Any], loc: str) -> None:
    assert error_of(MessagesRequest, body)[0] == loc


def test_tools_without_tool_choice_default_to_auto() -> None:
    assert ChatCompletionRequest.model_validate({"messages": M, "tools": T}).tool_choice == "auto"
    assert ChatCompletionRequest.model_validate({"messages": M}).tool_choice == "none"


def test_completion_prompts_are_split_one_per_engine_request() -> None:
    def prompts(p: Any) -> list[Any]:
        return CompletionRequest.model_validate({"prompt": p}).prompts()

    assert prompts("a") == ["a"]
    assert prompts(["a", "b"]) == ["a", "b"]
    assert prompts([1, 2]) == [[1, 2]]
    assert prompts([[1], [2, 3]]) == [[1], [2, 3]]


def test_max_completion_tokens_wins_over_max_tokens() -> None:
    req = ChatCompletionRequest.model_validate({"messages": M, "max_tokens": 3, "max_completion_tokens": 9})
    assert req.requested_max_tokens == 9
