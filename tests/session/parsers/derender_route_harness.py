"""Helpers for the tests of the derender's arguments route (session/derender/choice.py ``_route``):
a chat derenderer over a real tokenizer with a ``write_file`` tool, its one-shot answer, its
stream one token per push (in memory, or with the state through JSON and a fresh derenderer on
every push), and the parsers' feeds counted."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

import orjson
import pytest

from engine.protocol import GenerateChoice, GenerateResponse
from session.derender import ChatDerenderer, assemble_message, chat_derenderer, chat_response
from session.protocol.openai import ChatCompletionRequest

TOOLS = [{"type": "function", "function": {"name": "write_file", "parameters": {"type": "object", "properties": {
    "path": {"type": "string"}, "content": {"type": "string"}}}}}]
THINK = "Let me plan the week in Paris and 東京 🤔, day by day. "
CONTENT = "Here is the plan, written to a file. "


def derenderer(tok: Any, tool: str, reasoning: str) -> ChatDerenderer:
    request = ChatCompletionRequest.model_validate(
        {"messages": [{"role": "user", "content": "Plan my week."}], "tools": TOOLS})
    return chat_derenderer(request, list(tok.encode("Plan my week.", add_special_tokens=False)),
                           request_id="chatcmpl-r", created=0, model="m", tokenizer=tok, tool_parser=tool,
                           reasoning_parser=reasoning, enable_auto_tool_choice=True)


def one_shot(tok: Any, tool: str, reasoning: str, ids: list[int], finish: str) -> dict[str, Any]:
    """The message the one-shot derender makes of ``ids``."""
    choice = chat_response(derenderer(tok, tool, reasoning), GenerateResponse(request_id="chatcmpl-r", choices=[
        GenerateChoice(index=0, finish_reason=finish, token_ids=ids)]))["choices"][0]
    message = choice["message"]
    return {"content": message["content"] or "", "reasoning": message["reasoning"] or "",
            "tool_calls": [(c["id"], c["function"]["name"], c["function"]["arguments"])
                           for c in message.get("tool_calls", [])], "finish_reason": choice["finish_reason"]}


def pushes(tok: Any, tool: str, reasoning: str, ids: list[int], finish: str, restore: bool,
           apart: bool = False) -> Iterator[dict[str, Any]]:
    """One token per push (``apart``: then the finish alone, in a push without tokens)."""
    d, snap = derenderer(tok, tool, reasoning), None
    steps: list[list[int]] = [[t] for t in ids] + ([[]] if apart else [])
    for k, chunk in enumerate(steps):
        if restore:
            d = derenderer(tok, tool, reasoning)
            if snap is not None:
                d.restore(0, snap)
        step = d.push(0, chunk, finish_reason=finish if k == len(steps) - 1 else None)
        if step.chunk is not None:
            yield step.chunk
        if restore:
            snap = orjson.loads(orjson.dumps(d.snapshot(0)))


def streamed(tok: Any, tool: str, reasoning: str, ids: list[int], finish: str, restore: bool,
             apart: bool = False) -> dict[str, Any]:
    """The message the stream of :func:`pushes` assembles to, as :func:`one_shot` gives it."""
    got = assemble_message(list(pushes(tok, tool, reasoning, ids, finish, restore, apart)))
    return {"content": got["content"], "reasoning": got["reasoning"],
            "tool_calls": [(c["id"], c["name"], c["arguments"]) for c in got["tool_calls"]],
            "finish_reason": got["finish_reason"]}


def count_feeds(monkeypatch: pytest.MonkeyPatch, classes: Sequence[Any]) -> list[int]:
    """From now on, the feeds of each parser class in ``classes``, counted in the list returned."""
    counts = [0] * len(classes)
    for k, cls in enumerate(classes):
        def counting(self: Any, text: str, _feed: Any = cls.feed, _k: int = k) -> Any:
            counts[_k] += 1
            return _feed(self, text)

        monkeypatch.setattr(cls, "feed", counting)
    return counts
