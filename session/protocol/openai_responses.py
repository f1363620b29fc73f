"""OpenAI response shapes as vLLM 0.32 writes them, and vLLM's derender request shapes.

Field names, order and nullability follow vLLM 0.32's JSON (``reasoning`` rather than
``reasoning_content``, ``stop_reason``, ``token_ids: null``, ``usage`` with ``total_tokens``
between the two counts). The derenderer builds these shapes as plain dicts on its hot path
(``session.derender``); these models document them (OpenAPI), validate them in tests and give
clients typed access. Pure pydantic: no transformers, no torch.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, NonNegativeInt

from engine.protocol import GenerateResponse, GenerateStreamResponse
from session.protocol.openai import ChatCompletionRequest, CompletionRequest

__all__ = [
    "ChatCompletionLogProb",
    "ChatCompletionLogProbs",
    "ChatCompletionLogProbsContent",
    "ChatCompletionResponse",
    "ChatCompletionResponseChoice",
    "ChatCompletionResponseStreamChoice",
    "ChatCompletionStreamResponse",
    "ChatResponseMessage",
    "CompletionLogProbs",
    "CompletionResponse",
    "CompletionResponseChoice",
    "CompletionResponseStreamChoice",
    "CompletionStreamResponse",
    "DeltaFunctionCall",
    "DeltaMessage",
    "DeltaToolCall",
    "DerenderChatRequest",
    "DerenderChatStreamRequest",
    "DerenderChatStreamResponse",
    "DerenderCompletionRequest",
    "DerenderCompletionStreamRequest",
    "DerenderCompletionStreamResponse",
    "FunctionCall",
    "ToolCall",
    "Usage",
]


class _Model(BaseModel):
    model_config = ConfigDict(extra="allow")


class Usage(_Model):
    prompt_tokens: int = 0
    total_tokens: int = 0
    completion_tokens: int | None = 0
    prompt_tokens_details: dict[str, Any] | None = None
    completion_tokens_details: dict[str, Any] | None = None


# --- tool calls ------------------------------------------------------------------------------


class FunctionCall(_Model):
    name: str
    arguments: str  # a JSON string


class ToolCall(_Model):
    id: str
    type: Literal["function"] = "function"
    function: FunctionCall


class DeltaFunctionCall(_Model):
    name: str | None = None
    arguments: str | None = None


class DeltaToolCall(_Model):
    """The first delta of call ``index`` carries ``id``, ``type``, ``name`` and ``arguments``
    (``""`` when no argument text came with it); later deltas only argument fragments."""

    id: str | None = None
    type: Literal["function"] | None = None
    index: int
    function: DeltaFunctionCall | None = None


# --- logprobs --------------------------------------------------------------------------------


class ChatCompletionLogProb(_Model):
    token: str
    logprob: float = -9999.0
    bytes: list[int] | None = None


class ChatCompletionLogProbsContent(ChatCompletionLogProb):
    top_logprobs: list[ChatCompletionLogProb] = Field(default_factory=list)


class ChatCompletionLogProbs(_Model):
    content: list[ChatCompletionLogProbsContent] | None = None


class CompletionLogProbs(_Model):
    text_offset: list[int] = Field(default_factory=list)
    token_logprobs: list[float | None] = Field(default_factory=list)
    tokens: list[str] = Field(default_factory=list)
    top_logprobs: list[dict[str, float] | None] = Field(default_factory=list)


# --- chat ------------------------------------------------------------------------------------


class ChatResponseMessage(_Model):
    role: str = "assistant"
    content: str | None = None
    refusal: str | None = None
    annotations: Any = None
    audio: Any = None
    function_call: Any = None
    tool_calls: list[ToolCall] | None = None  # absent from the JSON when there are none
    reasoning: str | None = None


class ChatCompletionResponseChoice(_Model):
    index: int
    message: ChatResponseMessage
    logprobs: ChatCompletionLogProbs | None = None
    finish_reason: str | None = "stop"
    stop_reason: int | str | None = None
    token_ids: list[int] | None = None
    routed_experts: Any = None


class ChatCompletionResponse(_Model):
    id: str
    object: Literal["chat.completion"] = "chat.completion"
    created: int
    model: str
    choices: list[ChatCompletionResponseChoice]
    service_tier: str | None = None
    system_fingerprint: str | None = None
    usage: Usage
    prompt_logprobs: Any = None
    prompt_token_ids: list[int] | None = None
    prompt_text: str | None = None
    kv_transfer_params: dict[str, Any] | None = None
    ec_transfer_params: dict[str, Any] | None = None
    metrics: Any = None


class DeltaMessage(_Model):
    role: str | None = None
    content: str | None = None
    reasoning: str | None = None
    tool_calls: list[DeltaToolCall] | None = None  # absent from the JSON when there are none


class ChatCompletionResponseStreamChoice(_Model):
    index: int
    delta: DeltaMessage
    logprobs: ChatCompletionLogProbs | None = None
    finish_reason: str | None = None
    stop_reason: int | str | None = None
    token_ids: list[int] | None = None


class ChatCompletionStreamResponse(_Model):
    id: str
    object: Literal["chat.completion.chunk"] = "chat.completion.chunk"
    created: int
    model: str
    choices: list[ChatCompletionResponseStreamChoice]
    usage: Usage | None = None
    system_fingerprint: str | None = None
    prompt_token_ids: list[int] | None = None
    prompt_text: str | None = None
    metrics: Any = None


# --- completions -----------------------------------------------------------------------------


class CompletionResponseChoice(_Model):
    index: int
    text: str
    logprobs: CompletionLogProbs | None = None
    finish_reason: str | None = None
    stop_reason: int | str | None = None
    token_ids: list[int] | None = None
    prompt_logprobs: Any = None
    prompt_token_ids: list[int] | None = None
    routed_experts: Any = None


class CompletionResponse(_Model):
    id: str
    object: Literal["text_completion"] = "text_completion"
    created: int
    model: str
    choices: list[CompletionResponseChoice]
    service_tier: str | None = None
    system_fingerprint: str | None = None
    usage: Usage
    kv_transfer_params: dict[str, Any] | None = None
    ec_transfer_params: dict[str, Any] | None = None
    metrics: Any = None


class CompletionResponseStreamChoice(_Model):
    index: int
    text: str
    logprobs: CompletionLogProbs | None = None
    finish_reason: str | None = None
    stop_reason: int | str | None = None
    prompt_token_ids: list[int] | None = None
    token_ids: list[int] | None = None


class CompletionStreamResponse(_Model):
    id: str
    object: Literal["text_completion"] = "text_completion"
    created: int
    model: str
    choices: list[CompletionResponseStreamChoice]
    usage: Usage | None = None
    system_fingerprint: str | None = None
    metrics: Any = None


# --- derender requests (vLLM's /v1/*/derender bodies) ------------------------------------------


class _DerenderBase(_Model):
    model: str | None = None


class DerenderChatRequest(_DerenderBase):
    """``POST /v1/chat/completions/derender``: one engine response → ``ChatCompletionResponse``."""

    stream: Literal[False] | None = None
    generate_response: GenerateResponse
    prompt_tokens: NonNegativeInt | None = None
    prompt_token_ids: list[NonNegativeInt] | None = None
    chat_request: ChatCompletionRequest | None = None


class DerenderChatStreamRequest(_DerenderBase):
    """The streaming form: one engine chunk (one choice) and the state the previous call
    returned (``null`` first) → ``{"chunk", "stream_state"}``. Send the same ``chat_request``
    and ``prompt_token_ids`` on every call of a stream."""

    stream: Literal[True]
    generate_chunk: GenerateStreamResponse
    stream_state: str | None = None
    prompt_tokens: NonNegativeInt | None = None
    prompt_token_ids: list[NonNegativeInt] | None = None
    chat_request: ChatCompletionRequest | None = None


class DerenderChatStreamResponse(_Model):
    chunk: ChatCompletionStreamResponse
    stream_state: str | None  # opaque; null only when a usage-only chunk came without one


class DerenderCompletionRequest(_DerenderBase):
    """``POST /v1/completions/derender``: one engine response per prompt → ``CompletionResponse``
    with choices re-indexed ``prompt_index * n + choice_index``."""

    stream: Literal[False] | None = None
    generate_responses: list[GenerateResponse]
    prompt_tokens: list[NonNegativeInt] | None = None
    prompt_token_ids: list[list[NonNegativeInt]] | None = None
    completion_request: CompletionRequest | None = None


class DerenderCompletionStreamRequest(_DerenderBase):
    stream: Literal[True]
    generate_chunk: GenerateStreamResponse
    stream_state: str | None = None
    prompt_tokens: NonNegativeInt | None = None
    prompt_token_ids: list[NonNegativeInt] | None = None
    completion_request: CompletionRequest | None = None


class DerenderCompletionStreamResponse(_Model):
    chunk: CompletionStreamResponse
    stream_state: str | None
