"""The derender's arguments route where one guard character is not enough (``plain_args_guard`` a
compiled pattern, session/derender/choice.py ``_ARGS_MATCH``), and where the reasoning slot makes
the calls (harmony: ``ReasoningParser.plain_args_call``):

- gemma4: its argument reader holds a trailing whitespace or ``}`` and counts ``(`` / ``)``, so a
  text with any of those is fed; its reasoning parser still drops markers in the content
  (``plain_content_guard`` ``<``), which the route combines with the pattern;
- gpt-oss harmony, the one parser the derender runs: inside a JSON string argument a text without
  ``<``, ASCII-escaped on the way (the arguments are ``json.dumps`` with ``ensure_ascii``:
  ``plain_args_ascii``, route ``_ARGS_ASCII``), and raw arguments as they are.

Real tokenizers (Gemma 4, gpt-oss), one token per push, in memory and with the state through JSON
and a fresh derenderer on every push; bodies with quotes, escapes, a ``<`` that starts no marker,
parentheses, braces, tokens that end in whitespace, non-ASCII; cut off inside the argument
(``length``, the finish with the last token or alone) or closed: streamed == one-shot, and the
argument's tokens skip the parsers.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest

from session.parsers import REASONING_PARSERS, TOOL_PARSERS
from session.parsers.harmony import harmony_parser

from .derender_route_harness import CONTENT, THINK, count_feeds, one_shot, streamed

BODY = ("Monday: museums if it rains;  Tuesday: a 'river walk' (a < b, x<y) f(x) {k} — 雨なら美術館 😀. " * 6
        + 'Wednesday: "quoted" and back\\slash,\ttab\nnew line.   ' + "Thursday: day trip to Versailles. " * 6)
D = '<|"|>'


def gemma4(reasoning: str, content: str, body: str, close: bool) -> str:
    head = f"<|channel>thought\n{reasoning}<channel|>{content}<|tool_call>call:write_file{{path:{D}plan.md{D},content:{D}"
    return head + body + (f"{D}}}<tool_call|>" if close else "")


CALL = "<|start|>assistant<|channel|>commentary to=functions.write_file <|constrain|>json<|message|>"


def harmony(reasoning: str, content: str, body: str, close: bool) -> str:
    head = (f"<|channel|>analysis<|message|>{reasoning}<|end|><|start|>assistant<|channel|>commentary<|message|>"
            f"{content}<|end|>{CALL}")
    if not body:
        return head
    args = json.dumps({"path": "plan.md", "content": body}, ensure_ascii=False)
    return head + (args + "<|call|>" if close else args[:-2])


# (tool parser, reasoning parser, asset, output builder, the parser classes whose feeds are counted)
FAMILIES = [
    ("gemma4", "gemma4", "gemma-4", gemma4, (REASONING_PARSERS["gemma4"], TOOL_PARSERS["gemma4"])),
    ("openai", "openai_gptoss", "tiny-gpt-oss", harmony, (harmony_parser(True, True),)),
]


@pytest.mark.parametrize(("tool", "reasoning", "asset", "build", "classes"), FAMILIES, ids=[f[0] for f in FAMILIES])
def test_inside_a_string_argument_the_step_skips_the_parsers(tokenizer: Callable[[str], Any], tool: str,
                                                             reasoning: str, asset: str, build: Any,
                                                             classes: tuple[Any, ...],
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    tok = tokenizer(asset)
    head = list(tok.encode(build(THINK, CONTENT, "", False), add_special_tokens=False))
    ids = list(tok.encode(build(THINK, CONTENT, BODY, True), add_special_tokens=False))
    assert ids[:len(head) - 2] == head[:-2]
    want = one_shot(tok, tool, reasoning, ids, "stop")
    assert want["tool_calls"] and want["tool_calls"][0][1] == "write_file" and want["content"] and want["reasoning"]
    counts = count_feeds(monkeypatch, classes)
    assert streamed(tok, tool, reasoning, ids, "stop", restore=False) == want
    body = len(ids) - len(head)
    # (the argument's tokens with a quote, a backslash, a control character or a "<" are fed; for
    # gemma4 also those with a parenthesis or ending in whitespace or "}" and the one after such a
    # token: a minority)
    assert all(count < len(head) + body // 3 for count in counts), (counts, len(head), body)


@pytest.mark.parametrize(("tool", "reasoning", "asset", "build", "classes"), FAMILIES, ids=[f[0] for f in FAMILIES])
@pytest.mark.parametrize("restore", [False, True], ids=["in_memory", "state_each_push"])
def test_the_routed_stream_splits_as_the_one_shot_derender(tokenizer: Callable[[str], Any], tool: str,
                                                           reasoning: str, asset: str, build: Any,
                                                           classes: tuple[Any, ...], restore: bool) -> None:
    tok = tokenizer(asset)
    whole = list(tok.encode(build(THINK, CONTENT, BODY, True), add_special_tokens=False))
    cut = list(tok.encode(build(THINK, CONTENT, BODY, False), add_special_tokens=False))
    head = len(tok.encode(build(THINK, CONTENT, "", False), add_special_tokens=False))
    # cut off inside the argument: after tokens that end in whitespace, "}" or ")" (held by gemma4's
    # reader), and not; the finish with the last token or in a push of its own
    ends = [k for k in range(head + 1, len(cut)) if tok.decode(cut[:k])[-1:] in (" ", "}", ")")][:6]
    for ids, finish in [(whole, "stop"), *((cut[:k], "length") for k in [*ends, len(cut) - 5, len(cut)])]:
        want = one_shot(tok, tool, reasoning, ids, finish)
        for apart in (False, True):
            assert streamed(tok, tool, reasoning, ids, finish, restore, apart) == want, (len(ids), apart)
