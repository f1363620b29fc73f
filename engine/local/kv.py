"""The KV cache of the local engine: one preallocated buffer per layer (``[rows, kv_heads, capacity,
head_dim]``), one row per sequence, kept compact so a decode step reads a plain view; it grows and
shrinks with the live set. :class:`StepCache` is the duck-typed ``past_key_values`` of one forward.
The layout and its rules: docs/engine-design.md, "Scheduler and continuous batching".
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass(slots=True)
class WritePlan:
    """Where one forward writes its new keys/values.

    ``first_row``: the batch's rows are ``first_row .. first_row + len(starts) - 1``.
    ``starts[i]``: the position of row i's first new token; ``counts[i]`` new tokens, taken
    from the *end* of the (left-padded) query dimension. ``kv_len``: how many positions the
    attention reads (the longest row after the write).
    """

    first_row: int
    starts: list[int]
    counts: list[int]
    kv_len: int
    # decode fast path: every row writes exactly one token; positions as a tensor
    positions: torch.Tensor | None = None
    rows: torch.Tensor | None = None  # decode: the rows written, built once per step (not per layer)
    same_position: int | None = None  # decode: every row writes at this position (a plain slice)


class KVStore:
    """Per-layer K/V buffers; rows and capacity grow by doubling up to the given maxima."""

    def __init__(self, num_layers: int, *, max_rows: int, max_len: int, dtype: torch.dtype,
                 initial_rows: int = 4, initial_len: int = 256) -> None:
        self.num_layers = num_layers
        self.max_rows = max_rows
        self.max_len = max_len
        self.dtype = dtype
        self.initial_rows = min(initial_rows, max_rows)
        self.initial_len = min(initial_len, max_len)
        self.rows, self.capacity = self.initial_rows, self.initial_len
        self.keys: list[torch.Tensor | None] = [None] * num_layers
        self.values: list[torch.Tensor | None] = [None] * num_layers

    # --- sizing ----------------------------------------------------------------------------
    def reserve(self, rows: int, length: int) -> None:
        """Make room for ``rows`` rows of ``length`` positions (grows by doubling, keeps data)."""
        if rows > self.max_rows or length > self.max_len:
            raise ValueError(f"KV reservation {rows}x{length} exceeds {self.max_rows}x{self.max_len}")
        new_rows, new_cap = self.rows, self.capacity
        while new_rows < rows:
            new_rows = min(new_rows * 2, self.max_rows)
        while new_cap < length:
            new_cap = min(new_cap * 2, self.max_len)
        if (new_rows, new_cap) == (self.rows, self.capacity):
            return
        self._resize(new_rows, new_cap)

    def shrink_to(self, rows: int, length: int) -> bool:
        """Give memory back when the live set needs at most a quarter of a dimension (the
        hysteresis keeps a workload near a boundary from reallocating every step). Keeps the
        first ``rows`` rows and ``length`` positions. Returns whether anything was reallocated."""
        new_rows, new_cap = self.rows, self.capacity
        while new_rows > self.initial_rows and new_rows >= 4 * max(rows, 1):
            new_rows //= 2
        while new_cap > self.initial_len and new_cap >= 4 * max(length, 1):
            new_cap //= 2
        if (new_rows, new_cap) == (self.rows, self.capacity):
            return False
        self._resize(new_rows, new_cap)
        return True

    def _resize(self, rows: int, capacity: int) -> None:
        for i in range(self.num_layers):
            self.keys[i] = _resized(self.keys[i], rows, capacity)
            self.values[i] = _resized(self.values[i], rows, capacity)
        self.rows, self.capacity = rows, capacity

    def release_memory(self) -> None:
        """Drop all buffers (when the engine goes idle they are rebuilt small on next use)."""
        self.keys = [None] * self.num_layers
        self.values = [None] * self.num_layers
        self.rows, self.capacity = self.initial_rows, self.initial_len

    def nbytes(self) -> int:
        return sum(t.numel() * t.element_size() for t in (*self.keys, *self.values) if t is not None)

    # --- row moves -------------------------------------------------------------------------
    def move_row(self, src: int, dst: int, length: int) -> None:
        """Copy the first ``length`` positions of row ``src`` into row ``dst``."""
        if src == dst or length == 0:
            return
        for buf in (*self.keys, *self.values):
            if buf is not None:
                buf[dst, :, :length].copy_(buf[src, :, :length])

    def swap_rows(self, a: int, b: int, length_a: int, length_b: int) -> None:
        if a == b:
            return
        n = max(length_a, length_b)
        if n == 0:
            return
        for buf in (*self.keys, *self.values):
            if buf is not None:
                tmp = buf[a, :, :n].clone()
                buf[a, :, :n].copy_(buf[b, :, :n])
                buf[b, :, :n].copy_(tmp)

    # --- prefix caching (engine.local.prefix) ----------------------------------------------
    def read_row(self, row: int, length: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
        """A copy of the first ``length`` positions of ``row``: per layer (keys, values), each
        ``[kv_heads, length, head_dim]``."""
        out = []
        for kb, vb in zip(self.keys, self.values, strict=True):
            assert kb is not None and vb is not None
            out.append((kb[row, :, :length].clone(), vb[row, :, :length].clone()))
        return out

    def write_row(self, row: int, data: list[tuple[torch.Tensor, torch.Tensor]], length: int) -> None:
        """Copy the first ``length`` positions of ``data`` (from :meth:`read_row`) into ``row``."""
        for layer, (k, v) in enumerate(data):
            kb, vb = self.keys[layer], self.values[layer]
            if kb is None or vb is None:
                kb, vb = self._allocate(layer, k[None])
            kb[row, :, :length].copy_(k[:, :length])
            vb[row, :, :length].copy_(v[:, :length])

    # --- the model-facing side -------------------------------------------------------------
    def write(self, layer: int, key: torch.Tensor, value: torch.Tensor, plan: WritePlan) -> tuple[
            torch.Tensor, torch.Tensor]:
        kb, vb = self.keys[layer], self.values[layer]
        if kb is None or vb is None:
            kb, vb = self._allocate(layer, key)
        r0, n = plan.first_row, len(plan.starts)
        if plan.same_position is not None:  # decode, every row at the same position: a slice copy
            kb[r0:r0 + n, :, plan.same_position] = key[:, :, -1]
            vb[r0:r0 + n, :, plan.same_position] = value[:, :, -1]
        elif plan.positions is not None:  # decode: one token per row
            rows = plan.rows if plan.rows is not None else torch.arange(r0, r0 + n)
            kb[rows, :, plan.positions] = key[:, :, -1]
            vb[rows, :, plan.positions] = value[:, :, -1]
        else:
            q = key.shape[2]
            for i, (start, count) in enumerate(zip(plan.starts, plan.counts, strict=True)):
                if count:
                    kb[r0 + i, :, start:start + count] = key[i, :, q - count:]
                    vb[r0 + i, :, start:start + count] = value[i, :, q - count:]
        return kb[r0:r0 + n, :, :plan.kv_len], vb[r0:r0 + n, :, :plan.kv_len]

    def _allocate(self, layer: int, like: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        shape = (self.rows, like.shape[1], self.capacity, like.shape[3])
        kb = torch.zeros(shape, dtype=self.dtype)
        vb = torch.zeros(shape, dtype=self.dtype)
        self.keys[layer], self.values[layer] = kb, vb
        return kb, vb


def _resized(buf: torch.Tensor | None, rows: int, capacity: int) -> torch.Tensor | None:
    if buf is None:
        return None
    out = torch.zeros((rows, buf.shape[1], capacity, buf.shape[3]), dtype=buf.dtype)
    r, c = min(rows, buf.shape[0]), min(capacity, buf.shape[2])
    out[:r, :, :c].copy_(buf[:r, :, :c])
    return out


class StepCache:
    """``past_key_values`` for one forward: writes per the plan, returns the attention's view.

    Implements the part of transformers' ``Cache`` protocol that decoder models call when
    ``position_ids`` and a prepared 4D mask are given (``update``), plus harmless answers for
    the few introspection hooks some models touch.
    """

    is_compileable = False

    def __init__(self, store: KVStore, plan: WritePlan, *, record: bool = False) -> None:
        self.store = store
        self.plan = plan
        self.layers_seen: set[int] | None = set() if record else None

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, layer_idx: int,
               cache_kwargs: object = None) -> tuple[torch.Tensor, torch.Tensor]:
        if self.layers_seen is not None:
            self.layers_seen.add(layer_idx)
        return self.store.write(layer_idx, key_states, value_states, self.plan)

    # Used by transformers' mask builder only when the runner passes no mask (every row has
    # the same start and length), i.e. exactly the plain causal case.
    def get_seq_length(self, layer_idx: int = 0) -> int:
        return max(self.plan.starts, default=0)

    def get_query_offset(self, layer_idx: int = 0) -> int:
        return max(self.plan.starts, default=0)

    def get_mask_sizes(self, query_length: int, layer_idx: int = 0) -> tuple[int, int]:
        return self.plan.kv_len, 0

    def __len__(self) -> int:
        return self.store.num_layers
