"""Tool-call and reasoning parsers, selected by ``--tool-call-parser`` / ``--reasoning-parser``.

The contract is in ``base``; docs/parsers.md explains each parser's split and where it differs
from vLLM. The derenderer chains them per choice: text → reasoning parser → (content) → tool
parser. Which tool parser applies to a request also depends on its ``tool_choice``; use
``build_tool_parser`` / ``restore_tool_parser`` rather than the registry directly.
"""

from __future__ import annotations

from typing import Any

from .base import ParsedDelta, ParserContext, ReasoningParser, ToolCallDelta, ToolParser
from .errors import MalformedSnapshot, UnknownParser
from .harmony import HarmonyReasoningParser, HarmonyToolParser
from .reasoning import DeepSeekR1ReasoningParser, Qwen3ReasoningParser
from .reasoning.deepseek_v3 import DeepSeekV3ReasoningParser, Holo2ReasoningParser
from .reasoning.gemma4 import Gemma4ReasoningParser
from .reasoning.glm import GlmReasoningParser
from .reasoning.granite import GraniteReasoningParser
from .reasoning.kimi_k2 import KimiK2ReasoningParser
from .reasoning.minimax_m2 import MiniMaxM2AppendThinkReasoningParser, MiniMaxM2ReasoningParser
from .reasoning.mistral import MistralReasoningParser
from .reasoning.nemotron_v3 import GraniteThinkingReasoningParser, NemotronV3ReasoningParser
from .reasoning.qwen3 import SeedOssReasoningParser, Step3p5ReasoningParser
from .tool import (
    DeepSeekV3ToolParser,
    HermesToolParser,
    Llama3JsonToolParser,
    MistralToolParser,
    NamedToolChoiceParser,
    PythonicToolParser,
    RequiredToolChoiceParser,
)
from .tool.deepseek_v32 import DeepSeekV32ToolParser
from .tool.forced import forced_function_name
from .tool.gemma4 import Gemma4ToolParser
from .tool.glm import GlmToolParser
from .tool.granite import Granite4ToolParser, GraniteToolParser
from .tool.kimi_k2 import KimiK2ToolParser
from .tool.llama4_pythonic import Llama4PythonicToolParser
from .tool.minimax_m2 import MinimaxM2ToolParser
from .tool.qwen3_xml import MiMoToolParser, Qwen3XmlToolParser, SeedOssToolParser

# ``--tool-call-parser`` names. ``llama4_json`` and ``deepseek_v31`` are vLLM's names for the same
# formats (the deepseek_v3 parser reads both the V3 and the V3.1 call format).
TOOL_PARSERS: dict[str, type[ToolParser]] = {
    "minimax_m2": MinimaxM2ToolParser,
    "deepseek_v32": DeepSeekV32ToolParser,  # DeepSeek-V3.2 DSML calls
    "gemma4": Gemma4ToolParser,  # Gemma 4: <|tool_call>call:NAME{key:<|"|>v<|"|>}<tool_call|>
    "hermes": HermesToolParser,
    "llama3_json": Llama3JsonToolParser,
    "llama4_json": Llama3JsonToolParser,
    "mistral": MistralToolParser,
    "pythonic": PythonicToolParser,
    "deepseek_v3": DeepSeekV3ToolParser,
    "deepseek_v31": DeepSeekV3ToolParser,
    "granite": GraniteToolParser,  # Granite 3.x: <|tool_call|>[{…}, …]
    "granite4": Granite4ToolParser,  # Granite 4: <tool_call>{…}</tool_call>
    "llama4_pythonic": Llama4PythonicToolParser,
    "kimi_k2": KimiK2ToolParser,
    "glm45": GlmToolParser,  # GLM-4.5 / 4.6 / 4.7 / 5: one grammar in vLLM 0.32
    "glm47": GlmToolParser,
    "openai": HarmonyToolParser,  # gpt-oss harmony (session/parsers/harmony.py)
    # Qwen3-Coder / Qwen3.5 XML calls (one engine grammar in vLLM 0.32; step3p5 is the same grammar,
    # seed_oss and mimo variants of it); qwen3_json is vLLM's alias of hermes.
    "qwen3_coder": Qwen3XmlToolParser,
    "qwen3_xml": Qwen3XmlToolParser,
    "step3p5": Qwen3XmlToolParser,
    "seed_oss": SeedOssToolParser,
    "mimo": MiMoToolParser,
    "qwen3_json": HermesToolParser,
}

