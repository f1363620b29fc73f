"""The KV store on small tensors: per-row writes for prefill (left-padded) and decode, the views
the attention reads, row moves, and growing / shrinking without losing live data."""

from __future__ import annotations

import torch

from engine.local.kv import KVStore, StepCache, WritePlan

HEADS, DIM = 2, 3


def kv(batch: int, q: int, base: float) -> torch.Tensor:
    """Keys whose value encodes (row, query position): base + 10*row + position."""
    rows = torch.arange(batch, dtype=torch.float32)[:, None, None, None] * 10
    pos = torch.arange(q, dtype=torch.float32)[None, None, :, None]
    return (base + rows + pos).expand(batch, HEADS, q, DIM).clone()


def test_prefill_writes_only_real_tokens_at_each_rows_offset() -> None:
    store = KVStore(1, max_rows=8, max_len=64, dtype=torch.float32, initial_rows=2, initial_len=4)
    store.reserve(3, 10)
    key = kv(2, 4, 100.0)  # two rows, query width 4; row 0 has 4 real tokens, row 1 has 2 (left pad)
    plan = WritePlan(first_row=1, starts=[0, 5], counts=[4, 2], kv_len=7)
    k, v = StepCache(store, plan).update(key, key + 0.5, 0)
    assert k.shape == (2, HEADS, 7, DIM)
    assert store.keys[0] is not None
    buf = store.keys[0]
    assert buf[1, 0, :4, 0].tolist() == [100, 101, 102, 103]
    assert buf[2, 0, 5:7, 0].tolist() == [112, 113]  # the last two query positions of row 1
    assert buf[2, 0, :5, 0].tolist() == [0] * 5  # nothing written before its offset
    assert store.values[0] is not None and store.values[0][1, 0, :4, 0].tolist() == [100.5, 101.5, 102.5, 103.5]
    assert torch.equal(v[:, :, :5], store.values[0][1:3, :, :5])  # the view reads the store


def test_decode_writes_one_token_per_row_at_its_own_position() -> None:
    store = KVStore(2, max_rows=8, max_len=64, dtype=torch.float32)
    store.reserve(3, 8)
    positions = torch.tensor([4, 1, 6])
    plan = WritePlan(0, positions.tolist(), [1, 1, 1], 7, positions=positions)
    cache = StepCache(store, plan)
    for layer in range(2):
        k, _ = cache.update(kv(3, 1, 50.0 + layer), kv(3, 1, 0.0), layer)
        assert k.shape == (3, HEADS, 7, DIM)
        assert [k[r, 1, p, 2].item() for r, p in enumerate([4, 1, 6])] == [50 + layer, 60 + layer, 70 + layer]


def test_decode_at_one_shared_position_writes_what_the_indexed_path_writes() -> None:
    """The runner's fast path (every row at the same position: a slice copy, no index tensors)
    leaves the store exactly as the per-row indexed write does."""
    stores = []
    for fast in (False, True):
        store = KVStore(1, max_rows=8, max_len=64, dtype=torch.float32)
        store.reserve(3, 8)
        positions = torch.tensor([5, 5, 5])
        plan = WritePlan(0, [5, 5, 5], [1, 1, 1], 6, positions=positions, rows=torch.arange(3),
                         same_position=5 if fast else None)
        k, v = StepCache(store, plan).update(kv(3, 1, 50.0), kv(3, 1, 7.0), 0)
        assert k.shape == (3, HEADS, 6, DIM)
        assert [k[r, 0, 5, 0].item() for r in range(3)] == [50, 60, 70]
        assert [v[r, 1, 5, 2].item() for r in range(3)] == [7, 17, 27]
        stores.append(store)
    assert stores[0].keys[0] is not None and stores[1].keys[0] is not None
    assert torch.equal(stores[0].keys[0], stores[1].keys[0])
    assert stores[0].values[0] is not None and stores[1].values[0] is not None
    assert torch.equal(stores[0].values[0], stores[1].values[0])


def test_rows_move_and_swap_by_length() -> None:
    store = KVStore(1, max_rows=8, max_len=16, dtype=torch.float32, initial_rows=4, initial_len=8)
    store.reserve(3, 8)
    StepCache(store, WritePlan(0, [0, 0, 0], [5, 5, 5], 5)).update(kv(3, 5, 0.0), kv(3, 5, 0.0), 0)
    buf = store.keys
    store.move_row(2, 0, 3)
    assert buf[0] is not None and buf[0][0, 0, :5, 0].tolist() == [20, 21, 22, 3, 4]
    store.swap_rows(0, 1, 5, 5)
    assert buf[0][0, 0, :5, 0].tolist() == [10, 11, 12, 13, 14]
    assert buf[0][1, 0, :5, 0].tolist() == [20, 21, 22, 3, 4]


def test_growing_and_shrinking_keep_live_rows() -> None:
    store = KVStore(1, max_rows=64, max_len=1024, dtype=torch.float32, initial_rows=2, initial_len=4)
    store.reserve(2, 4)
    StepCache(store, WritePlan(0, [0, 0], [3, 3], 3)).update(kv(2, 3, 0.0), kv(2, 3, 0.0), 0)
    store.reserve(20, 300)
    assert (store.rows, store.capacity) == (32, 512)
    big = store.nbytes()
    assert store.keys[0] is not None and store.keys[0][1, 0, :3, 0].tolist() == [10, 11, 12]
    assert not store.shrink_to(20, 300)  # still needed
    assert store.shrink_to(2, 3)
    assert (store.rows, store.capacity) == (4, 8) and store.nbytes() < big / 100  # within 4x of the need
    assert store.keys[0] is not None and store.keys[0][1, 0, :3, 0].tolist() == [10, 11, 12]
    store.release_memory()
    assert store.nbytes() == 0
