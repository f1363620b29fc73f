"""Anthropic Messages output from OpenAI-shaped derender output (sans-I/O).

The derender stage speaks OpenAI's chat shapes; ``/v1/messages`` answers in Anthropic's. This
module is the one translation between them:

- :func:`message_from_chat` turns a non-streaming ``chat.completion`` dict into a ``message``;
- :class:`MessageStream` turns the stream of ``chat.completion.chunk`` dicts of one choice into
  Anthropic's event sequence: ``message_start``, then per content block ``content_block_start`` /
  ``content_block_delta`` (``thinking_delta``, ``text_delta``, ``input_json_delta``) /
  ``content_block_stop``, then ``message_delta`` (stop reason, usage) and ``message_stop``.

Blocks are opened lazily in the order their first delta arrives and closed when another kind of
block begins, so the event sequence is valid for any chunking.
"""

from __future__ import annotations

import secrets
from typing import Any

import orjson

from engine.json_depth import too_deep
from session.errors import StateError

# OpenAI finish_reason → Anthropic stop_reason
_STOP_REASONS = {"stop": "end_turn", "length": "max_tokens", "tool_calls": "tool_use",
                 "abort": "end_turn", "cancelled": "end_turn"}


def new_message_id() -> str:
    return f"msg_{secrets.token_hex(12)}"


def new_tool_use_id() -> str:
    return f"toolu_{secrets.token_hex(12)}"


def stop_reason_of(finish_reason: str | None, stop_reason: Any, stop_sequences: list[str]) -> tuple[str, str | None]:
    """(Anthropic stop_reason, stop_sequence) for an OpenAI finish."""
    if isinstance(stop_reason, str) and stop_reason in stop_sequences:
        return "stop_sequence", stop_reason
    return _STOP_REASONS.get(finish_reason or "stop", "end_turn"), None


def _tool_input(arguments: str | None) -> Any:
    if not arguments:
        return {}
    try:
        value = orjson.loads(arguments)
    except orjson.JSONDecodeError:
        return {"_raw_arguments": arguments}
    if too_deep(value, raw=arguments) is not None:  # the answer is serialized again (orjson: 255 levels)
        return {"_raw_arguments": arguments}
    return value if isinstance(value, dict) else {"value": value}


def message_from_chat(chat: dict[str, Any], *, model: str, stop_sequences: list[str],
                      message_id: str | None = None) -> dict[str, Any]:
    """A non-streaming Anthropic ``message`` from a ``chat.completion`` dict (first choice)."""
    choice = chat["choices"][0]
    msg = choice.get("message") or {}
    content: list[dict[str, Any]] = []
    if msg.get("reasoning"):
        content.append({"type": "thinking", "thinking": msg["reasoning"], "signature": ""})
    if msg.get("content"):
        content.append({"type": "text", "text": msg["content"]})
    for call in msg.get("tool_calls") or []:
        fn = call.get("function") or {}
        content.append({"type": "tool_use", "id": _tool_use_id(call.get("id")), "name": fn.get("name", ""),
                        "input": _tool_input(fn.get("arguments"))})
    finish = "tool_calls" if msg.get("tool_calls") else choice.get("finish_reason")
    stop_reason, stop_sequence = stop_reason_of(finish, choice.get("stop_reason"), stop_sequences)
    usage = chat.get("usage") or {}
    return {
        "id": message_id or new_message_id(),
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": content,
        "stop_reason": stop_reason,
        "stop_sequence": stop_sequence,
        "usage": {"input_tokens": usage.get("prompt_tokens", 0),
                  "output_tokens": usage.get("completion_tokens", 0)},
    }


def _tool_use_id(openai_id: str | None) -> str:
    # Keep the derenderer's pinned id recognisable, in Anthropic's id style.
    if openai_id and openai_id.startswith("chatcmpl-tool-"):
        return "toolu_" + openai_id[len("chatcmpl-tool-"):]
    return openai_id or new_tool_use_id()


