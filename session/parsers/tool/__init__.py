"""Tool-call parsers: model output text → content + tool calls, incrementally (see ``streaming``)."""

from __future__ import annotations

from .deepseek_v3 import DeepSeekV3ToolParser
from .forced import NamedToolChoiceParser, RequiredToolChoiceParser
from .hermes import HermesToolParser
from .llama3_json import Llama3JsonToolParser
from .mistral import MistralToolParser
from .pythonic import PythonicToolParser
from .streaming import StreamingToolParser

__all__ = [
    "DeepSeekV3ToolParser",
    "HermesToolParser",
    "Llama3JsonToolParser",
    "MistralToolParser",
    "NamedToolChoiceParser",
    "PythonicToolParser",
    "RequiredToolChoiceParser",
    "StreamingToolParser",
]
