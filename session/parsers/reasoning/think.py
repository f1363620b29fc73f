"""Shared ``<think>`` … ``</think>`` reasoning splitter.

Output starts as reasoning (the start tag may be missing: templates often put ``<think>`` in the
prompt) unless the prompt already ended the reasoning section; the first ``<think>`` seen while
reasoning is dropped; the first ``</think>`` ends reasoning and is dropped; everything after it is
content, verbatim. A tag split across deltas is held back until it is complete or cannot be.

State between feeds: the mode, the held-back text (a partial tag, qwen3's ``<tool_call>``
included), whether ``<think>`` was dropped already. Never the reasoning text itself.
"""

from __future__ import annotations

from typing import Any, ClassVar

from ..base import ParsedDelta, ParserContext
from ..markers import find_first, held_suffix_len
from .shared import ModalReasoningParser

THINK_START = "<think>"
THINK_END = "</think>"


class ThinkReasoningParser(ModalReasoningParser):
    start_tag: ClassVar[str] = THINK_START
    end_tag: ClassVar[str] = THINK_END

    def __init__(self, ctx: ParserContext) -> None:
        super().__init__(ctx)
        self._mode = "content" if self._starts_as_content(ctx) else "reasoning"
        self._buf = ""
        self._start_seen = False

    def _starts_as_content(self, ctx: ParserContext) -> bool:
        return ctx.prompt_ends_reasoning

    @property
    def passthrough(self) -> bool:
        return self._mode == "content" and not self._buf

    def plain_reasoning_guard(self) -> str | None:
        if self._mode != "reasoning" or self._buf:
            return None
        firsts = {m[0] for m in self._markers()}  # "<" for every tag here
        return firsts.pop() if len(firsts) == 1 else None

    # -- splitting ---------------------------------------------------------------------------
    def _markers(self) -> tuple[str, ...]:
        return (self.end_tag,) if self._start_seen else (self.end_tag, self.start_tag)

    def _process(self, text: str, final: bool) -> ParsedDelta:
        if self._mode == "content":
            if self._buf:
                text, self._buf = self._buf + text, ""
            return ParsedDelta(content=text)
        if not self._buf and "<" not in text:  # every tag starts with "<": plain reasoning
            return ParsedDelta(reasoning=text)
        buf, self._buf = self._buf + text, ""
        reasoning: list[str] = []
        i, n = 0, len(buf)
        while True:
            markers = self._markers()
            pos, marker = find_first(buf, markers, i)
            if pos == -1:
                end = n if final else n - held_suffix_len(buf[max(i, n - max(map(len, markers))):], markers)
                reasoning.append(buf[i:end])
                self._buf = buf[end:]
                return ParsedDelta(reasoning="".join(reasoning))
            reasoning.append(buf[i:pos])
            if marker == self.end_tag:
                self._mode = "content"
                return ParsedDelta(reasoning="".join(reasoning), content=buf[pos + len(marker) :])
            if marker == self.start_tag:
                self._start_seen = True
                i = pos + len(marker)
                continue
            decided = self._other_marker(buf, pos, marker, final)
            if decided is None:  # wait for more text
                self._buf = buf[pos:]
                return ParsedDelta(reasoning="".join(reasoning))
            if decided:  # reasoning ended implicitly; the marker belongs to the content
                self._mode = "content"
                return ParsedDelta(reasoning="".join(reasoning), content=buf[pos:])
            reasoning.append(marker)
            i = pos + len(marker)

    # -- for subclasses ----------------------------------------------------------------------
    def _other_marker(self, buf: str, pos: int, marker: str, final: bool) -> bool | None:
        """A subclass marker at ``buf[pos]``: True ends reasoning there, False is plain reasoning
        text, None needs more text."""
        return False

    def _save(self) -> dict[str, Any]:
        return {"s": self._start_seen}

    def _load(self, state: dict[str, Any]) -> None:
        self._start_seen = bool(state["s"])
