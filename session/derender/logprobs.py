"""Engine logprobs (integer token ids) → OpenAI's chat and completion logprob shapes.

A token's string is its bytes decoded as UTF-8 with U+FFFD for an unfinished character (what
``tokenizer.decode([id])`` gives, as vLLM reports it); its ``bytes`` are the token's exact bytes,
so a client that joins the ``bytes`` of consecutive tokens gets the real characters back even when
one character spans several tokens.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from engine.protocol import TokenLogprob
from session.detokenizer import TokenTable

__all__ = ["chat_logprobs", "completion_logprobs", "token_text"]

_TEXT_CACHE_LIMIT = 200_000
_text_cache: dict[tuple[int, int], tuple[str, list[int]]] = {}


def token_text(table: TokenTable, token_id: int) -> tuple[str, list[int]]:
    """(string, bytes) of one token, cached per tokenizer."""
    key = (id(table), token_id)
    hit = _text_cache.get(key)
    if hit is None:
        raw = table.token_bytes(token_id)
        hit = (raw.decode("utf-8", "replace"), list(raw))
        if len(_text_cache) >= _TEXT_CACHE_LIMIT:
            _text_cache.clear()
        _text_cache[key] = hit
    return hit


def _finite(value: float) -> float:
    # JSON has no -inf; vLLM clamps to -9999.0 the same way
    return max(float(value), -9999.0)


def chat_logprobs(table: TokenTable, entries: Sequence[TokenLogprob], top: int | None) -> dict[str, Any]:
    """``{"content": [{token, logprob, bytes, top_logprobs: [...]}, ...]}`` for ``entries``;
    ``top`` limits each ``top_logprobs`` list (None: as the engine sent them)."""
    content = []
    for e in entries:
        text, raw = token_text(table, e.token_id)
        tops = e.top_logprobs if top is None or top < 0 else e.top_logprobs[:top]
        top_list = []
        for t in tops:
            t_text, t_raw = token_text(table, t.token_id)
            top_list.append({"token": t_text, "logprob": _finite(t.logprob), "bytes": t_raw})
        content.append({"token": text, "logprob": _finite(e.logprob), "bytes": raw, "top_logprobs": top_list})
    return {"content": content}


def completion_logprobs(table: TokenTable, entries: Sequence[TokenLogprob], top: int | None,
                        text_offset: int) -> tuple[dict[str, Any], int]:
    """The completion shape (``tokens``, ``token_logprobs``, ``top_logprobs`` as dicts,
    ``text_offset``) and the offset after the last token."""
    tokens: list[str] = []
    token_logprobs: list[float | None] = []
    tops: list[dict[str, float] | None] = []
    offsets: list[int] = []
    for e in entries:
        text, _ = token_text(table, e.token_id)
        tokens.append(text)
        token_logprobs.append(_finite(e.logprob))
        chosen = e.top_logprobs if top is None or top < 0 else e.top_logprobs[:top]
        tops.append({token_text(table, t.token_id)[0]: _finite(t.logprob) for t in chosen} if chosen else None)
        offsets.append(text_offset)
        text_offset += len(text)
    return ({"text_offset": offsets, "token_logprobs": token_logprobs, "tokens": tokens, "top_logprobs": tops},
            text_offset)