class MessageStream:
    """Anthropic events for one choice's stream of OpenAI chat chunks."""

    def __init__(self, *, model: str, input_tokens: int, stop_sequences: list[str],
                 message_id: str | None = None) -> None:
        self.id = message_id or new_message_id()
        self.model = model
        self.input_tokens = input_tokens
        self.stop_sequences = stop_sequences
        self._index = -1  # index of the open block, -1 when none
        self._open_kind: str | None = None
        self._open_tool: int | None = None  # OpenAI tool-call index of the open tool_use block
        self._tool_calls = 0
        self._finished = False

    def snapshot(self) -> dict[str, Any]:
        """The event state a resumed stream needs to continue without repeating ``message_start``
        or reopening blocks (small: ids and counters only)."""
        return {"id": self.id, "i": self._index, "k": self._open_kind, "t": self._open_tool, "c": self._tool_calls}

    @classmethod
    def restore(cls, snap: dict[str, Any], *, model: str, input_tokens: int,
                stop_sequences: list[str]) -> MessageStream:
        """A stream that continues after the events ``snap`` was taken after (no ``start()``).
        A snapshot this server did not write is a ``StateError`` (400), never a crash."""
        index, calls, message_id = snap.get("i"), snap.get("c", 0), snap.get("id")
        if not (type(index) is int and type(calls) is int and index >= -1 and calls >= 0
                and isinstance(message_id, str)):
            raise StateError("the checkpoint's event state is malformed.", reason="malformed", param="resume")
        ms = cls(model=model, input_tokens=input_tokens, stop_sequences=stop_sequences, message_id=message_id)
        ms._index = index
        kind = snap.get("k")
        ms._open_kind = kind if kind in ("text", "thinking", "tool_use") else None
        ms._open_tool = snap.get("t") if isinstance(snap.get("t"), int) else None
        ms._tool_calls = calls
        return ms

    def start(self) -> list[dict[str, Any]]:
        return [{
            "type": "message_start",
            "message": {
                "id": self.id, "type": "message", "role": "assistant", "model": self.model, "content": [],
                "stop_reason": None, "stop_sequence": None,
                "usage": {"input_tokens": self.input_tokens, "output_tokens": 0},
            },
        }]

    def push(self, chunk: dict[str, Any]) -> list[dict[str, Any]]:
        """Events for one ``chat.completion.chunk`` dict (usage-only chunks give none)."""
        events: list[dict[str, Any]] = []
        for choice in chunk.get("choices") or []:
            delta = choice.get("delta") or {}
            if delta.get("reasoning"):
                events += self._text_block("thinking", delta["reasoning"])
            if delta.get("content"):
                events += self._text_block("text", delta["content"])
            for call in delta.get("tool_calls") or []:
                events += self._tool_delta(call)
        return events

    def finish(self, *, finish_reason: str | None, stop_reason: Any, output_tokens: int) -> list[dict[str, Any]]:
        if self._finished:
            return []
        self._finished = True
        events = self._close()
        if self._tool_calls and finish_reason in ("stop", None):
            finish_reason = "tool_calls"
        reason, sequence = stop_reason_of(finish_reason, stop_reason, self.stop_sequences)
        events.append({"type": "message_delta", "delta": {"stop_reason": reason, "stop_sequence": sequence},
                       "usage": {"output_tokens": output_tokens}})
        events.append({"type": "message_stop"})
        return events

    # -- blocks -------------------------------------------------------------------------------
    def _open(self, block: dict[str, Any], kind: str) -> list[dict[str, Any]]:
        events = self._close()
        self._index += 1
        self._open_kind = kind
        return [*events, {"type": "content_block_start", "index": self._index, "content_block": block}]

    def _close(self) -> list[dict[str, Any]]:
        if self._open_kind is None:
            return []
        self._open_kind = None
        self._open_tool = None
        return [{"type": "content_block_stop", "index": self._index}]

    def _text_block(self, kind: str, text: str) -> list[dict[str, Any]]:
        events: list[dict[str, Any]] = []
        if self._open_kind != kind:
            block = {"type": "thinking", "thinking": "", "signature": ""} if kind == "thinking" else {
                "type": "text", "text": ""}
            events += self._open(block, kind)
        key, delta_type = ("thinking", "thinking_delta") if kind == "thinking" else ("text", "text_delta")
        events.append({"type": "content_block_delta", "index": self._index,
                       "delta": {"type": delta_type, key: text}})
        return events

    def _tool_delta(self, call: dict[str, Any]) -> list[dict[str, Any]]:
        events: list[dict[str, Any]] = []
        index = call.get("index", 0)
        fn = call.get("function") or {}
        if self._open_kind != "tool_use" or self._open_tool != index:
            events += self._open({"type": "tool_use", "id": _tool_use_id(call.get("id")),
                                  "name": fn.get("name") or "", "input": {}}, "tool_use")
            self._open_tool = index
            self._tool_calls += 1
        if fn.get("arguments"):
            events.append({"type": "content_block_delta", "index": self._index,
                           "delta": {"type": "input_json_delta", "partial_json": fn["arguments"]}})
        return events
