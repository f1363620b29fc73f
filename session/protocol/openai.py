"""OpenAI request models: chat completions and (legacy) completions, with vLLM's extensions.

Field names, defaults and cross-field checks follow vLLM 0.32's ``ChatCompletionRequest`` /
``CompletionRequest`` so that a request a vLLM server accepts is accepted here, with the same
meaning. Unknown fields are tolerated (``extra="allow"``), as OpenAI-compatible servers do; a
field of the wrong type is a :class:`pydantic.ValidationError` whose location names the field.

Each request builds its own :class:`~engine.protocol.SamplingParams`
(:meth:`ChatCompletionRequest.to_sampling_params`): the one place where the request → sampling
mapping lives (``max_tokens`` vs ``max_completion_tokens``, ``logprobs``/``top_logprobs``,
penalties, stop, seed, ``logit_bias``…); a sampling field the request leaves unset takes the
model's default (:class:`~session.protocol.generation_defaults.GenerationDefaults`, handed in by
the renderer), else vLLM's.
"""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import Field, ValidationInfo, field_validator, model_validator

from engine.protocol import RequestOutputKind, SamplingParams, StreamOptions
from session.protocol.generation_defaults import NO_DEFAULTS, GenerationDefaults
from session.protocol.openai_messages import (
    TOOL_CHOICE_USAGE,
    ChatMessage,
    ContentPart,
    FunctionCall,
    FunctionDefinition,
    NamedToolChoice,
    OpenModel,
    Tool,
    ToolCall,
    ToolChoice,
    check_tool_choice,
    default_tool_choice,
    fail,
    is_token,
)
from session.protocol.sampling import (
    logit_bias_of,
    response_format_problem,
    structured_from_format,
    structured_outputs_problem,
    vllm_post_init,
)

__all__ = [
    "ChatCompletionRequest",
    "ChatMessage",
    "CompletionRequest",
    "ContentPart",
    "FunctionCall",
    "FunctionDefinition",
    "NamedToolChoice",
    "StreamOptions",
    "Tool",
    "ToolCall",
]


# --- shared sampling fields ----------------------------------------------------------------

NonNegInt = Annotated[int, Field(ge=0)]


