"""Anthropic messages → OpenAI chat (vLLM's conversion), and rendering through it."""

from __future__ import annotations

import json
from typing import Any

import pytest

from session.errors import ModelNotFound, RenderError
from session.protocol import ChatCompletionRequest, MessagesRequest
from session.protocol.openai import NamedToolChoice
from session.render import Renderer, to_openai_chat

TOOL = {"name": "get_weather", "description": "Weather", "input_schema": {
    "type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}


def messages(**body: Any) -> MessagesRequest:
    body.setdefault("max_tokens", 32)
    body.setdefault("messages", [{"role": "user", "content": "hi"}])
    return MessagesRequest.model_validate(body)


def plain(req: ChatCompletionRequest) -> list[dict[str, Any]]:
    return [m.model_dump(exclude_none=True) for m in req.messages]


def test_a_system_string_becomes_the_first_message() -> None:
    chat = to_openai_chat(messages(system="Be terse."))
    assert plain(chat) == [{"role": "system", "content": "Be terse."}, {"role": "user", "content": "hi"}]


def test_system_text_blocks_are_joined_and_the_billing_header_is_dropped() -> None:
    chat = to_openai_chat(messages(system=[{"type": "text", "text": "x-anthropic-billing-header: abc"},
                                           {"type": "text", "text": "One. "}, {"type": "text", "text": "Two."}]))
    assert plain(chat)[0] == {"role": "system", "content": "One. Two."}


def test_one_text_block_collapses_to_a_string_and_several_stay_parts() -> None:
    chat = to_openai_chat(messages(messages=[
        {"role": "user", "content": [{"type": "text", "text": "only"}]},
        {"role": "assistant", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]}]))
    assert plain(chat)[0]["content"] == "only"
    assert plain(chat)[1]["content"] == [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]


def test_tool_use_becomes_tool_calls_and_tool_result_a_tool_message() -> None:
    chat = to_openai_chat(messages(tools=[TOOL], messages=[
        {"role": "user", "content": "Weather in Paris?"},
        {"role": "assistant", "content": [
            {"type": "text", "text": "Checking."},
            {"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": {"city": "Paris"}}]},
        {"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": "toolu_1",
             "content": [{"type": "text", "text": "21C"}, {"type": "text", "text": "sunny"}]}]}]))
    msgs = plain(chat)
    assert msgs[1]["content"] == "Checking."
    assert msgs[1]["tool_calls"] == [{"id": "toolu_1", "type": "function",
                                      "function": {"name": "get_weather",
                                                   "arguments": json.dumps({"city": "Paris"})}}]
    assert msgs[2] == {"role": "tool", "tool_call_id": "toolu_1", "content": "21C\nsunny"}
    assert len(msgs) == 3  # the user message holding only the tool result is dropped


def test_an_assistant_tool_result_becomes_text() -> None:
    chat = to_openai_chat(messages(messages=[
        {"role": "user", "content": "go"},
        {"role": "assistant", "content": [{"type": "tool_result", "tool_use_id": "t", "content": "42"}]}]))
    assert plain(chat)[1]["content"] == "Tool result: 42"


def test_thinking_blocks_become_reasoning() -> None:
    chat = to_openai_chat(messages(messages=[
        {"role": "user", "content": "q"},
        {"role": "assistant", "content": [{"type": "thinking", "thinking": "hmm ", "signature": "s"},
                                          {"type": "thinking", "thinking": "ok"},
                                          {"type": "text", "text": "answer"}]}]))
    assert plain(chat)[1] == {"role": "assistant", "content": "answer", "reasoning": "hmm ok"}


def test_sampling_fields_carry_over() -> None:
    chat = to_openai_chat(messages(max_tokens=20, stop_sequences=["END"], temperature=0.3, top_p=0.8, top_k=4))
    assert (chat.max_tokens, chat.max_completion_tokens, chat.stop) == (20, 20, ["END"])
    assert (chat.temperature, chat.top_p, chat.top_k) == (0.3, 0.8, 4)


def test_streaming_asks_for_usage() -> None:
    chat = to_openai_chat(messages(stream=True))
    assert chat.stream is True
    assert chat.stream_options is not None and chat.stream_options.include_usage


@pytest.mark.parametrize(("anthropic", "openai"), [("auto", "auto"), ("any", "required"), ("none", "none")])
def test_tool_choice_maps_to_openai(anthropic: str, openai: str) -> None:
    assert to_openai_chat(messages(tools=[TOOL], tool_choice={"type": anthropic})).tool_choice == openai


def test_a_named_tool_choice_maps_to_a_named_function() -> None:
    choice = to_openai_chat(messages(tools=[TOOL], tool_choice={"type": "tool", "name": "get_weather"})).tool_choice
    assert isinstance(choice, NamedToolChoice) and choice.function.name == "get_weather"


def test_tools_become_functions_and_default_to_auto() -> None:
    chat = to_openai_chat(messages(tools=[TOOL]))
    assert chat.tool_choice == "auto"
    assert chat.tools is not None
    fn = chat.tools[0].function
    assert (fn.name, fn.description, fn.parameters) == ("get_weather", "Weather", TOOL["input_schema"])


