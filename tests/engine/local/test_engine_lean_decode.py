"""The lean decode forward (engine/local/lean_decode.py) is used only where it gives the model's
own logits bit for bit: the runner checks that at load and keeps the model's forward otherwise.
Every greedy-parity test of the engine (test_engine_parity, test_engine_packed, test_engine_resume)
decodes through it on the tiny models and SmolLM2, so those compare it with ``model.generate``."""

from __future__ import annotations

import importlib
import types
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch

from engine.local import lean_decode
from engine.local.packed import FusedPart
from engine.local.runner import ModelRunner
from tests.conftest import DEFAULT_MODEL, TINY_MODELS

pytestmark = pytest.mark.slow  # loads models (the fast loop: pytest -m "not slow")


def _runner(path: Path, dtype: torch.dtype) -> ModelRunner:
    runner = ModelRunner(path, dtype=dtype, max_rows=8, max_model_len=256)
    runner.load()
    return runner


def _seq(position: int, token: int) -> Any:
    return types.SimpleNamespace(computed=position, next_input=token, group=types.SimpleNamespace(mm=None))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("name", [*TINY_MODELS, DEFAULT_MODEL])
def test_decode_steps_are_the_models_bits(name: str, dtype: torch.dtype, asset: Callable[[str], Path]) -> None:
    runner = _runner(asset(name), dtype)
    assert runner.decode_forward == "lean (same bits as the model's forward)"
    lean = runner.lean
    assert lean is not None
    # q and k share one rotary step where q/k/v are one fused product and have no norms of their own
    attn = runner.model.model.layers[0].self_attn
    joint = isinstance(attn.q_proj, FusedPart) and not hasattr(attn, "q_norm")
    assert {layer.qkv is not None for layer in lean.layers} == {joint}
    if name == DEFAULT_MODEL:
        assert joint == (dtype == torch.bfloat16)  # SmolLM2 in bf16: the path the engine serves with
    gen = torch.Generator().manual_seed(1)
    with torch.inference_mode():
        for step in range(6):  # rows of different lengths (masked), then all at one position (no mask)
            positions = [9 + step + 3 * i for i in range(3)] if step < 3 else [20 + step] * 3
            seqs = [_seq(p, int(t)) for p, t in zip(positions, torch.randint(5, 200, (3,), generator=gen), strict=True)]
            runner.lean = None
            want = runner.decode(seqs)
            runner.lean = lean
            got = runner.decode(seqs)
            assert torch.equal(want, got), step


def test_it_is_refused_when_its_logits_differ(asset: Callable[[str], Path], monkeypatch: pytest.MonkeyPatch) -> None:
    real = lean_decode.LeanDecoder.__call__

    def off_by_a_little(self: lean_decode.LeanDecoder, *args: Any) -> torch.Tensor:
        return real(self, *args) + 1e-3

    monkeypatch.setattr(lean_decode.LeanDecoder, "__call__", off_by_a_little)
    runner = _runner(asset(TINY_MODELS[0]), torch.float32)
    assert runner.lean is None
    assert runner.decode_forward == "model forward (the lean decode's logits differ from the model's)"


def test_a_lean_decode_that_fails_leaves_the_model_forward(asset: Callable[[str], Path],
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(self: lean_decode.LeanDecoder, *args: Any) -> torch.Tensor:
        raise RuntimeError("a module this model variant does not have")

    monkeypatch.setattr(lean_decode.LeanDecoder, "__call__", broken)
    runner = _runner(asset(TINY_MODELS[0]), torch.float32)
    assert (runner.lean, runner.decode_forward) == (None, "model forward (RuntimeError in the lean decode's check)")
    with torch.inference_mode():
        assert runner.decode([_seq(4, 7)]).shape[0] == 1  # and the engine still decodes


def test_it_can_be_turned_off_and_is_not_built_for_other_models(asset: Callable[[str], Path],
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TOKENWIRE_LEAN_DECODE", "0")
    runner = _runner(asset(TINY_MODELS[0]), torch.float32)
    assert (runner.lean, runner.decode_forward) == (None, "model forward (TOKENWIRE_LEAN_DECODE=0)")
    monkeypatch.delenv("TOKENWIRE_LEAN_DECODE")
    other = types.SimpleNamespace(config=types.SimpleNamespace(model_type="gemma2"))
    assert lean_decode.build(other, vision=False, sliding_window=None) == (
        None, "model forward (gemma2 has no lean decode)")
    assert lean_decode.build(other, vision=True, sliding_window=None)[1] == "model forward (a vision-language model)"
    llama = types.SimpleNamespace(config=types.SimpleNamespace(model_type="llama"))
    assert lean_decode.build(llama, vision=False, sliding_window=4096)[1] == "model forward (sliding-window attention)"


def _modeling(family: str) -> Any:
    """transformers' modeling module of a family the lean decode supports."""
    return importlib.import_module(f"transformers.models.{family}.modeling_{family}")


@pytest.mark.parametrize("family", ["llama", "qwen2", "qwen3", "mistral"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_its_rotary_step_is_the_modeling_files_bit_for_bit(family: str, dtype: torch.dtype) -> None:
    apply = _modeling(family).apply_rotary_pos_emb
    gen = torch.Generator().manual_seed(3)
    for rows, heads, dim in ((1, 9, 64), (16, 3, 64), (5, 4, 128), (2, 2, 16)):
        q = (torch.randn(rows, 1, heads, dim, generator=gen) * 4).to(dtype)
        k = (torch.randn(rows, 1, 1, dim, generator=gen) * 4).to(dtype)
        angles = torch.rand(rows, 1, dim // 2, generator=gen) * 1000
        cos, sin = torch.cat((angles, angles), -1).cos().to(dtype), torch.cat((angles, angles), -1).sin().to(dtype)
        want_q, want_k = apply(q.transpose(1, 2), k.transpose(1, 2), cos, sin)
        signed = lean_decode._signed_sin(sin)
        got_q = lean_decode._rope(q, cos[:, :, None, :], signed).transpose(1, 2)
        got_k = lean_decode._rope(k, cos[:, :, None, :], signed).transpose(1, 2)
        assert torch.equal(want_q, got_q) and torch.equal(want_k, got_k), (rows, heads, dim)


@pytest.mark.parametrize("family", ["llama", "qwen2", "qwen3", "mistral"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_its_rms_norm_is_the_modeling_files_bit_for_bit(family: str, dtype: torch.dtype) -> None:
    norm = getattr(_modeling(family), f"{'Qwen2' if family == 'qwen2' else family.capitalize()}RMSNorm")(96, eps=1e-6).to(dtype)
    gen = torch.Generator().manual_seed(4)
    with torch.no_grad():
        norm.weight.copy_(torch.randn(96, generator=gen))
    lean = lean_decode._rms_norm(norm)
    assert lean != norm.forward  # the rewrite applies to this family's norm
    with torch.inference_mode():
        for scale in (1e-3, 1.0, 37.0):
            x = (torch.randn(7, 1, 96, generator=gen) * scale).to(dtype)
            assert torch.equal(norm(x), lean(x)), scale
    other = torch.nn.LayerNorm(96)
    assert lean_decode._rms_norm(other) == other.forward  # anything else keeps its own forward (a bound method: ==)
