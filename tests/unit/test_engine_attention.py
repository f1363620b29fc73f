"""The engine's decode attention in bf16 (engine/local/attention.py): one query token per row in
fp32 matmuls instead of torch's CPU flash kernel. It must be at least as close to exact
(float64) attention as SDPA is, on the shapes the engine gives it (grouped query heads, strided
views into the KV buffer, masked rows of different lengths), and everything it does not handle
must be SDPA's own result, bit for bit."""

from __future__ import annotations

import logging

import pytest
import torch
import torch.nn.functional as F

from engine.local import attention
from engine.local.attention import decode_attention

HQ, HKV, D = 9, 3, 64


def _exact(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
    """float64 attention with key-value heads repeated as transformers' ``repeat_kv``; ``[b, 1, hq, d]``."""
    g = q.shape[1] // k.shape[1]
    kk, vv = (t.double().repeat_interleave(g, dim=1) for t in (k, v))
    scores = q.double() @ kk.transpose(-1, -2) * q.shape[-1] ** -0.5
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    out: torch.Tensor = (scores.softmax(-1) @ vv).transpose(1, 2)
    return out


def _case(rows: int, length: int, *, ragged: bool, seed: int
          ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor | None]:
    gen = torch.Generator().manual_seed(seed)
    # views into a larger buffer, as the engine's KV store hands them to the attention
    keys = torch.randn(rows + 2, HKV, length + 40, D, generator=gen).to(torch.bfloat16)
    values = torch.randn(rows + 2, HKV, length + 40, D, generator=gen).to(torch.bfloat16)
    query = (torch.randn(rows, HQ, 1, D, generator=gen) * 2).to(torch.bfloat16)
    k, v = keys[:rows, :, :length], values[:rows, :, :length]
    mask = None
    if ragged:
        lengths = torch.tensor([length - i * length // (rows + 1) for i in range(rows)])  # each row >= 1
        mask = (torch.arange(length)[None, :] < lengths[:, None])[:, None, None, :]
    return query, k, v, mask


@pytest.mark.parametrize(("rows", "length", "ragged"), [(1, 1, False), (1, 37, False), (4, 130, True),
                                                       (16, 64, True), (8, 300, False)])
def test_decode_attention_is_as_close_to_exact_as_sdpa(rows: int, length: int, ragged: bool) -> None:
    for seed in range(3):
        q, k, v, mask = _case(rows, length, ragged=ragged, seed=seed)
        exact = _exact(q, k, v, mask)
        got = decode_attention(q, k, v, mask, D ** -0.5)
        sdpa = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=D ** -0.5, enable_gqa=True).transpose(1, 2)
        assert got.shape == sdpa.shape == (rows, 1, HQ, D) and got.dtype == torch.bfloat16
        ours, theirs = (got.double() - exact).abs().max().item(), (sdpa.double() - exact).abs().max().item()
        # float32 math, one rounding to bf16 at the end: within half a bf16 ulp of the exact value
        assert torch.allclose(got.double(), exact, rtol=2 ** -8, atol=1e-6)
        assert ours <= theirs + 1e-6, (ours, theirs)


def test_an_additive_mask_is_the_same_as_a_boolean_one() -> None:
    q, k, v, mask = _case(4, 50, ragged=True, seed=9)
    assert mask is not None
    additive = torch.zeros(mask.shape).masked_fill(~mask, float("-inf"))
    assert torch.equal(decode_attention(q, k, v, mask, D ** -0.5), decode_attention(q, k, v, additive, D ** -0.5))


class _Module(torch.nn.Module):
    is_causal = True
    num_key_value_groups = HQ // HKV


@pytest.mark.parametrize("case", ["prefill", "fp32", "softcap"])
def test_what_the_decode_path_does_not_handle_is_sdpa_bit_for_bit(case: str) -> None:
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    q, k, v, _ = _case(2, 24, ragged=False, seed=4)
    if case == "prefill":
        q = torch.randn(2, HQ, 5, D).to(torch.bfloat16)
    elif case == "fp32":
        q, k, v = q.float(), k.float(), v.float()
    module = _Module().eval()
    if case == "softcap":  # SDPA refuses softcapping; the decode path must not quietly ignore it
        with pytest.raises(ValueError, match="softcap"):
            attention._attention(module, q, k, v, None, scaling=D ** -0.5, softcap=30.0)
        return
    want, _ = sdpa_attention_forward(module, q, k, v, None, scaling=D ** -0.5)
    got, _ = attention._attention(module, q, k, v, None, scaling=D ** -0.5)
    assert torch.equal(got, want)


def test_a_bf16_decode_call_takes_the_grouped_path() -> None:
    q, k, v, mask = _case(3, 40, ragged=True, seed=2)
    got, _ = attention._attention(_Module().eval(), q, k, v, mask, scaling=D ** -0.5)
    assert torch.equal(got, decode_attention(q, k, v, mask, D ** -0.5))


def test_the_setting_turns_it_off_and_a_bad_value_is_named(monkeypatch: pytest.MonkeyPatch,
                                                            caplog: pytest.LogCaptureFixture) -> None:
    monkeypatch.delenv("TOKENWIRE_DECODE_ATTENTION", raising=False)
    assert attention.wanted(torch.bfloat16) and not attention.wanted(torch.float32)
    monkeypatch.setenv("TOKENWIRE_DECODE_ATTENTION", "sdpa")
    assert not attention.wanted(torch.bfloat16)
    assert attention.install(object(), torch.bfloat16) == "sdpa (TOKENWIRE_DECODE_ATTENTION=sdpa)"
    monkeypatch.setenv("TOKENWIRE_DECODE_ATTENTION", "flash")
    with caplog.at_level(logging.WARNING, logger="tokenwire.engine"):
        assert attention.wanted(torch.bfloat16)
    assert "TOKENWIRE_DECODE_ATTENTION='flash'" in caplog.text
