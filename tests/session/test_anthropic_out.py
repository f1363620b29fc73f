"""OpenAI-shaped derender output → Anthropic message and event sequence."""

from __future__ import annotations

from typing import Any

import orjson

from session.derender.anthropic_out import MessageStream, message_from_chat


def _chunk(**delta: Any) -> dict[str, Any]:
    return {"object": "chat.completion.chunk", "choices": [{"index": 0, "delta": delta}]}


def _tool(index: int, *, id: str | None = None, name: str | None = None, args: str = "") -> dict[str, Any]:
    fn: dict[str, Any] = {"arguments": args}
    if name:
        fn["name"] = name
    call: dict[str, Any] = {"index": index, "function": fn}
    if id:
        call.update(id=id, type="function")
    return call


def _replay(events: list[dict[str, Any]]) -> dict[str, Any]:
    """Assemble a message from events the way an Anthropic client does, checking the grammar."""
    assert events[0]["type"] == "message_start"
    assert events[-1]["type"] == "message_stop"
    message: dict[str, Any] = events[0]["message"]
    open_index = None
    for ev in events[1:-1]:
        kind = ev["type"]
        if kind == "content_block_start":
            assert open_index is None, "a block started while another is open"
            assert ev["index"] == len(message["content"])
            message["content"].append(dict(ev["content_block"]))
            message["content"][-1].setdefault("_json", "")
            open_index = ev["index"]
        elif kind == "content_block_delta":
            assert ev["index"] == open_index
            block, delta = message["content"][open_index], ev["delta"]
            if delta["type"] == "text_delta":
                block["text"] += delta["text"]
            elif delta["type"] == "thinking_delta":
                block["thinking"] += delta["thinking"]
            else:
                assert delta["type"] == "input_json_delta"
                block["_json"] += delta["partial_json"]
        elif kind == "content_block_stop":
            assert ev["index"] == open_index
            open_index = None
        else:
            assert kind == "message_delta" and open_index is None
            message.update(ev["delta"])
            message["usage"].update(ev["usage"])
    for block in message["content"]:
        raw = block.pop("_json")
        if block["type"] == "tool_use":
            block["input"] = orjson.loads(raw) if raw else {}
    return message


def test_stream_orders_thinking_text_and_tool_blocks() -> None:
    s = MessageStream(model="m", input_tokens=7, stop_sequences=[])
    events = s.start()
    events += s.push(_chunk(role="assistant", content=""))
    events += s.push(_chunk(reasoning="Let me "))
    events += s.push(_chunk(reasoning="think."))
    events += s.push(_chunk(content="Sure."))
    events += s.push(_chunk(tool_calls=[_tool(0, id="chatcmpl-tool-abc", name="get_weather")]))
    events += s.push(_chunk(tool_calls=[_tool(0, args='{"city": ')]))
    events += s.push(_chunk(tool_calls=[_tool(0, args='"Paris"}')]))
    events += s.push(_chunk(tool_calls=[_tool(1, id="chatcmpl-tool-def", name="now", args="{}")]))
    events += s.finish(finish_reason="tool_calls", stop_reason=None, output_tokens=12)
    message = _replay(events)
    assert [b["type"] for b in message["content"]] == ["thinking", "text", "tool_use", "tool_use"]
    assert message["content"][0]["thinking"] == "Let me think."
    assert message["content"][2] == {"type": "tool_use", "id": "toolu_abc", "name": "get_weather",
                                     "input": {"city": "Paris"}}
    assert message["content"][3]["input"] == {}
    assert message["stop_reason"] == "tool_use"
    assert message["usage"] == {"input_tokens": 7, "output_tokens": 12}


