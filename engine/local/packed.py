"""Prepacked linear weights for the CPU engine in bf16 (issue 22): each decoder and output-projection
weight is packed once at load, not on every ``F.linear`` call, and sibling linears that read the
same input (an attention's q/k/v, an MLP's gate/up) share one product of their concatenated
weights (:class:`FusedProduct`). ``TOKENWIRE_LINEAR_KERNEL`` picks the kernel: ``native`` (the
default; engine/local/native/linear.c, where it is built with AVX512-BF16: its own sums, checked
at load against float64 per weight shape) or ``onednn`` (torch's oneDNN kernel on a prepacked
weight: ``F.linear``'s bits up to 32 rows, checked at load). ``TOKENWIRE_PACKED_LINEAR=0`` turns packing off.
Why, what is packed and what it costs: docs/engine-design.md, "Linear layers".
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from typing import Any, Protocol, cast

import torch

from engine.local import native
from engine.local.env_choice import env_choice

log = logging.getLogger("tokenwire.engine")

KERNELS = ("native", "onednn")
EXACT_ROWS = 32  # rows up to which oneDNN's packed product and F.linear run the same kernel
CHECKED = 512  # outputs per weight the load-time check compares with float64


class Product(Protocol):
    """A packed weight and its bias: ``product(x)`` is ``F.linear(x, weight, bias)``."""

    def __call__(self, x: torch.Tensor) -> torch.Tensor: ...


class OneDnnProduct:
    """oneDNN's kernel on the weight in its blocked layout: ``F.linear``'s bits up to
    :data:`EXACT_ROWS` rows."""

    __slots__ = ("bias", "packed")

    def __init__(self, weight: torch.Tensor, bias: torch.Tensor | None) -> None:
        self.packed = torch.ops.mkldnn._reorder_linear_weight(weight, 1)  # an opaque mkldnn tensor
        self.bias = bias

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = torch.ops.mkldnn._linear_pointwise(x, self.packed, self.bias, "none", [], "")
        return out


class NativeProduct:
    """The native kernel (engine/local/native.py) on the weight in its panel layout."""

    __slots__ = ("bias", "kernel", "n", "packed")

    def __init__(self, kernel: native.NativeLinear, weight: torch.Tensor, bias: torch.Tensor | None) -> None:
        self.kernel = kernel
        self.packed = kernel.pack(weight)
        self.bias = kernel.pack_bias(bias)
        self.n = int(weight.shape[0])

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        return self.kernel(x, self.packed, self.bias, self.n)


class PackedLinear(torch.nn.Module):
    """``nn.Linear`` with its weight packed (bf16, CPU): not a parameter, never in a state dict."""

    def __init__(self, linear: torch.nn.Linear, product: Product) -> None:
        super().__init__()
        self.in_features = linear.in_features
        self.out_features = linear.out_features
        self.product = product
        self.bias = linear.bias

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.product(x)

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, out_features={self.out_features}, bias={self.bias is not None}"


class FusedProduct:
    """One packed product for sibling linears that read the same input (q/k/v, gate/up): the first
    of them to see an input computes every sibling's output, and each takes its slice (a view)."""

    __slots__ = ("_input", "_left", "_parts", "product", "sizes")

    def __init__(self, product: Product, sizes: list[int]) -> None:
        self.product = product
        self.sizes = sizes
        self._input: torch.Tensor | None = None
        self._parts: tuple[torch.Tensor, ...] = ()
        self._left = 0

    def whole(self, x: torch.Tensor) -> torch.Tensor:
        """Every sibling's output side by side, ``[..., sum(sizes)]`` (engine/local/lean_decode.py
        takes q's and k's together from it)."""
        return self.product(x)

    def part(self, x: torch.Tensor, index: int) -> torch.Tensor:
        # The same tensor object, held here until every sibling took its part, so its id cannot be
        # reused; any other input (even equal values) is computed afresh, so a model that calls
        # its projections in another order or on other inputs still gets the right products.
        if x is not self._input:
            out = self.whole(x)
            self._input, self._parts, self._left = x, tuple(torch.split(out, self.sizes, dim=-1)), len(self.sizes)
        part = self._parts[index]
        self._left -= 1
        if self._left <= 0:  # let go of the step's tensors
            self._input, self._parts = None, ()
        return part


class FusedPart(torch.nn.Module):
    """One sibling of a :class:`FusedProduct`, in place of its ``nn.Linear``."""

    def __init__(self, linear: torch.nn.Linear, product: FusedProduct, index: int) -> None:
        super().__init__()
        self.in_features = linear.in_features
        self.out_features = linear.out_features
        self.product = product
        self.index = index

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.product.part(x, self.index)

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, out_features={self.out_features}, part {self.index} of a fused product"


