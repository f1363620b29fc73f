"""Typed results.

The OpenAI shapes, vLLM's generate and derender shapes are the server's own pydantic models
(``session.protocol.openai_responses``, ``engine.protocol``), re-exported here. ``session`` has no
models of Anthropic's *responses* yet, so the Messages API's response and stream events are
modelled here, field for field as ``POST /v1/messages`` writes them (unknown fields are kept), and
typed all the way down as Anthropic's own SDK types them: ``message.content[0].text``,
``event.delta.text``, ``event.content_block.name``. A block or delta of a type this client does not
know is an ``UnknownBlock`` / ``UnknownDelta`` with its fields kept.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Annotated, Any, Literal

from pydantic import BaseModel, Discriminator, Tag

from client_sdk.open_model import OpenModel, parse_by_type, type_tag
from engine.protocol import GenerateRequest, GenerateStreamResponse, UsageInfo
from session.protocol.openai_responses import (
    ChatCompletionResponse,
    ChatCompletionStreamResponse,
    CompletionResponse,
    CompletionStreamResponse,
    DerenderChatStreamResponse,
    DerenderCompletionStreamResponse,
)

__all__ = [
    "BlockDelta",
    "ChatCompletionResponse",
    "ChatCompletionStreamResponse",
    "CompletionResponse",
    "CompletionStreamResponse",
    "ContentBlock",
    "ContentBlockDeltaEvent",
    "ContentBlockStartEvent",
    "ContentBlockStopEvent",
    "DerenderChatStreamResponse",
    "DerenderCompletionStreamResponse",
    "GenerateRequest",
    "GenerateStreamResponse",
    "InputJSONDelta",
    "Message",
    "MessageDelta",
    "MessageDeltaEvent",
    "MessageDeltaUsage",
    "MessageStartEvent",
    "MessageStopEvent",
    "MessageStreamEvent",
    "MessageUsage",
    "RedactedThinkingBlock",
    "SessionInfo",
    "SignatureDelta",
    "TextBlock",
    "TextDelta",
    "ThinkingBlock",
    "ThinkingDelta",
    "ToolUseBlock",
    "UnknownBlock",
    "UnknownDelta",
    "UnknownEvent",
    "UsageInfo",
    "parse_message_event",
]


class MessageUsage(OpenModel):
    input_tokens: int = 0
    output_tokens: int = 0


# --- content blocks (``message.content[i]``, ``content_block_start.content_block``) ---------------


class TextBlock(OpenModel):
    type: Literal["text"] = "text"
    text: str


class ThinkingBlock(OpenModel):
    type: Literal["thinking"] = "thinking"
    thinking: str
    signature: str = ""


class RedactedThinkingBlock(OpenModel):
    type: Literal["redacted_thinking"] = "redacted_thinking"
    data: str


class ToolUseBlock(OpenModel):
    type: Literal["tool_use"] = "tool_use"
    id: str
    name: str
    input: dict[str, Any]  # {} in content_block_start; the arguments arrive as input_json_delta


class UnknownBlock(OpenModel):
    """A content block of a type this client does not know (its fields are kept)."""

    type: str


ContentBlock = Annotated[
    Annotated[TextBlock, Tag("text")] | Annotated[ThinkingBlock, Tag("thinking")]
    | Annotated[RedactedThinkingBlock, Tag("redacted_thinking")] | Annotated[ToolUseBlock, Tag("tool_use")]
    | Annotated[UnknownBlock, Tag("unknown")],
    Discriminator(type_tag(frozenset({"text", "thinking", "redacted_thinking", "tool_use"}))),
]


# --- deltas (``content_block_delta.delta``, ``message_delta.delta``) ---------------------------------


class TextDelta(OpenModel):
    type: Literal["text_delta"] = "text_delta"
    text: str


class ThinkingDelta(OpenModel):
    type: Literal["thinking_delta"] = "thinking_delta"
    thinking: str


class SignatureDelta(OpenModel):
    type: Literal["signature_delta"] = "signature_delta"
    signature: str


class InputJSONDelta(OpenModel):
    type: Literal["input_json_delta"] = "input_json_delta"
    partial_json: str


class UnknownDelta(OpenModel):
    """A delta of a type this client does not know (its fields are kept)."""

    type: str


BlockDelta = Annotated[
    Annotated[TextDelta, Tag("text_delta")] | Annotated[ThinkingDelta, Tag("thinking_delta")]
    | Annotated[SignatureDelta, Tag("signature_delta")] | Annotated[InputJSONDelta, Tag("input_json_delta")]
    | Annotated[UnknownDelta, Tag("unknown")],
    Discriminator(type_tag(frozenset({"text_delta", "thinking_delta", "signature_delta", "input_json_delta"}))),
]


class MessageDelta(OpenModel):
    """``message_delta.delta``: how the message ended."""

    stop_reason: str | None = None
    stop_sequence: str | None = None


class MessageDeltaUsage(OpenModel):
    """``message_delta.usage``: the output tokens so far (other counters kept when a server sends them)."""

    output_tokens: int = 0


# --- the message and its stream events ---------------------------------------------------------


class Message(OpenModel):
    """An Anthropic ``message`` (the non-streaming answer of ``/v1/messages``)."""

    id: str
    type: Literal["message"] = "message"
    role: Literal["assistant"] = "assistant"
    model: str
    content: list[ContentBlock]
    stop_reason: str | None = None
    stop_sequence: str | None = None
    usage: MessageUsage


class MessageStartEvent(OpenModel):
    type: Literal["message_start"] = "message_start"
    message: Message


class ContentBlockStartEvent(OpenModel):
    type: Literal["content_block_start"] = "content_block_start"
    index: int
    content_block: ContentBlock


class ContentBlockDeltaEvent(OpenModel):
    type: Literal["content_block_delta"] = "content_block_delta"
    index: int
    delta: BlockDelta


class ContentBlockStopEvent(OpenModel):
    type: Literal["content_block_stop"] = "content_block_stop"
    index: int


class MessageDeltaEvent(OpenModel):
    type: Literal["message_delta"] = "message_delta"
    delta: MessageDelta
    usage: MessageDeltaUsage | None = None


class MessageStopEvent(OpenModel):
    type: Literal["message_stop"] = "message_stop"


class UnknownEvent(OpenModel):
    """An event type this client does not know (the protocol lets servers add them)."""

    type: str


MessageStreamEvent = (MessageStartEvent | ContentBlockStartEvent | ContentBlockDeltaEvent
                      | ContentBlockStopEvent | MessageDeltaEvent | MessageStopEvent | UnknownEvent)

_EVENTS: dict[str, type[BaseModel]] = {
    "message_start": MessageStartEvent, "content_block_start": ContentBlockStartEvent,
    "content_block_delta": ContentBlockDeltaEvent, "content_block_stop": ContentBlockStopEvent,
    "message_delta": MessageDeltaEvent, "message_stop": MessageStopEvent,
}


def parse_message_event(event: dict[str, Any]) -> MessageStreamEvent:
    return parse_by_type(_EVENTS, UnknownEvent, event)  # type: ignore[return-value]


@dataclass(frozen=True, slots=True)
class SessionInfo:
    """What the server said about itself when the session opened (``session.created``; over the
    HTTP fallback, from ``/v1/models`` and ``/openapi.json``)."""

    transport: Literal["websocket", "http"]
    url: str  # the server's base URL (http:// or https://)
    model: str
    frames: frozenset[str]  # request frame types the server enables (docs/protocol.md §11)
    session_id: str | None = None
    protocol_version: int = 1
    server: dict[str, str] = field(default_factory=dict)
    limits: dict[str, float | int] = field(default_factory=dict)
    settings: dict[str, Any] = field(default_factory=dict)
    features: dict[str, Any] = field(default_factory=dict)  # session.created's: the parsers, auto tool choice
