"""Decode attention of the local engine in bf16 (issue 22): one query token per row against its KV
row, with scores, softmax and weighted sum in fp32, in place of torch's CPU flash-attention kernel,
which is slow for a single query (3-7x slower on SmolLM2's decode shapes).

Registered with transformers as the attention implementation ``tokenwire``: a decode forward in
bf16 / fp16 takes the native kernel (``engine/local/native.py``) where it is built and takes the
call, else :func:`decode_attention` (two grouped matmuls); everything else — prefill, fp32 (the
exact mode), a call with arguments this path does not handle (sinks, softcapping, a position bias,
dropout) — runs transformers' own SDPA function unchanged. ``TOKENWIRE_DECODE_ATTENTION``:
``native`` (the default), ``grouped``, or ``sdpa`` everywhere. What it costs and changes:
docs/engine-design.md, "Decode attention in bf16".
"""

from __future__ import annotations

import logging
import sys
from typing import Any

import torch
from transformers.integrations.sdpa_attention import sdpa_attention_forward  # once, not per layer call

from engine.local import native
from engine.local.env_choice import env_choice

log = logging.getLogger("tokenwire.engine")

NAME = "tokenwire"  # native kernel first, grouped matmuls where it does not apply
GROUPED = "tokenwire_grouped"
_REDUCED = (torch.bfloat16, torch.float16)
_UNHANDLED = ("s_aux", "sinks", "softcap", "position_bias", "cache")
MODES = ("native", "grouped", "sdpa")
_native: native.NativeAttention | None = None  # set by register(): the kernel NAME's decode calls take
_native_loaded: native.Loaded | None = None  # native.shared(): built or found once per process


def mode() -> str:
    """``TOKENWIRE_DECODE_ATTENTION``: one of :data:`MODES`, ``native`` when unset; any other
    value is ignored with a warning, as the engine's other settings are."""
    return env_choice("TOKENWIRE_DECODE_ATTENTION", MODES)


def enabled() -> bool:
    return mode() != "sdpa"


