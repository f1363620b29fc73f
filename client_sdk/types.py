"""Typed results.

The OpenAI shapes, vLLM's generate and derender shapes are the server's own pydantic models
(``session.protocol.openai_responses``, ``engine.protocol``), re-exported here. ``session`` has no
models of Anthropic's *responses* yet, so the Messages API's response and stream events are
modelled here, field for field as ``POST /v1/messages`` writes them (unknown fields are kept).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict

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
    "ChatCompletionResponse",
    "ChatCompletionStreamResponse",
    "CompletionResponse",
    "CompletionStreamResponse",
    "ContentBlockDeltaEvent",
    "ContentBlockStartEvent",
    "ContentBlockStopEvent",
    "DerenderChatStreamResponse",
    "DerenderCompletionStreamResponse",
    "GenerateRequest",
    "GenerateStreamResponse",
    "Message",
    "MessageDeltaEvent",
    "MessageStartEvent",
    "MessageStopEvent",
    "MessageStreamEvent",
    "MessageUsage",
    "SessionInfo",
    "UnknownEvent",
    "UsageInfo",
    "parse_message_event",
]


class _Open(BaseModel):
    model_config = ConfigDict(extra="allow")


class MessageUsage(_Open):
    input_tokens: int = 0
    output_tokens: int = 0


class Message(_Open):
    """An Anthropic ``message`` (the non-streaming answer of ``/v1/messages``)."""

    id: str
    type: Literal["message"] = "message"
    role: Literal["assistant"] = "assistant"
    model: str
    content: list[dict[str, Any]]  # text / thinking / tool_use blocks, as Anthropic writes them
    stop_reason: str | None = None
    stop_sequence: str | None = None
    usage: MessageUsage


class MessageStartEvent(_Open):
    type: Literal["message_start"] = "message_start"
    message: Message


class ContentBlockStartEvent(_Open):
    type: Literal["content_block_start"] = "content_block_start"
    index: int
    content_block: dict[str, Any]


class ContentBlockDeltaEvent(_Open):
    type: Literal["content_block_delta"] = "content_block_delta"
    index: int
    delta: dict[str, Any]  # text_delta / thinking_delta / input_json_delta / signature_delta


class ContentBlockStopEvent(_Open):
    type: Literal["content_block_stop"] = "content_block_stop"
    index: int


class MessageDeltaEvent(_Open):
    type: Literal["message_delta"] = "message_delta"
    delta: dict[str, Any]
    usage: dict[str, Any] | None = None


class MessageStopEvent(_Open):
    type: Literal["message_stop"] = "message_stop"


class UnknownEvent(_Open):
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
    cls = _EVENTS.get(str(event.get("type")), UnknownEvent)
    return cls.model_validate(event)  # type: ignore[return-value]


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
