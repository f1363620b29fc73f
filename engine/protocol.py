"""Wire types of the generate stage, compatible with vLLM 0.32's scale-out API.

These are the only engine types that other packages (``session``, ``server``, ``client_sdk``)
may import; this module imports no torch.

- :class:`SamplingParams` mirrors vLLM's ``SamplingParams`` as it appears on the wire: it is
  serialized without fields equal to their defaults (:meth:`SamplingParams.to_wire`), except the
  fields vLLM always writes, so a vLLM tokens-only engine accepts what we send and we accept
  what a vLLM render server sends (unknown and vLLM-internal keys are kept and ignored).
- :class:`GenerateRequest` is render's output and the body of ``POST /inference/v1/generate``.
- :class:`GenerateResponse` / :class:`GenerateStreamResponse` are the engine's answers.

Validation here is structural (types, required fields, non-negative ids). Semantic bounds that
depend on the served model (``max_model_len``, vocabulary size) are checked by the engine.
"""

from __future__ import annotations

import time
from enum import IntEnum
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, NonNegativeInt, PositiveInt, field_validator


class RequestOutputKind(IntEnum):
    """vLLM's output kinds: how an engine reports progress of one request."""

    CUMULATIVE = 0
    DELTA = 1
    FINAL_ONLY = 2


class _Wire(BaseModel):
    """Base for wire models: unknown keys are tolerated (and kept, so they round-trip)."""

    model_config = ConfigDict(extra="allow", populate_by_name=True)


# Fields vLLM writes even when they hold their default value (observed in vLLM 0.32 render
# output). Everything else is omitted when equal to its default.
_ALWAYS_ON_WIRE = (
    "presence_penalty",
    "frequency_penalty",
    "repetition_penalty",
    "temperature",
    "stop",
    "stop_token_ids",
    "output_kind",
    "skip_clone",
    "bad_words",
    "skip_reading_prefix_cache",
)
# Written by vLLM unless sampling is greedy (vLLM resets them for temperature 0).
_ON_WIRE_UNLESS_GREEDY = ("top_p", "min_p")


class SamplingParams(_Wire):
    """Sampling parameters, field for field as vLLM names them (defaults as vLLM's)."""

    n: int = 1
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    repetition_penalty: float = 1.0
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0
    min_p: float = 0.0
    seed: int | None = None
    stop: list[str] = Field(default_factory=list)
    stop_token_ids: list[NonNegativeInt] = Field(default_factory=list)
    bad_words: list[str] = Field(default_factory=list)
    include_stop_str_in_output: bool = False
    ignore_eos: bool = False
    max_tokens: int | None = 16
    min_tokens: int = 0
    logprobs: int | None = None
    prompt_logprobs: int | None = None
    detokenize: bool = True
    skip_special_tokens: bool = True
    spaces_between_special_tokens: bool = True
    logit_bias: dict[int, float] | None = None
    allowed_token_ids: list[int] | None = None
    truncate_prompt_tokens: int | None = None
    structured_outputs: dict[str, Any] | None = None
    output_kind: RequestOutputKind = RequestOutputKind.FINAL_ONLY
    skip_clone: bool = True
    skip_reading_prefix_cache: bool = False
    extra_args: dict[str, Any] | None = None

    @field_validator("stop", mode="before")
    @classmethod
    def _stop_as_list(cls, v: Any) -> Any:
        if v is None:
            return []
        if isinstance(v, str):
            return [v]
        return v

    @field_validator("stop_token_ids", "bad_words", mode="before")
    @classmethod
    def _none_as_empty(cls, v: Any) -> Any:
        return [] if v is None else v

    @property
    def greedy(self) -> bool:
        return self.temperature < 1e-5

    def to_wire(self) -> dict[str, Any]:
        """The JSON-ready dict vLLM would write: defaults omitted, except vLLM's always-on set."""
        out = self.model_dump(mode="json", exclude_defaults=True)
        for name in _ALWAYS_ON_WIRE:
            out.setdefault(name, _json_value(getattr(self, name)))
        if not self.greedy:
            for name in _ON_WIRE_UNLESS_GREEDY:
                out.setdefault(name, getattr(self, name))
        # Keep vLLM's key order stable for readability: known fields first, extras after.
        order = {name: i for i, name in enumerate(type(self).model_fields)}
        return dict(sorted(out.items(), key=lambda kv: order.get(kv[0], len(order))))


def _json_value(v: Any) -> Any:
    return int(v) if isinstance(v, IntEnum) else v


class StreamOptions(_Wire):
    include_usage: bool | None = False
    continuous_usage_stats: bool | None = False


TensorDType = Literal["float32", "float16", "int64", "int32"]
_TENSOR_DTYPES = ("float32", "float16", "int64", "int32")


class TensorData(_Wire):
    """One tensor on the JSON wire: its raw little-endian bytes in C order, base64-encoded
    (RFC 4648, padded), with the dtype and the shape to read them back."""

    dtype: TensorDType
    shape: list[NonNegativeInt]
    data: str

    @classmethod
    def of(cls, array: Any) -> TensorData:
        """From a numpy array (duck-typed: ``dtype.name``, ``shape``, ``tobytes``)."""
        import base64

        if array.dtype.name not in _TENSOR_DTYPES:
            raise ValueError(f"tensor dtype {array.dtype.name} is not one of {', '.join(_TENSOR_DTYPES)}")
        little = array.astype(array.dtype.newbyteorder("<"), copy=False)
        return cls.model_construct(dtype=str(array.dtype.name), shape=[int(d) for d in array.shape],
                                   data=base64.b64encode(little.tobytes(order="C")).decode("ascii"))