# ``--reasoning-parser`` names.
REASONING_PARSERS: dict[str, type[ReasoningParser]] = {
    "minimax_m2": MiniMaxM2ReasoningParser,
    "minimax_m2_append_think": MiniMaxM2AppendThinkReasoningParser,
    "deepseek_v3": DeepSeekV3ReasoningParser,  # <think> only with thinking / enable_thinking
    "holo2": Holo2ReasoningParser,  # the same, thinking on by default
    "gemma4": Gemma4ReasoningParser,  # Gemma 4: <|channel>thought\n…<channel|>
    "deepseek_r1": DeepSeekR1ReasoningParser,
    "qwen3": Qwen3ReasoningParser,
    "seed_oss": SeedOssReasoningParser,
    "step3p5": Step3p5ReasoningParser,
    "mimo": Qwen3ReasoningParser,  # the qwen3 grammar under another name
    "granite": GraniteReasoningParser,
    "granite_thinking_parser": GraniteThinkingReasoningParser,
    "mistral": MistralReasoningParser,
    "nemotron_v3": NemotronV3ReasoningParser,
    "kimi_k2": KimiK2ReasoningParser,
    "glm45": GlmReasoningParser,
    "glm47": GlmReasoningParser,
    "openai_gptoss": HarmonyReasoningParser,
}


def get_tool_parser(name: str) -> type[ToolParser]:
    try:
        return TOOL_PARSERS[name]
    except KeyError:
        raise UnknownParser("tool call", name, sorted(TOOL_PARSERS)) from None


def get_reasoning_parser(name: str) -> type[ReasoningParser]:
    try:
        return REASONING_PARSERS[name]
    except KeyError:
        raise UnknownParser("reasoning", name, sorted(REASONING_PARSERS)) from None


def effective_tool_choice(ctx: ParserContext) -> str | dict[str, Any]:
    """``"none"``, ``"auto"``, ``"required"`` or the named choice, as vLLM resolves it: an absent
    ``tool_choice`` means ``"auto"`` when the request has tools and ``"none"`` otherwise."""
    choice = ctx.tool_choice
    if choice is None:
        return "auto" if ctx.tools else "none"
    return choice


def tool_parser_class(name: str | None, ctx: ParserContext) -> type[ToolParser] | None:
    """The tool parser class for this request, or None when tool calls are not parsed.

    A named ``tool_choice`` or ``"required"`` selects the forced parsers whatever the configured
    parser (vLLM reads constrained JSON output for them); ``"auto"`` selects the configured
    parser (None when none is configured); ``"none"``, or no tools, parses no tool calls.
    """
    choice = effective_tool_choice(ctx)
    if isinstance(choice, dict):
        if forced_function_name(choice) is None:
            return None
        return NamedToolChoiceParser
    if choice == "required":
        return RequiredToolChoiceParser
    if choice == "auto" and ctx.tools and name is not None:
        return get_tool_parser(name)
    return None


def build_tool_parser(name: str | None, ctx: ParserContext) -> ToolParser | None:
    """A fresh tool parser for this request (see ``tool_parser_class``)."""
    cls = tool_parser_class(name, ctx)
    return None if cls is None else cls(ctx)


def restore_tool_parser(name: str | None, ctx: ParserContext, snapshot: dict[str, Any]) -> ToolParser:
    """Rebuild the tool parser ``build_tool_parser(name, ctx)`` made, from its ``snapshot()``."""
    cls = tool_parser_class(name, ctx)
    if cls is None:
        raise MalformedSnapshot("this request parses no tool calls, but the state carries a tool parser")
    return cls.restore(ctx, snapshot)


__all__ = [
    "REASONING_PARSERS",
    "TOOL_PARSERS",
    "MalformedSnapshot",
    "ParsedDelta",
    "ParserContext",
    "ReasoningParser",
    "ToolCallDelta",
    "ToolParser",
    "UnknownParser",
    "build_tool_parser",
    "effective_tool_choice",
    "get_reasoning_parser",
    "get_tool_parser",
    "restore_tool_parser",
    "tool_parser_class",
]
