"""``deepseek_v3`` (DeepSeek-V3.1 / V3.2) and ``holo2``: ``<think>`` … ``</think>`` reasoning only
when the request turned thinking on.

As vLLM 0.32's ``DeepSeekV3ReasoningParser``: with ``chat_template_kwargs.thinking`` or
``enable_thinking`` true (Python truth, values ``None`` / ``"auto"`` counting as absent, as vLLM's
kwargs merge drops them) the output is split as ``deepseek_r1`` splits it; otherwise everything is
content, tags included (vLLM's identity parser). ``holo2`` is vLLM's
``DeepSeekV3ReasoningWithThinkingParser``: the same, but thinking is on when the request sets
neither key.
"""

from __future__ import annotations

from typing import Any, ClassVar

from ..base import ParserContext
from .think import ThinkReasoningParser

_UNSET = (None, "auto")


def thinking_requested(kwargs: dict[str, Any], default: bool) -> bool:
    """vLLM's reading of ``thinking`` / ``enable_thinking`` in the request's chat_template_kwargs."""
    present = {k: v for k, v in kwargs.items() if k in ("thinking", "enable_thinking") and v not in _UNSET}
    if not present:
        return default
    return any(bool(v) for v in present.values())


class DeepSeekV3ReasoningParser(ThinkReasoningParser):
    name = "deepseek_v3"
    needs_special_tokens = False
    thinking_default: ClassVar[bool] = False

    def _starts_as_content(self, ctx: ParserContext) -> bool:
        return ctx.prompt_ends_reasoning or not thinking_requested(ctx.chat_template_kwargs, self.thinking_default)


class Holo2ReasoningParser(DeepSeekV3ReasoningParser):
    name = "holo2"
    thinking_default = True
