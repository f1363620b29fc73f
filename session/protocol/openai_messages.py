"""OpenAI chat messages, content parts, tools and tool choice (vLLM's shapes and checks).

Unknown keys are kept (``extra="allow"``). Errors are raised as ``PydanticCustomError`` so that
their text reaches the client as written, prefixed by the field's location.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, field_validator
from pydantic_core import PydanticCustomError

__all__ = [
    "ChatMessage",
    "ContentPart",
    "FunctionCall",
    "FunctionDefinition",
    "NamedToolChoice",
    "Tool",
    "ToolCall",
    "ToolChoice",
]


class OpenModel(BaseModel):
    """Unknown keys are kept (and ignored), as OpenAI-compatible servers do."""

    model_config = ConfigDict(extra="allow")


# --- messages ------------------------------------------------------------------------------


class ContentPart(OpenModel):
    """One part of a message's ``content`` list. Render supports text parts only; other types
    (``image_url``, ``input_audio``…) validate here and are refused by render."""

    type: str
    text: str | None = None


def _check_content(value: Any) -> Any:
    """One readable error for a bad ``content`` instead of pydantic's per-union-member list."""
    if value is None or isinstance(value, str):
        return value
    if not isinstance(value, list):
        raise PydanticCustomError("content_type", "must be a string, a list of content parts, or null")
    for i, part in enumerate(value):
        if isinstance(part, str):
            continue
        if not isinstance(part, dict) or not isinstance(part.get("type"), str):
            raise PydanticCustomError("content_part", "part {i} must be an object with a string 'type'", {"i": i})
        if part["type"] == "text" and not isinstance(part.get("text"), str):
            raise PydanticCustomError("content_part", "part {i} has type 'text' but no 'text' string", {"i": i})
    return value


class FunctionCall(OpenModel):
    name: str
    # OpenAI sends a JSON string; vLLM also accepts an object (templates want a dict).
    arguments: str | dict[str, Any] | None = None


class ToolCall(OpenModel):
    id: str | None = None
    type: Literal["function"] = "function"
    function: FunctionCall


class ChatMessage(OpenModel):
    """A chat message of any role (system, developer, user, assistant, tool, or a custom one)."""

    role: str
    content: str | list[str | ContentPart] | None = None
    name: str | None = None
    # assistant
    tool_calls: list[ToolCall] | None = None
    reasoning: str | None = None
    reasoning_content: str | None = None  # older name of ``reasoning``
    # tool
    tool_call_id: str | None = None

    _content = field_validator("content", mode="before")(_check_content)


# --- tools ---------------------------------------------------------------------------------


class FunctionDefinition(OpenModel):
    """A tool's function. Extra keys (``strict``…) are kept and reach the template after these."""

    name: str
    description: str | None = None
    parameters: dict[str, Any] | None = None


class Tool(OpenModel):
    type: Literal["function"] = "function"
    function: FunctionDefinition


class _NamedFunction(OpenModel):
    name: str


class NamedToolChoice(OpenModel):
    type: Literal["function"] = "function"
    function: _NamedFunction


ToolChoice = Literal["none", "auto", "required"] | NamedToolChoice

TOOL_CHOICE_USAGE = 'Correct usage: `{"type": "function", "function": {"name": "my_function"}}`'


def default_tool_choice(data: Any) -> Any:
    """Tools without a ``tool_choice`` mean ``"auto"`` (OpenAI's default), as in vLLM."""
    if isinstance(data, dict) and "tool_choice" not in data and data.get("tools"):
        data = {**data, "tool_choice": "auto"}
    return data


def check_tool_choice(choice: Any, tools: list[Tool] | None) -> None:
    """vLLM's tool-choice checks and messages (``tools`` already validated)."""
    if choice is None or choice == "none":
        return
    if tools is None:
        raise PydanticCustomError("tool_choice", "When using `tool_choice`, `tools` must be set.")
    if isinstance(choice, NamedToolChoice):
        name = choice.function.name
        if not name:
            raise PydanticCustomError("tool_choice", f"Invalid `name` in `function` in `tool_choice`! {TOOL_CHOICE_USAGE}")
        if all(t.function.name != name for t in tools):
            raise PydanticCustomError(
                "tool_choice", "The tool specified in `tool_choice` does not match any of the specified `tools`")


def is_token(x: Any) -> bool:
    return isinstance(x, int) and not isinstance(x, bool) and x >= 0


def fail(message: str) -> PydanticCustomError:
    return PydanticCustomError("invalid_request", message)