class _SamplingFields(OpenModel):
    """Fields that chat and completion requests share (vLLM names and defaults)."""

    model: str | None = None
    n: int = Field(default=1, ge=1)
    seed: int | None = None
    stop: str | list[str] | None = None
    stream: bool | None = False
    stream_options: StreamOptions | None = None
    temperature: float | None = None
    top_p: float | None = None
    top_k: int | None = None
    min_p: float | None = None
    presence_penalty: float | None = None
    frequency_penalty: float | None = None
    repetition_penalty: float | None = None
    logit_bias: dict[str, float] | None = None
    user: str | None = None
    # vLLM extensions
    use_beam_search: bool = False
    length_penalty: float = 1.0
    stop_token_ids: list[NonNegInt] | None = None
    include_stop_str_in_output: bool = False
    ignore_eos: bool = False
    min_tokens: NonNegInt = 0
    skip_special_tokens: bool = True
    spaces_between_special_tokens: bool = True
    truncate_prompt_tokens: Annotated[int, Field(ge=-1)] | None = None
    prompt_logprobs: int | None = None
    allowed_token_ids: list[int] | None = None
    bad_words: list[str] | None = None
    response_format: dict[str, Any] | None = None
    structured_outputs: dict[str, Any] | None = None
    priority: int = 0
    request_id: str | None = None
    cache_salt: str | None = Field(default=None, min_length=1)
    kv_transfer_params: dict[str, Any] | None = None
    return_token_ids: bool | None = None
    return_tokens_as_token_ids: bool | None = None
    vllm_xargs: dict[str, Any] | None = None

    @field_validator("stream_options", mode="before")
    @classmethod
    def _stream_options_need_stream(cls, value: Any, info: ValidationInfo) -> Any:
        if value and not info.data.get("stream"):
            raise fail("Stream options can only be defined when `stream=True`.")
        return value

    @field_validator("response_format")
    @classmethod
    def _response_format_supported(cls, value: dict[str, Any] | None) -> dict[str, Any] | None:
        problem = response_format_problem(value) if value is not None else None
        if problem is not None:
            raise fail(problem)
        return value

    @field_validator("structured_outputs")
    @classmethod
    def _structured_outputs_supported(cls, value: dict[str, Any] | None,
                                      info: ValidationInfo) -> dict[str, Any] | None:
        if value is not None:
            # response_format's constraint is set on top of this object, as vLLM merges them
            problem = structured_outputs_problem(value, info.data.get("response_format"))
            if problem is not None:
                raise fail(problem)
        return value

    @field_validator("logit_bias")
    @classmethod
    def _logit_bias_keys_are_token_ids(cls, value: dict[str, float] | None) -> dict[str, float] | None:
        for key in value or {}:
            if not key.lstrip("-").isdigit():
                raise fail(f"keys must be token ids (integers as strings), got {key!r}")
        return value

    @field_validator("prompt_logprobs")
    @classmethod
    def _prompt_logprobs(cls, value: int | None, info: ValidationInfo) -> int | None:
        if value is not None:
            if value < 0 and value != -1:
                raise fail("`prompt_logprobs` must be a positive value or -1.")
            if info.data.get("stream") and value != 0:
                raise fail("`prompt_logprobs` are not available when `stream=True`.")
        return value

    def _sampling(self, *, max_tokens: int | None, logprobs: int | None, prompt_logprobs: int | None,
                  skip_special_tokens: bool | None = None,
                  structured_outputs: dict[str, Any] | None = None,
                  defaults: GenerationDefaults = NO_DEFAULTS) -> SamplingParams:
        """The request → :class:`SamplingParams` mapping (vLLM's ``to_sampling_params``): the
        request's value, else the model's default, else vLLM's."""
        fields: dict[str, Any] = {
            "n": self.n,
            "presence_penalty": defaults.value("presence_penalty", self.presence_penalty),
            "frequency_penalty": defaults.value("frequency_penalty", self.frequency_penalty),
            "repetition_penalty": defaults.value("repetition_penalty", self.repetition_penalty),
            "temperature": defaults.value("temperature", self.temperature),
            "top_p": defaults.value("top_p", self.top_p),
            "top_k": defaults.value("top_k", self.top_k),
            "min_p": defaults.value("min_p", self.min_p),
            "seed": self.seed,
            "stop": self.stop,
            "stop_token_ids": self.stop_token_ids,
            "logprobs": logprobs,
            "prompt_logprobs": prompt_logprobs,
            "ignore_eos": self.ignore_eos,
            "max_tokens": max_tokens,
            "min_tokens": self.min_tokens,
            "skip_special_tokens": self.skip_special_tokens if skip_special_tokens is None
            else skip_special_tokens,
            "spaces_between_special_tokens": self.spaces_between_special_tokens,
            "include_stop_str_in_output": self.include_stop_str_in_output,
            "output_kind": RequestOutputKind.DELTA if self.stream else RequestOutputKind.FINAL_ONLY,
            "logit_bias": logit_bias_of(self.logit_bias),
            "allowed_token_ids": self.allowed_token_ids,
            "bad_words": self.bad_words,
            "structured_outputs": structured_outputs
            or structured_from_format(self.response_format, self.structured_outputs),
            "extra_args": self.vllm_xargs or None,
            "skip_clone": True,
        }
        sp = SamplingParams.model_validate(fields)
        return vllm_post_init(sp)


# --- chat ----------------------------------------------------------------------------------


