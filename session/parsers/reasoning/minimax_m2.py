"""``minimax_m2`` and ``minimax_m2_append_think``: MiniMax-M2 reasoning.

The full rules: docs/parsers.md (the family's section: its split, state and every difference from vLLM).
"""

from __future__ import annotations

from typing import Any, Self

from ..base import ParsedDelta, ParserContext, ReasoningParser
from ..errors import MalformedSnapshot
from ..markers import find_first, held_suffix_len
from ..tool.minimax_m2 import TOOL_START, pack_space, unpack_space
from .shared import ModalReasoningParser, hold_trailing_space

THINK_START = "<think>"
THINK_END = "</think>"
_REASONING_MARKERS = (THINK_START, THINK_END, TOOL_START)
_CONTENT_MARKERS = (THINK_END,)


class MiniMaxM2ReasoningParser(ModalReasoningParser):
    name = "minimax_m2"
    needs_special_tokens = False
    # vLLM's minimax_m2 reasoning parser is the engine grammar itself (with it, vLLM also runs its
    # engine tool parser for tool_choice "none", to take the call markup out of the content).
    engine_based = True

    def __init__(self, ctx: ParserContext) -> None:
        super().__init__(ctx)
        self._mode = "content" if ctx.prompt_ends_reasoning else "reasoning"
        self._buf = ""  # a partial marker
        self._ws = ""  # trailing whitespace of the reasoning, held back

    def _save(self) -> dict[str, Any]:
        return {"w": pack_space(self._ws)}

    def _load(self, state: dict[str, Any]) -> None:
        self._ws = unpack_space(state["w"])

    def plain_content_guard(self) -> str | None:
        # Past the reasoning only "</think>" is still taken out of the content: a text without "<"
        # is content as it is.
        return "<" if self._mode == "content" and not self._buf else None

    def _reasoning(self, parts: list[str], text: str) -> None:
        """Reasoning text, its trailing whitespace held back until more reasoning follows."""
        sent, self._ws = hold_trailing_space(self._ws, text)
        parts.append(sent)

    def _process(self, text: str, final: bool) -> ParsedDelta:
        if not self._buf and "<" not in text and not final:  # every marker starts with "<"
            if self._mode == "content":
                return ParsedDelta(content=text)
            sent, self._ws = hold_trailing_space(self._ws, text)
            return ParsedDelta(reasoning=sent)
        buf, self._buf = self._buf + text, ""
        if self._mode == "content":
            return ParsedDelta(content=self._content(buf, final))
        reasoning: list[str] = []
        i, n = 0, len(buf)
        while True:
            pos, marker = find_first(buf, _REASONING_MARKERS, i)
            if pos == -1:
                end = n if final else n - held_suffix_len(buf[max(i, n - len(TOOL_START)):], _REASONING_MARKERS)
                self._reasoning(reasoning, buf[i:end])
                self._buf = buf[end:]
                if final:
                    self._ws = ""
                return ParsedDelta(reasoning="".join(reasoning))
            self._reasoning(reasoning, buf[i:pos])
            if marker == THINK_START:
                i = pos + len(marker)
                continue
            self._mode, self._ws = "content", ""  # trailing whitespace of the reasoning is dropped
            rest = buf[pos + len(THINK_END):] if marker == THINK_END else buf[pos:]
            return ParsedDelta(reasoning="".join(reasoning), content=self._content(rest, final))

    def _content(self, buf: str, final: bool) -> str:
        if "<" not in buf:
            return buf
        parts = buf.split(THINK_END)
        last = parts[-1]
        keep = 0 if final else held_suffix_len(last[-len(THINK_END):], _CONTENT_MARKERS)
        if keep:
            self._buf = last[-keep:]
            parts[-1] = last[:-keep]
        return "".join(parts)


class MiniMaxM2AppendThinkReasoningParser(ReasoningParser):
    name = "minimax_m2_append_think"
    needs_special_tokens = False
    engine_based = False  # a plain reasoning parser in vLLM: with it, "none" reads no calls

    def __init__(self, ctx: ParserContext) -> None:
        super().__init__(ctx)
        self._opened = False  # "<think>" was sent

    @property
    def reasoning_ended(self) -> bool:
        return True

    @property
    def passthrough(self) -> bool:
        return self._opened

    def feed(self, text: str) -> ParsedDelta:
        if not text or self._opened:
            return ParsedDelta(content=text)
        self._opened = True
        return ParsedDelta(content=THINK_START + text)

    def finish(self) -> ParsedDelta:
        if self._opened:
            return ParsedDelta()
        self._opened = True
        return ParsedDelta(content=THINK_START)

    def snapshot(self) -> dict[str, Any]:
        return {"p": self.name, "m": "content", "s": self._opened}

    @classmethod
    def restore(cls, ctx: ParserContext, snapshot: dict[str, Any]) -> Self:
        if not isinstance(snapshot, dict) or snapshot.get("p") != cls.name:
            raise MalformedSnapshot(f"not a {cls.name} reasoning parser snapshot")
        if snapshot.get("m") != "content" or not isinstance(snapshot.get("s"), bool):
            raise MalformedSnapshot(f"malformed {cls.name} reasoning parser snapshot")
        parser = cls(ctx)
        parser._opened = snapshot["s"]
        return parser
