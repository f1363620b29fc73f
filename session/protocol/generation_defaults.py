"""Sampling defaults from the model's ``generation_config.json``, as vLLM 0.32's ``--generation-config``.

The one place that decides what a request that leaves a sampling field unset gets. Every endpoint
reaches it through the renderer (``session/render/renderer.py`` holds one
:class:`GenerationDefaults` and hands it to each request's ``to_sampling_params`` and to the
length rules): chat, completions, Anthropic messages (rendered as the chat request they convert
to), the ``/v1/session`` frames, the ``/render`` endpoints and the engine requests a front end sends
to a remote engine (the front end decides; the engine gets explicit values).

vLLM's rules (``ModelConfig.get_diff_sampling_param`` in ``vllm/config/model.py``, the serving
classes' ``override_max_tokens``, ``get_max_tokens`` in ``vllm/entrypoints/serve/utils/api_utils.py``):

- the keys: ``repetition_penalty``, ``presence_penalty``, ``frequency_penalty``, ``temperature``,
  ``top_k``, ``top_p``, ``min_p`` and ``max_new_tokens`` (Hugging Face's name for ``max_tokens``);
  a key whose value is ``null`` is not a default;
- ``--generation-config auto`` (the default) reads the model directory, a folder path reads that
  folder, ``vllm`` reads nothing; ``--override-generation-config`` is merged on top key by key
  (``null`` removes the model's value), also with ``vllm``;
- a request value wins, then the default, then vLLM's own (temperature 1, top_p 1, top_k 0,
  min_p 0, penalties 0 and 1);
- ``max_new_tokens`` is the output limit of a request that sets none (chat's ``max_tokens`` /
  ``max_completion_tokens``; a completion's ``max_tokens`` defaults to 16, as in vLLM, so it only
  applies there to an explicit ``null``). It is also a hard cap on every request where vLLM makes
  it one: the ``max_new_tokens`` of ``--override-generation-config``, or, with a folder path, the
  folder's own (after the override);
- every output limit is then clamped to the room the prompt leaves in the context;
- a tokens-in request (``/inference/v1/generate``, a ``generate`` frame) whose ``sampling_params``
  do not name ``max_tokens`` gets that same limit, and nothing else (:func:`with_default_max_tokens`,
  vLLM's tokens-only serving); its other fields are the client's, as it sent them.

Values are checked once, at start-up (:func:`resolve`): a value of the wrong type or out of the
range the engine accepts is a :class:`ValueError` naming the key and where it came from.
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
