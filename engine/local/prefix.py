"""Prefix caching for the local engine: keys and values of earlier prompts, reused by later ones.
Whole ``BLOCK``-token blocks matched through a chain of hashes, then compared for real; an LRU
bounded in bytes; images and resumed generations left out. A request's ``cache_salt`` is mixed into
its first block's hash, as vLLM does, so blocks of different salts (tenants) never match: the cache
is shared only between requests with the same salt (or none). How, and what it costs and keeps
exact: docs/engine-design.md, "Prefix cache".
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any

BLOCK = 16


@dataclass(eq=False, slots=True)
class PrefixEntry:
    tokens: tuple[int, ...]  # a whole number of blocks
    hashes: list[int]  # the hash chain of its blocks
    salt: str | None = None  # the cache_salt of the request that filled it
    nbytes: int = 0  # set when the runner stores the tensors
    data: Any = None  # per layer (keys, values) [kv_heads, len(tokens), head_dim]; the runner's
    hits: int = field(default=0)


def block_hash(parent: int, block: tuple[int, ...], salt: str | None, first: bool) -> int:
    """One link of the chain: the parent's hash and the block's tokens, and in the first block the
    salt (vLLM's ``cache_salt`` in the first block's extra keys): every later block chains it."""
    return hash((parent, block, salt)) if first and salt is not None else hash((parent, block))


def block_hashes(tokens: list[int] | tuple[int, ...], blocks: int, salt: str | None = None) -> list[int]:
    out: list[int] = []
    h = 0
    for i in range(blocks):
        h = block_hash(h, tuple(tokens[i * BLOCK:(i + 1) * BLOCK]), salt, i == 0)
        out.append(h)
    return out


class PrefixCache:
    """Entries by block-hash chain, evicted least-recently-used first past ``max_bytes``.

    ``bytes_per_token`` is what one cached position costs (all layers, keys and values); the
    runner sets it at load time. ``max_bytes == 0`` turns caching off.
    """

    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max(0, int(max_bytes))
        self.bytes_per_token = 0
        self.entries: OrderedDict[int, PrefixEntry] = OrderedDict()  # id -> entry, LRU order
        self._by_hash: dict[int, PrefixEntry] = {}
        self.nbytes = 0
        self.hits = 0
        self.hit_tokens = 0
        self.evictions = 0

    @property
    def enabled(self) -> bool:
        return self.max_bytes > 0 and self.bytes_per_token > 0

    def lookup(self, prompt: list[int], limit: int, salt: str | None = None) -> tuple[PrefixEntry, int] | None:
        """The entry of the same ``salt`` sharing the longest whole-block prefix with ``prompt``,
        and how many positions to take from it: at most ``limit`` (the positions the prefill would
        compute, less one)."""
        if not self.enabled or limit < BLOCK:
            return None
        blocks = min(len(prompt), limit + 1) // BLOCK
        best: PrefixEntry | None = None
        matched = 0
        h = 0
        for i in range(blocks):
            h = block_hash(h, tuple(prompt[i * BLOCK:(i + 1) * BLOCK]), salt, i == 0)
            entry = self._by_hash.get(h)
            if entry is None:
                break
            best, matched = entry, (i + 1) * BLOCK
        if best is None:
            return None
        matched = min(matched, limit)
        if best.salt != salt or list(best.tokens[:matched]) != prompt[:matched]:  # a collision: a miss
            return None
        return best, matched

    def use(self, entry: PrefixEntry, matched: int) -> None:
        """Count a lookup's answer as used (and make its entry the most recently used)."""
        if id(entry) in self.entries:
            self.entries.move_to_end(id(entry))
        entry.hits += 1
        self.hits += 1
        self.hit_tokens += matched

    def admit(self, prompt: list[int], length: int, salt: str | None = None) -> PrefixEntry | None:
        """A new entry for ``prompt[:length]`` rounded down to whole blocks under ``salt``, or None
        when it is too short, too big for the budget, or already covered by an entry at least as
        long (of the same salt)."""
        if not self.enabled:
            return None
        blocks = length // BLOCK
        if blocks == 0 or blocks * BLOCK * self.bytes_per_token > self.max_bytes:
            return None
        tokens = tuple(prompt[:blocks * BLOCK])
        hashes = block_hashes(tokens, blocks, salt)
        have = self._by_hash.get(hashes[-1])
        if have is not None and have.salt == salt and have.tokens[:len(tokens)] == tokens:
            self.entries.move_to_end(id(have))  # the same prefix again: keep the one stored
            return None
        entry = PrefixEntry(tokens, hashes, salt, nbytes=len(tokens) * self.bytes_per_token)
        self._evict(self.max_bytes - entry.nbytes)
        self.entries[id(entry)] = entry
        for h in hashes:  # the newest entry answers for every prefix it holds
            self._by_hash[h] = entry
        self.nbytes += entry.nbytes
        return entry

    def _evict(self, room: int) -> None:
        while self.entries and self.nbytes > room:
            _, old = self.entries.popitem(last=False)
            self._drop(old)
            self.evictions += 1

    def _drop(self, entry: PrefixEntry) -> None:
        for h in entry.hashes:
            if self._by_hash.get(h) is entry:
                del self._by_hash[h]
        self.nbytes -= entry.nbytes  # its tensors go with the last reference (a pending copy may hold one)

    def clear(self) -> None:
        for entry in list(self.entries.values()):
            self._drop(entry)
        self.entries.clear()

    def stats(self) -> dict[str, int]:
        return {"prefix_cache_entries": len(self.entries), "prefix_cache_bytes": self.nbytes,
                "prefix_cache_max_bytes": self.max_bytes, "prefix_cache_hits": self.hits,
                "prefix_cache_hit_tokens": self.hit_tokens, "prefix_cache_evictions": self.evictions}
