"""Budget-aware closing: a constrained sequence always completes its document within max_tokens.

:func:`closing_path` walks a fork of a sequence's matcher to a complete document, :meth:`Vocab.tokens`
splits the bytes into few tokens, :func:`check_path` checks them; :class:`Closing` (one per
constrained sequence, on the engine thread) forces the path at the last moment and checks drawn
tokens near the end. The policy, the search and its budgets: docs/structured-outputs.md, "How the
local engine enforces it" and "Inside the engine" ("The closing walk"). The walk lives in
structured_closing_walk.py, what it reads of the text in structured_closing_text.py.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from engine.local.structured_closing_text import Lexer, Region, TagShape, Vocab, tag_shape
from engine.local.structured_closing_walk import check_path, closing_path

__all__ = ["MARGIN", "Closing", "Lexer", "Region", "TagShape", "Vocab", "check_path", "closing_path", "tag_shape"]

# --- steering one sequence -----------------------------------------------------------------------

MARGIN = 32  # slack (tokens) under which every drawn token is checked against a fresh path (more
# than one token can add: a "," in a tool-call array adds a whole call, about 15 tokens)


class Closing:
    """One constrained sequence's closing path and when to walk it again (engine thread only).

    :meth:`before` runs before the step's draw and may restrict the row to one token;
    :meth:`after` runs once the matcher accepted the drawn token and may replace it."""

    __slots__ = ("_bytes_of", "_vocab", "check", "due", "estimate", "lexer", "off", "path", "region", "stop_ids",
                 "tag", "text", "walks")

    def __init__(self, vocab: Vocab, bytes_of: Sequence[bytes], stop_ids: Sequence[int], json_text: bool,
                 prefix: Sequence[int], tag: TagShape | None = None) -> None:
        self._vocab = vocab
        self._bytes_of = bytes_of
        self.stop_ids = list(stop_ids)
        self.lexer = Lexer().feed(b"".join(bytes_of[t] for t in prefix)) if json_text else None
        # a structural tag: the text so far, and where it stands in JSON content
        self.tag = tag
        self.text = bytearray(b"".join(bytes_of[t] for t in prefix)) if tag is not None else bytearray()
        self.region = Region.of(self.text, tag) if tag is not None else Region()
        self.path: list[int] | None = None  # tokens completing the document from the current state
        self.estimate = 0  # the last path's length, while ``path`` is stale
        self.due = 0  # tokens generated when the next walk is due
        self.check = False  # check the token drawn in this step (slack at most MARGIN)
        self.off = not self.stop_ids  # not steered (no stop id, a walk that gave up, too late)
        self.walks = 0

    def walk(self, matcher: Any) -> list[int] | None:
        """A checked closing path from ``matcher``'s state (tokens, the stop token not included)."""
        self.walks += 1
        data = closing_path(matcher, self.lexer, self.tag, self.text, self.region)
        tokens = self._vocab.tokens(data) if data is not None else None
        if tokens is None or not check_path(matcher, tokens, self.stop_ids[0]):
            return None
        return tokens

    def before(self, matcher: Any, generated: int, remaining: int) -> list[int] | None:
        """The ids the row is restricted to in this step (None: the grammar's mask alone).
        ``remaining``: tokens the sequence may still produce, this one included."""
        self.check = False
        if self.off:
            return None
        if self.path is None:
            if generated < self.due and remaining - 1 - self.estimate > MARGIN:
                return None
            self.path = self.walk(matcher)
            if self.path is None:
                self.off = True
                return None
        slack = remaining - 1 - len(self.path)
        if slack < 0:  # too late (or max_tokens too small): the sequence ends with "length"
            self.off = True
            return None
        if slack == 0:
            return [self.path[0]] if self.path else self.stop_ids
        if slack <= MARGIN:
            self.check = True
        else:
            self.due = generated + max(1, (slack - MARGIN) // 4)
        return None

    def after(self, matcher: Any, token: int, remaining: int) -> int | None:
        """``matcher`` has accepted ``token``; ``remaining`` is what is left after it. Returns the
        token that replaces it (the matcher then stands after that one), or None."""
        path = self.path
        if self.off or matcher.is_terminated():
            return None
        lexer, size, region = self.lexer, len(self.text), self.region
        if path and token == path[0]:
            self.path = path[1:]
            self._feed(token)
            return None
        self._feed(token)
        if not self.check:
            if path is not None:
                self.estimate, self.path = len(path), None
            return None
        fresh = self.walk(matcher)
        if fresh is not None and len(fresh) + 1 <= remaining:
            self.path = fresh
            return None
        assert path is not None  # check is set only with a path
        matcher.rollback(1)
        self.lexer, self.region = lexer, region
        del self.text[size:]
        replacement = path[0] if path else self.stop_ids[0]
        matcher.accept_token(replacement)
        self.path = path[1:]
        self._feed(replacement)
        return replacement

    def _feed(self, token: int) -> None:
        if self.lexer is not None:
            self.lexer = self.lexer.feed(self._bytes_of[token])
        tag = self.tag
        if tag is not None:
            data = self._bytes_of[token]
            self.text += data
            self.region = self.region.fed(self.text, len(data), tag)