class PlaceholderRangeInfo(_Wire):
    """Where one multimodal item's placeholder tokens sit in ``token_ids``."""

    offset: NonNegativeInt
    length: PositiveInt


# One item's processed inputs: tensors by the model's input name (``pixel_values``,
# ``image_grid_thw``). vLLM sends a base64 msgpack ``MultiModalKwargsItem`` string here instead,
# which is kept (and passed on by a remote engine) but not read by the local engine.
KwargsItem = dict[str, TensorData] | str | None


class MultiModalFeatures(_Wire):
    """vLLM's render-side ``features``: per modality, each item's hash, placeholder range and
    processed tensors (lists parallel to ``mm_hashes[modality]``). See docs/render.md."""

    mm_hashes: dict[str, list[str]]
    mm_placeholders: dict[str, list[PlaceholderRangeInfo]]
    kwargs_data: dict[str, list[KwargsItem]] | None = None


class GenerateRequest(_Wire):
    """One engine prompt: what render produces and ``/inference/v1/generate`` consumes."""

    request_id: str | None = None
    token_ids: list[NonNegativeInt] = Field(min_length=1)
    sampling_params: SamplingParams
    model: str | None = None
    token_offsets: list[tuple[int, int]] | None = None
    features: MultiModalFeatures | None = None
    content_parts: Any = None
    assistant_tokens_mask: list[int] | None = None
    reasoning_ended: bool | None = None
    reasoning_parser_kwargs: dict[str, Any] | None = None
    return_token_ids: bool | None = None
    output_mode: Literal["tokens"] = "tokens"
    stream: bool = False
    stream_options: StreamOptions | None = None
    cache_salt: str | None = None
    priority: int = 0
    kv_transfer_params: dict[str, Any] | None = None
    ec_transfer_params: dict[str, Any] | None = None

    def to_wire(self) -> dict[str, Any]:
        """JSON-ready dict in vLLM 0.32's key layout (sampling params without defaults)."""
        out = self.model_dump(mode="json", exclude={"sampling_params"}, exclude_none=False)
        if self.assistant_tokens_mask is None:
            out.pop("assistant_tokens_mask", None)
        out["sampling_params"] = self.sampling_params.to_wire()
        return out

    def to_engine_wire(self) -> dict[str, Any]:
        """:meth:`to_wire` with ``max_tokens`` always written, as a front end sends the request to a
        remote engine: the front end decided the output limit (the model's defaults included, the
        16 of a completion too), and a vLLM engine that gets none applies its own (its
        generation config's, else all the room)."""
        out = self.to_wire()
        if self.sampling_params.max_tokens is not None:
            out["sampling_params"].setdefault("max_tokens", self.sampling_params.max_tokens)
        return out


class UsageInfo(_Wire):
    prompt_tokens: int = 0
    completion_tokens: int = 0
    total_tokens: int = 0
    prompt_tokens_details: dict[str, Any] | None = None
    completion_tokens_details: dict[str, Any] | None = None

    @classmethod
    def of(cls, prompt_tokens: int, completion_tokens: int) -> UsageInfo:
        return cls(
            prompt_tokens=prompt_tokens,
            completion_tokens=completion_tokens,
            total_tokens=prompt_tokens + completion_tokens,
        )


class TopLogprob(_Wire):
    token_id: int
    logprob: float
    rank: int | None = None


class TokenLogprob(_Wire):
    token_id: int
    logprob: float
    rank: int | None = None
    top_logprobs: list[TopLogprob] = Field(default_factory=list)


class ChoiceLogprobs(_Wire):
    content: list[TokenLogprob] = Field(default_factory=list)


FinishReason = Literal["stop", "length", "abort", "error"]


class GenerateChoice(_Wire):
    index: int = 0
    finish_reason: str | None = None
    stop_reason: int | str | None = None
    token_ids: list[NonNegativeInt] | None = None
    logprobs: ChoiceLogprobs | None = None


class GenerateResponse(_Wire):
    """The non-streaming answer of ``/inference/v1/generate`` (and derender's input)."""

    request_id: str
    model: str | None = None
    created: int = Field(default_factory=lambda: int(time.time()))
    usage: UsageInfo | None = None
    output_mode: Literal["tokens"] = "tokens"
    choices: list[GenerateChoice]


class GenerateStreamResponse(_Wire):
    """One SSE event of a streaming generate: that step's new tokens per choice.

    The last event (when ``stream_options.include_usage``) has ``choices: []`` and the usage.
    """

    request_id: str
    usage: UsageInfo | None = None
    output_mode: Literal["tokens"] = "tokens"
    choices: list[GenerateChoice]


class AbortRequest(_Wire):
    request_ids: list[str]


def generate_response_id(request_id: str) -> str:
    """vLLM names a generate response after its request: ``generate-tokens-<request id>``."""
    return request_id if request_id.startswith("generate-tokens-") else f"generate-tokens-{request_id}"
