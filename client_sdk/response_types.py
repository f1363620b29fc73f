"""The OpenAI Responses API's response and stream events, typed as the ``openai`` SDK types them
(``openai.types.responses``): ``response.output_text``, ``event.delta``, ``event.item.call_id``,
``event.response.usage.output_tokens``. Modelled here, field for field as ``POST /v1/responses``
writes them, so the client needs no ``openai`` package; unknown fields are kept (``extra``), and an
item, content part or event of a type this client does not know is an ``Unknown…`` with its fields
kept. Events are told apart by ``type`` (:func:`parse_response_event`).
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, Discriminator, Tag

from client_sdk.open_model import OpenModel, parse_by_type, type_tag

__all__ = [
    "FunctionCallItem",
    "OutputText",
    "ReasoningItem",
    "ReasoningText",
    "Refusal",
    "Response",
    "ResponseContentPartEvent",
    "ResponseErrorEvent",
    "ResponseFunctionCallArgumentsDeltaEvent",
    "ResponseFunctionCallArgumentsDoneEvent",
    "ResponseLifecycleEvent",
    "ResponseMessage",
    "ResponseOutputItemEvent",
    "ResponseReasoningTextDeltaEvent",
    "ResponseReasoningTextDoneEvent",
    "ResponseStreamEvent",
    "ResponseTextDeltaEvent",
    "ResponseTextDoneEvent",
    "ResponseUsage",
    "UnknownContent",
    "UnknownItem",
    "UnknownResponseEvent",
    "parse_response_event",
]


# --- content parts -------------------------------------------------------------------------------


class OutputText(OpenModel):
    type: Literal["output_text"] = "output_text"
    text: str
    annotations: list[Any] = []
    logprobs: list[Any] | None = None


class Refusal(OpenModel):
    type: Literal["refusal"] = "refusal"
    refusal: str


class ReasoningText(OpenModel):
    type: Literal["reasoning_text"] = "reasoning_text"
    text: str


class UnknownContent(OpenModel):
    type: str


Content = Annotated[
    Annotated[OutputText, Tag("output_text")] | Annotated[Refusal, Tag("refusal")]
    | Annotated[ReasoningText, Tag("reasoning_text")] | Annotated[UnknownContent, Tag("unknown")],
    Discriminator(type_tag(frozenset({"output_text", "refusal", "reasoning_text"}))),
]


# --- output items ----------------------------------------------------------------------------------


class ResponseMessage(OpenModel):
    type: Literal["message"] = "message"
    id: str
    role: Literal["assistant"] = "assistant"
    status: str | None = None
    content: list[Content]


class ReasoningItem(OpenModel):
    type: Literal["reasoning"] = "reasoning"
    id: str
    summary: list[Any] = []
    content: list[Content] | None = None
    encrypted_content: str | None = None
    status: str | None = None


class FunctionCallItem(OpenModel):
    type: Literal["function_call"] = "function_call"
    id: str | None = None
    call_id: str
    name: str
    arguments: str
    namespace: str | None = None
    status: str | None = None


class UnknownItem(OpenModel):
    type: str


OutputItem = Annotated[
    Annotated[ResponseMessage, Tag("message")] | Annotated[ReasoningItem, Tag("reasoning")]
    | Annotated[FunctionCallItem, Tag("function_call")] | Annotated[UnknownItem, Tag("unknown")],
    Discriminator(type_tag(frozenset({"message", "reasoning", "function_call"}))),
]


# --- the response ------------------------------------------------------------------------------------


class InputTokensDetails(OpenModel):
    cached_tokens: int = 0


class OutputTokensDetails(OpenModel):
    reasoning_tokens: int = 0


class ResponseUsage(OpenModel):
    input_tokens: int
    input_tokens_details: InputTokensDetails = InputTokensDetails()
    output_tokens: int
    output_tokens_details: OutputTokensDetails = OutputTokensDetails()
    total_tokens: int


class Response(OpenModel):
    """A ``response`` object (the non-streaming answer of ``/v1/responses``; the ``response`` of the
    lifecycle events). The fields not listed are kept as sent."""

    id: str
    object: Literal["response"] = "response"
    created_at: float
    model: str
    status: str | None = None
    output: list[OutputItem]
    error: dict[str, Any] | None = None
    incomplete_details: dict[str, Any] | None = None
    instructions: Any = None
    metadata: dict[str, Any] | None = None
    previous_response_id: str | None = None
    usage: ResponseUsage | None = None

    @property
    def output_text(self) -> str:
        """The text of every ``output_text`` part of the message items, joined (as the ``openai``
        SDK's ``Response.output_text``)."""
        return "".join(part.text for item in self.output if isinstance(item, ResponseMessage)
                       for part in item.content if isinstance(part, OutputText))


# --- stream events -------------------------------------------------------------------------------------


class _Event(OpenModel):
    sequence_number: int


class _ItemEvent(_Event):
    """An event of one output item."""

    item_id: str
    output_index: int


class _PartEvent(_ItemEvent):
    """An event of one content part of an output item."""

    content_index: int


class ResponseLifecycleEvent(_Event):
    """``response.created`` / ``.in_progress`` / ``.completed`` / ``.incomplete`` / ``.failed``:
    the whole response as it stands (the last one is the final response)."""

    type: Literal["response.created", "response.in_progress", "response.completed", "response.incomplete",
                  "response.failed", "response.queued"]
    response: Response


class ResponseOutputItemEvent(_Event):
    type: Literal["response.output_item.added", "response.output_item.done"]
    output_index: int
    item: OutputItem


class ResponseContentPartEvent(_PartEvent):
    type: Literal["response.content_part.added", "response.content_part.done"]
    part: Content


class ResponseTextDeltaEvent(_PartEvent):
    type: Literal["response.output_text.delta"] = "response.output_text.delta"
    delta: str
    logprobs: list[Any] = []


class ResponseTextDoneEvent(_PartEvent):
    type: Literal["response.output_text.done"] = "response.output_text.done"
    text: str
    logprobs: list[Any] = []


class ResponseReasoningTextDeltaEvent(_PartEvent):
    type: Literal["response.reasoning_text.delta"] = "response.reasoning_text.delta"
    delta: str


class ResponseReasoningTextDoneEvent(_PartEvent):
    type: Literal["response.reasoning_text.done"] = "response.reasoning_text.done"
    text: str


class ResponseFunctionCallArgumentsDeltaEvent(_ItemEvent):
    type: Literal["response.function_call_arguments.delta"] = "response.function_call_arguments.delta"
    delta: str


class ResponseFunctionCallArgumentsDoneEvent(_ItemEvent):
    type: Literal["response.function_call_arguments.done"] = "response.function_call_arguments.done"
    arguments: str
    name: str | None = None


class ResponseErrorEvent(_Event):
    type: Literal["error"] = "error"
    code: str | None = None
    message: str
    param: str | None = None


class UnknownResponseEvent(OpenModel):
    """An event type this client does not know (servers may add them)."""

    type: str


ResponseStreamEvent = (ResponseLifecycleEvent | ResponseOutputItemEvent | ResponseContentPartEvent
                       | ResponseTextDeltaEvent | ResponseTextDoneEvent | ResponseReasoningTextDeltaEvent
                       | ResponseReasoningTextDoneEvent | ResponseFunctionCallArgumentsDeltaEvent
                       | ResponseFunctionCallArgumentsDoneEvent | ResponseErrorEvent | UnknownResponseEvent)

_LIFECYCLE = ("response.created", "response.in_progress", "response.completed", "response.incomplete",
              "response.failed", "response.queued")
_EVENTS: dict[str, type[BaseModel]] = {
    **dict.fromkeys(_LIFECYCLE, ResponseLifecycleEvent),
    "response.output_item.added": ResponseOutputItemEvent, "response.output_item.done": ResponseOutputItemEvent,
    "response.content_part.added": ResponseContentPartEvent, "response.content_part.done": ResponseContentPartEvent,
    "response.output_text.delta": ResponseTextDeltaEvent, "response.output_text.done": ResponseTextDoneEvent,
    "response.reasoning_text.delta": ResponseReasoningTextDeltaEvent,
    "response.reasoning_text.done": ResponseReasoningTextDoneEvent,
    "response.function_call_arguments.delta": ResponseFunctionCallArgumentsDeltaEvent,
    "response.function_call_arguments.done": ResponseFunctionCallArgumentsDoneEvent,
    "error": ResponseErrorEvent,
}
FINAL_EVENTS = frozenset({"response.completed", "response.incomplete", "response.failed"})


def parse_response_event(event: dict[str, Any]) -> ResponseStreamEvent:
    return parse_by_type(_EVENTS, UnknownResponseEvent, event)  # type: ignore[return-value]
