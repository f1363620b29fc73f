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
from collections.abc import Callable, Iterator
from typing import Any

import orjson
import pytest

from engine.protocol import GenerateChoice, GenerateResponse
from session.derender import ChatDerenderer, assemble_message, chat_derenderer, chat_response
from session.parsers import REASONING_PARSERS, TOOL_PARSERS
from session.protocol.openai import ChatCompletionRequest

TOOLS = [{"type": "function", "function": {"name": "write_file", "parameters": {"type": "object", "properties": {
    "path": {"type": "string"}, "content": {"type": "string"}}}}}]
THINK = "Let me plan the week in Paris and 東京 🤔, day by day. "
CONTENT = "Here is the plan, written to a file. "
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


def _request() -> ChatCompletionRequest:
    return ChatCompletionRequest.model_validate(
        {"messages": [{"role": "user", "content": "Plan my week."}], "tools": TOOLS})


def _derenderer(tok: Any, parser: str) -> ChatDerenderer:
    return chat_derenderer(_request(), list(tok.encode("Plan my week.", add_special_tokens=False)),
                           request_id="chatcmpl-r", created=0, model="m", tokenizer=tok, tool_parser=parser,
                           reasoning_parser=parser, enable_auto_tool_choice=True)


def _want(tok: Any, parser: str, ids: list[int], finish: str) -> dict[str, Any]:
    choice = chat_response(_derenderer(tok, parser), GenerateResponse(request_id="chatcmpl-r", choices=[
        GenerateChoice(index=0, finish_reason=finish, token_ids=ids)]))["choices"][0]
    message = choice["message"]
    return {"content": message["content"] or "", "reasoning": message["reasoning"] or "",
            "tool_calls": [(c["id"], c["function"]["name"], c["function"]["arguments"])
                           for c in message.get("tool_calls", [])], "finish_reason": choice["finish_reason"]}


def _pushes(tok: Any, parser: str, ids: list[int], finish: str, restore: bool,
            apart: bool = False) -> Iterator[dict[str, Any]]:
    """One token per push (``apart``: then the finish alone, in a push without tokens)."""
    d, snap = _derenderer(tok, parser), None
    pushes: list[list[int]] = [[t] for t in ids] + ([[]] if apart else [])
    for k, chunk in enumerate(pushes):
        if restore:
            d = _derenderer(tok, parser)
            if snap is not None:
                d.restore(0, snap)
        step = d.push(0, chunk, finish_reason=finish if k == len(pushes) - 1 else None)
        if step.chunk is not None:
            yield step.chunk
        if restore:
            snap = orjson.loads(orjson.dumps(d.snapshot(0)))


def _got(chunks: list[dict[str, Any]]) -> dict[str, Any]:
    got = assemble_message(chunks)
    return {"content": got["content"], "reasoning": got["reasoning"],
            "tool_calls": [(c["id"], c["name"], c["arguments"]) for c in got["tool_calls"]],
            "finish_reason": got["finish_reason"]}


@pytest.fixture
def fed(monkeypatch: pytest.MonkeyPatch) -> Callable[[str], list[int]]:
    """Counts the feeds each family's two parsers get: ``fed(name)`` -> [reasoning feeds, tool feeds]."""
    counts: dict[str, list[int]] = {}

    def counting(name: str) -> list[int]:
        count = counts.setdefault(name, [0, 0])
        classes: tuple[Any, ...] = (REASONING_PARSERS[name], TOOL_PARSERS[name])
        for k, cls in enumerate(classes):
            feed = cls.feed

            def wrapped(self: Any, text: str, _feed: Any = feed, _k: int = k) -> Any:
                count[_k] += 1
                return _feed(self, text)

            monkeypatch.setattr(cls, "feed", wrapped)
        return count

    return counting


@pytest.mark.parametrize(("parser", "asset", "build"), FAMILIES, ids=[f[0] for f in FAMILIES])
def test_inside_a_string_argument_the_step_skips_both_parsers(tokenizer: Callable[[str], Any], parser: str,
                                                               asset: str, build: Any,
                                                               fed: Callable[[str], list[int]]) -> None:
    tok = tokenizer(asset)
    head = list(tok.encode(build(THINK, CONTENT, "", False), add_special_tokens=False))
    ids = list(tok.encode(build(THINK, CONTENT, BODY, True), add_special_tokens=False))
    assert ids[:len(head) - 2] == head[:-2]
    want = _want(tok, parser, ids, "stop")
    assert want["tool_calls"] and want["tool_calls"][0][1] == "write_file" and want["content"] and want["reasoning"]
    count = fed(parser)
    assert _got(list(_pushes(tok, parser, ids, "stop", restore=False))) == want
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
        want = _want(tok, parser, ids, finish)
        for apart in (False, True):
            assert _got(list(_pushes(tok, parser, ids, finish, restore, apart))) == want, (len(ids), apart)
