"""Prepacked linear weights for the CPU engine in bf16 (issue 22): each decoder and output-projection
weight is reordered into oneDNN's blocked layout once at load, not on every ``F.linear`` call; the
same kernel runs, so the results are the same bits (checked at load per weight shape).
``TOKENWIRE_PACKED_LINEAR=0`` turns it off. Why, what is packed and what it costs in memory:
docs/engine.md, "Linear layers: prepacked weights in bf16".
"""

from __future__ import annotations

import logging
import os
from typing import Any, cast

import torch

log = logging.getLogger("tokenwire.engine")


class PackedLinear(torch.nn.Module):
    """``nn.Linear`` with its weight in oneDNN's blocked layout (bf16, CPU)."""

    def __init__(self, linear: torch.nn.Linear, packed: torch.Tensor) -> None:
        super().__init__()
        self.in_features = linear.in_features
        self.out_features = linear.out_features
        self.packed = packed  # an opaque mkldnn tensor: not a parameter, never in a state dict
        self.bias = linear.bias

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = torch.ops.mkldnn._linear_pointwise(x, self.packed, self.bias, "none", [], "")
        return out

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, out_features={self.out_features}, bias={self.bias is not None}"


def enabled() -> bool:
    """``TOKENWIRE_PACKED_LINEAR`` (default on; ``0`` / ``false`` / ``off`` turn it off)."""
    return os.environ.get("TOKENWIRE_PACKED_LINEAR", "1").strip().lower() not in ("0", "false", "off", "no")


def _available() -> bool:
    if not cast(Any, torch.backends.mkldnn).is_available():
        return False
    try:
        torch.ops.mkldnn._reorder_linear_weight  # noqa: B018 (resolving the op is the check)
        torch.ops.mkldnn._linear_pointwise  # noqa: B018
    except (AttributeError, RuntimeError):
        return False
    return True


def pack_linears(model: Any, dtype: torch.dtype, wanted: bool | None = None) -> tuple[int, str]:
    """Replace the bf16 CPU linears of ``model``'s decoder and output projection with
    :class:`PackedLinear` (``wanted``: None follows ``TOKENWIRE_PACKED_LINEAR``). Returns (how
    many were packed, why or why not), for the log and ``/engine/stats``."""
    if not (enabled() if wanted is None else wanted):
        return 0, "off"
    if dtype != torch.bfloat16:
        return 0, f"not packed: {str(dtype).removeprefix('torch.')} (bf16 only)"
    if not _available():
        return 0, "not packed: this torch build has no oneDNN linear"
    targets: list[tuple[torch.nn.Module, str, torch.nn.Linear]] = []
    try:
        roots = [model.get_decoder(), model.get_output_embeddings()]
    except (AttributeError, NotImplementedError):  # a model class without the usual accessors
        return 0, "not packed: the model has no get_decoder / get_output_embeddings"
    for root in roots:
        if isinstance(root, torch.nn.Linear):  # the output projection itself
            targets.extend((parent, name, root) for parent, name, child in _children(model) if child is root)
            continue
        targets.extend((parent, name, child) for parent, name, child in _children(root)
                       if isinstance(child, torch.nn.Linear))
    targets = [t for t in targets if t[2].weight.device.type == "cpu" and t[2].weight.dtype == torch.bfloat16]
    if not targets:
        return 0, "not packed: no bf16 linear on the CPU"
    packed: dict[int, torch.Tensor] = {}
    checked: set[tuple[int, int, bool]] = set()
    with torch.inference_mode():
        for _, _, linear in targets:
            weight = linear.weight.detach()
            pw = torch.ops.mkldnn._reorder_linear_weight(weight, 1)
            shape = (linear.out_features, linear.in_features, linear.bias is not None)
            if shape not in checked:
                if not _same_bits(linear, pw):
                    return 0, "not packed: oneDNN's packed product differs from F.linear on this CPU"
                checked.add(shape)
            packed[id(linear)] = pw
    for parent, name, linear in targets:
        setattr(parent, name, PackedLinear(linear, packed[id(linear)]))
    _own_the_rest(model)
    return len(targets), "oneDNN packed (bf16)"


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


def _children(root: torch.nn.Module) -> list[tuple[torch.nn.Module, str, torch.nn.Module]]:
    return [(parent, name, child) for parent in root.modules() for name, child in parent.named_children()]


def _same_bits(linear: torch.nn.Linear, pw: torch.Tensor) -> bool:
    """The packed product equals ``F.linear`` bit for bit at a decode and a prefill shape."""
    gen = torch.Generator().manual_seed(22)
    for rows in (1, 7):
        x = torch.randn(rows, linear.in_features, generator=gen).to(torch.bfloat16)
        want = torch.nn.functional.linear(x, linear.weight, linear.bias)
        got = torch.ops.mkldnn._linear_pointwise(x, pw, linear.bias, "none", [], "")
        if not torch.equal(want, got):
            return False
    return True
