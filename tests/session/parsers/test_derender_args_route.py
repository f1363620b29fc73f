"""The derender's arguments route with a reasoning parser that still reads the content (glm45 /
glm47, kimi_k2, minimax_m2: ``</think>`` is taken out of the content after the reasoning, so they
are never ``passthrough``): inside a long string argument the step skips both parsers
(ReasoningParser.plain_content_guard combined with ToolParser.plain_args_call in
session/derender/choice.py ``_route``), and the stream still splits exactly as the one-shot
derender does.

Real tokenizers (GLM-4.6, GLM-4.7, Kimi-K2-Thinking, MiniMax-M2), one token per push, in memory and with the
state through JSON and a fresh derenderer on every push; outputs with quotes, escapes, ``<`` that
starts no marker, newlines, tokens that end in whitespace (Kimi-K2 holds the arguments' trailing
whitespace), cut off inside the argument (``length``) or closed.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest

from session.parsers import REASONING_PARSERS, TOOL_PARSERS

from .derender_route_harness import CONTENT, THINK, count_feeds, one_shot, streamed

BODY = ("Monday: museums if it rains;  Tuesday: a 'river walk' (a < b, x<y) — 雨なら美術館 😀. " * 6
        + 'Wednesday: "quoted" and back\\slash,\ttab\nnew line.   ' + "Thursday: day trip to Versailles. " * 6)


def glm(reasoning: str, content: str, body: str, close: bool) -> str:
    head = (f"<think>{reasoning}</think>{content}<tool_call>write_file<arg_key>path</arg_key><arg_value>plan.md"
            f"</arg_value><arg_key>content</arg_key><arg_value>{body}")
    return head + ("</arg_value></tool_call>" if close else "")


def kimi(reasoning: str, content: str, body: str, close: bool) -> str:
    args = json.dumps({"path": "plan.md", "content": body}, ensure_ascii=False)
    head = (f"<think>{reasoning}</think>{content}<|tool_calls_section_begin|><|tool_call_begin|>"
            f"functions.write_file:0<|tool_call_argument_begin|>")
    return head + (args + "  <|tool_call_end|><|tool_calls_section_end|>" if close else args[:-2])


def minimax(reasoning: str, content: str, body: str, close: bool) -> str:
    head = (f"{reasoning}</think>\n\n{content}\n<minimax:tool_call>\n<invoke name=\"write_file\">\n"
            f"<parameter name=\"path\">plan.md</parameter>\n<parameter name=\"content\">{body}")
    return head + ("</parameter>\n</invoke>\n</minimax:tool_call>" if close else "")


FAMILIES = [("glm45", "glm-4.6", glm), ("glm47", "glm-4.7", glm), ("kimi_k2", "kimi-k2-thinking", kimi),
            ("minimax_m2", "minimax-m2", minimax)]


@pytest.mark.parametrize(("parser", "asset", "build"), FAMILIES, ids=[f[0] for f in FAMILIES])
def test_inside_a_string_argument_the_step_skips_both_parsers(tokenizer: Callable[[str], Any], parser: str,
                                                               asset: str, build: Any,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    tok = tokenizer(asset)
    head = list(tok.encode(build(THINK, CONTENT, "", False), add_special_tokens=False))
    ids = list(tok.encode(build(THINK, CONTENT, BODY, True), add_special_tokens=False))
    assert ids[:len(head) - 2] == head[:-2]
    want = one_shot(tok, parser, parser, ids, "stop")
    assert want["tool_calls"] and want["tool_calls"][0][1] == "write_file" and want["content"] and want["reasoning"]
    count = count_feeds(monkeypatch, (REASONING_PARSERS[parser], TOOL_PARSERS[parser]))
    assert streamed(tok, parser, parser, ids, "stop", restore=False) == want
    body = len(ids) - len(head)
    # (the argument's tokens that hold a quote, a backslash, a control character or a "<" are fed,
    # and for Kimi-K2 those that end in whitespace: a minority)
    assert count[0] < len(head) + body // 3 and count[1] < len(head) + body // 3, (count, len(head), body)


@pytest.mark.parametrize(("parser", "asset", "build"), FAMILIES, ids=[f[0] for f in FAMILIES])
@pytest.mark.parametrize("restore", [False, True], ids=["in_memory", "state_each_push"])
def test_the_routed_stream_splits_as_the_one_shot_derender(tokenizer: Callable[[str], Any], parser: str, asset: str,
                                                           build: Any, restore: bool) -> None:
    tok = tokenizer(asset)
    whole = list(tok.encode(build(THINK, CONTENT, BODY, True), add_special_tokens=False))
    cut = list(tok.encode(build(THINK, CONTENT, BODY, False), add_special_tokens=False))
    head = len(tok.encode(build(THINK, CONTENT, "", False), add_special_tokens=False))
    # cut off inside the argument: after tokens that end in whitespace (held by Kimi-K2), and not;
    # the finish with the last token or in a push of its own
    spaced = [k for k in range(head + 1, len(cut)) if tok.decode(cut[:k]).endswith(" ")]
    ends = [*spaced[:3], len(cut) - 5, len(cut)]
    for ids, finish in [(whole, "stop"), *((cut[:k], "length") for k in ends)]:
        want = one_shot(tok, parser, parser, ids, finish)
        for apart in (False, True):
            assert streamed(tok, parser, parser, ids, finish, restore, apart) == want, (len(ids), apart)
