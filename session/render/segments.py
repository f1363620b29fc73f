"""Tokenize a rendered chat piece by piece, caching the pieces (keyed by ``cache_salt`` too): same ids,
less work. Only where the tokenizer really works piece by piece (:func:`plan_for`). Why this gives
the same ids and when it applies: docs/render.md, "Caching and speed".
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

MAX_ENTRIES = 4096  # cached pieces
MAX_CACHED_CHARS = 2 * 1024 * 1024  # total text kept (ids take about 10 bytes per char on top)
MAX_PIECE_CHARS = 64 * 1024  # longer pieces are encoded every time, not kept


@dataclass(frozen=True, slots=True)
class Plan:
    pattern: re.Pattern[str]  # matches any added token, longest first
    ids: dict[str, int]  # added token text → id


def plan_for(rust: Any) -> Plan | None:
    """How to cut this tokenizer's input, or ``None`` when it does not work piece by piece."""
    if getattr(rust, "encode_special_tokens", False):
        return None
    # The components' own state and the added vocabulary, not ``json.loads(rust.to_str())``: that
    # round trip of a 150k-token vocabulary cost half a second of every server's start-up.
    if any(b"Metaspace" in _state(part) for part in (rust.pre_tokenizer, rust.decoder)):
        return None
    tokens: dict[str, int] = {}
    for token_id, tok in rust.get_added_tokens_decoder().items():
        if tok.single_word or tok.lstrip or tok.rstrip:
            return None
        if not tok.normalized:  # normalized ones are matched inside each piece
            tokens[tok.content] = token_id
    if not tokens:
        return None
    alternation = "|".join(re.escape(t) for t in sorted(tokens, key=len, reverse=True))
    return Plan(re.compile(alternation), tokens)


def _state(component: Any) -> bytes:
    """A pre-tokenizer's or decoder's JSON (``b""`` for none)."""
    return bytes(component.__getstate__()) if component is not None else b""


class SegmentCache:
    """Piece → ids, shared by the threads a server renders on, without locks: every dict
    operation used here is atomic under the GIL, and races only cost a duplicate encode or an
    early eviction. Eviction is oldest-first; a hit moves the piece to the back (re-insertion).
    The running text total is re-counted now and then, so it cannot drift under races."""

    def __init__(self, rust: Any, plan: Plan) -> None:
        self._rust = rust
        self._plan = plan
        self._cache: dict[tuple[str | None, str], list[int]] = {}
        self._chars = 0
        self._inserts = 0

    def __len__(self) -> int:
        return len(self._cache)

    @property
    def cached_chars(self) -> int:
        return self._chars

    def encode(self, text: str, *, salt: str | None = None) -> list[int]:
        """The ids of ``text`` without the post-processor's special tokens."""
        plan = self._plan
        pieces: list[str | int] = []  # text pieces, and added-token ids in place
        pos = 0
        for m in plan.pattern.finditer(text):
            if m.start() > pos:
                pieces.append(text[pos:m.start()])
            pieces.append(plan.ids[m.group()])
            pos = m.end()
        if pos < len(text):
            pieces.append(text[pos:])

        cache = self._cache
        found: dict[str, list[int]] = {}
        missing: list[str] = []
        for p in pieces:
            if isinstance(p, str) and p not in found:
                key = (salt, p)
                hit = cache.pop(key, None)
                if hit is None:
                    missing.append(p)
                    found[p] = []
                else:
                    cache[key] = hit  # back of the queue: recently used
                    found[p] = hit
        if missing:
            encoded = self._rust.encode_batch_fast(missing, add_special_tokens=False)
            for piece, enc in zip(missing, encoded, strict=True):
                found[piece] = enc.ids
                if len(piece) <= MAX_PIECE_CHARS:
                    self._store((salt, piece), enc.ids)
        out: list[int] = []
        for p in pieces:
            if isinstance(p, str):
                out.extend(found[p])
            else:
                out.append(p)
        return out

    def _store(self, key: tuple[str | None, str], ids: list[int]) -> None:
        cache = self._cache
        if key in cache:
            return
        cache[key] = ids
        self._chars += len(key[1])
        self._inserts += 1
        if self._inserts % 256 == 0:
            self._chars = sum(len(k[1]) for k in list(cache))
        while len(cache) > MAX_ENTRIES or self._chars > MAX_CACHED_CHARS:
            try:
                oldest = next(iter(cache))
            except (StopIteration, RuntimeError):  # emptied or resized by another thread
                break
            if cache.pop(oldest, None) is not None:
                self._chars -= len(oldest[1])