class ChatCompletionRequest(_SamplingFields):
    """``POST /v1/chat/completions`` (and its ``/render``), OpenAI fields plus vLLM's extensions."""

    messages: list[ChatMessage]
    logprobs: bool | None = False
    top_logprobs: int | None = 0
    max_tokens: int | None = Field(default=None, ge=1)  # deprecated by OpenAI, still honoured
    max_completion_tokens: int | None = Field(default=None, ge=1)
    tools: list[Tool] | None = None
    tool_choice: ToolChoice | None = "none"
    parallel_tool_calls: bool | None = True
    reasoning_effort: str | None = None
    include_reasoning: bool = True
    # vLLM chat extensions
    echo: bool = False
    add_generation_prompt: bool = True
    continue_final_message: bool = False
    add_special_tokens: bool = False
    documents: list[dict[str, str]] | None = None
    chat_template: str | None = None
    chat_template_kwargs: dict[str, Any] | None = None
    mm_processor_kwargs: dict[str, Any] | None = None
    return_assistant_tokens_mask: bool = False
    return_token_offsets: bool = False

    @model_validator(mode="before")
    @classmethod
    def _tool_choice_default(cls, data: Any) -> Any:
        return default_tool_choice(data)

    @field_validator("tools")
    @classmethod
    def _tools_not_empty(cls, value: list[Tool] | None) -> list[Tool] | None:
        if value is not None and not value:
            raise fail("`tools` must not be an empty array. Either provide at least one tool or omit the field entirely.")
        return value

    @field_validator("tool_choice", mode="before")
    @classmethod
    def _tool_choice_shape(cls, value: Any) -> Any:
        if isinstance(value, str) and value not in ("none", "auto", "required"):
            raise fail(f'Invalid value for `tool_choice`: {value}! Only named tools, "none", "auto" or '
                        '"required" are supported.')
        if isinstance(value, dict):
            function = value.get("function")
            if not isinstance(function, dict):
                raise fail(f"Invalid value for `function` in `tool_choice`! {TOOL_CHOICE_USAGE}")
            if not isinstance(function.get("name"), str) or not function["name"]:
                raise fail(f"Expected a non-empty string `name` in `function` in `tool_choice`! {TOOL_CHOICE_USAGE}")
        return value

    @field_validator("tool_choice")
    @classmethod
    def _tool_choice_matches_tools(cls, value: Any, info: ValidationInfo) -> Any:
        if "tools" in info.data:  # absent when `tools` itself failed validation
            check_tool_choice(value, info.data["tools"])
        return value

    @field_validator("top_logprobs")
    @classmethod
    def _top_logprobs(cls, value: int | None, info: ValidationInfo) -> int | None:
        if value is not None:
            if value < 0 and value != -1:
                raise fail("`top_logprobs` must be a positive value or -1.")
            if value != 0 and not info.data.get("logprobs"):
                raise fail("when using `top_logprobs`, `logprobs` must be set to true.")
        return value

    @field_validator("continue_final_message")
    @classmethod
    def _not_both_prompts(cls, value: bool, info: ValidationInfo) -> bool:
        if value and info.data.get("add_generation_prompt"):
            raise fail("Cannot set both `continue_final_message` and `add_generation_prompt` to True.")
        return value

    @property
    def requested_max_tokens(self) -> int | None:
        """``max_completion_tokens`` when given, else the deprecated ``max_tokens``."""
        return self.max_completion_tokens if self.max_completion_tokens is not None else self.max_tokens

    def template_kwargs(self) -> dict[str, Any]:
        """vLLM's merge of what the chat template (and the parsers) see: ``chat_template_kwargs``
        with ``None`` / ``"auto"`` values dropped, then the request's own fields on top
        (``documents``; ``reasoning_effort``, which also sets ``enable_thinking`` unless the client
        did: anything but ``"none"`` turns thinking on)."""
        user = self.chat_template_kwargs or {}
        kwargs = {k: v for k, v in user.items() if v is not None and v != "auto"}
        if self.documents is not None:
            kwargs["documents"] = self.documents
        if self.reasoning_effort is not None:
            kwargs["reasoning_effort"] = self.reasoning_effort
            if "enable_thinking" not in user:
                kwargs["enable_thinking"] = self.reasoning_effort != "none"
        return kwargs

    @property
    def has_active_tools(self) -> bool:
        return bool(self.tools) and self.tool_choice != "none"

    def to_sampling_params(self, max_tokens: int | None, *, skip_special_tokens: bool | None = None,
                           structured_outputs: dict[str, Any] | None = None,
                           defaults: GenerationDefaults = NO_DEFAULTS) -> SamplingParams:
        """Sampling params for this request; ``max_tokens`` is the value render settled on, a
        configured tool parser may force ``skip_special_tokens`` / ``structured_outputs``, and
        ``defaults`` fills the fields the request leaves unset."""
        prompt_logprobs = self.prompt_logprobs
        if prompt_logprobs is None and self.echo:
            prompt_logprobs = self.top_logprobs
        return self._sampling(max_tokens=max_tokens,
                              logprobs=self.top_logprobs if self.logprobs else None,
                              prompt_logprobs=prompt_logprobs, skip_special_tokens=skip_special_tokens,
                              structured_outputs=structured_outputs, defaults=defaults)


