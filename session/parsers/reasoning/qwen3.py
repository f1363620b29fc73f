"""``qwen3``: Qwen3 / Qwen3.5 ``<think>`` … ``</think>`` reasoning.

As vLLM 0.32's qwen3 parser (one grammar for reasoning and tool calls):

- ``chat_template_kwargs.enable_thinking`` false (the template then closes the think block in the
  prompt): everything is content;
- otherwise a ``<think>`` in the output is dropped, text up to ``</think>`` is reasoning, the rest
  content, and without ``</think>`` everything is reasoning (the output was cut short);
- a ``<tool_call>`` while reasoning ends reasoning implicitly, whatever follows it (a Qwen3 that
  answers with a tool call directly, a Qwen3-Instruct model, Qwen3.5's XML calls): the marker and
  everything after it are content, for the tool parser to read. The text before it stays reasoning.

vLLM 0.32's grammar also drops a ``</think>`` that comes after reasoning ended; here the content is
verbatim (this parser runs before the tool parser and cannot tell content from a call's
arguments, where vLLM keeps it): see docs/parsers.md.
"""

from __future__ import annotations

from ..base import ParserContext
from .think import ThinkReasoningParser

TOOL_CALL = "<tool_call>"


class Qwen3ReasoningParser(ThinkReasoningParser):
    name = "qwen3"
    needs_special_tokens = False

    def _starts_as_content(self, ctx: ParserContext) -> bool:
        return ctx.prompt_ends_reasoning or not ctx.chat_template_kwargs.get("enable_thinking", True)

    def _markers(self) -> tuple[str, ...]:
        return (*super()._markers(), TOOL_CALL)

    def _other_marker(self, buf: str, pos: int, marker: str, final: bool) -> bool | None:
        return True  # <tool_call>: reasoning ends here, the call is content
