"""Decode attention of the local engine in bf16 (issue 22): one query token per row against its KV
row, computed as two grouped matmuls and a softmax in fp32, in place of torch's CPU flash-attention
kernel, which is slow for a single query (3-7x slower on SmolLM2's decode shapes).

Registered with transformers as the attention implementation ``tokenwire``: a decode forward in
bf16 / fp16 takes :func:`decode_attention`; everything else — prefill, fp32 (the exact mode), a
call with arguments this path does not handle (sinks, softcapping, a position bias, dropout) —
runs transformers' own SDPA function unchanged. ``TOKENWIRE_DECODE_ATTENTION=sdpa`` keeps SDPA
everywhere. What it costs and changes: docs/engine.md, "Decode attention in bf16".
"""

from __future__ import annotations

import logging
import os
from typing import Any

import torch
from transformers.integrations.sdpa_attention import sdpa_attention_forward  # once, not per layer call

log = logging.getLogger("tokenwire.engine")

NAME = "tokenwire"
_REDUCED = (torch.bfloat16, torch.float16)
_UNHANDLED = ("s_aux", "sinks", "softcap", "position_bias", "cache")


def enabled() -> bool:
    """``TOKENWIRE_DECODE_ATTENTION``: ``grouped`` (the default) or ``sdpa``; any other value is
    ignored with a warning, as the engine's other settings are."""
    value = os.environ.get("TOKENWIRE_DECODE_ATTENTION", "").strip().lower()
    if value not in ("", "grouped", "sdpa"):
        log.warning("ignoring TOKENWIRE_DECODE_ATTENTION=%r (use 'grouped' or 'sdpa')", value)
    return value != "sdpa"


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


def _attention(module: torch.nn.Module, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
               attention_mask: torch.Tensor | None, dropout: float = 0.0, scaling: float | None = None,
               **kwargs: Any) -> tuple[torch.Tensor, None]:
    if (query.shape[2] != 1 or query.dtype not in _REDUCED or dropout or module.training
            or query.shape[1] % key.shape[1] or any(kwargs.get(k) is not None for k in _UNHANDLED)):
        return sdpa_attention_forward(module, query, key, value, attention_mask, dropout=dropout, scaling=scaling,
                                      **kwargs)
    mask = attention_mask
    if mask is not None:
        mask = mask[:, :, :, : key.shape[-2]]
    return decode_attention(query, key, value, mask, query.shape[-1] ** -0.5 if scaling is None else scaling), None


def register() -> str:
    """Register :data:`NAME` with transformers (idempotent), so that any model — the engine's, or
    a ``model.generate`` reference loaded with ``attn_implementation=NAME`` — can use it."""
    from transformers import AttentionInterface, AttentionMaskInterface
    from transformers.masking_utils import sdpa_mask

    AttentionInterface.register(NAME, _attention)
    AttentionMaskInterface.register(NAME, sdpa_mask)  # the masks stay what SDPA is given
    return NAME


def wanted(dtype: torch.dtype) -> bool:
    """Whether the engine decodes with :func:`decode_attention` in ``dtype``."""
    return dtype in _REDUCED and enabled()


def install(model: Any, dtype: torch.dtype) -> str:
    """Make ``model``'s text decoder use this module's attention where it applies. Returns the
    kernel in words, for the log and ``/engine/stats``."""
    if not enabled():
        return "sdpa (TOKENWIRE_DECODE_ATTENTION=sdpa)"
    if not wanted(dtype):
        return f"sdpa ({str(dtype).removeprefix('torch.')}: the exact mode)"
    register()
    text = model.config.get_text_config()
    if text is model.config:
        model.set_attn_implementation(NAME)
    else:  # a vision-language model: only its language model decodes
        key = next((k for k in model.config.sub_configs if getattr(model.config, k) is text), None)
        if key is None:
            return "sdpa (no text sub-config found)"
        model.set_attn_implementation({key: NAME})
    return "grouped fp32 for decode, SDPA for prefill"
