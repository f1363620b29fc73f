"""Anthropic ``POST /v1/messages`` request model (the fields vLLM's Anthropic endpoint accepts).

Unknown fields are tolerated; a field of the wrong type is a validation error naming it.
Render converts a :class:`MessagesRequest` into OpenAI-shaped messages and tools first
(:func:`session.render.anthropic.to_openai_chat`), then renders it like a chat request.
What Claude Code sends beyond vLLM's fields (``context_management``, ``metadata.user_id``,
``thinking.display``, …) is accepted; docs/render.md says what each one does.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

__all__ = [
    "ContentBlock",
    "CountTokensRequest",
    "MessageParam",
    "MessagesRequest",
    "OutputConfig",
    "ThinkingConfig",
    "ToolChange",
    "ToolChoiceParam",
    "ToolDefinition",
]

TOOL_CHANGES = ("tool_addition", "tool_removal")


class _Open(BaseModel):
    model_config = ConfigDict(extra="allow")


class ToolDefinition(_Open):
    name: str
    description: str | None = None
    input_schema: dict[str, Any] = Field(default_factory=lambda: {"type": "object", "properties": {}})
    strict: bool | None = None
    defer_loading: bool | None = None


class ToolChange(_Open):
    """What a ``tool_addition`` / ``tool_removal`` block names (Anthropic's beta
    ``mid-conversation-tool-changes``): a declared tool by name (``tool_reference``) or, for an
    addition, a whole new one (``tool_definition``)."""

    type: Literal["tool_reference", "tool_definition"]
    name: str | None = None
    definition: ToolDefinition | None = None

    @model_validator(mode="after")
    def _shape(self) -> ToolChange:
        if self.type == "tool_reference" and not self.name:
            raise ValueError("a tool_reference needs a 'name'")
        if self.type == "tool_definition" and self.definition is None:
            raise ValueError("a tool_definition needs a 'definition'")
        return self


class ContentBlock(_Open):
    """One content block: ``text``, ``tool_use``, ``tool_result``, ``thinking`` (others, such as
    ``image``, validate here and are refused by render); ``tool_addition`` / ``tool_removal`` only
    in a ``system`` message."""

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
    # tool_addition / tool_removal
    tool: ToolChange | None = None

    @model_validator(mode="after")
    def _tool_change(self) -> ContentBlock:
        if self.type in TOOL_CHANGES:
            if self.tool is None:
                raise ValueError(f"a {self.type} block needs a 'tool'")
            if self.type == "tool_removal" and self.tool.type != "tool_reference":
                raise ValueError("a tool_removal block names its tool with a tool_reference")
        return self


class MessageParam(_Open):
    """A message. ``system`` (Claude Code sends one inside ``messages``) is rendered where it stands
    or merged into the system prompt, by the template's rule (docs/render.md)."""

    role: Literal["user", "assistant", "system"]
    content: str | list[ContentBlock]

    @model_validator(mode="after")
    def _tool_changes_in_system_only(self) -> MessageParam:
        if self.role != "system" and not isinstance(self.content, str):
            for block in self.content:
                if block.type in TOOL_CHANGES:
                    raise ValueError(f'{block.type} blocks are only allowed in messages with role "system"')
        return self


class ToolChoiceParam(_Open):
    type: Literal["auto", "any", "tool", "none"]
    name: str | None = None
    disable_parallel_tool_use: bool | None = None


class ThinkingConfig(_Open):
    """``enabled`` / ``adaptive`` switch the template's thinking on, ``disabled`` off;
    ``budget_tokens`` and ``display`` are accepted and not enforced (docs/render.md)."""

    type: Literal["enabled", "disabled", "adaptive"]
    budget_tokens: int | None = None
    display: str | None = None


class OutputFormat(_Open):
    type: Literal["json_schema"] = "json_schema"
    json_schema: dict[str, Any] | None = Field(default=None, alias="schema")


class OutputConfig(_Open):
    """``effort`` becomes the chat request's ``reasoning_effort`` and ``format`` its
    ``response_format``, as vLLM converts them."""

    effort: Literal["low", "medium", "high", "xhigh", "max"] | None = None
    format: OutputFormat | None = None


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
    output_config: OutputConfig | None = None
    context_management: dict[str, Any] | None = None  # accepted, not applied (docs/render.md)
    # vLLM extensions passed through to the chat template / sampling
    chat_template_kwargs: dict[str, Any] | None = None
    request_id: str | None = None

    @model_validator(mode="after")
    def _system_without_tool_changes(self) -> MessagesRequest:
        if isinstance(self.system, list):
            for block in self.system:
                if block.type in TOOL_CHANGES:
                    raise ValueError(f'{block.type} blocks are only allowed in messages with role "system"')
        return self


class CountTokensRequest(MessagesRequest):
    """``POST /v1/messages/count_tokens``: a messages request without ``max_tokens`` (Anthropic's
    shape; a ``max_tokens`` sent anyway is read as in a messages request)."""

    max_tokens: int | None = Field(default=None, ge=1)  # type: ignore[assignment]