# --- completion ----------------------------------------------------------------------------

Prompt = str | list[str] | list[NonNegInt] | list[list[NonNegInt]]


class CompletionRequest(_SamplingFields):
    """``POST /v1/completions`` (and its ``/render``)."""

    prompt: Prompt | None = None
    prompt_embeds: Any = None
    best_of: int | None = None
    echo: bool = False
    logprobs: int | None = Field(default=None, ge=0)
    max_tokens: int | None = Field(default=16, ge=1)
    suffix: str | None = None
    add_special_tokens: bool = True
    return_token_offsets: bool = False

    @model_validator(mode="before")
    @classmethod
    def _null_max_tokens_is_the_default(cls, data: Any) -> Any:
        """vLLM's ``normalize_null_max_tokens``: ``"max_tokens": null`` means 16, as when absent."""
        if isinstance(data, dict) and "max_tokens" in data and data["max_tokens"] is None:
            data = {**data, "max_tokens": cls.model_fields["max_tokens"].default}
        return data

    @field_validator("prompt", mode="before")
    @classmethod
    def _prompt_shape(cls, value: Any) -> Any:
        if value is None or isinstance(value, str):
            return value
        ok = isinstance(value, list) and (
            all(isinstance(x, str) for x in value)
            or all(is_token(x) for x in value)
            or all(isinstance(x, list) and all(is_token(t) for t in x) for x in value))
        if not ok:
            raise fail("must be a string, a list of strings, a list of token ids (non-negative integers) "
                        "or a list of token-id lists")
        return value

    @model_validator(mode="after")
    def _has_prompt(self) -> CompletionRequest:
        if (self.prompt is None or self.prompt == []) and self.prompt_embeds is None:
            raise fail("Either prompt or prompt_embeds must be provided and non-empty.")
        return self

    def prompts(self) -> list[str | list[int]]:
        """The prompt as a list of prompts (text or token ids), one engine request each."""
        p = self.prompt
        if p is None:
            return []
        if isinstance(p, str):
            return [p]
        if not p:
            return [p]  # type: ignore[list-item]  # empty list: render reports it
        if all(isinstance(x, int) for x in p):
            return [p]  # type: ignore[list-item]
        return list(p)  # type: ignore[arg-type]

    def to_sampling_params(self, max_tokens: int | None,
                           defaults: GenerationDefaults = NO_DEFAULTS) -> SamplingParams:
        prompt_logprobs = self.prompt_logprobs
        if prompt_logprobs is None and self.echo:
            prompt_logprobs = self.logprobs
        return self._sampling(max_tokens=max_tokens, logprobs=self.logprobs,
                              prompt_logprobs=prompt_logprobs, defaults=defaults)
