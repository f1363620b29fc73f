"""OpenAI Responses API request models (``POST /v1/responses`` and its ``input_tokens`` / ``render``).

Field names and shapes follow OpenAI's reference (and the ``openai`` SDK's ``responses`` types);
vLLM 0.32's sampling extensions (``top_k``, ``min_p``, ``repetition_penalty``, ``stop``…) are
accepted as its ``ResponsesRequest`` takes them. Unknown top-level fields are tolerated and
counted, as for chat; an input item, content part or tool of the wrong shape is a
:class:`pydantic.ValidationError` whose location names it (``input.2.type``). What each field does
here, what is ignored and what is refused: docs/responses.md. Pure pydantic: no transformers, no torch.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Discriminator,
    Field,
    Tag,
    ValidationInfo,
    field_validator,
    model_validator,
)

from session.protocol.openai_messages import fail

__all__ = [
    "BUILTIN_TOOL_TYPES",
    "INCLUDE_VALUES",
    "FunctionCallItem",
    "FunctionCallOutputItem",
    "FunctionTool",
    "InputItem",
    "MessageItem",
    "NamespaceTool",
    "ReasoningItem",
    "ResponsesRequest",
]


class _Open(BaseModel):
    """Unknown keys are kept (and ignored), as OpenAI-compatible servers do."""

    model_config = ConfigDict(extra="allow")


# --- content parts ------------------------------------------------------------------------------


class InputText(_Open):
    type: Literal["input_text"]
    text: str


class OutputText(_Open):
    type: Literal["output_text"]
    text: str
    annotations: list[Any] | None = None
    logprobs: list[Any] | None = None


class InputImage(_Open):
    type: Literal["input_image"]
    image_url: str | None = None
    file_id: str | None = None
    detail: Literal["low", "high", "auto", "original"] | None = "auto"


class Refusal(_Open):
    type: Literal["refusal"]
    refusal: str


# Discriminator tags are capitalized, so that error locations leave them out (``input.0.content.1``).
_PART_TAGS = {"input_text": "InputText", "output_text": "OutputText", "input_image": "InputImage",
              "refusal": "Refusal"}


def _part_type(value: Any) -> str | None:
    kind = value.get("type") if isinstance(value, dict) else getattr(value, "type", None)
    return _PART_TAGS.get(kind) if isinstance(kind, str) else None


PART_TYPES = ("input_text", "output_text", "input_image", "refusal")
ContentPart = Annotated[
    Annotated[InputText, Tag("InputText")] | Annotated[OutputText, Tag("OutputText")]
    | Annotated[InputImage, Tag("InputImage")] | Annotated[Refusal, Tag("Refusal")],
    Discriminator(_part_type, custom_error_type="invalid_content_part",
                  custom_error_message="unknown content part type; the types are input_text, output_text, "
                                       "input_image and refusal (input_file and input_audio are not supported)"),
]


def _text_or_list(value: Any) -> str:
    return "Text" if isinstance(value, str) else "Parts"


# A string or a list of parts, errors located at the part (``content.1``), not at the union member.
TextOrParts = Annotated[Annotated[str, Tag("Text")] | Annotated[list[ContentPart], Tag("Parts")],
                        Discriminator(_text_or_list)]


# --- input items --------------------------------------------------------------------------------

ROLES = ("user", "assistant", "system", "developer")


class MessageItem(_Open):
    """A message: ``{"role", "content"}`` (``type: "message"`` optional), content a string or parts."""

    type: Literal["message"] = "message"
    role: Literal["user", "assistant", "system", "developer"]
    content: TextOrParts
    id: str | None = None
    status: Literal["in_progress", "completed", "incomplete"] | None = None


class FunctionCallItem(_Open):
    type: Literal["function_call"]
    call_id: str = Field(min_length=1)
    name: str = Field(min_length=1)
    arguments: str
    namespace: str | None = None
    id: str | None = None
    status: Literal["in_progress", "completed", "incomplete"] | None = None


class FunctionCallOutputItem(_Open):
    type: Literal["function_call_output"]
    call_id: str = Field(min_length=1)
    output: TextOrParts
    id: str | None = None
    status: Literal["in_progress", "completed", "incomplete"] | None = None


class SummaryText(_Open):
    type: Literal["summary_text"] = "summary_text"
    text: str


class ReasoningText(_Open):
    type: Literal["reasoning_text"] = "reasoning_text"
    text: str


class ReasoningItem(_Open):
    """A reasoning item given back: its ``content`` text, else its first summary, else its
    ``encrypted_content`` (which this server sealed: docs/responses.md, "Reasoning across turns")."""

    type: Literal["reasoning"]
    id: str | None = None
    summary: list[SummaryText] = Field(default_factory=list)
    content: list[ReasoningText] | None = None
    encrypted_content: str | None = None
    status: Literal["in_progress", "completed", "incomplete"] | None = None


ITEM_TYPES = ("message", "function_call", "function_call_output", "reasoning")


_ITEM_TAGS = {"message": "Message", "function_call": "FunctionCall", "function_call_output": "FunctionCallOutput",
              "reasoning": "Reasoning"}


def _item_type(value: Any) -> str | None:
    if isinstance(value, dict):
        kind = value.get("type", "message")  # an EasyInputMessage has no type
    else:
        kind = getattr(value, "type", None)
    return _ITEM_TAGS.get(kind) if isinstance(kind, str) else None


InputItem = Annotated[
    Annotated[MessageItem, Tag("Message")] | Annotated[FunctionCallItem, Tag("FunctionCall")]
    | Annotated[FunctionCallOutputItem, Tag("FunctionCallOutput")] | Annotated[ReasoningItem, Tag("Reasoning")],
    Discriminator(_item_type, custom_error_type="invalid_item_type",
                  custom_error_message="unknown input item type; the types are message, function_call, "
                                       "function_call_output and reasoning (item_reference and built-in tool "
                                       "calls are not supported)"),
]


# --- tools --------------------------------------------------------------------------------------

# Tool types OpenAI runs on its side; nothing runs them here, so they are left out of the prompt.
BUILTIN_TOOL_TYPES = ("web_search", "web_search_preview", "web_search_2025_08_26", "web_search_preview_2025_03_11",
                      "file_search", "code_interpreter", "image_generation", "computer_use_preview", "computer",
                      "mcp", "local_shell", "shell", "apply_patch", "custom", "tool_search")


class FunctionTool(_Open):
    type: Literal["function"]
    name: str = Field(min_length=1)
    description: str | None = None
    parameters: dict[str, Any] | None = None
    strict: bool | None = None


class NamespaceTool(_Open):
    """Codex's nested function tools: each becomes ``<name>__<tool name>`` in the prompt, as vLLM
    flattens them, and a call comes back with its ``namespace``."""

    type: Literal["namespace"]
    name: str = Field(min_length=1)
    description: str | None = None
    tools: list[FunctionTool | dict[str, Any]]


class OtherTool(_Open):
    """Any other tool type (OpenAI's built-in tools): accepted, left out of the prompt."""

    type: str


def _tool_type(value: Any) -> str:
    kind = value.get("type") if isinstance(value, dict) else getattr(value, "type", None)
    return kind if kind in ("function", "namespace") else "other"


ToolParam = Annotated[
    Annotated[FunctionTool, Tag("function")] | Annotated[NamespaceTool, Tag("namespace")]
    | Annotated[OtherTool, Tag("other")],
    Discriminator(_tool_type),
]


class NamedFunctionChoice(_Open):
    type: Literal["function"]
    name: str = Field(min_length=1)


class OtherToolChoice(_Open):
    """``{"type": "web_search"}``, ``{"type": "mcp", ...}``, ``{"type": "custom", "name": ...}``,
    ``{"type": "allowed_tools", ...}``: validated here, refused by the conversion with the reason."""

    type: str


ToolChoice = Literal["none", "auto", "required"] | NamedFunctionChoice | OtherToolChoice


# --- the rest -----------------------------------------------------------------------------------


class TextFormat(_Open):
    type: Literal["text", "json_object", "json_schema"]
    name: str | None = None
    schema_: dict[str, Any] | None = Field(default=None, alias="schema")
    description: str | None = None
    strict: bool | None = None

    model_config = ConfigDict(extra="allow", populate_by_name=True)

    @model_validator(mode="after")
    def _schema_needed(self) -> TextFormat:
        if self.type == "json_schema" and (self.schema_ is None or not self.name):
            raise fail("a json_schema format needs a non-empty `name` and a `schema` object")
        return self


class TextConfig(_Open):
    format: TextFormat | None = None
    verbosity: Literal["low", "medium", "high"] | None = None


class ReasoningConfig(_Open):
    effort: Literal["none", "minimal", "low", "medium", "high", "xhigh"] | None = None
    summary: Literal["auto", "concise", "detailed"] | None = None
    generate_summary: Literal["auto", "concise", "detailed"] | None = None


# OpenAI's ``include`` values; any other is a 400, as OpenAI answers.
INCLUDE_VALUES = ("reasoning.encrypted_content", "message.output_text.logprobs", "message.input_image.image_url",
                  "computer_call_output.output.image_url", "file_search_call.results", "code_interpreter_call.outputs",
                  "web_search_call.results", "web_search_call.action.sources")

NonNegInt = Annotated[int, Field(ge=0)]


class ResponsesRequest(_Open):
    """``POST /v1/responses``: OpenAI's fields, with vLLM 0.32's sampling extensions."""

    model: str | None = None
    input: Annotated[Annotated[str, Tag("Text")] | Annotated[list[InputItem], Tag("Items")],
                     Discriminator(lambda v: "Text" if isinstance(v, str) else "Items")]
    instructions: str | None = None
    tools: list[ToolParam] | None = None
    tool_choice: ToolChoice | None = None
    parallel_tool_calls: bool | None = True
    max_output_tokens: int | None = Field(default=None, ge=1)
    max_tool_calls: int | None = Field(default=None, ge=1)
    temperature: float | None = Field(default=None, ge=0, le=2)
    top_p: float | None = Field(default=None, ge=0, le=1)
    top_logprobs: int | None = Field(default=None, ge=0, le=20)
    seed: int | None = None
    text: TextConfig | None = None
    reasoning: ReasoningConfig | None = None
    metadata: dict[str, str] | None = None
    user: str | None = None
    safety_identifier: str | None = None
    store: bool | None = True
    stream: bool | None = False
    stream_options: dict[str, Any] | None = None
    previous_response_id: str | None = Field(default=None, min_length=1)
    include: list[str] | None = None
    prompt_cache_key: str | None = None
    prompt_cache_retention: str | None = None
    client_metadata: dict[str, Any] | None = None
    truncation: Literal["auto", "disabled"] | None = "disabled"
    service_tier: Literal["auto", "default", "flex", "scale", "priority"] | None = None
    background: bool | None = False
    conversation: Any = None
    prompt: Any = None
    # vLLM 0.32 extensions
    top_k: int | None = None
    min_p: float | None = None
    presence_penalty: float | None = Field(default=None, ge=-2, le=2)
    frequency_penalty: float | None = Field(default=None, ge=-2, le=2)
    repetition_penalty: float | None = None
    stop: str | list[str] | None = None
    stop_token_ids: list[NonNegInt] | None = None
    ignore_eos: bool = False
    cache_salt: str | None = Field(default=None, min_length=1)
    chat_template_kwargs: dict[str, Any] | None = None
    include_reasoning: bool = True
    request_id: str | None = None

    @field_validator("include")
    @classmethod
    def _include_known(cls, value: list[str] | None) -> list[str] | None:
        for item in value or []:
            if item not in INCLUDE_VALUES:
                raise fail(f"unknown include value {item[:100]!r}; the values are {', '.join(INCLUDE_VALUES)}")
        return value

    @field_validator("background")
    @classmethod
    def _background_is_stored(cls, value: bool | None, info: ValidationInfo) -> bool | None:
        if value and info.data.get("store") is False:  # declared before: validated first
            raise fail("background can only be used when `store` is true")  # vLLM 0.32's message
        return value

    @field_validator("conversation")
    @classmethod
    def _no_conversation(cls, value: Any) -> Any:
        if value is not None:
            raise fail("conversations are not supported by this server; chain responses with "
                       "`previous_response_id` instead.")
        return value

    @field_validator("prompt")
    @classmethod
    def _no_prompt_template(cls, value: Any) -> Any:
        if value is not None:
            raise fail("prompt template is not supported")  # vLLM 0.32's message
        return value

    @field_validator("input")
    @classmethod
    def _input_not_empty(cls, value: Any) -> Any:
        if isinstance(value, list) and not value:
            raise fail("input must hold at least one item")
        return value

    def wants(self, include: str) -> bool:
        return include in (self.include or ())
