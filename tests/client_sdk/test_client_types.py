"""client_sdk's Anthropic Messages types are typed all the way down, as the official SDK types them:
``message.content[0].text``, ``event.delta.partial_json``, ``event.content_block.name``; the class of
every nested block and delta has the name the ``anthropic`` SDK gives it, and unknown types keep
their fields."""

from __future__ import annotations

from typing import Any

import anthropic.types as official
import pytest

from client_sdk.types import (
    ContentBlockDeltaEvent,
    ContentBlockStartEvent,
    InputJSONDelta,
    Message,
    MessageDeltaEvent,
    MessageStartEvent,
    TextBlock,
    ThinkingBlock,
    ToolUseBlock,
    UnknownBlock,
    UnknownDelta,
    parse_message_event,
)

# As POST /v1/messages writes them (session/derender/anthropic_out.py), reasoning and a tool call included.
MESSAGE: dict[str, Any] = {
    "id": "msg_1", "type": "message", "role": "assistant", "model": "qwen3",
    "content": [
        {"type": "thinking", "thinking": "The user wants the weather.", "signature": ""},
        {"type": "text", "text": "Let me check."},
        {"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": {"city": "Paris"}},
    ],
    "stop_reason": "tool_use", "stop_sequence": None, "usage": {"input_tokens": 12, "output_tokens": 30},
}
EVENTS: list[dict[str, Any]] = [
    {"type": "message_start", "message": {**MESSAGE, "content": [], "stop_reason": None,
                                          "usage": {"input_tokens": 12, "output_tokens": 0}}},
    {"type": "content_block_start", "index": 0, "content_block": {"type": "thinking", "thinking": "", "signature": ""}},
    {"type": "content_block_delta", "index": 0, "delta": {"type": "thinking_delta", "thinking": "The user"}},
    {"type": "content_block_stop", "index": 0},
    {"type": "content_block_start", "index": 1, "content_block": {"type": "text", "text": ""}},
    {"type": "content_block_delta", "index": 1, "delta": {"type": "text_delta", "text": "Let me check."}},
    {"type": "content_block_stop", "index": 1},
    {"type": "content_block_start", "index": 2,
     "content_block": {"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": {}}},
    {"type": "content_block_delta", "index": 2, "delta": {"type": "input_json_delta", "partial_json": '{"city": '}},
    {"type": "content_block_delta", "index": 2, "delta": {"type": "signature_delta", "signature": "c2ln"}},
    {"type": "content_block_stop", "index": 2},
    {"type": "message_delta", "delta": {"stop_reason": "tool_use", "stop_sequence": None}, "usage": {"output_tokens": 30}},
    {"type": "message_stop"},
]
OFFICIAL_EVENTS: dict[str, Any] = {"message_start": official.RawMessageStartEvent, "content_block_start": official.RawContentBlockStartEvent,
                   "content_block_delta": official.RawContentBlockDeltaEvent,
                   "content_block_stop": official.RawContentBlockStopEvent,
                   "message_delta": official.RawMessageDeltaEvent, "message_stop": official.RawMessageStopEvent}


def test_every_content_block_of_a_message_is_typed() -> None:
    message = Message.model_validate(MESSAGE)
    thinking, text, tool = message.content
    assert isinstance(thinking, ThinkingBlock) and thinking.thinking == "The user wants the weather."
    assert isinstance(text, TextBlock) and message.content[1].text == "Let me check."  # type: ignore[union-attr]
    assert isinstance(tool, ToolUseBlock) and (tool.id, tool.name, tool.input) == ("toolu_1", "get_weather",
                                                                                   {"city": "Paris"})
    assert message.model_dump(mode="json", exclude_unset=True) == MESSAGE


def test_the_block_classes_are_the_ones_the_official_sdk_gives() -> None:
    ours = Message.model_validate(MESSAGE)
    theirs = official.Message.model_validate(MESSAGE)
    assert [type(b).__name__ for b in ours.content] == [type(b).__name__ for b in theirs.content]
    assert [b.model_dump() for b in ours.content] == [b.model_dump(exclude_none=True) for b in theirs.content]


@pytest.mark.parametrize("event", EVENTS, ids=[f"{i}-{e['type']}" for i, e in enumerate(EVENTS)])
def test_every_stream_event_is_typed_down_to_its_delta(event: dict[str, Any]) -> None:
    ours = parse_message_event(event)
    theirs = OFFICIAL_EVENTS[event["type"]].model_validate(event)
    assert type(ours).__name__.removeprefix("Raw") == type(theirs).__name__.removeprefix("Raw")
    for name in ("delta", "content_block"):
        if name in event:  # a block's or a block delta's class; message_delta's delta is "Delta" there
            want = type(getattr(theirs, name)).__name__
            assert type(getattr(ours, name)).__name__ == ("MessageDelta" if want == "Delta" else want)
    assert ours.model_dump(mode="json", exclude_unset=True) == event


def test_typed_attributes_read_as_in_the_official_sdk() -> None:
    start, delta, done = (parse_message_event(EVENTS[i]) for i in (7, 8, 11))
    assert isinstance(start, ContentBlockStartEvent) and isinstance(start.content_block, ToolUseBlock)
    assert start.content_block.name == "get_weather"
    assert isinstance(delta, ContentBlockDeltaEvent) and isinstance(delta.delta, InputJSONDelta)
    assert delta.delta.partial_json == '{"city": '
    assert isinstance(done, MessageDeltaEvent) and done.delta.stop_reason == "tool_use"
    assert done.usage is not None and done.usage.output_tokens == 30
    first = parse_message_event(EVENTS[0])
    assert isinstance(first, MessageStartEvent) and first.message.content == []


def test_a_block_or_delta_of_an_unknown_type_keeps_its_fields() -> None:
    message = Message.model_validate({**MESSAGE, "content": [{"type": "server_tool_use", "id": "s1", "name": "x"}]})
    (block,) = message.content
    assert isinstance(block, UnknownBlock) and block.type == "server_tool_use" and block.model_extra == {
        "id": "s1", "name": "x"}
    event = parse_message_event({"type": "content_block_delta", "index": 0,
                                 "delta": {"type": "citations_delta", "citation": {"cited_text": "a"}}})
    assert isinstance(event, ContentBlockDeltaEvent) and isinstance(event.delta, UnknownDelta)
    assert event.delta.model_extra == {"citation": {"cited_text": "a"}}
