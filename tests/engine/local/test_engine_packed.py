"""Prepacked bf16 linears (engine/local/packed.py): the engine uses them by default in bf16. With
oneDNN's kernel they give the same bits as ``F.linear`` up to 32 rows, fused siblings (q/k/v,
gate/up) included (past 32 rows torch's ``F.linear`` itself takes another oneDNN kernel on CPUs
with AMX); with either kernel, native (the default where it is built with AVX512-BF16) or oneDNN,
the whole model's logits are no further from the fp32 model's than ``F.linear``'s are, and the
engine and its ``model.generate`` reference (which packs the same way) decode the same tokens
(test_engine_parity's default-dtype test runs with them on this CPU). The kernel itself:
test_engine_native_linear."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, cast

import pytest
import torch

from engine.local import native
from engine.local.packed import FusedPart, FusedProduct, OneDnnProduct, PackedLinear, pack_linears
from tests.conftest import DEFAULT_MODEL, TINY_MODELS
from tests.support.engine_harness import Reference, request, running_engine

pytestmark = [pytest.mark.skipif(not cast(Any, torch.backends.mkldnn).is_available(),
                                 reason="torch built without oneDNN"),
              pytest.mark.slow]  # whole models loaded and run (the fast loop: pytest -m "not slow")


def _load(path: Path, dtype: torch.dtype) -> Any:
    from transformers import AutoModelForCausalLM

    model: Any = AutoModelForCausalLM.from_pretrained(str(path), dtype=dtype, attn_implementation="sdpa",
                                                      local_files_only=True)
    return model.eval()


def _linears(model: Any) -> list[torch.nn.Module]:
    return [m for m in model.modules() if isinstance(m, torch.nn.Linear | PackedLinear | FusedPart)]


def _native_vector() -> bool:
    library = native.shared().library
    return library is not None and library.linear.vector


def _batches(model: Any, seed: int = 5, length: int = 23) -> list[tuple[torch.Tensor, torch.Tensor | None]]:
    """A padded batch of three rows (prefill shapes; 3 x 23 = 69 rows through each linear) and one
    decode-shaped token."""
    gen = torch.Generator().manual_seed(seed)
    ids = torch.randint(3, min(int(model.config.vocab_size), 30000), (3, length), generator=gen)
    mask = torch.ones_like(ids)
    mask[1, :7] = 0  # a left-padded row
    return [(ids, mask), (ids[:1, :1], None)]


def _packed(path: Path, kernel: str, monkeypatch: pytest.MonkeyPatch) -> Any:
    plain, packed = _load(path, torch.bfloat16), _load(path, torch.bfloat16)
    monkeypatch.setenv("TOKENWIRE_LINEAR_KERNEL", kernel)
    count, name = pack_linears(packed, torch.bfloat16, wanted=True)
    layers = int(plain.config.num_hidden_layers)
    prefix = "native bf16 (" if kernel == "native" else "oneDNN packed (bf16)"
    assert name.startswith(prefix) and name.endswith(f", {2 * layers} sibling groups fused")  # q/k/v, gate/up
    # every linear of a text model is in its decoder or is its output projection
    assert count == len(_linears(plain)) > 0
    assert all(isinstance(m, PackedLinear | FusedPart) for m in _linears(packed))
    assert sum(isinstance(m, FusedPart) for m in _linears(packed)) == 5 * layers
    return plain, packed


@pytest.mark.parametrize("name", [*TINY_MODELS, DEFAULT_MODEL])
def test_onednn_packing_gives_the_same_logits_bit_for_bit_up_to_32_rows(name: str, asset: Callable[[str], Path],
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    plain, packed = _packed(asset(name), "onednn", monkeypatch)
    with torch.inference_mode():
        for ids, mask in _batches(plain, length=10):  # 3 x 10 = 30 rows through each linear
            assert torch.equal(plain(input_ids=ids, attention_mask=mask).logits,
                               packed(input_ids=ids, attention_mask=mask).logits)


@pytest.mark.parametrize("kernel", ["native", "onednn"])
@pytest.mark.parametrize("name", [*TINY_MODELS, DEFAULT_MODEL])
def test_packing_keeps_the_logits_as_close_to_fp32_as_f_linear(name: str, kernel: str, asset: Callable[[str], Path],
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """Its own sums may round differently from ``F.linear``'s (the native kernel's always, oneDNN's
    past 32 rows), so not the same bits; over the whole model the logits (pooled over every real
    position of four seeds' batches, at 10 and 23 tokens: one batch alone moves by +-15 % between
    seeds for any bf16 kernel) must be no further from the fp32 model's than the plain bf16
    model's are, and pick the same top token wherever the fp32 model's top two are further apart
    than the plain model's worst error."""
    if kernel == "native" and not _native_vector():
        pytest.skip("this CPU has no AVX512-BF16: the engine packs with oneDNN here")
    path = asset(name)
    plain, packed = _packed(path, kernel, monkeypatch)
    exact = _load(path, torch.float32)
    errors: dict[str, list[torch.Tensor]] = {"packed": [], "plain": []}
    compared = 0
    batches = [b for seed in range(5, 9) for length in (10, 23) for b in _batches(plain, seed, length)]
    with torch.inference_mode():
        for ids, mask in batches:
            want = exact(input_ids=ids, attention_mask=mask).logits.double()
            base = plain(input_ids=ids, attention_mask=mask).logits.double()
            got = packed(input_ids=ids, attention_mask=mask).logits.double()
            keep = mask.bool() if mask is not None else torch.ones(ids.shape, dtype=torch.bool)
            errors["packed"].append((got - want).abs()[keep].flatten())
            errors["plain"].append((base - want).abs()[keep].flatten())
            top2 = want.topk(2, dim=-1).values
            clear = keep & (top2[..., 0] - top2[..., 1] > 2 * float((base - want).abs()[keep].max()))
            assert torch.equal(got.argmax(-1)[clear], want.argmax(-1)[clear])
            compared += int(clear.sum())
    assert compared > 0, "no position had a clear top token: the argmax check saw nothing"
    err, base_err = (float(torch.cat(errors[k]).mean()) for k in ("packed", "plain"))
    assert err <= 1.1 * base_err, (err, base_err)


