"""The engine's decode attention in bf16 (engine/local/attention.py): one query token per row in
fp32, by the native kernel (engine/local/native.py, built here with the machine's compiler) or
grouped matmuls, instead of torch's CPU flash kernel. Each must be at least as close to exact
(float64) attention as SDPA is, on the shapes the engine gives it (grouped query heads, strided
views into the KV buffer, masked rows of different lengths), and everything they do not handle
must be SDPA's own result, bit for bit."""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.nn.functional as F

from engine.local import attention, native
from engine.local.attention import decode_attention

HQ, HKV, D = 9, 3, 64


@pytest.fixture(scope="module")
def kernel(tmp_path_factory: pytest.TempPathFactory) -> native.NativeAttention:
    loaded = native.load(tmp_path_factory.mktemp("cache"))
    assert loaded.library is not None, loaded.detail  # the test machine has a C compiler (scripts/install.sh)
    return loaded.library.attention


def _kernels(kernel: native.NativeAttention) -> dict[str, Callable[..., torch.Tensor]]:
    def run(*args: Any) -> torch.Tensor:
        out = kernel(*args)
        assert out is not None  # every case below is one it takes
        return out

    return {"grouped": decode_attention, "native": run}


def _exact(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
    """float64 attention with key-value heads repeated as transformers' ``repeat_kv``; ``[b, 1, hq, d]``."""
    g = q.shape[1] // k.shape[1]
    kk, vv = (t.double().repeat_interleave(g, dim=1) for t in (k, v))
    scores = q.double() @ kk.transpose(-1, -2) * q.shape[-1] ** -0.5
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    out: torch.Tensor = (scores.softmax(-1) @ vv).transpose(1, 2)
    return out


def _case(rows: int, length: int, *, ragged: bool, seed: int, hq: int = HQ, hkv: int = HKV, d: int = D
          ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor | None]:
    gen = torch.Generator().manual_seed(seed)
    # views into a larger buffer, as the engine's KV store hands them to the attention
    keys = torch.randn(rows + 2, hkv, length + 40, d, generator=gen).to(torch.bfloat16)
    values = torch.randn(rows + 2, hkv, length + 40, d, generator=gen).to(torch.bfloat16)
    query = (torch.randn(rows, hq, 1, d, generator=gen) * 2).to(torch.bfloat16)
    k, v = keys[:rows, :, :length], values[:rows, :, :length]
    mask = None
    if ragged:
        lengths = torch.tensor([length - i * length // (rows + 1) for i in range(rows)])  # each row >= 1
        mask = (torch.arange(length)[None, :] < lengths[:, None])[:, None, None, :]
    return query, k, v, mask


@pytest.mark.parametrize("which", ["grouped", "native"])
@pytest.mark.parametrize(("rows", "length", "ragged", "heads"), [
    (1, 1, False, (HQ, HKV, D)), (1, 37, False, (HQ, HKV, D)), (4, 130, True, (HQ, HKV, D)),
    (16, 64, True, (HQ, HKV, D)), (8, 300, False, (HQ, HKV, D)),
    # other head shapes: head_dim 128 and 32 take the native kernel's portable loops, 64 its vector path
    (3, 90, True, (16, 8, 128)), (2, 50, True, (8, 2, 32)), (2, 20, False, (4, 4, 64))])
def test_decode_attention_is_as_close_to_exact_as_sdpa(kernel: native.NativeAttention, which: str, rows: int,
                                                       length: int, ragged: bool, heads: tuple[int, int, int]) -> None:
    run = _kernels(kernel)[which]
    hq, hkv, d = heads
    for seed in range(3):
        q, k, v, mask = _case(rows, length, ragged=ragged, seed=seed, hq=hq, hkv=hkv, d=d)
        exact = _exact(q, k, v, mask)
        got = run(q, k, v, mask, d ** -0.5)
        sdpa = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=d ** -0.5, enable_gqa=True).transpose(1, 2)
        assert got.shape == sdpa.shape == (rows, 1, hq, d) and got.dtype == torch.bfloat16
        ours, theirs = (got.double() - exact).abs().max().item(), (sdpa.double() - exact).abs().max().item()
        # float32 math, one rounding to bf16 at the end: within half a bf16 ulp of the exact value
        assert torch.allclose(got.double(), exact, rtol=2 ** -8, atol=1e-6)
        assert ours <= theirs + 1e-6, (ours, theirs)


def test_the_native_kernel_gives_a_row_the_same_bits_alone_and_in_any_batch(kernel: native.NativeAttention) -> None:
    q, k, v, mask = _case(6, 120, ragged=True, seed=5)
    assert mask is not None
    batch = kernel(q, k, v, mask, D ** -0.5)
    assert batch is not None
    for row in range(6):
        alone = kernel(q[row:row + 1], k[row:row + 1], v[row:row + 1], mask[row:row + 1], D ** -0.5)
        assert alone is not None and torch.equal(alone, batch[row:row + 1])
    # a row reads only its unmasked positions: garbage past its length changes nothing
    k2, v2 = k.clone(), v.clone()
    k2[1:, :, 110:] = float("nan")
    v2[1:, :, 110:] = float("inf")
    garbage = kernel(q, k2, v2, mask, D ** -0.5)
    assert garbage is not None and torch.equal(garbage, batch)


@pytest.mark.parametrize("d", [64, 32])  # the AVX-512 path, and the portable loops
def test_a_row_alone_at_its_length_has_the_bits_of_the_same_row_masked_in_a_longer_batch(
        kernel: native.NativeAttention, d: int) -> None:
    """What the one-pass replay of a resumed generation relies on (issue 39 item 5), and what a
    decode batch of rows of different lengths needs to give each row its own bits: a row read
    alone at its length L and masked in a call of length T > L. Before, the last L % 16 positions'
    scores were reduced in another order than a whole block's (11 of 952 cases differed at d=64)."""
    differ = []
    for seed in range(8):
        gen = torch.Generator().manual_seed(seed)
        t = 120
        q = (torch.randn(1, HQ, 1, d, generator=gen) * 4).to(torch.bfloat16)
        k = torch.randn(1, HKV, t, d, generator=gen).to(torch.bfloat16)
        v = torch.randn(1, HKV, t, d, generator=gen).to(torch.bfloat16)
        for length in range(1, t):
            alone = kernel(q, k[:, :, :length], v[:, :, :length], None, d ** -0.5)
            masked = kernel(q, k, v, (torch.arange(t) < length)[None, None, None, :], d ** -0.5)
            assert alone is not None and masked is not None
            if not torch.equal(alone, masked):
                differ.append((seed, length))
        # one call for several positions of one row (keys expanded, stride 0), as the replay makes it
        rows = torch.arange(40, 60)
        qs = (torch.randn(len(rows), HQ, 1, d, generator=gen) * 4).to(torch.bfloat16)
        together = kernel(qs, k.expand(len(rows), -1, -1, -1), v.expand(len(rows), -1, -1, -1),
                          (torch.arange(t)[None, :] <= rows[:, None])[:, None, None, :], d ** -0.5)
        assert together is not None
        for i, p in enumerate(rows.tolist()):
            one = kernel(qs[i:i + 1], k[:, :, :p + 1], v[:, :, :p + 1], None, d ** -0.5)
            if not torch.equal(together[i:i + 1], one):
                differ.append((seed, -p))
    assert differ == []


def test_the_native_kernel_gives_the_same_bits_on_any_thread_count_and_loads_no_second_openmp(
        kernel: native.NativeAttention) -> None:
    assert kernel.parallel  # built with its own threads (native/pool.c)
    q, k, v, mask = _case(8, 300, ragged=True, seed=7)  # past the grain: the rows are shared
    before = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        one = kernel(q, k, v, mask, D ** -0.5)
        torch.set_num_threads(2)
        two = kernel(q, k, v, mask, D ** -0.5)
    finally:
        torch.set_num_threads(before)
    assert one is not None and two is not None and torch.equal(one, two)
    # the kernels use no OpenMP runtime: the only libgomp is the one torch loaded, none of the system's
    # beside it (wheels may vendor their own under other sonames: sentencepiece does)
    maps = Path("/proc/self/maps").read_text().splitlines()
    runtimes = {line.split()[-1] for line in maps if "libgomp" in line or "libomp" in line}
    assert str(Path(torch.__file__).parent / "lib" / "libgomp.so.1") in runtimes, runtimes
    assert {r for r in runtimes if "site-packages" not in r} == set(), runtimes


def test_the_native_kernel_declines_what_it_does_not_take(kernel: native.NativeAttention) -> None:
    q, k, v, mask = _case(2, 30, ragged=True, seed=6)
    assert mask is not None
    additive = torch.zeros(mask.shape).masked_fill(~mask, float("-inf"))
    assert kernel(q, k, v, additive, D ** -0.5) is None
    assert kernel(q.half(), k.half(), v.half(), mask, D ** -0.5) is None
    assert kernel(q, k.transpose(2, 3).contiguous().transpose(2, 3), v, mask, D ** -0.5) is None  # head_dim strided
    # the registered attention then takes the grouped matmuls, with the same result as calling them
    got, _ = attention._native_first(_Module().eval(), q, k, v, additive, scaling=D ** -0.5)
    assert torch.equal(got, decode_attention(q, k, v, mask, D ** -0.5))


def test_the_kernel_is_built_once_per_cache_and_a_failed_build_says_why(tmp_path: Path,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    first = native.load(tmp_path).library
    assert first is not None and first.path.parent == tmp_path / "kernels"
    built = first.path.stat().st_mtime_ns
    again = native.load(tmp_path).library
    assert again is not None and again.path == first.path
    assert again.path.stat().st_mtime_ns == built  # found, not rebuilt
    assert [p.name for p in (tmp_path / "kernels").iterdir()] == [first.path.name]  # no temp file left
    monkeypatch.setenv("CC", "tokenwire-no-such-compiler")
    none = native.load(tmp_path / "other")
    assert none.library is None and none.detail == "no C compiler (tokenwire-no-such-compiler not found)"
    monkeypatch.setenv("CC", "false")
    failed = native.load(tmp_path / "other")
    assert failed.library is None and failed.detail.startswith("build failed: ")
    assert not (tmp_path / "other" / "kernels").exists() or not any((tmp_path / "other" / "kernels").iterdir())


def test_the_install_step_builds_the_library_the_engine_then_loads_without_a_compiler(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    installed = tmp_path / "venv" / "share" / "tokenwire" / "kernels"
    monkeypatch.setattr(native, "INSTALLED", installed)
    assert native.main(["build"]) == 0  # python -m engine.local.native build (scripts/install.sh)
    (built,) = installed.iterdir()
    assert str(built) in capsys.readouterr().out
    monkeypatch.setenv("CC", "tokenwire-no-such-compiler")
    loaded = native.load(tmp_path / "cache", installed=installed)
    assert loaded.library is not None and loaded.library.path == built and loaded.detail.startswith("installed, ")
    assert not (tmp_path / "cache" / "kernels").exists()  # nothing built at first use
    assert native.main(["build"]) == 0  # already there: found, not rebuilt
    assert native.main(["build", "now"]) == 2
    monkeypatch.setattr(native, "INSTALLED", tmp_path / "other" / "kernels")
    assert native.main(["build"]) == 1 and "no C compiler" in capsys.readouterr().err


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
            attention._native_first(module, q, k, v, None, scaling=D ** -0.5, softcap=30.0)
        return
    want, _ = sdpa_attention_forward(module, q, k, v, None, scaling=D ** -0.5)
    for path in (attention._native_first, attention._grouped):
        got, _ = path(module, q, k, v, None, scaling=D ** -0.5)
        assert torch.equal(got, want)


def test_a_bf16_decode_call_takes_the_native_kernel_else_the_grouped_path(
        kernel: native.NativeAttention, monkeypatch: pytest.MonkeyPatch) -> None:
    q, k, v, mask = _case(3, 40, ragged=True, seed=2)
    monkeypatch.setattr(attention, "_native", kernel)
    got, _ = attention._native_first(_Module().eval(), q, k, v, mask, scaling=D ** -0.5)
    want = kernel(q, k, v, mask, D ** -0.5)
    assert want is not None and torch.equal(got, want)
    got, _ = attention._grouped(_Module().eval(), q, k, v, mask, scaling=D ** -0.5)
    assert torch.equal(got, decode_attention(q, k, v, mask, D ** -0.5))
    monkeypatch.setattr(attention, "_native", None)  # where no kernel was built
    got, _ = attention._native_first(_Module().eval(), q, k, v, mask, scaling=D ** -0.5)
    assert torch.equal(got, decode_attention(q, k, v, mask, D ** -0.5))


def test_the_setting_chooses_the_path_and_a_bad_value_is_named(monkeypatch: pytest.MonkeyPatch,
                                                               caplog: pytest.LogCaptureFixture, tmp_path: Path) -> None:
    monkeypatch.setenv("TOKENWIRE_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(native, "INSTALLED", tmp_path / "installed")  # none installed: built into the cache
    monkeypatch.setattr(attention, "_native_loaded", None)
    monkeypatch.setattr(native, "_shared", None)
    monkeypatch.setattr(attention, "_native", None)
    monkeypatch.delenv("TOKENWIRE_DECODE_ATTENTION", raising=False)
    assert attention.wanted(torch.bfloat16) and not attention.wanted(torch.float32)
    assert attention.mode() == "native" and attention.register() == attention.NAME
    assert attention.decode_kernel(attention.NAME).startswith("native fp32 (built by ")  # not installed: built
    assert os.listdir(tmp_path / "kernels")
    assert native.describe().startswith(f"{tmp_path / 'kernels'}/tokenwire-")  # /engine/stats' native_kernels
    monkeypatch.setenv("TOKENWIRE_DECODE_ATTENTION", "grouped")
    assert attention.register() == attention.GROUPED
    assert attention.decode_kernel(attention.GROUPED) == "grouped fp32 (TOKENWIRE_DECODE_ATTENTION=grouped)"
    monkeypatch.setenv("TOKENWIRE_DECODE_ATTENTION", "sdpa")
    assert not attention.wanted(torch.bfloat16)
    assert attention.install(object(), torch.bfloat16) == "sdpa (TOKENWIRE_DECODE_ATTENTION=sdpa)"
    monkeypatch.setenv("TOKENWIRE_DECODE_ATTENTION", "flash")
    with caplog.at_level(logging.WARNING, logger="tokenwire.engine"):
        assert attention.wanted(torch.bfloat16) and attention.mode() == "native"
    assert "TOKENWIRE_DECODE_ATTENTION='flash'" in caplog.text


def test_without_a_compiler_the_engine_decodes_with_grouped_matmuls_and_says_why(
        monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture, tmp_path: Path) -> None:
    monkeypatch.setenv("TOKENWIRE_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(native, "INSTALLED", tmp_path / "installed")  # none installed, and none can be built
    monkeypatch.setattr(attention, "_native_loaded", None)
    monkeypatch.setattr(native, "_shared", None)
    monkeypatch.setattr(attention, "_native", None)
    monkeypatch.delenv("TOKENWIRE_DECODE_ATTENTION", raising=False)
    monkeypatch.setenv("CC", "tokenwire-no-such-compiler")
    with caplog.at_level(logging.WARNING, logger="tokenwire.engine"):
        assert attention.register() == attention.GROUPED
    warning = [r for r in caplog.records if r.levelno == logging.WARNING and "NATIVE KERNELS UNAVAILABLE" in r.message]
    assert len(warning) == 1 and "(no C compiler (tokenwire-no-such-compiler not found))" in warning[0].message
    assert native.describe() == (f"unavailable, fallback: {native.FALLBACK} "
                                 "(no C compiler (tokenwire-no-such-compiler not found))")
    assert attention.decode_kernel(attention.GROUPED) == (
        "grouped fp32 (native kernel: no C compiler (tokenwire-no-such-compiler not found))")
