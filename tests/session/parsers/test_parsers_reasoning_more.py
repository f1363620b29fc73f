"""Reasoning parsers granite (Granite 3.2's phrases), mistral (``[THINK]``), nemotron_v3 and
granite_thinking_parser: vectors with the split vLLM 0.32 gives (checked against its recorded answers in
tests/data/vllm/parsers/{granite,mistral_reasoning,nemotron_v3}.json), one-shot and over random splits,
a property over fragments of each format, and the state bound."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from session.parsers import REASONING_PARSERS
from session.parsers.base import ParserContext, ReasoningParser
from session.parsers.reasoning.granite import GraniteReasoningParser
from session.parsers.reasoning.mistral import MistralReasoningParser
from session.parsers.reasoning.nemotron_v3 import GraniteThinkingReasoningParser, NemotronV3ReasoningParser

from .parsers_harness import Split, one_shot, random_splits, split_at, streamed

R = ParserContext()
OFF = ParserContext(chat_template_kwargs={"enable_thinking": False})
ENDED = ParserContext(prompt_ends_reasoning=True)
CALL = "<tool_call>\n<function=f>\n</function>\n</tool_call>"

Vector = tuple[str, type[ReasoningParser], ParserContext, str, Split]
VECTORS: list[Vector] = [
    # granite: "Here is my thought process:" … "Here is my response:" …
    ("granite: plain", GraniteReasoningParser, R, "Paris.", Split(content="Paris.")),
    ("granite: reasoning then answer", GraniteReasoningParser, R,
     "Here is my thought process:\nThink.\nHere is my response:\nParis.",
     Split(content="\nParis.", reasoning="\nThink.\n")),
    ("granite: Here's, either phrase", GraniteReasoningParser, R, "Here's my thought process: a Here is my response: b",
     Split(content=" b", reasoning=" a ")),
    ("granite: unclosed is reasoning", GraniteReasoningParser, R, "Here is my thought process: still",
     Split(reasoning=" still")),
    ("granite: a phrase later in the output is content", GraniteReasoningParser, R,
     "Sure. Here is my thought process: x Here is my response: y",
     Split(content="Sure. Here is my thought process: x Here is my response: y")),
    ("granite: a partial phrase at the start is content", GraniteReasoningParser, R, "Here is my tho",
     Split(content="Here is my tho")),
    ("granite: a response phrase alone is content", GraniteReasoningParser, R, "Here is my response: x",
     Split(content="Here is my response: x")),
    ("granite: unicode", GraniteReasoningParser, R, "Here is my thought process:東京 ☕Here's my response:😀",
     Split(content="😀", reasoning="東京 ☕")),
    ("granite: <think> tags are content", GraniteReasoningParser, R, "<think>a</think>b",
     Split(content="<think>a</think>b")),
    # mistral: [THINK] … [/THINK], starting as content
    ("mistral: plain", MistralReasoningParser, R, "Paris.", Split(content="Paris.")),
    ("mistral: reasoning then answer", MistralReasoningParser, R, "[THINK]Think.[/THINK]Paris.",
     Split(content="Paris.", reasoning="Think.")),
    ("mistral: the reasoning's trailing whitespace is dropped", MistralReasoningParser, R,
     "[THINK] Think. \n\n [/THINK]\n\nParis.", Split(content="\n\nParis.", reasoning=" Think.")),
    ("mistral: unclosed is reasoning", MistralReasoningParser, R, "[THINK]still ", Split(reasoning="still")),
    ("mistral: a call ends the reasoning and is content (a [/THINK] in it dropped, as vLLM drops it)",
     MistralReasoningParser, R, '[THINK]call it [TOOL_CALLS]f[ARGS]{"a": "[/THINK]"}',
     Split(content='[TOOL_CALLS]f[ARGS]{"a": ""}', reasoning="call it")),
    ("mistral: a call in the content stays content", MistralReasoningParser, R, "[TOOL_CALLS]f[ARGS]{}",
     Split(content="[TOOL_CALLS]f[ARGS]{}")),
    ("mistral: two think blocks, the space between kept", MistralReasoningParser, R, "[THINK]a [/THINK]m[THINK]b [/THINK]e",
     Split(content="me", reasoning="a b")),
    ("mistral: a stray end in the content is dropped", MistralReasoningParser, R, "x[/THINK]y", Split(content="xy")),
    ("mistral: a repeated start is dropped", MistralReasoningParser, R, "[THINK]a[THINK]b[/THINK]c",
     Split(content="c", reasoning="ab")),
    ("mistral: content before the reasoning", MistralReasoningParser, R, "Hmm. [THINK]x[/THINK]y",
     Split(content="Hmm. y", reasoning="x")),
    ("mistral: unicode", MistralReasoningParser, R, "[THINK]東京 ☕ 😀[/THINK]答え", Split(content="答え", reasoning="東京 ☕ 😀")),
    ("mistral: partial markers are text", MistralReasoningParser, R, "a [THIN b [/THI", Split(content="a [THIN b [/THI")),
    # nemotron_v3: qwen3's grammar, trailing reasoning whitespace dropped
    ("nemotron: reasoning then answer", NemotronV3ReasoningParser, R, "Think. \n\n</think>\nParis.",
     Split(content="\nParis.", reasoning="Think.")),
    ("nemotron: an explicit <think> is dropped", NemotronV3ReasoningParser, R, "<think>\nThink.\n</think>\nParis.",
     Split(content="\nParis.", reasoning="\nThink.")),
    ("nemotron: unclosed is reasoning", NemotronV3ReasoningParser, R, "still \n", Split(reasoning="still")),
    ("nemotron: whitespace inside the reasoning is kept", NemotronV3ReasoningParser, R, "a \n b\n</think>c",
     Split(content="c", reasoning="a \n b")),
    ("nemotron: a call ends the reasoning", NemotronV3ReasoningParser, R, f"Call it.\n{CALL}",
     Split(content=CALL, reasoning="Call it.")),
    ("nemotron: thinking off is all content", NemotronV3ReasoningParser, OFF, "<think>a</think>b",
     Split(content="<think>a</think>b")),
    ("nemotron: a prompt that closed the block: all content", NemotronV3ReasoningParser, ENDED, "a</think>b",
     Split(content="a</think>b")),
    ("nemotron: unicode", NemotronV3ReasoningParser, R, "東京 ☕\n</think>\n😀", Split(content="\n😀", reasoning="東京 ☕")),
    # granite_thinking_parser: nemotron's, the content's leading newlines dropped
    ("granite thinking: reasoning then answer", GraniteThinkingReasoningParser, R, "Think.\n</think>\n\nParis.\n",
     Split(content="Paris.\n", reasoning="Think.")),
    ("granite thinking: only newlines after", GraniteThinkingReasoningParser, R, "Think.\n</think>\n\n",
     Split(reasoning="Think.")),
    ("granite thinking: thinking off", GraniteThinkingReasoningParser, OFF, "\n\nParis.", Split(content="Paris.")),
]

IDS = [v[0] for v in VECTORS]


@pytest.mark.parametrize(("label", "cls", "ctx", "text", "expected"), VECTORS, ids=IDS)
def test_vectors_one_shot_and_streamed(label: str, cls: type[ReasoningParser], ctx: ParserContext, text: str,
                                       expected: Split) -> None:
    assert one_shot(cls, text, ctx) == expected
    for chunks in random_splits(text, seed=len(text)):
        assert streamed(cls, chunks, ctx) == expected, chunks


def test_registered_under_vllms_names() -> None:
    assert REASONING_PARSERS["granite"] is GraniteReasoningParser
    assert REASONING_PARSERS["mistral"] is MistralReasoningParser
    assert REASONING_PARSERS["nemotron_v3"] is NemotronV3ReasoningParser
    assert REASONING_PARSERS["granite_thinking_parser"] is GraniteThinkingReasoningParser
    assert MistralReasoningParser.needs_special_tokens  # [THINK] is a special token
    assert not (GraniteReasoningParser.needs_special_tokens or NemotronV3ReasoningParser.needs_special_tokens)


FRAGMENTS: dict[type[ReasoningParser], list[str]] = {
    GraniteReasoningParser: ["Here is my thought process:", "Here's my thought process:", "Here is my response:",
                             "Here's my response:", "Here is my ", "Here", "H", "my", ":", " ", "\n", "x", "東京"],
    MistralReasoningParser: ["[THINK]", "[/THINK]", "[TOOL_CALLS]", "[THI", "[/TH", "[TOOL_", "[", "]", " ", "\n",
                             "\t", "x", "東京", "😀"],
    NemotronV3ReasoningParser: ["<think>", "</think>", "<tool_call>", "</thi", "<tool_", "<", " ", "\n", "x", "東京"],
    GraniteThinkingReasoningParser: ["<think>", "</think>", "<tool_call>", "</thi", "<", " ", "\n", "\n\n", "x"],
}
PROPERTY_CASES = [(cls, ctx) for cls in FRAGMENTS for ctx in (R, OFF)]


@pytest.mark.parametrize(("cls", "ctx"), PROPERTY_CASES,
                         ids=[f"{c.name}-{'off' if x is OFF else 'on'}" for c, x in PROPERTY_CASES])
@settings(max_examples=200, deadline=None)
@given(data=st.data())
def test_any_split_with_state_round_trips_equals_one_shot(cls: type[ReasoningParser], ctx: ParserContext,
                                                          data: st.DataObject) -> None:
    text = "".join(data.draw(st.lists(st.sampled_from(FRAGMENTS[cls]), max_size=40)))
    expected = one_shot(cls, text, ctx)
    cuts = data.draw(st.lists(st.integers(0, len(text)), max_size=30))
    assert streamed(cls, split_at(text, cuts), ctx) == expected


LONG: list[tuple[type[ReasoningParser], str, str]] = [
    (GraniteReasoningParser, "Here is my thought process:", "Hmm, Here is my thinking. "),
    (MistralReasoningParser, "[THINK]", "Thinking [about] it. \n"),
    (NemotronV3ReasoningParser, "", "Thinking <about> it. \n"),
    (GraniteThinkingReasoningParser, "", "Thinking <about> it. \n"),
]


@pytest.mark.parametrize(("cls", "head", "piece"), LONG, ids=[c.name for c, _, _ in LONG])
def test_state_stays_small_over_a_long_reasoning(cls: type[ReasoningParser], head: str, piece: str) -> None:
    text = head + piece * 1000  # ~20k characters of reasoning
    parser = cls(R)
    reasoning = []
    for k in range(0, len(text), 5):
        reasoning.append(parser.feed(text[k:k + 5]).reasoning)
        assert len(json.dumps(parser.snapshot())) < 1024
    reasoning.append(parser.finish().reasoning)
    assert "".join(reasoning) == (piece * 1000).rstrip() if cls is not GraniteReasoningParser else piece * 1000
