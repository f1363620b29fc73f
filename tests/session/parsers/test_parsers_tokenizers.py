"""Parser vectors streamed at real token boundaries: each vector is encoded with its model
family's real tokenizer and decoded token by token (special tokens kept), so markers such as
``<tool_call>`` or ``[TOOL_CALLS]`` arrive as the single tokens they are and JSON arrives split
where a model would split it."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from session.parsers.base import ParserContext
from session.parsers.reasoning import DeepSeekR1ReasoningParser, Qwen3ReasoningParser
from session.parsers.tool import (
    DeepSeekV3ToolParser,
    HermesToolParser,
    Llama3JsonToolParser,
    MistralToolParser,
    PythonicToolParser,
)

from . import (
    test_parsers_deepseek_v3,
    test_parsers_hermes,
    test_parsers_llama3_json,
    test_parsers_mistral,
    test_parsers_pythonic,
    test_parsers_reasoning,
)
from .parsers_harness import AUTO, AnyParser, Split, fold, one_shot, streamed, token_chunks

CASES: list[tuple[str, AnyParser, ParserContext, str, Split]] = [
    *(("qwen3", HermesToolParser, AUTO, t, s) for _, t, s in test_parsers_hermes.VECTORS),
    *(("qwen2.5", HermesToolParser, AUTO, t, s) for _, t, s in test_parsers_hermes.VECTORS[:8]),
    *(("llama3.1", Llama3JsonToolParser, AUTO, t, s) for _, t, s in test_parsers_llama3_json.VECTORS),
    *(("llama3.1", PythonicToolParser, AUTO, t, s) for _, t, s in test_parsers_pythonic.VECTORS),
    *(("mistral-nemo", MistralToolParser, AUTO, t, s) for _, t, s in test_parsers_mistral.VECTORS),
    *(("deepseek-v3.1", DeepSeekV3ToolParser, AUTO, t, s) for _, t, s in test_parsers_deepseek_v3.VECTORS),
    *(("qwen3", cls, ctx, t, s) for _, cls, ctx, t, s in test_parsers_reasoning.VECTORS if cls is Qwen3ReasoningParser),
    *(("deepseek-v3.1", cls, ctx, t, s) for _, cls, ctx, t, s in test_parsers_reasoning.VECTORS
      if cls is DeepSeekR1ReasoningParser),
]


@pytest.mark.parametrize(("family", "cls", "ctx", "text", "expected"), CASES,
                         ids=[f"{c[0]}-{c[1].name}-{i}" for i, c in enumerate(CASES)])
def test_vectors_split_the_same_at_real_token_boundaries(tokenizer: Callable[[str], Any], family: str,
                                                         cls: AnyParser, ctx: ParserContext, text: str,
                                                         expected: Split) -> None:
    chunks = token_chunks(tokenizer(family), text)
    assert one_shot(cls, text, ctx) == expected
    assert streamed(cls, chunks, ctx) == expected


def test_qwen3_reasoning_then_hermes_calls_one_token_at_a_time(tokenizer: Callable[[str], Any]) -> None:
    text = (
        "<think>\nThe user wants the weather in Tokyo and the time there. 東京 is in JST.\n</think>\n\n"
        "Let me look both up.\n<tool_call>\n"
        '{"name": "get_weather", "arguments": {"city": "東京", "units": "metric", "days": [1, 2]}}\n'
        "</tool_call>\n<tool_call>\n"
        '{"name": "get_time", "arguments": {"tz": "Asia/Tokyo", "note": "say \\"hi\\" 😀"}}\n'
        "</tool_call>"
    )
    chunks = token_chunks(tokenizer("qwen3"), text)
    reasoning, tool = Qwen3ReasoningParser(AUTO), HermesToolParser(AUTO)
    deltas = []
    for chunk in chunks:
        r = reasoning.feed(chunk)
        t = tool.feed(r.content)
        t.reasoning = r.reasoning
        deltas.append(t)
        reasoning = Qwen3ReasoningParser.restore(AUTO, reasoning.snapshot())
        tool = HermesToolParser.restore(AUTO, tool.snapshot())
    end = reasoning.finish()
    last = tool.feed(end.content)
    last.extend(tool.finish())
    last.reasoning = end.reasoning
    deltas.append(last)
    split = fold(deltas)
    assert split.reasoning == "\nThe user wants the weather in Tokyo and the time there. 東京 is in JST.\n"
    assert split.content == "\n\nLet me look both up.\n"
    assert split.calls == (
        ("get_weather", '{"city": "東京", "units": "metric", "days": [1, 2]}'),
        ("get_time", '{"tz": "Asia/Tokyo", "note": "say \\"hi\\" 😀"}'),
    )
    # the arguments streamed over many deltas, not in one piece at the end
    assert sum(1 for d in deltas for c in d.tool_calls if c.name is None) > 10
