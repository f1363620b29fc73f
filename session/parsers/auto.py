"""``--tool-call-parser auto`` / ``--reasoning-parser auto``: the parsers a model needs, read from its
chat template's markers and its ``config.json`` ``model_type``, so users need not look names up.

:func:`choose` is pure (template text and config in, names and the reason out); the server reads the
files, logs the reason in one line and refuses ``auto`` with a clear error when nothing matches.
The rules are checked against every chat template the tests ship (docs/parsers.md, "Choosing
automatically"), and each picks the parsers vLLM's own recipes name for that model.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

AUTO = "auto"


@dataclass(frozen=True, slots=True)
class Choice:
    tool: str | None  # a --tool-call-parser name, or None: the template has no tool-call format we know
    reasoning: str | None  # a --reasoning-parser name, or None: the model does not reason (or we cannot tell)
    why: str  # what in the template / config decided it, for the start-up line


def _has(*markers: str) -> Callable[[str], bool]:
    return lambda t: all(m in t for m in markers)


# (what decides, test on the template, tool parser, reasoning parser or a test that says whether the
# template reasons). Most specific first: the first rule that matches decides.
_THINK = "<think>"
_RULES: tuple[tuple[str, Callable[[str], bool], str, str | None], ...] = (
    ("harmony channels (<|channel|>)", _has("<|channel|>", "<|start|>"), "openai", "openai_gptoss"),
    ("DeepSeek DSML calls (<｜DSML｜function_calls>)", _has("DSML"), "deepseek_v32", "deepseek_v3"),
    ("DeepSeek-V3.1 call markers and a `thinking` switch",
     _has("<｜tool▁calls▁begin｜>", "thinking is defined"), "deepseek_v31", "deepseek_v3"),
    ("DeepSeek-R1 call markers and <think>", _has("<｜tool▁calls▁begin｜>", _THINK), "deepseek_v3", "deepseek_r1"),
    ("DeepSeek-V3 call markers", _has("<｜tool▁calls▁begin｜>"), "deepseek_v3", None),
    ("Kimi-K2 tool-call sections and <think>", _has("<|tool_calls_section_begin|>", _THINK), "kimi_k2", "kimi_k2"),
    ("Kimi-K2 tool-call sections", _has("<|tool_calls_section_begin|>"), "kimi_k2", None),
    ("MiniMax-M2 <minimax:tool_call>", _has("<minimax:tool_call>"), "minimax_m2", "minimax_m2_append_think"),
    ("Seed-OSS <seed:tool_call>", _has("<seed:tool_call>"), "seed_oss", "seed_oss"),
    ("Gemma 4 <|tool_call> and <|think|>", _has("<|tool_call>", "<|think|>"), "gemma4", "gemma4"),
    ("GLM-4.7 <arg_key> calls (clear_thinking)", _has("<arg_key>", "clear_thinking"), "glm47", "glm45"),
    ("GLM-4.5/4.6 <arg_key> calls", _has("<arg_key>", "<|assistant|>"), "glm45", "glm45"),
    ("Nemotron-3 XML calls (truncate_history_thinking)", _has("<function=", "truncate_history_thinking"),
     "qwen3_coder", "nemotron_v3"),
    ("Step-3.5 XML calls", _has("<function=", "<tool_call>", "{% macro render_content"), "step3p5", "step3p5"),
    ("Qwen3-Coder / Qwen3.5 XML calls and <think>", _has("<function=", "<tool_call>", _THINK), "qwen3_coder", "qwen3"),
    ("Qwen3-Coder XML calls", _has("<function=", "<tool_call>"), "qwen3_coder", None),
    ("Granite 3 <|tool_call|> and roles", _has("<|tool_call|>", "<|start_of_role|>"), "granite", "granite"),
    ("Granite 4 <tool_call> JSON and roles", _has("<tool_call>", "<|start_of_role|>"), "granite4", None),
    ("Hermes <tool_call> JSON and <think>", _has("<tool_call>", "arguments", _THINK), "hermes", "qwen3"),
    ("Hermes <tool_call> JSON", _has("<tool_call>", "arguments"), "hermes", None),
    ("Mistral [TOOL_CALLS] and [THINK]", _has("[TOOL_CALLS]", "[THINK]"), "mistral", "mistral"),
    ("Mistral [TOOL_CALLS]", _has("[TOOL_CALLS]"), "mistral", None),
    ("Llama 3 <|python_tag|>", _has("<|python_tag|>"), "llama3_json", None),
)

# config.json model_type values that decide before the template does.
_MODEL_TYPES: dict[str, tuple[str, str | None]] = {
    "gpt_oss": ("openai", "openai_gptoss"),
}


class NoParserMatches(ValueError):
    """``auto`` was asked for and nothing in the template or config says which parser applies."""


def choose(template: str | None, config: Mapping[str, Any] | None) -> Choice:
    """The parsers for a model with this chat template (its source) and ``config.json``."""
    model_type = (config or {}).get("model_type")
    if isinstance(model_type, str) and model_type in _MODEL_TYPES:
        tool, reasoning = _MODEL_TYPES[model_type]
        return Choice(tool, reasoning, f"config.json model_type {model_type!r}")
    text = template or ""
    for why, test, tool, reasoning in _RULES:
        if test(text):
            return Choice(tool, reasoning, f"the chat template has {why}")
    reasoning_only = "<think>" in text and "</think>" in text
    if reasoning_only:
        return Choice(None, "deepseek_r1", "the chat template has <think> … </think> and no tool-call format")
    return Choice(None, None, "the chat template has no tool-call or reasoning markers tokenwire knows"
                  if text else "the model has no chat template")


def resolve(tool: str | None, reasoning: str | None, template: str | None,
            config: Mapping[str, Any] | None) -> tuple[str | None, str | None, str | None]:
    """``(tool, reasoning, line)``: each ``auto`` replaced by :func:`choose`'s pick, and the start-up
    line that says what was chosen and why (None when neither was ``auto``). An ``auto`` tool parser
    with no match raises :class:`NoParserMatches`; an ``auto`` reasoning parser with no match is
    none (a model that does not reason is the common case)."""
    if AUTO not in (tool, reasoning):
        return tool, reasoning, None
    choice = choose(template, config)
    if tool == AUTO:
        if choice.tool is None:
            raise NoParserMatches(
                f"--tool-call-parser auto: {choice.why}; name a parser (--tool-call-parser NAME, the names in "
                "docs/parsers.md) or leave the flag out")
        tool = choice.tool
    if reasoning == AUTO:
        reasoning = choice.reasoning
    line = (f"parsers chosen automatically: --tool-call-parser {tool or '(none)'}, --reasoning-parser "
            f"{reasoning or '(none)'} ({choice.why})")
    return tool, reasoning, line
