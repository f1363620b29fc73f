"""The native bf16 linear kernel (engine/local/native/linear.c, built here with the machine's
compiler): each output within the error bound of fp32 sums rounded once to bf16 (packed.error_bound)
of the float64 product, and the same bits whatever the number of rows, the thread count, or the
sibling weights packed beside it — the properties the engine's greedy parity rests on. The
AVX512-BF16 path is what this machine builds where it has the instructions; the portable loops
are built here too, for a CPU without them."""

from __future__ import annotations

import platform
import shutil
from pathlib import Path

import pytest
import torch

from engine.local import native
from engine.local.packed import FusedPart, FusedProduct, NativeProduct, PackedLinear, _agrees, error_bound


@pytest.fixture(scope="module")
def kernel(tmp_path_factory: pytest.TempPathFactory) -> native.NativeLinear:
    loaded = native.load(tmp_path_factory.mktemp("cache"))
    assert loaded.library is not None, loaded.detail  # the test machine has a C compiler (scripts/install.sh)
    return loaded.library.linear


@pytest.fixture(scope="module")
def portable(tmp_path_factory: pytest.TempPathFactory) -> native.NativeLinear:
    """The library built with -DTW_PORTABLE (native/cpu.h): the portable loops, as a CPU without
    AVX512-BF16 runs them."""
    compiler = shutil.which("cc")
    if compiler is None or platform.machine() not in ("x86_64", "AMD64"):
        pytest.skip("the portable build is checked on x86-64 with cc")
    target = tmp_path_factory.mktemp("portable") / "portable.so"
    flags = (*native.FLAGS, "-DTW_PORTABLE", *native.VARIANTS[0][1])
    native.build(target, compiler, flags)
    library = native.Library(target)
    assert not library.linear.vector
    return library.linear


def _weights(n: int, k: int, seed: int, bias: bool) -> tuple[torch.Tensor, torch.Tensor | None]:
    gen = torch.Generator().manual_seed(seed)
    w = (torch.randn(n, k, generator=gen) * 0.1).to(torch.bfloat16)
    return w, (torch.randn(n, generator=gen).to(torch.bfloat16) if bias else None)


def _product(kernel: native.NativeLinear, x: torch.Tensor, w: torch.Tensor, b: torch.Tensor | None) -> torch.Tensor:
    return kernel(x, kernel.pack(w), kernel.pack_bias(b), w.shape[0])


def _within_bound(got: torch.Tensor, x: torch.Tensor, w: torch.Tensor, b: torch.Tensor | None) -> None:
    want, bound = error_bound(x.reshape(-1, x.shape[-1]), w, b)
    err = (got.reshape(-1, w.shape[0]).double() - want).abs()
    assert bool((err <= bound).all()), f"worst error {float((err - bound).max())} past the bound"
    # and not loose by construction: F.linear's own error is of the same order
    ref = torch.nn.functional.linear(x, w, b).reshape(-1, w.shape[0]).double()
    assert float(err.max()) <= 2 * float((ref - want).abs().max()) + 1e-6


@pytest.mark.parametrize("which", ["vector", "portable"])
@pytest.mark.parametrize(("m", "k", "n"), [(1, 576, 960), (2, 64, 64), (5, 7, 65), (6, 1, 1), (7, 577, 63),
                                           (13, 130, 200), (64, 1536, 576)])
@pytest.mark.parametrize("bias", [False, True])
def test_each_output_is_within_the_bound_of_one_bf16_rounding(kernel: native.NativeLinear,
                                                               portable: native.NativeLinear, which: str, m: int,
                                                               k: int, n: int, bias: bool) -> None:
    lin = kernel if which == "vector" else portable
    if which == "vector" and not kernel.vector:
        pytest.skip("this CPU has no AVX512-BF16: the engine uses oneDNN's linears here")
    w, b = _weights(n, k, m * 1000 + k + n, bias)
    x = torch.randn(m, k, generator=torch.Generator().manual_seed(k)).to(torch.bfloat16)
    got = _product(lin, x, w, b)
    assert got.shape == (m, n) and got.dtype == torch.bfloat16
    _within_bound(got, x, w, b)


def test_a_row_has_the_same_bits_alone_in_any_batch_and_at_any_thread_count(kernel: native.NativeLinear) -> None:
    w, b = _weights(960, 576, 3, True)
    pw, pb = kernel.pack(w), kernel.pack_bias(b)
    x = torch.randn(37, 576, generator=torch.Generator().manual_seed(4)).to(torch.bfloat16)
    whole = kernel(x, pw, pb, 960)
    for rows in (slice(0, 1), slice(5, 6), slice(3, 10), slice(30, 37), slice(1, 14)):
        assert torch.equal(kernel(x[rows], pw, pb, 960), whole[rows])
    threads = torch.get_num_threads()
    try:
        for count in (1, 2, 3):
            torch.set_num_threads(count)
            assert torch.equal(kernel(x, pw, pb, 960), whole)
    finally:
        torch.set_num_threads(threads)


