"""``qwen3`` (and ``seed_oss``, ``step3p5``): Qwen3 / Qwen3.5 ``<think>`` … ``</think>`` reasoning.

As vLLM 0.32's qwen3 grammar (one grammar for reasoning and tool calls, ``vllm/parser/qwen3.py``):

- ``chat_template_kwargs.enable_thinking`` false (the template then closes the think block in the
  prompt): everything is content;
- otherwise every ``<think>`` while reasoning is dropped (a repeated one too), text up to
  ``</think>`` is reasoning, the rest content, and without ``</think>`` everything is reasoning
  (the output was cut short);
- a ``<tool_call>`` while reasoning ends reasoning implicitly, whatever follows it (a Qwen3 that
  answers with a tool call directly, a Qwen3-Instruct model, Qwen3.5's XML calls, a call made
  inside the think block): the marker and everything after it are content, for the tool parser
  to read. The text before it stays reasoning.

vLLM 0.32's grammar also drops a ``</think>`` that comes after reasoning ended; here the content is
verbatim (this parser runs before the tool parser and cannot tell content from a call's
arguments, where vLLM's stream keeps it; the ``qwen3_coder`` tool parser drops it from content):
see docs/parsers.md.

``seed_oss`` is the same grammar with ByteDance Seed-OSS's tags (``<seed:think>``,
``<seed:tool_call>``); ``step3p5`` (StepFun Step-3.5) always thinks (``enable_thinking`` is
ignored) and drops the whitespace that ends its reasoning.
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