# Sibling linears of one module that read the same input, by the names transformers' decoders use.
FUSABLE = (("q_proj", "k_proj", "v_proj"), ("gate_proj", "up_proj"))


def enabled() -> bool:
    """``TOKENWIRE_PACKED_LINEAR`` (default on; ``0`` / ``false`` / ``off`` turn it off)."""
    return os.environ.get("TOKENWIRE_PACKED_LINEAR", "1").strip().lower() not in ("0", "false", "off", "no")


def kernel_setting() -> str:
    """``TOKENWIRE_LINEAR_KERNEL``: one of :data:`KERNELS`, ``native`` when unset; any other
    value is named in a warning and ignored."""
    return env_choice("TOKENWIRE_LINEAR_KERNEL", KERNELS)


def _onednn_available() -> bool:
    if not cast(Any, torch.backends.mkldnn).is_available():
        return False
    try:
        torch.ops.mkldnn._reorder_linear_weight  # noqa: B018 (resolving the op is the check)
        torch.ops.mkldnn._linear_pointwise  # noqa: B018
    except (AttributeError, RuntimeError):
        return False
    return True


Maker = Callable[[torch.Tensor, "torch.Tensor | None"], Product]


def _kernel() -> tuple[Maker | None, bool, str]:
    """The kernel the setting and this machine give: (how to make a product, or None where there
    is none; whether it must give ``F.linear``'s bits; the kernel in words)."""
    why = ""
    if kernel_setting() == "native":
        loaded = native.shared()
        lib = loaded.library
        if lib is not None and lib.linear.vector:
            kernel = lib.linear
            return (lambda w, b: NativeProduct(kernel, w, b)), False, f"native bf16 ({loaded.detail})"
        why = f"; native kernel: {loaded.detail if lib is None else 'built without AVX512-BF16'}"
    if not _onednn_available():
        return None, True, "this torch build has no oneDNN linear" + why
    return OneDnnProduct, True, "oneDNN packed (bf16" + why + ")"


def pack_linears(model: Any, dtype: torch.dtype, wanted: bool | None = None) -> tuple[int, str]:
    """Replace the bf16 CPU linears of ``model``'s decoder and output projection with
    :class:`PackedLinear` and :class:`FusedPart` (``wanted``: None follows
    ``TOKENWIRE_PACKED_LINEAR``). Returns (how many were packed, the kernel or why none), for the
    log and ``/engine/stats``."""
    if not (enabled() if wanted is None else wanted):
        return 0, "off"
    if dtype != torch.bfloat16:
        return 0, f"not packed: {str(dtype).removeprefix('torch.')} (bf16 only)"
    targets: list[tuple[torch.nn.Module, str, torch.nn.Linear]] = []
    try:
        roots = [model.get_decoder(), model.get_output_embeddings()]
    except (AttributeError, NotImplementedError):  # a model class without the usual accessors
        return 0, "not packed: the model has no get_decoder / get_output_embeddings"
    for root in roots:
        if isinstance(root, torch.nn.Linear):  # the output projection itself
            targets.extend((parent, name, root) for parent, name, child in children(model) if child is root)
            continue
        targets.extend((parent, name, child) for parent, name, child in children(root)
                       if isinstance(child, torch.nn.Linear))
    targets = [t for t in targets if t[2].weight.device.type == "cpu" and t[2].weight.dtype == torch.bfloat16]
    if not targets:
        return 0, "not packed: no bf16 linear on the CPU"
    make, exact, kernel = _kernel()
    if make is None:
        return 0, f"not packed: {kernel}"
    fused = _fuse_siblings(targets, make, exact)
    done = {id(m) for _, _, members, _ in fused for m in members}
    packed: dict[int, Product] = {}
    checked: set[tuple[int, int, bool]] = set()
    with torch.inference_mode():
        for _, _, linear in targets:
            if id(linear) in done:
                continue
            product = make(linear.weight.detach(), linear.bias)
            shape = (linear.out_features, linear.in_features, linear.bias is not None)
            if shape not in checked:
                if not _agrees([linear], FusedProduct(product, [linear.out_features]), exact):
                    return 0, f"not packed: the {kernel} product failed its check at load on this CPU"
                checked.add(shape)
            packed[id(linear)] = product
    for parent, name, linear in targets:
        if id(linear) not in done:
            setattr(parent, name, PackedLinear(linear, packed[id(linear)]))
    for parent, names, members, fused_product in fused:
        for index, (name, linear) in enumerate(zip(names, members, strict=True)):
            setattr(parent, name, FusedPart(linear, fused_product, index))
    _own_the_rest(model)
    if fused:
        kernel += f", {len(fused)} sibling groups fused"
    return len(targets), kernel


