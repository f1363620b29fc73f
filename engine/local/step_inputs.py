"""The inputs of the local engine's two forwards (engine/local/runner.py), built from the scheduler's
step: token ids, each token's position in its KV row, the attention mask (None where every row
reads all it wrote) and the :class:`~engine.local.kv.WritePlan` of a prefill batch or a decode
step, and the per-layer masks of a model with sliding-window layers. docs/engine-design.md,
"Scheduler and continuous batching".
"""

from __future__ import annotations

from typing import Any

import torch

from engine.local.kv import WritePlan
from engine.local.scheduler import PrefillChunk


def window_bites(window: int | None, kv_len: int) -> bool:
    """A sliding window (``window`` positions) hides some of ``kv_len`` positions."""
    return window is not None and kv_len > window


def prefill_inputs(chunks: list[PrefillChunk], window: int | None
                   ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None, WritePlan]:
    """A prefill batch of prompt chunks in consecutive rows, left-padded to the longest: its ids, its
    positions, its mask (None for one chunk from position 0 that no window bites) and its plan."""
    first = chunks[0].seq.row
    rows = [c.seq.row for c in chunks]
    if rows != list(range(first, first + len(chunks))):
        raise AssertionError(f"prefill rows not consecutive: {rows}")
    width = max(c.count for c in chunks)
    kv_len = max(c.start + c.count for c in chunks)
    ids = torch.zeros((len(chunks), width), dtype=torch.long)
    pos = torch.empty((len(chunks), width), dtype=torch.long)
    q = torch.arange(width)
    for i, c in enumerate(chunks):
        pad = width - c.count
        ids[i, pad:] = torch.tensor(c.seq.prompt[c.start:c.start + c.count])
        pos[i] = c.start + (q - pad).clamp(min=0)
    plain = len(chunks) == 1 and chunks[0].start == 0 and not window_bites(window, kv_len)
    mask = None if plain else (torch.arange(kv_len)[None, None, :] <= pos[:, :, None])[:, None]
    plan = WritePlan(first, [c.start for c in chunks], [c.count for c in chunks], kv_len)
    return ids, pos, mask, plan


def decode_inputs(positions: list[int], window: int | None) -> tuple[torch.Tensor, torch.Tensor | None, WritePlan]:
    """A decode step's positions tensor (rows ``0 .. len(positions)-1``), its mask (None when every
    row is at the same position and no window bites) and its KV write plan."""
    kv_len = max(positions) + 1
    pos = torch.tensor(positions)
    same = min(positions) == kv_len - 1
    mask = None
    if not same or window_bites(window, kv_len):
        mask = (torch.arange(kv_len)[None, :] <= pos[:, None])[:, None, None, :]
    plan = WritePlan(0, positions, [1] * len(positions), kv_len, positions=pos,
                     rows=None if same else torch.arange(len(positions)),
                     same_position=kv_len - 1 if same else None)
    return pos, mask, plan


def layer_masks(mask: torch.Tensor | None, pos: torch.Tensor, kv_len: int, window: int) -> Any:
    """A model with sliding-window layers: ``mask`` for its full-attention layers, and ``mask`` within
    the last ``window`` positions for its sliding ones (None: no mask for either)."""
    if mask is None:
        return None
    t = torch.arange(kv_len)
    within = t[None, None, :] > (pos[:, :, None] - window)
    return {"full_attention": mask, "sliding_attention": mask & within[:, None]}
