"""deepseek_v3 (DeepSeek-V3 ``function<｜tool▁sep｜>name\\n```json\\n{…}\\n```...`` and DeepSeek-V3.1
``name<｜tool▁sep｜>{…}`` calls): vectors with the split vLLM's DeepSeekV3 / V31 parsers give,
one-shot and over random splits."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from session.parsers.tool import DeepSeekV3ToolParser

from .parsers_harness import Split, one_shot, random_splits, split_at, streamed

P = DeepSeekV3ToolParser
BEGIN, END = "<｜tool▁calls▁begin｜>", "<｜tool▁calls▁end｜>"
CB, CE, SEP = "<｜tool▁call▁begin｜>", "<｜tool▁call▁end｜>", "<｜tool▁sep｜>"


def v3(name: str, args: str) -> str:
    return f"{CB}function{SEP}{name}\n```json\n{args}\n```{CE}"


def v31(name: str, args: str) -> str:
    return f"{CB}{name}{SEP}{args}{CE}"


def sec(calls: str) -> str:
    return BEGIN + calls + END


VECTORS: list[tuple[str, str, Split]] = [
    ("plain answer", "Paris is the capital of France.", Split(content="Paris is the capital of France.")),
    ("V3 one call", sec(v3("get_weather", '{"city": "Paris"}')), Split(calls=(("get_weather", '{"city": "Paris"}'),))),
    ("V3 two calls on separate lines", sec(v3("a", "{}") + "\n" + v3("b", '{"x": 1}')),
     Split(calls=(("a", "{}"), ("b", '{"x": 1}')))),
    ("V3.1 one call", sec(v31("get_weather", '{"city": "Paris"}')),
     Split(calls=(("get_weather", '{"city": "Paris"}'),))),
    ("V3.1 two calls", sec(v31("a", '{"x":1}') + v31("b", "{}")), Split(calls=(("a", '{"x":1}'), ("b", "{}")))),
    ("content before the calls, text after dropped", "Let me check." + sec(v31("f", "{}")) + "\nDone.",
     Split(content="Let me check.", calls=(("f", "{}"),))),
    ("arguments are the raw text", sec(v31("f", '{ "a" :1 ,"b":[ ] }')), Split(calls=(("f", '{ "a" :1 ,"b":[ ] }'),))),
    ("unicode arguments", sec(v3("translate", '{"text": "東京 😀"}')), Split(calls=(("translate", '{"text": "東京 😀"}'),))),
    ("nested arguments", sec(v31("q", '{"f": {"and": [{"x": [1, {"y": null}]}]}}')),
     Split(calls=(("q", '{"f": {"and": [{"x": [1, {"y": null}]}]}}'),))),
    ("V3 arguments holding a code fence", sec(v3("md", '{"s": "```py\\nx\\n```"}')),
     Split(calls=(("md", '{"s": "```py\\nx\\n```"}'),))),
    ("empty arguments", sec(v31("ping", "{}")), Split(calls=(("ping", "{}"),))),
    ("V3.1 function literally named function", sec(v31("function", '{"a": 1}')),
     Split(calls=(("function", '{"a": 1}'),))),
    ("V3 call without the json fence is dropped", f"x{BEGIN}{CB}function{SEP}f\n{{}}{CE}{END}", Split(content="x")),
    ("a head with a newline is dropped, the next call kept", sec(f"{CB}bad\nname{SEP}{{}}{CE}" + v31("ok", "{}")),
     Split(calls=(("ok", "{}"),))),
    ("a call marker outside the calls section is content", f"{CB}f{SEP}{{}}{CE}", Split(content=f"{CB}f{SEP}{{}}{CE}")),
    ("output cut inside the arguments keeps the streamed prefix", BEGIN + CB + "f" + SEP + '{"a": "par',
     Split(calls=(("f", '{"a": "par'),))),
    ("output cut inside the name: no call", f"{BEGIN}{CB}get_wea", Split()),
    ("a partial section marker at the end is content", "Done<｜tool▁calls", Split(content="Done<｜tool▁calls")),
    ("V3 arguments ending at the call end without a fence still count", f"{BEGIN}{CB}function{SEP}f\n```json\n{{}}{CE}{END}",
     Split(calls=(("f", "{}"),))),
]

IDS = [v[0] for v in VECTORS]


@pytest.mark.parametrize(("label", "text", "expected"), VECTORS, ids=IDS)
def test_deepseek_v3_vector_one_shot(label: str, text: str, expected: Split) -> None:
    assert one_shot(P, text) == expected


@pytest.mark.parametrize(("label", "text", "expected"), VECTORS, ids=IDS)
def test_deepseek_v3_vector_streamed_over_splits_with_state_round_trips(label: str, text: str,
                                                                       expected: Split) -> None:
    for chunks in random_splits(text, seed=len(text)):
        assert streamed(P, chunks) == expected, chunks


@settings(max_examples=200, deadline=None)
@given(data=st.data())
def test_deepseek_v3_vectors_over_random_splits(data: st.DataObject) -> None:
    _, text, expected = data.draw(st.sampled_from(VECTORS))
    cuts = data.draw(st.lists(st.integers(0, len(text)), max_size=24))
    assert streamed(P, split_at(text, cuts)) == expected


def test_deepseek_v3_needs_special_tokens() -> None:
    assert P.needs_special_tokens is True
