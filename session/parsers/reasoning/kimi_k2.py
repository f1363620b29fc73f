"""``kimi_k2``: Kimi-K2 Thinking / K2.5 ``<think>`` … ``</think>`` reasoning.

The full rules: docs/parsers.md (the family's section: its split, state and every difference from vLLM).
"""

from __future__ import annotations

from typing import Any, ClassVar

from ..base import ParsedDelta, ParserContext
from ..markers import find_first, held_suffix_len
from ..tool.kimi_k2 import hold_short_trailing_space
from .shared import ModalReasoningParser, thinking_enabled

THINK_START = "<think>"
THINK_END = "</think>"
SECTION_BEGIN = "<|tool_calls_section_begin|>"
_REASONING_MARKERS = (THINK_END, THINK_START, SECTION_BEGIN)
_CONTENT_MARKERS = (THINK_END,)
_LONGEST = len(SECTION_BEGIN)


class KimiK2ReasoningParser(ModalReasoningParser):
    """Modes: ``reasoning``, ``content`` (dropping ``</think>``), ``off`` (thinking off: all is
    content, verbatim)."""

    name = "kimi_k2"
    needs_special_tokens = True
    engine_based = True  # vLLM 0.32 builds it from its engine grammar (vllm/parser/kimi_k2.py)
    modes: ClassVar[tuple[str, ...]] = ("reasoning", "content", "off")

    def __init__(self, ctx: ParserContext) -> None:
        super().__init__(ctx)
        self._mode = "reasoning" if thinking_enabled(ctx.chat_template_kwargs) else "off"  # (KimiK2Parser's)
        self._buf = ""  # a partial tag
        self._ws = ""  # trailing whitespace of the reasoning, held

    @property
    def reasoning_ended(self) -> bool:
        return self._mode != "reasoning"

    @property
    def passthrough(self) -> bool:
        return self._mode == "off"

    plain_reasoning_hold_space: ClassVar[bool] = True  # (its trailing whitespace is held: stripped at the end)

    def plain_reasoning_guard(self) -> str | None:
        # Every marker starts with "<"; with trailing whitespace held, a text is not simply reasoning.
        return "<" if self._mode == "reasoning" and not self._buf and not self._ws else None

    def plain_content_guard(self) -> str | None:
        # After the reasoning only </think> is looked for (and dropped).
        return "<" if self._mode == "content" and not self._buf else None

    def _save(self) -> dict[str, Any]:
        return {"w": self._ws}

    def _load(self, state: dict[str, Any]) -> None:
        self._ws = str(state["w"])

    # -- splitting ---------------------------------------------------------------------------
    def _reasoning(self, out: list[str], text: str) -> None:
        """Reasoning text: trailing whitespace is held until more reasoning follows."""
        if not text:
            return
        body, self._ws = hold_short_trailing_space(self._ws, text)
        if body:
            out.append(body)

    def _process(self, text: str, final: bool) -> ParsedDelta:
        mode = self._mode
        if mode == "off":
            return ParsedDelta(content=text)
        if not self._buf and "<" not in text:  # every tag starts with "<"
            if mode == "content":
                return ParsedDelta(content=text)
            out: list[str] = []
            self._reasoning(out, text)
            if final:
                self._ws = ""
            return ParsedDelta(reasoning="".join(out))
        buf, self._buf = self._buf + text, ""
        reasoning: list[str] = []
        content: list[str] = []
        i, n = 0, len(buf)
        while True:
            markers = _REASONING_MARKERS if self._mode == "reasoning" else _CONTENT_MARKERS
            pos, marker = find_first(buf, markers, i)
            if pos == -1:
                end = n if final else n - held_suffix_len(buf[max(i, n - _LONGEST):], markers)
                if self._mode == "reasoning":
                    self._reasoning(reasoning, buf[i:end])
                    if final:
                        self._ws = ""
                else:
                    content.append(buf[i:end])
                self._buf = buf[end:]
                return ParsedDelta(reasoning="".join(reasoning), content="".join(content))
            if self._mode == "reasoning":
                self._reasoning(reasoning, buf[i:pos])
                if marker == THINK_START:
                    i = pos + len(marker)
                    continue
                self._ws, self._mode = "", "content"  # the reasoning's trailing whitespace is dropped
                i = pos if marker == SECTION_BEGIN else pos + len(marker)
                continue
            content.append(buf[i:pos])
            i = pos + len(marker)
