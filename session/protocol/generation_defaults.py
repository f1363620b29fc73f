"""Sampling defaults from the model's ``generation_config.json``, as vLLM 0.32's ``--generation-config``.

The one place that decides what a request that leaves a sampling field unset gets. Every endpoint
reaches it through the renderer (``session/render/renderer.py`` holds one
:class:`GenerationDefaults`): chat, completions, Anthropic messages, Responses, the ``/v1/session``
frames, the ``/render`` endpoints and the engine requests a front end sends to a remote engine.
It follows ``ModelConfig.get_diff_sampling_param`` (``vllm/config/model.py``) and vLLM's
``get_max_tokens``; the keys, their precedence, the output limit and the cap are described in
docs/serve.md, "Sampling defaults from the model". Values are checked once, at start-up
(:func:`resolve`): a value of the wrong type or range is a :class:`ValueError` naming the key and
where it came from.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from engine.protocol import GenerateRequest

# vLLM's ``available_params``, in its order
SAMPLING_KEYS = ("repetition_penalty", "presence_penalty", "frequency_penalty", "temperature", "top_k", "top_p",
                 "min_p", "max_new_tokens")
# vLLM's ``_DEFAULT_SAMPLING_PARAMS``: what a field gets with neither a request value nor a default
VLLM_DEFAULTS: dict[str, float | int] = {"repetition_penalty": 1.0, "presence_penalty": 0.0,
                                         "frequency_penalty": 0.0, "temperature": 1.0, "top_p": 1.0, "top_k": 0,
                                         "min_p": 0.0}
# The sources vLLM names by word; anything else is a folder path.
AUTO = "auto"
VLLM = "vllm"


@dataclass(frozen=True, slots=True)
class GenerationDefaults:
    """vLLM's ``default_sampling_params`` (``max_new_tokens`` renamed ``max_tokens``) and its
    ``override_max_tokens`` (:attr:`max_tokens_cap`)."""

    sampling: Mapping[str, float | int] = field(default_factory=dict)
    max_tokens_cap: int | None = None
    source: str = VLLM  # auto, vllm or the folder the defaults were read from
    overridden: bool = False  # --override-generation-config set something

    def value(self, name: str, requested: Any) -> Any:
        """The request's value, else the default, else vLLM's own."""
        if requested is not None:
            return requested
        return self.sampling.get(name, VLLM_DEFAULTS[name])

    def max_tokens(self, requested: int | None, room: int) -> int:
        """vLLM's ``get_max_tokens``: the smallest of the room the prompt leaves, the request's
        limit (else the default one) and the cap."""
        fallback = requested if requested is not None else self.sampling.get("max_tokens")
        return min(int(v) for v in (room, fallback, self.max_tokens_cap) if v is not None)

    def describe(self) -> str:
        """The start-up line: which defaults apply and where they come from."""
        where = {AUTO: "the model's generation_config.json", VLLM: "--override-generation-config"}.get(
            self.source, f"{self.source}/generation_config.json")
        if self.overridden and self.source != VLLM:
            where += " and --override-generation-config"
        cap = f"; every request's output is capped at {self.max_tokens_cap} tokens" if self.max_tokens_cap else ""
        if not self.sampling:
            if self.source == VLLM:
                return "sampling defaults: vLLM's own (--generation-config vllm)" + cap
            return f"sampling defaults: vLLM's own ({where} sets none)" + cap
        values = ", ".join(f"{k}={v}" for k, v in self.sampling.items())
        off = "" if self.source == VLLM else "; --generation-config vllm turns them off"
        return f"sampling defaults from {where}: {values} (a request's own values win{off}){cap}"


NO_DEFAULTS = GenerationDefaults()


def with_default_max_tokens(request: GenerateRequest, defaults: GenerationDefaults,
                            max_model_len: int) -> GenerateRequest:
    """vLLM 0.32's tokens-only rule: ``sampling_params`` without a ``max_tokens`` key get the model's
    default limit, else the room the prompt leaves (not the 16 of ``SamplingParams``). A prompt
    that leaves no room is left for the engine to refuse with the lengths."""
    sp = request.sampling_params
    if "max_tokens" in sp.model_fields_set:
        return request
    prompt = len(request.token_ids)
    if sp.truncate_prompt_tokens is not None and sp.truncate_prompt_tokens >= 0:
        prompt = min(prompt, sp.truncate_prompt_tokens)
    room = max_model_len - prompt
    if room < 1:
        return request
    limited = sp.model_copy(update={"max_tokens": defaults.max_tokens(None, room)})
    return request.model_copy(update={"sampling_params": limited})


def resolve(config: Mapping[str, Any] | None, *, source: str = AUTO,
            override: Mapping[str, Any] | None = None, where: str = "generation_config.json") -> GenerationDefaults:
    """vLLM's ``get_diff_sampling_param`` and ``override_max_tokens`` for ``config`` (the generation
    config read from ``source``; ignored for ``vllm``) with ``override`` merged on top. ``where``
    names the file in errors."""
    override = dict(override or {})
    merged: dict[str, Any] = {} if source == VLLM else dict(config or {})
    merged.update(override)
    sampling: dict[str, float | int] = {}
    for key in SAMPLING_KEYS:
        value = merged.get(key)
        if value is not None:
            origin = "--override-generation-config" if override.get(key) is not None else where
            sampling[key] = _checked(key, value, origin)
    if "max_new_tokens" in sampling:  # Hugging Face's max_new_tokens is vLLM's max_tokens
        sampling["max_tokens"] = sampling.pop("max_new_tokens")
    if source in (AUTO, VLLM):
        cap = override.get("max_new_tokens")
        cap = None if cap is None else _checked("max_new_tokens", cap, "--override-generation-config")
    else:
        cap = sampling.get("max_tokens")
    return GenerationDefaults(sampling, int(cap) if cap is not None else None, source, overridden=bool(override))


def _checked(key: str, value: Any, origin: str) -> float | int:
    """The value as the engine takes it, or a ValueError naming the key and its origin."""
    integer = key in ("top_k", "max_new_tokens")
    ok_type = isinstance(value, int) if integer else isinstance(value, (int, float))
    if isinstance(value, bool) or not ok_type or (isinstance(value, float) and not math.isfinite(value)):
        kind = "a whole number" if integer else "a number"
        raise ValueError(f"{origin}: {key} must be {kind}, got {value!r}")
    bounds = {
        "repetition_penalty": (value > 0, "more than 0"),
        "presence_penalty": (-2 <= value <= 2, "from -2 to 2"),
        "frequency_penalty": (-2 <= value <= 2, "from -2 to 2"),
        "temperature": (value >= 0, "0 or more"),
        "top_k": (value >= -1, "-1 or more (0 and -1: off)"),
        "top_p": (0 < value <= 1, "more than 0 and at most 1"),
        "min_p": (0 <= value <= 1, "from 0 to 1"),
        "max_new_tokens": (value >= 1, "1 or more"),
    }
    ok, rule = bounds[key]
    if not ok:
        raise ValueError(f"{origin}: {key} is {value!r}, out of range ({rule})")
    checked: float | int = value  # as given: vLLM keeps an int temperature an int
    return checked
