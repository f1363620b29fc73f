"""Which tool parser a request gets, and whether its calls are dropped (vLLM 0.32's
``_extract_tool_calls``): tool_choice none / auto / required / named against parsers with and without
``supports_required_and_named`` and ``engine_based``."""

from __future__ import annotations

from typing import Any

import pytest

from session.derender.spec import ParserConfig, _tool_parser
from session.parsers import get_reasoning_parser, get_tool_parser
from session.parsers.base import ParserContext
from session.parsers.tool import NamedToolChoiceParser, RequiredToolChoiceParser

TOOLS = ({"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}},)
NAMED = {"type": "function", "function": {"name": "f"}}


def pick(tool: str, reasoning: str | None, choice: Any, *, tools: bool = True, auto: bool = True) -> tuple[Any, bool]:
    config = ParserConfig(get_tool_parser(tool), get_reasoning_parser(reasoning) if reasoning else None, auto)
    return _tool_parser(config, ParserContext(tools=TOOLS if tools else (), tool_choice=choice))


def test_the_attributes_are_vllms() -> None:
    assert get_tool_parser("hermes").supports_required_and_named and not get_tool_parser("hermes").engine_based
    coder = get_tool_parser("qwen3_coder")
    assert not coder.supports_required_and_named and coder.engine_based
    assert get_tool_parser("seed_oss").supports_required_and_named and get_tool_parser("seed_oss").engine_based
    assert get_reasoning_parser("qwen3").engine_based and not get_reasoning_parser("deepseek_r1").engine_based


@pytest.mark.parametrize("tools", [True, False])
def test_none_with_engine_parsers_reads_the_output_and_drops_calls(tools: bool) -> None:
    assert pick("qwen3_coder", "qwen3", "none" if tools else None, tools=tools) == (get_tool_parser("qwen3_coder"), True)
    assert pick("qwen3_coder", None, "none", tools=tools) == (get_tool_parser("qwen3_coder"), True)


def test_none_reads_nothing_unless_every_parser_is_engine_based() -> None:
    assert pick("hermes", "qwen3", "none") == (None, False)
    assert pick("qwen3_coder", "deepseek_r1", "none") == (None, False)


def test_auto_needs_the_flag() -> None:
    assert pick("qwen3_coder", "qwen3", "auto") == (get_tool_parser("qwen3_coder"), False)
    assert pick("qwen3_coder", "qwen3", "auto", auto=False) == (None, False)


@pytest.mark.parametrize("choice", ["required", NAMED])
def test_required_and_named_read_the_models_own_format_where_the_parser_says_so(choice: Any) -> None:
    assert pick("qwen3_coder", "qwen3", choice) == (get_tool_parser("qwen3_coder"), False)
    assert pick("qwen3_coder", "qwen3", choice, auto=False) == (None, False)


def test_required_and_named_are_json_for_the_other_parsers() -> None:
    assert pick("hermes", "qwen3", "required") == (RequiredToolChoiceParser, False)
    assert pick("hermes", "qwen3", NAMED) == (NamedToolChoiceParser, False)
    assert pick("seed_oss", "seed_oss", NAMED) == (NamedToolChoiceParser, False)
