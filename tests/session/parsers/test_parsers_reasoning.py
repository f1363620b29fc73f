"""Reasoning parsers (qwen3, deepseek_r1): vectors with the split vLLM's Qwen3 / DeepSeekR1
reasoning parsers give, one-shot and over random splits."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from session.parsers.base import ParserContext
from session.parsers.reasoning import DeepSeekR1ReasoningParser, Qwen3ReasoningParser

from .parsers_harness import AUTO, AnyParser, Split, one_shot, random_splits, split_at, streamed

NO_THINKING = ParserContext(chat_template_kwargs={"enable_thinking": False})
PROMPT_CLOSED = ParserContext(prompt_ends_reasoning=True)

# (label, parser, context, text, expected)
Vector = tuple[str, AnyParser, ParserContext, str, Split]
Q, R = Qwen3ReasoningParser, DeepSeekR1ReasoningParser

COMMON: list[tuple[str, str, Split]] = [
    ("both tags", "<think>\nLet me think.\n</think>\n\nThe answer is 4.",
     Split(reasoning="\nLet me think.\n", content="\n\nThe answer is 4.")),
    ("start tag in the prompt, only the end tag generated", "Let me think.</think>The answer is 4.",
     Split(reasoning="Let me think.", content="The answer is 4.")),
    ("no end tag: all reasoning (cut short)", "<think>\nStill thinking about it", Split(reasoning="\nStill thinking about it")),
    ("no tags at all: all reasoning", "Just some words", Split(reasoning="Just some words")),
    ("empty think block", "<think>\n\n</think>\n\nHi!", Split(reasoning="\n\n", content="\n\nHi!")),
    ("the end tag last", "<think>done</think>", Split(reasoning="done")),
    ("the first end tag splits, later tags are content", "a</think>b</think>c<think>d",
     Split(reasoning="a", content="b</think>c<think>d")),
    ("unicode and emoji", "<think>東京は…😀</think>答え: 42", Split(reasoning="東京は…😀", content="答え: 42")),
    ("angle brackets that are not tags", "<think>a < b and b > c, </thin k></think>ok",
     Split(reasoning="a < b and b > c, </thin k>", content="ok")),
    ("a partial end tag at the end is reasoning", "<think>hmm </thi", Split(reasoning="hmm </thi")),
    ("text before the start tag stays reasoning", "\n<think>x</think>y", Split(reasoning="\nx", content="y")),
    ("a hermes tool call after the reasoning is content", '<think>call it</think>\n<tool_call>\n{"name": "f"}\n</tool_call>',
     Split(reasoning="call it", content='\n<tool_call>\n{"name": "f"}\n</tool_call>')),
    ("empty output", "", Split()),
]

VECTORS: list[Vector] = [
    *((f"qwen3: {label}", Q, AUTO, text, split) for label, text, split in COMMON),
    *((f"deepseek_r1: {label}", R, AUTO, text, split) for label, text, split in COMMON),
    ("deepseek_r1: a second start tag inside reasoning is kept", R, AUTO, "<think>x<think>y</think>z",
     Split(reasoning="x<think>y", content="z")),
    # vLLM 0.32's qwen3 grammar: (REASONING, "<think>") stays in reasoning and drops the tag, every time
    ("qwen3: every start tag inside reasoning is dropped", Q, AUTO, "<think>x<think>y</think>z",
     Split(reasoning="xy", content="z")),
    ("qwen3: enable_thinking false: all content", Q, NO_THINKING, "The answer is 4.", Split(content="The answer is 4.")),
    ("qwen3: enable_thinking false keeps tags in content", Q, NO_THINKING, "<think>x</think>y",
     Split(content="<think>x</think>y")),
    ("qwen3: the prompt closed the think block: all content", Q, PROMPT_CLOSED, "Hello", Split(content="Hello")),
    ("deepseek_r1: the prompt closed the think block: all content", R, PROMPT_CLOSED, "a</think>b",
     Split(content="a</think>b")),
    ("qwen3: <tool_call><function=…> ends reasoning implicitly", Q, AUTO,
     "I should call it.\n<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n</function>\n</tool_call>",
     Split(reasoning="I should call it.\n",
           content="<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n</function>\n</tool_call>")),
    # vLLM 0.32's qwen3 grammar: (REASONING, "<tool_call>") ends reasoning, whatever follows
    ("qwen3: a hermes <tool_call> with no think tags is all content", Q, AUTO,
     '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>',
     Split(content='<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>')),
    ("qwen3: a <tool_call> ends reasoning whatever follows", Q, AUTO,
     "Maybe <tool_call> is needed.</think>No.", Split(reasoning="Maybe ", content="<tool_call> is needed.</think>No.")),
    ("qwen3: the first <tool_call> ends reasoning, later ones are content", Q, AUTO,
     "a<tool_call>x b<tool_call><function=f>", Split(reasoning="a", content="<tool_call>x b<tool_call><function=f>")),
    ("qwen3: a <tool_call> at the very end ends reasoning", Q, AUTO, "think <tool_call>\n<func",
     Split(reasoning="think ", content="<tool_call>\n<func")),
    ("qwen3: a partial <tool_call> at the end of the output is reasoning", Q, AUTO, "think <tool_ca",
     Split(reasoning="think <tool_ca")),
    ("qwen3: after </think> a <tool_call> is content as before", Q, AUTO, "r</think>c<tool_call>x",
     Split(reasoning="r", content="c<tool_call>x")),
    ("qwen3: enable_thinking false: a <tool_call> is content", Q, NO_THINKING, "c<tool_call>x",
     Split(content="c<tool_call>x")),
    ("deepseek_r1: <tool_call><function=…> is just reasoning", R, AUTO, "x<tool_call><function=f>",
     Split(reasoning="x<tool_call><function=f>")),
]

IDS = [v[0] for v in VECTORS]


@pytest.mark.parametrize(("label", "cls", "ctx", "text", "expected"), VECTORS, ids=IDS)
def test_reasoning_vector_one_shot(label: str, cls: AnyParser, ctx: ParserContext, text: str, expected: Split) -> None:
    assert one_shot(cls, text, ctx) == expected


@pytest.mark.parametrize(("label", "cls", "ctx", "text", "expected"), VECTORS, ids=IDS)
def test_reasoning_vector_streamed_over_splits_with_state_round_trips(label: str, cls: AnyParser, ctx: ParserContext,
                                                                     text: str, expected: Split) -> None:
    for chunks in random_splits(text, seed=len(text)):
        assert streamed(cls, chunks, ctx) == expected, chunks


@settings(max_examples=300, deadline=None)
@given(data=st.data())
def test_reasoning_vectors_over_random_splits(data: st.DataObject) -> None:
    _, cls, ctx, text, expected = data.draw(st.sampled_from(VECTORS))
    cuts = data.draw(st.lists(st.integers(0, len(text)), max_size=24))
    assert streamed(cls, split_at(text, cuts), ctx) == expected


@pytest.mark.parametrize("cls", [Q, R])
def test_reasoning_ended_turns_true_at_the_end_tag(cls: AnyParser) -> None:
    parser = cls(AUTO)
    parser.feed("thinking")
    assert not parser.reasoning_ended  # type: ignore[union-attr]
    parser.feed("</think>")
    assert parser.reasoning_ended  # type: ignore[union-attr]


@pytest.mark.parametrize("cls", [Q, R])
def test_reasoning_parsers_read_plain_decoded_text(cls: AnyParser) -> None:
    assert cls.needs_special_tokens is False  # <think> is an added, non-special token