def decode_attention(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, mask: torch.Tensor | None,
                     scaling: float) -> torch.Tensor:
    """Attention of one query token per row: ``query`` ``[b, hq, 1, d]``, ``key`` / ``value``
    ``[b, hkv, t, d]`` (any strides), ``mask`` None or ``[b, 1, 1, t]`` (bool: True attends; or
    additive). Query head ``h`` reads key-value head ``h // (hq // hkv)``, as transformers'
    ``repeat_kv``. Scores, softmax and the weighted sum are fp32; returns ``[b, 1, hq, d]`` in the
    query's dtype (the layout transformers' attention functions return)."""
    b, hq, _, d = query.shape
    hkv = key.shape[1]
    q = query.reshape(b, hkv, hq // hkv, d).float()
    scores = torch.matmul(q, key.float().transpose(-1, -2)).mul_(scaling)  # [b, hkv, groups, t]
    if mask is not None:
        if mask.dtype == torch.bool:
            scores.masked_fill_(~mask, float("-inf"))
        else:
            scores.add_(mask)
    probs = torch.softmax(scores, dim=-1)
    out = torch.matmul(probs, value.float())  # [b, hkv, groups, d]
    return out.to(query.dtype).reshape(b, hq, 1, d).transpose(1, 2)


def _decode_call(module: torch.nn.Module, query: torch.Tensor, key: torch.Tensor, dropout: float,
                 kwargs: dict[str, Any]) -> bool:
    """Whether a call is one this module's decode path takes (else it is transformers' SDPA)."""
    return not (query.shape[2] != 1 or query.dtype not in _REDUCED or dropout or module.training
                or query.shape[1] % key.shape[1] or any(kwargs.get(k) is not None for k in _UNHANDLED))


def _attend(kernel: native.NativeAttention | None, module: torch.nn.Module, query: torch.Tensor, key: torch.Tensor,
            value: torch.Tensor, attention_mask: torch.Tensor | None, dropout: float, scaling: float | None,
            kwargs: dict[str, Any]) -> tuple[torch.Tensor, None]:
    """A decode call through ``kernel`` where given and it takes the call, else the grouped
    matmuls; any other call through transformers' SDPA."""
    if not _decode_call(module, query, key, dropout, kwargs):
        return sdpa_attention_forward(module, query, key, value, attention_mask, dropout=dropout, scaling=scaling,
                                      **kwargs)
    mask = None if attention_mask is None else attention_mask[:, :, :, : key.shape[-2]]
    scale = query.shape[-1] ** -0.5 if scaling is None else scaling
    if kernel is not None and (out := kernel(query, key, value, mask, scale)) is not None:
        return out, None
    return decode_attention(query, key, value, mask, scale), None


def _grouped(module: torch.nn.Module, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
             attention_mask: torch.Tensor | None, dropout: float = 0.0, scaling: float | None = None,
             **kwargs: Any) -> tuple[torch.Tensor, None]:
    return _attend(None, module, query, key, value, attention_mask, dropout, scaling, kwargs)


def _native_first(module: torch.nn.Module, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                  attention_mask: torch.Tensor | None, dropout: float = 0.0, scaling: float | None = None,
                  **kwargs: Any) -> tuple[torch.Tensor, None]:
    return _attend(_native, module, query, key, value, attention_mask, dropout, scaling, kwargs)


def register() -> str:
    """Register this module's attention with transformers (idempotent) under two names, so that
    any model — the engine's, or a ``model.generate`` reference loaded with the returned name —
    can use it: :data:`NAME` takes the native kernel where it applies, :data:`GROUPED` the grouped
    matmuls. With the ``native`` mode, builds or finds the kernel first (once per process).
    Returns the name the current mode decodes with: :data:`NAME` when the kernel loaded."""
    global _native, _native_loaded
    from transformers import AttentionInterface, AttentionMaskInterface
    from transformers.masking_utils import sdpa_mask

    for name, fn in ((NAME, _native_first), (GROUPED, _grouped)):
        AttentionInterface.register(name, fn)
        AttentionMaskInterface.register(name, sdpa_mask)  # the masks stay what SDPA is given
    if mode() != "native":
        return GROUPED
    if _native_loaded is None:
        _native_loaded = native.shared()
    _native = _native_loaded.library.attention if _native_loaded.library else None
    return NAME if _native is not None else GROUPED


EAGER = "tokenwire_eager"  # the model's own eager attention with the engine's boolean masks


def _eager(module: torch.nn.Module, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
           attention_mask: torch.Tensor | None, **kwargs: Any) -> Any:
    """The eager attention function of ``module``'s modeling file (``eager_attention_forward``),
    given an additive mask (0 where a boolean mask attends, the dtype's minimum elsewhere)."""
    if attention_mask is not None and attention_mask.dtype == torch.bool:
        attention_mask = attention_mask[:, :, :, : key.shape[-2]]
        additive = torch.zeros(attention_mask.shape, dtype=query.dtype, device=query.device)
        attention_mask = additive.masked_fill_(~attention_mask, torch.finfo(query.dtype).min)
    fn = getattr(sys.modules.get(type(module).__module__), "eager_attention_forward", None)
    if fn is None:
        raise TypeError(f"{type(module).__name__}'s modeling file has no eager_attention_forward")
    return fn(module, query, key, value, attention_mask, **kwargs)


def register_eager() -> None:
    """Register :data:`EAGER` with transformers (idempotent). The masks transformers builds for it
    (where the engine passes none) are eager's own, additive and never skipped: SDPA's may be
    None where a causal flag would do, which eager attention has not."""
    from transformers import AttentionInterface, AttentionMaskInterface
    from transformers.masking_utils import eager_mask

    AttentionInterface.register(EAGER, _eager)
    AttentionMaskInterface.register(EAGER, eager_mask)


def decode_kernel(name: str) -> str:
    """The bf16 decode path of the registered attention ``name``, in words."""
    if name == NAME and _native_loaded is not None:
        return f"native fp32 ({_native_loaded.detail})"
    if mode() == "grouped":
        return "grouped fp32 (TOKENWIRE_DECODE_ATTENTION=grouped)"
    why = _native_loaded.detail if _native_loaded else "not built"
    return f"grouped fp32 (native kernel: {why})"


def wanted(dtype: torch.dtype) -> bool:
    """Whether the engine decodes with :func:`decode_attention` in ``dtype``."""
    return dtype in _REDUCED and enabled()


def install(model: Any, dtype: torch.dtype) -> str:
    """Make ``model``'s text decoder use this module's attention where it applies. Returns the
    kernel in words, for the log and ``/engine/stats``. A model loaded with its own eager attention
    (one transformers runs without SDPA, such as gpt-oss with its attention sinks) keeps that
    function for every call, behind :data:`EAGER`, which only turns the engine's boolean masks
    into the additive ones it expects: the plain transformers path, whatever the settings."""
    config = getattr(model, "config", None)
    if config is not None and getattr(config.get_text_config(), "_attn_implementation", None) == "eager":
        register_eager()
        model.set_attn_implementation(EAGER)
        return (f"the model's own eager attention for prefill and decode ({type(model).__name__} has no SDPA "
                "path in transformers, e.g. attention sinks: the decode kernel does not apply)")
    if not enabled():
        return "sdpa (TOKENWIRE_DECODE_ATTENTION=sdpa)"
    if not wanted(dtype):
        return f"sdpa ({str(dtype).removeprefix('torch.')}: the exact mode)"
    name = register()
    kernel = decode_kernel(name)
    if dtype != torch.bfloat16 and name == NAME:  # the native kernel takes bf16 only
        name, kernel = GROUPED, "grouped fp32 (native kernel: bf16 only)"
    text = model.config.get_text_config()
    if text is model.config:
        model.set_attn_implementation(name)
    else:  # a vision-language model: only its language model decodes
        key = next((k for k in model.config.sub_configs if getattr(model.config, k) is text), None)
        if key is None:
            return "sdpa (no text sub-config found)"
        model.set_attn_implementation({key: name})
    return f"{kernel} for decode, SDPA for prefill"