def test_stop_sequence_and_length_map_to_anthropic_reasons() -> None:
    s = MessageStream(model="m", input_tokens=1, stop_sequences=["END"])
    events = s.start() + s.push(_chunk(content="hi")) + s.finish(finish_reason="stop", stop_reason="END",
                                                               output_tokens=2)
    assert events[-2]["delta"] == {"stop_reason": "stop_sequence", "stop_sequence": "END"}
    s = MessageStream(model="m", input_tokens=1, stop_sequences=[])
    events = s.start() + s.finish(finish_reason="length", stop_reason=None, output_tokens=0)
    assert events[-2]["delta"]["stop_reason"] == "max_tokens"
    assert [e["type"] for e in events] == ["message_start", "message_delta", "message_stop"]


def test_finish_is_idempotent() -> None:
    s = MessageStream(model="m", input_tokens=1, stop_sequences=[])
    s.start()
    assert s.finish(finish_reason="stop", stop_reason=None, output_tokens=1)
    assert s.finish(finish_reason="stop", stop_reason=None, output_tokens=1) == []


def test_non_streaming_message_matches_the_streamed_one() -> None:
    chat = {
        "choices": [{"index": 0, "finish_reason": "stop", "stop_reason": None, "message": {
            "role": "assistant", "content": "Sure.", "reasoning": "hmm",
            "tool_calls": [{"id": "chatcmpl-tool-abc", "type": "function",
                            "function": {"name": "f", "arguments": '{"a": [1, 2]}'}}]}}],
        "usage": {"prompt_tokens": 3, "completion_tokens": 9, "total_tokens": 12},
    }
    message = message_from_chat(chat, model="m", stop_sequences=[], message_id="msg_1")
    assert message["content"] == [
        {"type": "thinking", "thinking": "hmm", "signature": ""},
        {"type": "text", "text": "Sure."},
        {"type": "tool_use", "id": "toolu_abc", "name": "f", "input": {"a": [1, 2]}},
    ]
    assert message["stop_reason"] == "tool_use"
    assert message["usage"] == {"input_tokens": 3, "output_tokens": 9}


def test_invalid_tool_arguments_are_kept_not_dropped() -> None:
    chat = {"choices": [{"finish_reason": "stop", "message": {"content": None, "tool_calls": [
        {"id": "x", "function": {"name": "f", "arguments": "{broken"}}]}}], "usage": {}}
    block = message_from_chat(chat, model="m", stop_sequences=[])["content"][0]
    assert block["input"] == {"_raw_arguments": "{broken"}


def test_tool_arguments_nested_past_what_the_answer_can_carry_are_kept_as_text() -> None:
    # a model's (or a scripted engine's) 300-level arguments: orjson reads them but writes at most 255
    deep = '{"a":' * 300 + "1" + "}" * 300
    chat = {"choices": [{"finish_reason": "tool_calls", "message": {"content": None, "tool_calls": [
        {"id": "x", "function": {"name": "f", "arguments": deep}}]}}], "usage": {}}
    message = message_from_chat(chat, model="m", stop_sequences=[])
    assert message["content"][0]["input"] == {"_raw_arguments": deep}
    assert orjson.loads(orjson.dumps(message)) == message  # the non-streaming answer is written


def test_a_stream_restored_from_a_snapshot_continues_the_same_event_sequence() -> None:
    chunks = [_chunk(reasoning="hmm "), _chunk(reasoning="ok"), _chunk(content="Sure."),
              _chunk(tool_calls=[_tool(0, id="chatcmpl-tool-abc", name="f")]),
              _chunk(tool_calls=[_tool(0, args='{"a": 1}')]), _chunk(content="after")]

    def run(cut: int | None) -> list[dict[str, Any]]:
        s = MessageStream(model="m", input_tokens=3, stop_sequences=[], message_id="msg_1")
        events = s.start()
        for i, chunk in enumerate(chunks):
            if i == cut:  # the socket dropped here: continue from a snapshot taken now
                snap = orjson.loads(orjson.dumps(s.snapshot()))
                s = MessageStream.restore(snap, model="m", input_tokens=3, stop_sequences=[])
            events += s.push(chunk)
        return events + s.finish(finish_reason="stop", stop_reason=None, output_tokens=9)

    whole = run(None)
    for cut in range(len(chunks)):
        assert run(cut) == whole
    assert _replay(whole)["stop_reason"] == "tool_use"