def test_a_packed_linear_with_bias_matches_f_linear() -> None:
    gen = torch.Generator().manual_seed(1)
    linear = torch.nn.Linear(96, 160, bias=True).to(torch.bfloat16)
    with torch.inference_mode():
        packed = PackedLinear(linear, OneDnnProduct(linear.weight.detach(), linear.bias))
        for shape in ((1, 96), (5, 96), (2, 3, 96)):
            x = torch.randn(*shape, generator=gen).to(torch.bfloat16)
            out = packed(x)
            assert out.shape == (*shape[:-1], 160)
            assert torch.equal(out, linear(x))


def test_a_fused_product_gives_each_sibling_its_own_product_whatever_the_order() -> None:
    """Siblings called out of order, twice, or on another input than the others still get
    exactly ``F.linear`` of their own input."""
    gen = torch.Generator().manual_seed(3)
    siblings = [torch.nn.Linear(64, n, bias=True).to(torch.bfloat16) for n in (48, 16, 16)]
    weight = torch.cat([s.weight.detach() for s in siblings])
    bias = torch.cat([s.bias.detach() for s in siblings])
    product = FusedProduct(OneDnnProduct(weight, bias), [48, 16, 16])
    parts = [FusedPart(s, product, i) for i, s in enumerate(siblings)]
    x, y = (torch.randn(2, 5, 64, generator=gen).to(torch.bfloat16) for _ in range(2))
    with torch.inference_mode():
        for index, inp in ((1, x), (0, x), (0, y), (2, x), (2, y), (1, y), (1, x), (0, x)):
            got = parts[index](inp)
            assert torch.equal(got, torch.nn.functional.linear(inp, siblings[index].weight, siblings[index].bias))
        z = torch.randn(1, 64, generator=gen).to(torch.bfloat16)
        for part in parts:  # a whole round on a new input lets go of it and of the outputs
            part(z)
    assert product._input is None and product._parts == ()