def test_views_and_leading_dimensions_are_read_as_rows(kernel: native.NativeLinear) -> None:
    w, _ = _weights(100, 48, 5, False)
    pw = kernel.pack(w)
    big = torch.randn(2, 3, 80, generator=torch.Generator().manual_seed(6)).to(torch.bfloat16)
    x = big[..., 10:58]  # a row stride of 80, not 48
    got = kernel(x, pw, None, 100)
    assert got.shape == (2, 3, 100)
    assert torch.equal(got, kernel(x.contiguous(), pw, None, 100))
    assert torch.equal(got.reshape(6, 100), kernel(x.reshape(6, 48), pw, None, 100))
    assert kernel(x[:0], pw, None, 100).shape == (0, 3, 100)
    row = x[0, 0]
    assert torch.equal(kernel(row.expand(4, 48), pw, None, 100), kernel(row.repeat(4, 1), pw, None, 100))  # stride 0


def test_a_non_finite_input_reaches_only_its_own_row(kernel: native.NativeLinear) -> None:
    w, _ = _weights(70, 32, 7, False)
    pw = kernel.pack(w)
    x = torch.randn(4, 32, generator=torch.Generator().manual_seed(8)).to(torch.bfloat16)
    clean = kernel(x, pw, None, 70)
    x[2, 5] = float("nan")
    x[1, 0] = float("inf")
    got = kernel(x, pw, None, 70)
    assert bool(got[2].isnan().all()) and not bool(got[1].isfinite().any())
    assert torch.equal(got[[0, 3]], clean[[0, 3]])


def test_what_it_does_not_take_is_refused_with_a_reason(kernel: native.NativeLinear) -> None:
    with pytest.raises(ValueError, match="2-d bf16 weights"):
        kernel.pack(torch.zeros(4, 4))
    pw = kernel.pack(torch.zeros(4, 4, dtype=torch.bfloat16))
    with pytest.raises(TypeError, match="bf16 inputs"):
        kernel(torch.zeros(1, 4), pw, None, 4)


def test_fused_siblings_get_the_bits_of_their_own_products(kernel: native.NativeLinear) -> None:
    """q/k/v packed side by side: each slice equals the sibling's product alone, bit for bit, so
    fusing changes nothing (the same holds of the oneDNN product, checked in test_engine_packed)."""
    siblings = [torch.nn.Linear(64, n, bias=True).to(torch.bfloat16) for n in (48, 16, 80)]
    weight = torch.cat([s.weight.detach() for s in siblings])
    bias = torch.cat([s.bias.detach() for s in siblings])
    product = FusedProduct(NativeProduct(kernel, weight, bias), [48, 16, 80])
    parts = [FusedPart(s, product, i) for i, s in enumerate(siblings)]
    alone = [PackedLinear(s, NativeProduct(kernel, s.weight.detach(), s.bias)) for s in siblings]
    x = torch.randn(3, 5, 64, generator=torch.Generator().manual_seed(9)).to(torch.bfloat16)
    with torch.inference_mode():
        for index in (2, 0, 1):
            assert torch.equal(parts[index](x), alone[index](x))


def test_the_load_time_check_passes_the_kernel_and_catches_a_wrong_product(kernel: native.NativeLinear) -> None:
    """engine/local/packed.py checks each weight shape at load on a sample of its outputs (the
    last one always): a product without its bias, or with its last output off, fails."""
    linear = torch.nn.Linear(200, 1100, bias=True).to(torch.bfloat16)
    good = NativeProduct(kernel, linear.weight.detach(), linear.bias)

    def last_off(x: torch.Tensor) -> torch.Tensor:
        out = good(x)
        out[..., -1] += 0.5
        return out

    with torch.inference_mode():
        assert _agrees([linear], FusedProduct(good, [1100]), exact=False)
        assert not _agrees([linear], FusedProduct(NativeProduct(kernel, linear.weight.detach(), None), [1100]),
                           exact=False)
        assert not _agrees([linear], FusedProduct(last_off, [1100]), exact=False)


def test_the_library_holds_both_kernels_and_is_built_from_every_source(tmp_path: Path) -> None:
    library = native.load(tmp_path).library
    assert library is not None
    assert {s.name for s in native.SOURCES} == {"decode_attention.c", "linear.c", "pool.c"}
    assert library.attention.parallel == library.linear.parallel == library.parallel