def _fuse_siblings(targets: list[tuple[torch.nn.Module, str, torch.nn.Linear]], make: Maker, exact: bool
                   ) -> list[tuple[torch.nn.Module, tuple[str, ...], list[torch.nn.Linear], FusedProduct]]:
    """Pack each group of :data:`FUSABLE` siblings (same input size, all with or all without a
    bias) as one product, where each sibling's slice passes :func:`_agrees`."""
    children: dict[int, tuple[torch.nn.Module, dict[str, torch.nn.Linear]]] = {}
    for parent, name, linear in targets:
        children.setdefault(id(parent), (parent, {}))[1][name] = linear
    out: list[tuple[torch.nn.Module, tuple[str, ...], list[torch.nn.Linear], FusedProduct]] = []
    verdicts: dict[tuple[tuple[int, ...], int, bool], bool] = {}
    with torch.inference_mode():
        for parent, named in children.values():
            for names in FUSABLE:
                found = [named.get(n) for n in names]
                members = [m for m in found if m is not None]
                if (len(members) != len(names) or len({m.in_features for m in members}) != 1
                        or len({m.bias is None for m in members}) != 1):
                    continue
                weight = torch.cat([m.weight.detach() for m in members])
                bias = None if members[0].bias is None else torch.cat([m.bias.detach() for m in members])
                product = FusedProduct(make(weight, bias), [m.out_features for m in members])
                shape = (tuple(m.out_features for m in members), members[0].in_features, bias is not None)
                if shape not in verdicts:
                    verdicts[shape] = _agrees(members, product, exact)
                if verdicts[shape]:
                    out.append((parent, names, members, product))
    return out


def _own_the_rest(model: Any) -> None:
    """Copy the parameters that stay dense (embeddings, norms) out of the checkpoint's memory map.

    transformers maps the safetensors file and its tensors point into that mapping. Packing read
    every weight, so every page of the file is resident, and the mapping lives as long as any
    tensor of the file does: the dense weights the packed ones replaced would stay in the RSS
    (SmolLM2: +200 MiB idle, 949 instead of 714 MiB). Once the remaining parameters are copies,
    the mapping and its pages go."""
    with torch.no_grad():
        for param in model.parameters():
            param.data = param.data.clone()


def children(root: torch.nn.Module) -> list[tuple[torch.nn.Module, str, torch.nn.Module]]:
    """Every ``(parent, name, child)`` under ``root``: where a module can be replaced."""
    return [(parent, name, child) for parent in root.modules() for name, child in parent.named_children()]


def _agrees(members: list[torch.nn.Linear], product: FusedProduct, exact: bool) -> bool:
    """Each member's slice of the product is within :func:`error_bound` of the float64 product
    (on the outputs :func:`_sampled` picks) at a decode and two prefill shapes, and, where it must
    give ``F.linear``'s bits (``exact``), equals its ``F.linear`` bit for bit up to
    :data:`EXACT_ROWS` rows: past that torch's ``F.linear`` itself changes kernel by row count on
    CPUs with AMX, whose sums round differently (equally close to float64)."""
    samples = [_sampled(linear) for linear in members]
    gen = torch.Generator().manual_seed(22)
    for rows in (1, 7, 64):
        x = torch.randn(rows, members[0].in_features, generator=gen).to(torch.bfloat16)
        for index, linear in enumerate(members):
            got = product.part(x, index)
            if exact and rows <= EXACT_ROWS and not torch.equal(
                    torch.nn.functional.linear(x, linear.weight, linear.bias), got):
                return False
            cols, weight, bias = samples[index]
            want, bound = error_bound(x, weight, bias)
            if not bool(((got[:, cols].double() - want).abs() <= bound).all()):
                return False
    return True


def _sampled(linear: torch.nn.Linear) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
    """At most :data:`CHECKED` output indices spread over ``linear`` and its last one (the last
    panel's padding), with their weights and bias: float64 copies of a whole large weight would
    cost GBs."""
    n = linear.out_features
    cols = torch.cat([torch.arange(0, n, -(-n // CHECKED)), torch.tensor([n - 1])])
    bias = None if linear.bias is None else linear.bias.detach()[cols]
    return cols, linear.weight.detach()[cols], bias


def error_bound(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor]:
    """The float64 product and how far a bf16 result of fp32 sums may be from it: half a bf16 ulp
    of the result (2^-8 relative) and the fp32 sums' rounding, at most ``in_features`` roundings of
    2^-24 each of the sum of magnitudes (twice that, for slack)."""
    xd, wd = x.double(), weight.double()
    want = xd @ wd.T
    magnitude = xd.abs() @ wd.abs().T
    if bias is not None:
        want, magnitude = want + bias.double(), magnitude + bias.double().abs()
    return want, want.abs() * 2.0 ** -8 + magnitude * (x.shape[-1] + 1) * 2.0 ** -23
