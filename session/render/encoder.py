"""Text → token ids with the model's tokenizer, as ``tokenizer(text, add_special_tokens=…)`` does.

For fast (Rust-backed) tokenizers the encoder keeps its own copy of the Rust tokenizer, so no
truncation or padding state set elsewhere in the process can leak into render, and calls skip
transformers' Python wrapper (``BatchEncoding``, padding/truncation bookkeeping). The parity suite
checks the ids against ``apply_chat_template(..., tokenize=True)``.
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass
from typing import Any

from session.render.segments import SegmentCache, plan_for

# One private copy of each tokenizer's Rust backend (and how to cut its input into pieces),
# shared by every renderer of that tokenizer: copying a 150k-token vocabulary takes a noticeable
# fraction of a second. Renderers never change the copy's state.
# Two renderers built at once may both make a copy; one wins, both work.
_COPIES: weakref.WeakKeyDictionary[Any, Any] = weakref.WeakKeyDictionary()


@dataclass(frozen=True, slots=True)
class Encoded:
    ids: list[int]
    offsets: list[tuple[int, int]] | None
    encoding: Any = None  # the Rust ``Encoding`` (char → token lookups), when there is one

    def char_to_token(self, char_index: int) -> int | None:
        if self.encoding is None:
            return None
        result: int | None = self.encoding.char_to_token(char_index)
        return result


class Encoder:
    def __init__(self, tokenizer: Any) -> None:
        self._tokenizer = tokenizer
        self._rust: Any = None
        self._segments: SegmentCache | None = None
        # the longest token, in characters: text longer than this many per token of room cannot
        # fit (for byte-level vocabularies the stored form is at least as long as the text)
        self.max_chars_per_token = 0
        backend = getattr(tokenizer, "_tokenizer", None)
        from tokenizers import Tokenizer

        if isinstance(backend, Tokenizer):
            entry = _COPIES.get(tokenizer)
            if entry is None:
                split = bool(getattr(tokenizer, "split_special_tokens", False))
                if backend.truncation is None and backend.padding is None and backend.encode_special_tokens == split:
                    rust = backend  # already configured as render needs: no copy (a copy of a
                    # 150k-entry vocabulary costs seconds of start-up)
                else:
                    rust = Tokenizer.from_str(backend.to_str())
                    rust.no_truncation()
                    rust.no_padding()
                    rust.encode_special_tokens = split
                entry = _COPIES[tokenizer] = (rust, plan_for(rust), _longest_token(rust.get_vocab()))
            self._rust, plan, self.max_chars_per_token = entry
            self._segments = SegmentCache(self._rust, plan) if plan is not None else None
        else:
            try:
                self.max_chars_per_token = _longest_token(tokenizer.get_vocab())
            except (AttributeError, NotImplementedError, TypeError):
                self.max_chars_per_token = 0  # unknown: no fast length check

    @property
    def has_offsets(self) -> bool:
        return self._rust is not None

    def encode(self, text: str, *, add_special_tokens: bool) -> Encoded:
        if self._rust is not None:
            enc = self._rust.encode(text, add_special_tokens=add_special_tokens)
            return Encoded(enc.ids, enc.offsets, enc)
        ids = self._tokenizer(text, add_special_tokens=add_special_tokens)["input_ids"]
        return Encoded(list(ids), None, None)

    def ids(self, text: str, *, add_special_tokens: bool, salt: str | None = None) -> list[int]:
        """Just the ids; a chat prompt (no post-processor tokens) goes through the piece cache,
        shared only between requests with the same ``salt`` (the request's ``cache_salt``)."""
        if not add_special_tokens and self._segments is not None:
            return self._segments.encode(text, salt=salt)
        if self._rust is not None:
            ids: list[int] = self._rust.encode_batch_fast([text], add_special_tokens=add_special_tokens)[0].ids
            return ids
        return list(self._tokenizer(text, add_special_tokens=add_special_tokens)["input_ids"])

    @property
    def vocab_size(self) -> int:
        return len(self._tokenizer)


def _longest_token(vocab: dict[str, int]) -> int:
    return max(map(len, vocab), default=0)


def assistant_mask(encoded: Encoded, spans: tuple[tuple[int, int], ...]) -> list[int]:
    """transformers' mask: 1 for the tokens of each ``{% generation %}`` span, else 0."""
    n = len(encoded.ids)
    mask = [0] * n
    for start_char, end_char in spans:
        start = encoded.char_to_token(start_char)
        end = encoded.char_to_token(end_char - 1)
        if start is None:
            break  # out of range (transformers stops here too)
        for i in range(start, end + 1 if end else n):
            mask[i] = 1
    return mask