def test_packing_only_in_bf16_and_when_wanted(asset: Callable[[str], Path], monkeypatch: pytest.MonkeyPatch) -> None:
    path = asset(TINY_MODELS[1])
    fp32 = _load(path, torch.float32)
    assert pack_linears(fp32, torch.float32, wanted=True) == (0, "not packed: float32 (bf16 only)")
    assert not any(isinstance(m, PackedLinear) for m in fp32.modules())
    bf16 = _load(path, torch.bfloat16)
    monkeypatch.setenv("TOKENWIRE_PACKED_LINEAR", "0")
    assert pack_linears(bf16, torch.bfloat16) == (0, "off")
    assert not any(isinstance(m, PackedLinear) for m in bf16.modules())
    monkeypatch.delenv("TOKENWIRE_PACKED_LINEAR")
    bare = torch.nn.Sequential(torch.nn.Linear(8, 8)).to(torch.bfloat16)  # no get_decoder: left alone, no error
    assert pack_linears(bare, torch.bfloat16) == (0, "not packed: the model has no get_decoder / "
                                                     "get_output_embeddings")
    assert isinstance(bare[0], torch.nn.Linear)


def test_the_bf16_engine_packs_by_default_and_matches_model_generate(asset: Callable[[str], Path],
                                                                    tokenizer: Callable[[str], Any]) -> None:
    path = asset(DEFAULT_MODEL)
    tok = tokenizer(DEFAULT_MODEL)
    ps = [list(tok(t, add_special_tokens=False)["input_ids"]) for t in ("The quick brown fox", "def fibonacci(n):")]
    with running_engine(path, dtype="bfloat16") as h:
        stats = h.engine.stats()
        got = [h.run(request(p, max_tokens=16))[0].ids for p in ps]
        engine_attention = h.engine.runner.model.config._attn_implementation
    prefix = "native bf16 (" if _native_vector() else "oneDNN packed (bf16"
    assert stats["linear_kernel"].startswith(prefix) and stats["linear_kernel"].endswith(", 60 sibling groups fused")
    assert h.engine.runner.packed_linears == 30 * 7 + 1  # SmolLM2: 7 per layer and the output projection
    # engine/local/attention.py: the native kernel where this machine builds it, else grouped matmuls
    kernel = stats["attention_kernel"]
    assert kernel.startswith(("native fp32 (", "grouped fp32 (")) and kernel.endswith(
        ") for decode, SDPA for prefill"), kernel
    ref = Reference(path, "bfloat16")
    assert ref.model.config._attn_implementation == engine_attention  # model.generate decodes as the engine does
    assert ref.linear_kernel == stats["linear_kernel"]
    assert got == [ref.greedy(p, 16) for p in ps]


def test_packing_lets_go_of_the_checkpoint_mapping(asset: Callable[[str], Path]) -> None:
    """transformers maps the safetensors file; packing reads every page of it, so if any dense
    parameter still pointed into the mapping the replaced weights' pages would stay in the RSS
    (SmolLM2 serve: 949 MiB idle instead of 735)."""
    path = asset(DEFAULT_MODEL)
    code = ("import gc, sys, torch\n"
            "from transformers import AutoModelForCausalLM\n"
            "from engine.local.packed import pack_linears\n"
            "m = AutoModelForCausalLM.from_pretrained(sys.argv[1], dtype=torch.bfloat16, local_files_only=True)\n"
            "mapped = lambda: sum('.safetensors' in line for line in open('/proc/self/maps'))\n"
            "before = mapped()\n"
            "print(pack_linears(m, torch.bfloat16, wanted=True)[0])\n"
            "gc.collect()\n"
            "print(before, mapped())\n")
    proc = subprocess.run([sys.executable, "-c", code, str(path)], capture_output=True, text=True,
                          cwd=Path(__file__).resolve().parents[3], timeout=300)
    assert proc.returncode == 0, proc.stderr
    packed, counts = proc.stdout.split("\n")[:2]
    before, after = map(int, counts.split())
    assert int(packed) == 211
    assert before > 0  # the checkpoint was mapped (else this test checks nothing)
    assert after == 0
