"""Helpers for the parser tests: run a parser one-shot or over chunks (with its snapshot going
through JSON and ``restore`` between every feed), or as the derenderer steps with its shortcuts
(:func:`skipping`), and fold the deltas into a final split."""

from __future__ import annotations

import itertools
import json
import random
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from session.parsers.base import ParsedDelta, ParserContext, ReasoningParser, ToolCallDelta, ToolParser
from session.parsers.tool.json_stream import is_plain_without

AnyParser = type[ToolParser] | type[ReasoningParser]

TOOLS: tuple[dict[str, Any], ...] = (
    {"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}},
)
AUTO = ParserContext(tools=TOOLS)


@dataclass(frozen=True)
class Split:
    """What a parser made of a whole output."""

    content: str = ""
    reasoning: str = ""
    calls: tuple[tuple[str, str], ...] = ()  # (name, arguments)


def fold(deltas: Iterable[ParsedDelta]) -> Split:
    """Concatenate deltas, checking the tool-call delta rules on the way: a call's first delta
    carries its name and ``arguments == ""``, later ones only arguments, indexes count up from 0."""
    content, reasoning = [], []
    calls: dict[int, list[str]] = {}
    for delta in deltas:
        content.append(delta.content)
        reasoning.append(delta.reasoning)
        for tc in delta.tool_calls:
            if tc.name is not None:
                assert tc.index not in calls, f"call {tc.index} named twice"
                assert tc.index == len(calls), f"call {tc.index} opened out of order"
                assert tc.arguments == "", "the first delta of a call carries no arguments"
                calls[tc.index] = [tc.name, ""]
            else:
                assert tc.index in calls, f"arguments for call {tc.index} before its name"
                assert tc.arguments, "an empty argument delta"
                calls[tc.index][1] += tc.arguments
    return Split("".join(content), "".join(reasoning), tuple((n, a) for n, a in calls.values()))


def one_shot(cls: AnyParser, text: str, ctx: ParserContext = AUTO) -> Split:
    parser = cls(ctx)
    return fold([parser.feed(text), parser.finish()])


def streamed(cls: AnyParser, chunks: Sequence[str], ctx: ParserContext = AUTO) -> Split:
    """Feed ``chunks`` one by one; between feeds the parser is rebuilt from its JSON snapshot."""
    parser = cls(ctx)
    deltas = []
    for chunk in chunks:
        deltas.append(parser.feed(chunk))
        snapshot = json.loads(json.dumps(parser.snapshot()))
        parser = cls.restore(ctx, snapshot)
    deltas.append(parser.finish())
    return fold(deltas)


def skipping(tool: ToolParser, chunks: Iterable[str], reasoning: ReasoningParser | None = None,
             skipped: list[str] | None = None) -> Split:
    """Feed ``chunks`` as the derenderer steps (session/derender/choice.py ``_route``), through
    ``reasoning`` (when given) and its content into ``tool``: a chunk the reasoning parser passes on
    as it is (``passthrough``, or a text without its ``plain_content_guard``) that the tool parser's
    arguments shortcut covers (``plain_args_call``; JSON-plain, without ``plain_args_guard``, not
    ending in whitespace where ``plain_args_hold_space``) is that call's arguments, and neither
    parser is fed; nor is an empty chunk. The chunks skipped so are appended to ``skipped``."""
    out: list[ParsedDelta] = []
    for chunk in chunks:
        if not chunk:
            continue
        outer = "" if reasoning is None or reasoning.passthrough else reasoning.plain_content_guard() or None
        call = tool.plain_args_call()
        if outer is not None and call is not None and (not outer or outer not in chunk) \
                and is_plain_without(chunk, tool.plain_args_guard()) \
                and not (tool.plain_args_hold_space and chunk[-1].isspace()):
            out.append(ParsedDelta(tool_calls=[ToolCallDelta(index=call, arguments=chunk)]))
            if skipped is not None:
                skipped.append(chunk)
        elif reasoning is None:
            out.append(tool.feed(chunk))
        else:
            out.append(_chain_step(tool, reasoning.feed(chunk)))
    last = tool.finish() if reasoning is None else _chain_step(tool, reasoning.finish(), finish=True)
    out.append(last)
    return fold(out)


def _chain_step(tool: ToolParser, r: ParsedDelta, finish: bool = False) -> ParsedDelta:
    """The reasoning parser's delta ``r`` with its content fed to ``tool`` (then ``finish``ed)."""
    t = tool.feed(r.content) if r.content else ParsedDelta()
    if finish:
        t.extend(tool.finish())
    t.reasoning = r.reasoning
    return t


def check_think_guards(parser: ReasoningParser) -> None:
    """A new ``<think>`` reasoning parser offers its reasoning and content guards (the derenderer's
    shortcuts) only while it holds nothing: no trailing whitespace, no partial ``</think>``."""
    assert parser.plain_reasoning_guard() == "<" and parser.plain_reasoning_hold_space
    assert parser.plain_content_guard() is None  # (reasoning)
    assert parser.feed("plan ").reasoning == "plan"
    assert parser.plain_reasoning_guard() is None  # its trailing whitespace is held
    assert parser.feed("ahead").reasoning == " ahead"
    assert parser.plain_reasoning_guard() == "<"
    assert parser.feed("</thi").reasoning == ""
    assert parser.plain_reasoning_guard() is None  # a partial </think> is held
    assert parser.feed("nk>ok </thi").content == "ok "
    assert parser.plain_reasoning_guard() is None
    assert parser.plain_content_guard() is None  # a partial </think> is held
    assert parser.feed("nk>more").content == "more"
    assert parser.plain_content_guard() == "<"
    assert parser.feed("plain text").content == "plain text"


def split_at(text: str, cuts: Iterable[int]) -> list[str]:
    """``text`` cut at the given positions (repeats give empty chunks)."""
    points = sorted(min(max(c, 0), len(text)) for c in cuts)
    bounds = [0, *points, len(text)]
    return [text[a:b] for a, b in itertools.pairwise(bounds)]


def random_splits(text: str, seed: int, count: int = 12) -> list[list[str]]:
    rng = random.Random(seed)
    out = [[text], list(text), ["", *list(text), ""]]
    for _ in range(count):
        k = rng.randint(0, min(12, len(text) + 2))
        out.append(split_at(text, [rng.randint(0, len(text)) for _ in range(k)]))
    return out


def token_chunks(tokenizer: Any, text: str) -> list[str]:
    """``text`` as a model would stream it: encoded, then decoded token by token (special tokens
    kept, a chunk ending inside a multi-byte character held until the character completes)."""
    ids = tokenizer.encode(text, add_special_tokens=False)
    chunks, sent = [], ""
    for k in range(1, len(ids) + 1):
        now = tokenizer.decode(ids[:k], skip_special_tokens=False)
        if now.endswith("\ufffd") and k < len(ids):
            continue
        assert now.startswith(sent), "decoding is not prefix-stable"
        chunks.append(now[len(sent) :])
        sent = now
    assert sent == text, f"{text!r} does not survive the tokenizer round trip: {sent!r}"
    return chunks
