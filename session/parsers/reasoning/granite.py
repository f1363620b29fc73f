"""``granite``: IBM Granite 3.2's plain-text reasoning sections, ``Here is my thought process:`` …
``Here is my response:`` … (``Here's`` accepted for either, as vLLM accepts it).

The full rules: docs/parsers.md (the family's section: its split, state and every difference from vLLM).
"""

from __future__ import annotations

from typing import ClassVar

from ..base import ParsedDelta, ParserContext
from ..markers import find_first, held_suffix_len
from .shared import ModalReasoningParser

THINK_STARTS = ("Here is my thought process:", "Here's my thought process:")
RESPONSE_STARTS = ("Here is my response:", "Here's my response:")
_LONGEST_RESPONSE = max(map(len, RESPONSE_STARTS))


class GraniteReasoningParser(ModalReasoningParser):
    name = "granite"
    needs_special_tokens = False
    modes: ClassVar[tuple[str, ...]] = ("start", "reasoning", "content")

    def __init__(self, ctx: ParserContext) -> None:
        super().__init__(ctx)
        self._mode = "start"
        self._buf = ""

    @property
    def passthrough(self) -> bool:
        return self._mode == "content" and not self._buf

    def plain_reasoning_guard(self) -> str | None:
        # every response phrase starts with "H"
        return "H" if self._mode == "reasoning" and not self._buf else None

    def _process(self, text: str, final: bool) -> ParsedDelta:
        buf, self._buf = self._buf + text, ""
        if self._mode == "content":
            return ParsedDelta(content=buf)
        if self._mode == "start":
            start = next((s for s in THINK_STARTS if buf.startswith(s)), None)
            if start is None:
                if not final and any(s.startswith(buf) for s in THINK_STARTS):
                    self._buf = buf  # may still become the phrase
                    return ParsedDelta()
                self._mode = "content"
                return ParsedDelta(content=buf)
            self._mode, buf = "reasoning", buf[len(start):]
        pos, marker = find_first(buf, RESPONSE_STARTS)
        if pos != -1:
            self._mode = "content"
            return ParsedDelta(reasoning=buf[:pos], content=buf[pos + len(marker):])
        n = len(buf)
        end = n if final else n - held_suffix_len(buf[max(0, n - _LONGEST_RESPONSE):], RESPONSE_STARTS)
        self._buf = buf[end:]
        return ParsedDelta(reasoning=buf[:end])
