"""hermes and llama3_json share one single-call base (``session/parsers/tool/single_call.py``);
their snapshots travel inside client-carried derender states, so a state signed before that base
existed must continue after it. The snapshots below were recorded from the parsers as they were
before (issue 21 item 14)."""

from __future__ import annotations

from typing import Any

import pytest

from session.parsers.base import ParserContext
from session.parsers.tool import HermesToolParser, Llama3JsonToolParser
from session.parsers.tool.single_call import SingleCallToolParser

ARGS_READER = ["v", "s", False, "", 0, True, False, False]  # inside the string "Pa…"
CASES: dict[str, tuple[type[SingleCallToolParser], list[str], dict[str, Any], str]] = {
    "hermes, inside a call's arguments": (
        HermesToolParser, ['Sure.<tool_call>\n{"name": "get_weather", "argu', 'ments": {"city": "Pa'],
        {"p": "hermes", "m": "call", "b": "", "n": 1, "r": "",
         "o": ["value", ARGS_READER, '"arguments"', "args", "", "", "get_weather", 1, True]},
        'ris"}}\n</tool_call>'),
    "hermes, a call not committed yet": (
        HermesToolParser, ['<tool_call>\n{"na', 'me": "f"'],
        {"p": "hermes", "m": "call", "b": "", "n": 0, "r": '<tool_call>\n{"name": "f"',
         "o": ["comma", None, '"name"', "name", "", "", "f", 0, False]},
        " oops"),
    "llama3_json, inside a call's arguments": (
        Llama3JsonToolParser, [' {"name": "get_weather", "parameters": {"city": "Pa'],
        {"p": "llama3_json", "m": "call", "b": "", "n": 1, "r": "",
         "o": ["value", ARGS_READER, '"parameters"', "args", "", "", "get_weather", 1, True]},
        'ris"}}; {"name": "f", "arguments": {}}'),
    "llama3_json, a call not committed yet": (
        Llama3JsonToolParser, ['<|python_tag|>{"nam'],
        {"p": "llama3_json", "m": "call", "b": "", "n": 0, "r": '<|python_tag|>{"nam',
         "o": ["keystr", ["", "s", False, "", 0, True, False, False], '"nam', "", "", "", None, 0, False]},
        "e\": 3} and prose"),
}


def _split(parser: SingleCallToolParser, texts: list[str]) -> tuple[str, list[tuple[int, str | None, str]]]:
    content, calls = "", []
    for text in texts:
        delta = parser.feed(text)
        content += delta.content or ""
        calls += [(c.index, c.name, c.arguments) for c in delta.tool_calls]
    delta = parser.finish()
    content += delta.content or ""
    calls += [(c.index, c.name, c.arguments) for c in delta.tool_calls]
    return content, calls


@pytest.mark.parametrize("case", list(CASES))
def test_a_snapshot_from_before_the_shared_base_is_the_same_and_continues_the_same(case: str) -> None:
    cls, head, recorded, rest = CASES[case]
    ctx = ParserContext()
    parser = cls(ctx)
    for text in head:
        parser.feed(text)
    assert parser.snapshot() == recorded
    # the recorded snapshot continues exactly as an uninterrupted parser does
    whole = cls(ctx)
    for text in head:
        whole.feed(text)
    expected = _split(whole, [rest])
    assert _split(cls.restore(ctx, recorded), [rest]) == expected
    assert expected != ("", [])