def test_thinking_config_sets_enable_thinking_unless_given() -> None:
    assert to_openai_chat(messages(thinking={"type": "enabled", "budget_tokens": 100})).chat_template_kwargs == \
        {"enable_thinking": True}
    assert to_openai_chat(messages(thinking={"type": "disabled"},
                                   chat_template_kwargs={"enable_thinking": True})).chat_template_kwargs == \
        {"enable_thinking": True}


def test_an_image_block_becomes_an_image_url_part_that_remembers_the_block() -> None:
    chat = to_openai_chat(messages(messages=[{"role": "user", "content": [
        {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "AAAA"}}]}]))
    content = chat.messages[0].content
    assert isinstance(content, list) and not isinstance(content[0], str)
    part = content[0].model_dump()
    assert part["image_url"] == {"url": "data:image/png;base64,AAAA"}
    assert part["tokenwire_source"] == ["messages[0].content[0].source", "messages.0.content.0.source"]
    with pytest.raises(RenderError) as info:
        to_openai_chat(messages(messages=[{"role": "user", "content": [
            {"type": "text", "text": "see"}, {"type": "image", "source": {"type": "file", "file_id": "f"}}]}]))
    assert info.value.param == "messages.0.content.1.source"


def test_messages_render_equals_the_equivalent_chat_render(tokenizer: Any) -> None:
    r = Renderer(tokenizer("qwen3"), model_name="qwen3", max_model_len=4096, tool_call_parser="hermes",
                 enable_auto_tool_choice=True)
    out = r.render_messages(messages(system="Be terse.", tools=[TOOL], max_tokens=12,
                                     messages=[{"role": "user", "content": "Weather in Paris?"}]))
    ref = r.render_chat(ChatCompletionRequest.model_validate({
        "messages": [{"role": "system", "content": "Be terse."}, {"role": "user", "content": "Weather in Paris?"}],
        "tools": [{"type": "function", "function": {"name": "get_weather", "description": "Weather",
                                                     "parameters": TOOL["input_schema"]}}],
        "max_tokens": 12}))
    assert out.token_ids == ref.token_ids
    assert out.request_id is not None and out.request_id.startswith("chatcmpl-")
    assert out.to_wire()["sampling_params"] == ref.to_wire()["sampling_params"]


def test_messages_render_checks_the_model(tokenizer: Any) -> None:
    r = Renderer(tokenizer("qwen3"), model_name="qwen3", max_model_len=4096)
    with pytest.raises(ModelNotFound):
        r.render_messages(messages(model="claude-nope"))


# --- errors name the Anthropic request's fields (issue 20 item 7) ------------------------------


def test_a_max_tokens_above_the_context_is_named_max_tokens(tokenizer: Any) -> None:
    r = Renderer(tokenizer("qwen3"), model_name="qwen3", max_model_len=4096)
    with pytest.raises(RenderError) as info:
        r.render_messages(messages(max_tokens=99999999))
    assert info.value.message == ("`max_tokens` (99999999) is greater than the model's maximum context length "
                                  "(4096 tokens). Please request fewer output tokens.")
    assert info.value.param == "max_tokens"


def test_a_max_tokens_past_the_room_left_is_clamped(tokenizer: Any) -> None:
    out = Renderer(tokenizer("qwen3"), model_name="qwen3", max_model_len=4096).render_messages(
        messages(max_tokens=4090))
    assert out.sampling_params.max_tokens == 4096 - len(out.token_ids)


@pytest.mark.parametrize(("choice", "said"), [({"type": "any"}, '{"type": "any"}'),
                                              ({"type": "tool", "name": "get_weather"},
                                               '{"type": "tool", "name": "get_weather"}')])
def test_a_forced_tool_choice_without_a_parser_names_the_anthropic_choice(tokenizer: Any, choice: dict[str, Any],
                                                                         said: str) -> None:
    r = Renderer(tokenizer("qwen3"), model_name="qwen3", max_model_len=4096)
    with pytest.raises(RenderError) as info:
        r.render_messages(messages(tools=[TOOL], tool_choice=choice))
    assert info.value.message == f"tool_choice={said} requires --tool-call-parser to be set"
    assert "required" not in info.value.message and "function" not in info.value.message


def test_an_unenforceable_tool_schema_names_input_schema(tokenizer: Any) -> None:
    r = Renderer(tokenizer("qwen3"), model_name="qwen3", max_model_len=4096, tool_call_parser="hermes",
                 enable_auto_tool_choice=True)
    tool = {**TOOL, "input_schema": {"type": "object", "properties": {"tags": {"type": "array", "uniqueItems": True}}}}
    with pytest.raises(RenderError) as info:
        r.render_messages(messages(tools=[tool], tool_choice={"type": "any"}))
    assert info.value.message.startswith("tools[0].input_schema.properties.tags.uniqueItems ")
    assert info.value.message.endswith('(tool_choice={"type": "any"} constrains the output to this schema).')
    assert info.value.param == "tools[0].input_schema"
    assert "function" not in info.value.message and "parameters" not in info.value.message
