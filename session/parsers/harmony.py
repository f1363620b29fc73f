"""gpt-oss's harmony output format, split incrementally as vLLM 0.32 splits it.

The full rules: docs/parsers.md, "gpt-oss harmony".
"""

from __future__ import annotations

import functools
from typing import Any, ClassVar, Self

from .base import ParsedDelta, ParserContext, ReasoningParser, ToolParser
from .errors import MalformedSnapshot
from .harmony_grammar import HEADER_MAX, message_kind, parse_header
from .harmony_machine import HarmonyMachine

__all__ = ["HEADER_MAX", "HarmonyMachine", "HarmonyReasoningParser", "HarmonyToolParser", "harmony_parser",
           "is_harmony_model", "message_kind", "parse_header"]


def is_harmony_model(config: dict[str, Any] | None) -> bool:
    """Whether vLLM 0.32 renders and derenders this model with harmony (``model_type: gpt_oss``)."""
    return bool(config) and config.get("model_type") == "gpt_oss"  # type: ignore[union-attr]


class _HarmonyReasoningBase(ReasoningParser):
    """The machine in the reasoning slot: it returns reasoning, content and tool calls."""

    needs_special_tokens = True
    surface_reasoning: ClassVar[bool] = True
    surface_tools: ClassVar[bool] = False

    def __init__(self, ctx: ParserContext) -> None:
        super().__init__(ctx)
        self.machine = HarmonyMachine(self.surface_reasoning, self.surface_tools)

    def feed(self, text: str) -> ParsedDelta:
        return self.machine.feed(text)

    def finish(self) -> ParsedDelta:
        return self.machine.finish()

    def snapshot(self) -> dict[str, Any]:
        return {"p": self.name, **self.machine.snapshot()}

    @classmethod
    def restore(cls, ctx: ParserContext, snapshot: dict[str, Any]) -> Self:
        if not isinstance(snapshot, dict) or snapshot.get("p") != cls.name:
            raise MalformedSnapshot(f"not a {cls.name} parser state")
        parser = cls(ctx)
        parser.machine.load(snapshot)
        return parser

    @property
    def reasoning_ended(self) -> bool:
        return False  # the machine splits everything itself (no tool parser follows it)

    @property
    def calls_made(self) -> int:
        return self.machine.calls

    def plain_reasoning_guard(self) -> str | None:
        return "<" if self.machine.in_plain_reasoning() else None

    def plain_content_guard(self) -> str | None:
        return "<" if self.machine.in_plain_content() else None

    def plain_args_call(self) -> int | None:
        return self.machine.plain_args_call(self.ctx.parallel_tool_calls)

    def plain_args_guard(self) -> str:
        return "<"

    def plain_args_ascii(self) -> bool:
        return self.machine.plain_args_ascii()


class HarmonyReasoningParser(_HarmonyReasoningBase):
    """``--reasoning-parser openai_gptoss``: analysis → reasoning, final / preamble → content."""

    name = "openai_gptoss"


class HarmonyToolParser(ToolParser):
    """``--tool-call-parser openai``: the machine in the tool slot (content and function calls;
    analysis dropped, as vLLM's HarmonyParser without a reasoning parser drops it). With a gpt_oss
    model the derenderer runs :func:`harmony_parser` in the reasoning slot instead."""

    name = "openai"
    needs_special_tokens = True

    def __init__(self, ctx: ParserContext) -> None:
        super().__init__(ctx)
        self.machine = HarmonyMachine(False, True)

    def feed(self, text: str) -> ParsedDelta:
        return self.machine.feed(text)

    def finish(self) -> ParsedDelta:
        return self.machine.finish()

    def snapshot(self) -> dict[str, Any]:
        return {"p": self.name, **self.machine.snapshot()}

    @classmethod
    def restore(cls, ctx: ParserContext, snapshot: dict[str, Any]) -> Self:
        if not isinstance(snapshot, dict) or snapshot.get("p") != cls.name:
            raise MalformedSnapshot(f"not a {cls.name} parser state")
        parser = cls(ctx)
        parser.machine.load(snapshot)
        return parser

    @property
    def calls_made(self) -> int:
        return self.machine.calls

    def plain_content_guard(self) -> str | None:
        return "<" if self.machine.in_plain_content() else None

    def plain_args_call(self) -> int | None:
        return self.machine.plain_args_call(self.ctx.parallel_tool_calls)

    def plain_args_guard(self) -> str:
        return "<"

    def plain_args_ascii(self) -> bool:
        return self.machine.plain_args_ascii()


@functools.cache
def harmony_parser(reasoning: bool, tools: bool) -> type[ReasoningParser]:
    """The parser a gpt_oss model's derender runs in the reasoning slot (no tool parser after it):
    reasoning surfaced when ``--reasoning-parser openai_gptoss`` is configured, function calls when
    ``--tool-call-parser openai`` is (with ``--enable-auto-tool-choice``), as vLLM's HarmonyParser."""
    if reasoning and not tools:
        return HarmonyReasoningParser
    name = f"harmony{'+r' if reasoning else ''}{'+t' if tools else ''}"
    return type(f"Harmony{'R' if reasoning else ''}{'T' if tools else ''}Parser", (_HarmonyReasoningBase,),
                {"name": name, "surface_reasoning": reasoning, "surface_tools": tools,
                 "__module__": __name__})


def harmony_for(tool_parser: type[ToolParser] | None, reasoning_parser: type[ReasoningParser] | None,
                enable_auto_tool_choice: bool) -> type[ReasoningParser] | None:
    """The one parser the derender runs (in the reasoning slot, with no tool parser after it) when
    the configured parsers are the harmony ones (``--tool-call-parser openai`` and / or
    ``--reasoning-parser openai_gptoss``), else None. As vLLM's HarmonyParser it parses function
    calls whatever the request's ``tool_choice`` and tools (with ``--enable-auto-tool-choice``)."""
    reasoning = reasoning_parser is HarmonyReasoningParser
    tools = tool_parser is HarmonyToolParser
    if not (reasoning or tools):
        return None
    return harmony_parser(reasoning, tools and enable_auto_tool_choice)
