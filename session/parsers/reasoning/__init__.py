"""Reasoning parsers: model output text → reasoning + content, incrementally (see ``think``)."""

from __future__ import annotations

from .deepseek_r1 import DeepSeekR1ReasoningParser
from .qwen3 import Qwen3ReasoningParser
from .think import ThinkReasoningParser

__all__ = ["DeepSeekR1ReasoningParser", "Qwen3ReasoningParser", "ThinkReasoningParser"]
