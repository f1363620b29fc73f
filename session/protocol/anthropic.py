"""Anthropic ``POST /v1/messages`` request model (the fields vLLM's Anthropic endpoint accepts).

Unknown fields are tolerated; a field of the wrong type is a validation error naming it.
Render converts a :class:`MessagesRequest` into OpenAI-shaped messages and tools first
(:func:`session.render.anthropic.to_openai_chat`), then renders it like a chat request.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

__all__ = [
    "ContentBlock",
    "MessageParam",
    "MessagesRequest",
    "ThinkingConfig",
    "ToolChoiceParam",
    "ToolDefinition",
]


class _Open(BaseModel):
    model_config = ConfigDict(extra="allow")


class ContentBlock(_Open):
    """One content block: ``text``, ``tool_use``, ``tool_result``, ``thinking`` (others, such as
    ``image``, validate here and are refused by render)."""

    type: str
    # text / thinking
    text: str | None = None
    thinking: str | None = None
    signature: str | None = None
    # tool_use
    id: str | None = None
    name: str | None = None
    input: dict[str, Any] | None = None
    # tool_result
    tool_use_id: str | None = None
    content: str | list[ContentBlock] | None = None
    is_error: bool | None = None


class MessageParam(_Open):
    role: Literal["user", "assistant"]
    content: str | list[ContentBlock]


class ToolDefinition(_Open):
    name: str
    description: str | None = None
    input_schema: dict[str, Any] = Field(default_factory=lambda: {"type": "object", "properties": {}})


class ToolChoiceParam(_Open):
    type: Literal["auto", "any", "tool", "none"]
    name: str | None = None
    disable_parallel_tool_use: bool | None = None


class ThinkingConfig(_Open):
    type: Literal["enabled", "disabled", "adaptive"]
    budget_tokens: int | None = None


class MessagesRequest(_Open):
    """Anthropic Messages API request."""

    model: str | None = None
    messages: list[MessageParam]
    max_tokens: int = Field(ge=1)
    system: str | list[ContentBlock] | None = None
    metadata: dict[str, Any] | None = None
    stop_sequences: list[str] | None = None
    stream: bool | None = False
    temperature: float | None = None
    top_p: float | None = None
    top_k: int | None = None
    tools: list[ToolDefinition] | None = None
    tool_choice: ToolChoiceParam | None = None
    thinking: ThinkingConfig | None = None
    # vLLM extensions passed through to the chat template / sampling
    chat_template_kwargs: dict[str, Any] | None = None
    request_id: str | None = None
