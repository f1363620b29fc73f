"""Tokenize a rendered chat piece by piece, caching the pieces: same ids, less work.

A fast tokenizer first cuts its input at every added token (``<|im_start|>``, ``<|im_end|>``…,
matched leftmost-longest), then normalizes, pre-tokenizes and encodes each piece on its own. So
``encode(text)`` is the concatenation of the added tokens' ids and ``encode(piece)`` for the
pieces between them. Chat prompts repeat most pieces from request to request (the system prompt,
the tool schemas, the conversation so far), so the pieces' ids are cached (LRU, bounded) and only
new pieces reach the tokenizer.

Pieces are keyed by the request's ``cache_salt`` as well: like vLLM's prefix cache, requests
share cached pieces only with requests of the same salt, so a tenant that salts its requests
cannot learn from render timing whether another tenant's text was rendered recently.

This holds only where the tokenizer really works piece by piece, which :func:`plan_for` checks:
no ``single_word`` / ``lstrip`` / ``rstrip`` added tokens, no Metaspace pre-tokenizer (its
"prepend on the first piece only" depends on a piece's position), special tokens not split. The
parity suite checks the result against ``apply_chat_template(..., tokenize=True)``.
"""

from __future__ import annotations

import json
import re
import threading
from collections import OrderedDict
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
    spec = json.loads(rust.to_str())
    if "Metaspace" in json.dumps(spec.get("pre_tokenizer")) or "Metaspace" in json.dumps(spec.get("decoder")):
        return None
    tokens: dict[str, int] = {}
    for tok in spec.get("added_tokens", []):
        if tok.get("single_word") or tok.get("lstrip") or tok.get("rstrip"):
            return None
        if not tok.get("normalized", False):  # normalized ones are matched inside each piece
            tokens[tok["content"]] = tok["id"]
    if not tokens:
        return None
    alternation = "|".join(re.escape(t) for t in sorted(tokens, key=len, reverse=True))
    return Plan(re.compile(alternation), tokens)


class SegmentCache:
    def __init__(self, rust: Any, plan: Plan) -> None:
        self._rust = rust
        self._plan = plan
        self._cache: OrderedDict[tuple[str | None, str], list[int]] = OrderedDict()
        self._chars = 0
        self._lock = threading.Lock()

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

        found: dict[str, list[int]] = {}
        missing: list[str] = []
        with self._lock:
            cache = self._cache
            for p in pieces:
                if isinstance(p, str) and p not in found:
                    hit = cache.get((salt, p))
                    if hit is None:
                        missing.append(p)
                        found[p] = []
                    else:
                        cache.move_to_end((salt, p))
                        found[p] = hit
        if missing:
            encoded = self._rust.encode_batch_fast(missing, add_special_tokens=False)
            with self._lock:
                for piece, enc in zip(missing, encoded, strict=True):
                    ids = enc.ids
                    found[piece] = ids
                    key = (salt, piece)
                    if len(piece) <= MAX_PIECE_CHARS and key not in self._cache:
                        self._cache[key] = ids
                        self._chars += len(piece)
                while len(self._cache) > MAX_ENTRIES or self._chars > MAX_CACHED_CHARS:
                    (_, old), _ids = self._cache.popitem(last=False)
                    self._chars -= len(old)
        out: list[int] = []
        for p in pieces:
            if isinstance(p, str):
                out.extend(found[p])
            else:
                out.append(p)
        return out
