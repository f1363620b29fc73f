"""``qwen3`` (and ``seed_oss``, ``step3p5``): Qwen3 / Qwen3.5 ``<think>`` … ``</think>`` reasoning.

The full rules: docs/parsers.md (the family's section: its split, state and every difference from vLLM).
"""

from __future__ import annotations

from typing import Any, ClassVar

from ..base import ParsedDelta, ParserContext
from .shared import hold_trailing_space
from .think import ThinkReasoningParser

TOOL_CALL = "<tool_call>"
# Whitespace at the end of the reasoning held back (step3p5), at most.
WS_CAP = 64


class Qwen3ReasoningParser(ThinkReasoningParser):
    name = "qwen3"
    needs_special_tokens = False
    engine_based = True  # (vLLM 0.32's qwen3 engine grammar)
    tool_tag: ClassVar[str] = TOOL_CALL
    honours_enable_thinking: ClassVar[bool] = True

    def _starts_as_content(self, ctx: ParserContext) -> bool:
        if ctx.prompt_ends_reasoning:
            return True
        return self.honours_enable_thinking and not ctx.chat_template_kwargs.get("enable_thinking", True)

    def _markers(self) -> tuple[str, ...]:
        return (self.end_tag, self.start_tag, self.tool_tag)  # (every <think> is dropped, not only the first)

    def _other_marker(self, buf: str, pos: int, marker: str, final: bool) -> bool | None:
        return True  # <tool_call>: reasoning ends here, the call is content


class SeedOssReasoningParser(Qwen3ReasoningParser):
    name = "seed_oss"
    start_tag = "<seed:think>"
    end_tag = "</seed:think>"
    tool_tag = "<seed:tool_call>"


class Step3p5ReasoningParser(Qwen3ReasoningParser):
    """Step-3.5: thinking is always on, and the reasoning's trailing whitespace is not part of it
    (held back until more reasoning follows; dropped when reasoning ends)."""

    name = "step3p5"
    honours_enable_thinking = False

    def __init__(self, ctx: ParserContext) -> None:
        super().__init__(ctx)
        self._ws = ""

    def plain_reasoning_guard(self) -> str | None:
        return None  # a text ending in whitespace is held back, so no text passes unchanged

    def feed(self, text: str) -> ParsedDelta:
        return self._trim(super().feed(text), final=False)

    def finish(self) -> ParsedDelta:
        return self._trim(super().finish(), final=True)

    def _trim(self, delta: ParsedDelta, final: bool) -> ParsedDelta:
        delta.reasoning, self._ws = hold_trailing_space(self._ws, delta.reasoning, WS_CAP)
        if self._ws and (final or self.reasoning_ended):
            self._ws = ""
        return delta

    def _save(self) -> dict[str, Any]:
        return {**super()._save(), "w": self._ws}

    def _load(self, state: dict[str, Any]) -> None:
        super()._load(state)
        self._ws = str(state["w"])
