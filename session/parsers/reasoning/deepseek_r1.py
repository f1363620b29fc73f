"""``deepseek_r1``: DeepSeek-R1 style ``<think>`` … ``</think>`` reasoning.

As vLLM's ``DeepSeekR1ReasoningParser``: the start tag may be missing (text before ``</think>``
is reasoning) and without ``</think>`` everything is reasoning. When the prompt already ended the
reasoning section (e.g. a template that closed ``</think>``), everything is content, which is
what vLLM's streaming path does (its non-streaming path would call it all reasoning).
"""

from __future__ import annotations

from .think import ThinkReasoningParser


class DeepSeekR1ReasoningParser(ThinkReasoningParser):
    name = "deepseek_r1"
    needs_special_tokens = False
