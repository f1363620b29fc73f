"""``nemotron_v3``: NVIDIA Nemotron 3 ``<think>`` … ``</think>`` reasoning; ``granite_thinking_parser``:
Granite 4.2's, the same with the content's leading newlines dropped.

The full rules: docs/parsers.md (the family's section: its split, state and every difference from vLLM).
"""

from __future__ import annotations

from typing import Any

from ..base import ParsedDelta, ParserContext
from .qwen3 import Qwen3ReasoningParser
from .shared import hold_trailing_space


class NemotronV3ReasoningParser(Qwen3ReasoningParser):
    name = "nemotron_v3"
    needs_special_tokens = False
    engine_based = True  # vLLM 0.32 builds it (and granite_thinking_parser) from its engine grammar

    def __init__(self, ctx: ParserContext) -> None:
        super().__init__(ctx)
        self._space = ""  # the reasoning's trailing whitespace, held back

    def _save(self) -> dict[str, Any]:
        return {**super()._save(), "w": self._space}

    def _load(self, state: dict[str, Any]) -> None:
        super()._load(state)
        self._space = str(state["w"])

    def plain_reasoning_guard(self) -> str | None:
        return None  # a text that ends in whitespace is not sent as it is

    def feed(self, text: str) -> ParsedDelta:
        return self._trimmed(super().feed(text), final=False)

    def finish(self) -> ParsedDelta:
        return self._trimmed(super().finish(), final=True)

    def _trimmed(self, delta: ParsedDelta, final: bool) -> ParsedDelta:
        delta.reasoning, self._space = hold_trailing_space(self._space, delta.reasoning)
        if final or self._mode == "content":  # no more reasoning: the held whitespace was its end
            self._space = ""
        delta.content = self._content_out(delta.content, final)
        return delta

    def _content_out(self, content: str, final: bool) -> str:
        return content


class GraniteThinkingReasoningParser(NemotronV3ReasoningParser):
    name = "granite_thinking_parser"

    def __init__(self, ctx: ParserContext) -> None:
        super().__init__(ctx)
        self._started = False  # content other than newlines was sent

    @property
    def passthrough(self) -> bool:
        return self._started and super().passthrough

    def _save(self) -> dict[str, Any]:
        return {**super()._save(), "c": self._started}

    def _load(self, state: dict[str, Any]) -> None:
        super()._load(state)
        self._started = bool(state["c"])

    def _content_out(self, content: str, final: bool) -> str:
        if content and not self._started:
            content = content.lstrip("\n")
            self._started = bool(content)
        return content
