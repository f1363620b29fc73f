"""``qwen3``: Qwen3 / Qwen3.5 ``<think>`` … ``</think>`` reasoning.

As vLLM's current ``Qwen3ReasoningParser``:

- ``chat_template_kwargs.enable_thinking`` false (the template then closes the think block in the
  prompt): everything is content;
- otherwise a ``<think>`` in the output is dropped, text up to ``</think>`` is reasoning, the rest
  content, and without ``</think>`` everything is reasoning (the output was cut short);
- a ``<tool_call>`` followed (after whitespace) by ``<function=`` / ``<function `` — Qwen3.5's XML
  tool format — ends reasoning implicitly and belongs to the content; only the first
  ``<tool_call>`` is considered, as vLLM's non-streaming parser does.

Older vLLM releases returned content when neither tag was in the output; vLLM now treats a
missing ``</think>`` as truncated reasoning, and so does this parser.
"""

from __future__ import annotations

import re
from typing import Any

from ..base import ParserContext
from .think import ThinkReasoningParser

TOOL_CALL = "<tool_call>"
_FUNCTION_OPEN = re.compile(r"<function[\s=]")
_FUNCTION_PREFIX = "<function"


class Qwen3ReasoningParser(ThinkReasoningParser):
    name = "qwen3"
    needs_special_tokens = False

    def __init__(self, ctx: ParserContext) -> None:
        super().__init__(ctx)
        self._tool_call_checked = False

    def _starts_as_content(self, ctx: ParserContext) -> bool:
        return ctx.prompt_ends_reasoning or not ctx.chat_template_kwargs.get("enable_thinking", True)

    def _markers(self) -> tuple[str, ...]:
        markers = super()._markers()
        return markers if self._tool_call_checked else (*markers, TOOL_CALL)

    def _other_marker(self, buf: str, pos: int, marker: str, final: bool) -> bool | None:
        after = buf[pos + len(marker) :].lstrip()
        if _FUNCTION_OPEN.match(after):
            self._tool_call_checked = True
            return True
        # Still whitespace, or a prefix of "<function" plus its next character: wait.
        could_be = len(after) <= len(_FUNCTION_PREFIX) and _FUNCTION_PREFIX.startswith(after)
        if could_be and not final:
            return None
        self._tool_call_checked = True
        return False

    def _save(self) -> dict[str, Any]:
        return {"t": self._tool_call_checked}

    def _load(self, state: dict[str, Any]) -> None:
        self._tool_call_checked = bool(state["t"])
