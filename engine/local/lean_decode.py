"""A lean decode forward for Llama-family text decoders (Llama, Mistral, Qwen2, Qwen3, SmolLM), issue 22.

It calls the model's own modules' ``forward``, in the order transformers' decoder layer calls them,
with the attention function the model is set to — the same operators on the same tensors — but
without what a full model call adds around them: ``nn.Module.__call__`` on ~400 modules, the mask
builder, the decoder layers' keyword plumbing and the output records (about 1.5 ms of a 15 ms
SmolLM2 decode step on one thread). Two pieces are rewritten with fewer operators and the same
bits: the rotary step (:func:`_rope`) and the RMSNorms (:func:`_rms_norm`). The runner uses it for
decode steps only, and only after it has found its logits equal to the model's own, bit for bit,
on a masked and an unmasked step at load (``ModelRunner._lean_decoder``); anything else runs the
model. Why and what it saves: docs/engine-design.md, "Lean decode forward".
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from typing import Any, NamedTuple

import torch

from engine.local.kv import KVStore, WritePlan
from engine.local.packed import FusedPart

log = logging.getLogger("tokenwire.engine")

SUPPORTED = frozenset({"llama", "mistral", "qwen2", "qwen3"})


def enabled() -> bool:
    """``TOKENWIRE_LEAN_DECODE`` (default on; ``0`` / ``false`` / ``off`` turn it off)."""
    return os.environ.get("TOKENWIRE_LEAN_DECODE", "1").strip().lower() not in ("0", "false", "off", "no")


class _Layer(NamedTuple):
    attn: torch.nn.Module
    input_norm: Callable[..., torch.Tensor]
    q: Callable[..., torch.Tensor]
    k: Callable[..., torch.Tensor]
    v: Callable[..., torch.Tensor]
    q_norm: Callable[..., torch.Tensor] | None
    k_norm: Callable[..., torch.Tensor] | None
    o: Callable[..., torch.Tensor]
    post_norm: Callable[..., torch.Tensor]
    gate: Callable[..., torch.Tensor]
    up: Callable[..., torch.Tensor]
    down: Callable[..., torch.Tensor]
    act: Callable[..., torch.Tensor]
    head_dim: int
    scaling: float
    qkv: Callable[[torch.Tensor], tuple[torch.Tensor, torch.Tensor]] | None  # see _joint_qkv
    q_heads: int


class LeanDecoder:
    """Decode forward of ``model`` (see the module doc): ``__call__`` takes what
    ``ModelRunner._forward`` takes for a decode step and returns ``[rows, vocab]`` logits."""

    def __init__(self, model: Any) -> None:
        inner = model.model
        self.config = model.config
        self.embed = inner.embed_tokens.forward
        self.rotary = inner.rotary_emb.forward
        self.norm = _rms_norm(inner.norm)
        self.lm_head = model.lm_head.forward
        layers = []
        for layer in inner.layers[: self.config.num_hidden_layers]:
            a, mlp = layer.self_attn, layer.mlp
            layers.append(_Layer(
                a, _rms_norm(layer.input_layernorm), a.q_proj.forward, a.k_proj.forward, a.v_proj.forward,
                _rms_norm(a.q_norm) if hasattr(a, "q_norm") else None, _rms_norm(a.k_norm) if hasattr(a, "k_norm") else None,
                a.o_proj.forward, _rms_norm(layer.post_attention_layernorm), mlp.gate_proj.forward, mlp.up_proj.forward,
                mlp.down_proj.forward, mlp.act_fn, int(a.head_dim), float(a.scaling), _joint_qkv(a),
                int(self.config.num_attention_heads)))
        self.layers = layers

    def __call__(self, ids: torch.Tensor, pos: torch.Tensor, mask: torch.Tensor | None, plan: WritePlan,
                 kv: KVStore) -> torch.Tensor:
        return self._forward(ids, pos, mask, lambda i, k, v: kv.write(i, k, v, plan))

    def replay(self, ids: list[int], start: int, row: int, kv: KVStore) -> torch.Tensor:
        """The decode steps of positions ``start .. start + len(ids) - 1`` of KV row ``row`` in one
        forward (a resumed generation's earlier output, issue 39 item 5): each token is a query
        row of its own, as in a decode step, and every one reads ``row`` up to its own position
        (the keys and values expanded over the query rows, stride 0, and a causal mask). With
        row-invariant linears and a decode attention whose bits do not depend on the length it is
        given past a row's mask, this is the same bits as ``len(ids)`` one-token decode steps
        (``ModelRunner._one_pass_replay`` checks it at load). Returns the last token's logits,
        ``[1, vocab]``; writes every position's keys and values into ``row``."""
        n, end = len(ids), start + len(ids)
        pos = torch.arange(start, end)
        mask = (torch.arange(end)[None, :] <= pos[:, None])[:, None, None, :] if n > 1 else None

        def write(i: int, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
            kb, vb = kv.keys[i], kv.values[i]
            if kb is None or vb is None:
                raise RuntimeError("the KV buffers must hold the prompt before a replay")
            kb[row, :, start:end] = k[:, :, -1].transpose(0, 1)
            vb[row, :, start:end] = v[:, :, -1].transpose(0, 1)
            return (kb[row:row + 1, :, :end].expand(n, -1, -1, -1), vb[row:row + 1, :, :end].expand(n, -1, -1, -1))

        return self._forward(torch.tensor(ids)[:, None], pos[:, None], mask, write, last_only=True)

    def _forward(self, ids: torch.Tensor, pos: torch.Tensor, mask: torch.Tensor | None,
                 write: Callable[[int, torch.Tensor, torch.Tensor], tuple[torch.Tensor, torch.Tensor]], *,
                 last_only: bool = False) -> torch.Tensor:
        from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS

        attention = ALL_ATTENTION_FUNCTIONS[self.config._attn_implementation]
        rows = ids.shape[0]
        x = self.embed(ids)
        cos, sin = self.rotary(x, pos)
        cos, sin = cos[:, :, None, :], _signed_sin(sin)  # [rows, 1, 1, head_dim], once per step
        for i, L in enumerate(self.layers):
            h = L.input_norm(x)
            if L.qkv is not None:  # q and k side by side in one product: one rotary step for both
                qk, v = L.qkv(h)
                qk = _rope(qk.view(rows, 1, -1, L.head_dim), cos, sin).transpose(1, 2)
                q, k = qk[:, :L.q_heads], qk[:, L.q_heads:]
                v = v.view(rows, 1, -1, L.head_dim).transpose(1, 2)
                del qk
            else:
                q = L.q(h).view(rows, 1, -1, L.head_dim)
                k = L.k(h).view(rows, 1, -1, L.head_dim)
                v = L.v(h).view(rows, 1, -1, L.head_dim).transpose(1, 2)
                if L.q_norm is not None and L.k_norm is not None:
                    q, k = L.q_norm(q), L.k_norm(k)
                q, k = _rope(q, cos, sin).transpose(1, 2), _rope(k, cos, sin).transpose(1, 2)
            keys, values = write(i, k, v)
            out, _ = attention(L.attn, q, keys, values, mask, dropout=0.0, scaling=L.scaling)
            x = x + L.o(out.reshape(rows, 1, -1).contiguous())
            del q, k, v, keys, values, out  # the next layer's tensors reuse their memory (as in the
            h = L.post_norm(x)  # model, whose locals go when each module returns): 6% of a 16-row step
            x = x + L.down(L.act(L.gate(h)) * L.up(h))
            del h
        if last_only:  # a replay: only the last token's logits are drawn from
            x = x[-1:]
        logits: torch.Tensor = self.lm_head(self.norm(x)[:, -1:, :])[:, -1, :]
        return logits


def _rms_norm(module: torch.nn.Module) -> Callable[[torch.Tensor], torch.Tensor]:
    """``module``'s forward; for the RMSNorm of these families (``weight * (x32 * rsqrt(mean(x32²) +
    eps)).to(dtype)``, x32 the input widened to fp32), the same computation with the normalisation
    as one ``torch.rms_norm`` call, which runs the same operators (pow, mean, add, rsqrt, mul) in
    C++ instead of five Python-level calls."""
    eps, weight = getattr(module, "variance_epsilon", None), getattr(module, "weight", None)
    if not type(module).__name__.endswith("RMSNorm") or not isinstance(eps, float) or not isinstance(
            weight, torch.Tensor):
        return module.forward
    shape = (int(weight.shape[-1]),)

    def norm(x: torch.Tensor) -> torch.Tensor:
        return weight * torch.rms_norm(x.float(), shape, eps=eps).to(x.dtype)

    return norm


def _joint_qkv(attn: torch.nn.Module) -> Callable[[torch.Tensor], tuple[torch.Tensor, torch.Tensor]] | None:
    """Where q, k and v are one fused product in that order (engine/local/packed.py) and q and k
    have no norms of their own: a function ``h -> (qk, v)``, q's and k's outputs as one view, so
    that the rotary step, which acts on each head alike, runs once on both (4 operators, not 8);
    else None. The product is the one the fused parts compute, so the bits are the same."""
    if hasattr(attn, "q_norm") or hasattr(attn, "k_norm"):
        return None
    fused = [p for p in (getattr(attn, n, None) for n in ("q_proj", "k_proj", "v_proj")) if isinstance(p, FusedPart)]
    if len(fused) != 3 or any(p.product is not fused[0].product for p in fused) or [p.index for p in fused] != [0, 1, 2]:
        return None
    product = fused[0].product
    width = product.sizes[0] + product.sizes[1]

    def qkv(h: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        out = product.whole(h)
        return out[..., :width], out[..., width:]

    return qkv


def _signed_sin(sin: torch.Tensor) -> torch.Tensor:
    """``sin`` (``[rows, 1, head_dim]``) with its first half negated, as ``[rows, 1, 1, head_dim]``:
    what :func:`_rope` multiplies the rolled input by."""
    half = sin.shape[-1] // 2
    return torch.cat((-sin[..., :half], sin[..., half:]), dim=-1)[:, :, None, :]


def _rope(x: torch.Tensor, cos: torch.Tensor, signed_sin: torch.Tensor) -> torch.Tensor:
    """transformers' ``apply_rotary_pos_emb`` for one of q / k, bit for bit, in 4 operators instead
    of 7: ``x * cos + rotate_half(x) * sin``, where ``rotate_half(x) = cat(-x2, x1)``. Rolling ``x``
    by half gives ``cat(x2, x1)``, and ``(-a) * b == a * (-b)`` exactly in IEEE arithmetic (a sign
    flip commutes with rounding), so multiplying the rolled ``x`` by the half-negated sine gives the
    same bits as the model's product, and the sum is the same sum."""
    return x * cos + torch.roll(x, x.shape[-1] // 2, dims=-1) * signed_sin


def build(model: Any, *, vision: bool, sliding_window: int | None) -> tuple[LeanDecoder | None, str]:
    """A :class:`LeanDecoder` for ``model`` when its family and shape are ones it reproduces (the
    runner then checks its logits bit for bit), else None; and why, in words."""
    model_type = str(getattr(model.config, "model_type", ""))
    if not enabled():
        return None, "model forward (TOKENWIRE_LEAN_DECODE=0)"
    if vision:
        return None, "model forward (a vision-language model)"
    if model_type not in SUPPORTED:
        return None, f"model forward ({model_type or 'this model type'} has no lean decode)"
    if sliding_window is not None:
        return None, "model forward (sliding-window attention)"
    try:
        return LeanDecoder(model), "lean"
    except (AttributeError, TypeError, ValueError) as exc:  # a variant with other module names
        log.info("no lean decode for %s: %s: %s", type(model).__name__, type(exc).__name__, exc)
        return None, f"model forward ({type(exc).__name__} building the lean decode)"
