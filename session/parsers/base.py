"""The contract between the incremental derenderer and the tool / reasoning parsers: ``feed`` returns
what became certain, ``finish`` flushes, ``snapshot`` / ``restore`` carry a small state (never the
output history), and non-streaming is ``feed(all)`` + ``finish()``, so any split agrees. The
contract, the state and ``needs_special_tokens``: docs/parsers.md.
"""

from __future__ import annotations

import abc
import re
from dataclasses import dataclass, field
from typing import Any, ClassVar, Self


@dataclass(slots=True)
class ToolCallDelta:
    """A piece of one tool call. The first delta of call ``index`` carries its ``name`` (and
    ``arguments`` may be ""); later deltas carry only argument fragments."""

    index: int
    name: str | None = None
    arguments: str = ""
    # The call's id when the model wrote one (Kimi-K2's ``functions.NAME:IDX``), on the delta that
    # carries the name; None: the derenderer makes one (``call_id_style``).
    id: str | None = None


@dataclass(slots=True)
class ParsedDelta:
    content: str = ""
    reasoning: str = ""
    tool_calls: list[ToolCallDelta] = field(default_factory=list)

    def __bool__(self) -> bool:
        return bool(self.content or self.reasoning or self.tool_calls)

    def extend(self, other: ParsedDelta) -> None:
        self.content += other.content
        self.reasoning += other.reasoning
        self.tool_calls.extend(other.tool_calls)


@dataclass(frozen=True, slots=True)
class ParserContext:
    """What a parser may know about the request (never the output so far)."""

    tools: tuple[dict[str, Any], ...] = ()
    tool_choice: str | dict[str, Any] | None = None
    parallel_tool_calls: bool = True
    chat_template_kwargs: dict[str, Any] = field(default_factory=dict)
    # Whether the prompt already ended the reasoning section (e.g. the template closed <think>).
    prompt_ends_reasoning: bool = False
    # Whether the prompt opened the reasoning section (e.g. the template emitted "<think>\n").
    prompt_opens_reasoning: bool = False
    # Whether a reasoning parser runs before the tool parser (vLLM's grammars read reasoning markup
    # left in the content differently with and without one).
    reasoning_configured: bool = False


class ReasoningParser(abc.ABC):
    """Splits generated text into reasoning and content. Returns ``ParsedDelta`` with only
    ``reasoning`` and ``content`` set."""

    name: ClassVar[str]
    needs_special_tokens: ClassVar[bool] = False
    # True for the parsers vLLM 0.32 builds from its engine grammars (``vllm/parser/``): see
    # ToolParser.engine_based.
    engine_based: ClassVar[bool] = False
    # With plain_reasoning_guard: True when a text that ends in whitespace is not covered either
    # (the parser holds the reasoning's trailing whitespace back until more reasoning follows, as
    # glm45 and kimi_k2 do: vLLM strips it).
    plain_reasoning_hold_space: ClassVar[bool] = False

    def __init__(self, ctx: ParserContext) -> None:
        self.ctx = ctx

    @abc.abstractmethod
    def feed(self, text: str) -> ParsedDelta: ...

    @abc.abstractmethod
    def finish(self) -> ParsedDelta: ...

    @abc.abstractmethod
    def snapshot(self) -> dict[str, Any]: ...

    @classmethod
    @abc.abstractmethod
    def restore(cls, ctx: ParserContext, snapshot: dict[str, Any]) -> Self: ...

    @property
    @abc.abstractmethod
    def reasoning_ended(self) -> bool:
        """True once everything further is content (tool parsing may start)."""

    @property
    def passthrough(self) -> bool:
        """True when ``feed(text)`` would return exactly ``content=text`` and change nothing, for
        any text (reasoning over, nothing held): the derenderer may then skip ``feed``."""
        return False

    def plain_reasoning_guard(self) -> str | None:
        """When not None: a character that every marker the parser looks for now starts with;
        feeding a text that does not contain it (with :attr:`plain_reasoning_hold_space`, nor end
        in whitespace) would change nothing and return exactly ``reasoning=text`` (so the
        derenderer may skip ``feed`` for such texts). None: no such shortcut now (the default)."""
        return None

    def plain_content_guard(self) -> str | None:
        """When not None: the reasoning is over (for now) and the character every marker the
        parser still looks for starts with; feeding a text that does not contain it would change
        nothing and return exactly ``content=text`` (so the derenderer may skip ``feed`` for such
        texts and take the tool parser's shortcuts, under this guard too). For a parser that is
        not ``passthrough`` only because it still drops or reacts to a marker in the content
        (e.g. ``</think>``). None: no such shortcut now (the default)."""
        return None

    def plain_args_call(self) -> int | None:
        """For a parser that makes the tool calls too (harmony, with no tool parser after it): as
        ToolParser.plain_args_call (with ``parallel_tool_calls`` false, only call 0). None: no
        such shortcut now (the default)."""
        return None

    def plain_args_guard(self) -> str | re.Pattern[str]:
        """With :meth:`plain_args_call`: as ToolParser.plain_args_guard."""
        return "\x00"

    def plain_args_ascii(self) -> bool:
        """With :meth:`plain_args_call`: as ToolParser.plain_args_ascii."""
        return False


class ToolParser(abc.ABC):
    """Splits content into plain content and tool calls. Returns ``ParsedDelta`` with only
    ``content`` and ``tool_calls`` set. Call indexes count from 0 in order of appearance."""

    name: ClassVar[str]
    needs_special_tokens: ClassVar[bool] = False
    # vLLM 0.32's two parser attributes that decide how ``tool_choice`` selects parsing
    # (session/derender/spec.py ``_tool_parser``; docs/parsers.md):
    # False: "required" and a named tool_choice are read in the model's own format, as "auto" is
    # (vLLM does not constrain such a parser's output to JSON for them).
    supports_required_and_named: ClassVar[bool] = True
    # True: one of vLLM's engine-grammar parsers (``vllm/parser/``). When every configured parser is
    # one, a request with tool_choice "none" (or without tools) is still read by the tool parser and
    # its calls are dropped, so call markup never reaches the content.
    engine_based: ClassVar[bool] = False
    # With plain_args_call: True when a text that ends in whitespace is not covered either (the
    # parser holds the arguments' trailing whitespace back until more follows, e.g. kimi_k2's raw
    # arguments, stripped at their end).
    plain_args_hold_space: ClassVar[bool] = False

    def __init__(self, ctx: ParserContext) -> None:
        self.ctx = ctx

    @abc.abstractmethod
    def feed(self, text: str) -> ParsedDelta: ...

    @abc.abstractmethod
    def finish(self) -> ParsedDelta: ...

    @abc.abstractmethod
    def snapshot(self) -> dict[str, Any]: ...

    @classmethod
    @abc.abstractmethod
    def restore(cls, ctx: ParserContext, snapshot: dict[str, Any]) -> Self: ...

    @property
    @abc.abstractmethod
    def calls_made(self) -> int:
        """How many tool calls have been started so far."""

    def plain_args_call(self) -> int | None:
        """When not None: the parser is inside call ``index``'s arguments where text streams as it
        is (a string of its JSON arguments; kimi_k2's raw arguments) (a call it reports: with
        ``parallel_tool_calls`` false, only call 0), and feeding a text for which
        ``json_stream.is_plain`` holds and that does not contain :meth:`plain_args_guard` would
        change nothing in it and yield exactly that text as that call's arguments (so the
        derenderer may skip ``feed`` while the text stays plain; with
        :attr:`plain_args_hold_space`, only a text that does not end in whitespace).
        None: no such shortcut now (the default)."""
        return None

    def plain_args_guard(self) -> str | re.Pattern[str]:
        """With :meth:`plain_args_call`: a character the text must also not contain (the first
        character of the markers that can end the argument, e.g. ``"<"`` before ``</parameter>``);
        ``"\x00"``, which no plain text holds, when only ``is_plain`` matters (the default). Or a
        compiled pattern the text must have no match of, where one character cannot say it (a
        reader that also holds a trailing ``}`` or counts parentheses: gemma4);
        :attr:`plain_args_hold_space` is then part of the pattern.
        ``json_stream.is_plain_without`` is the test."""
        return "\x00"

    def plain_args_ascii(self) -> bool:
        """With :meth:`plain_args_call`: True when the arguments are JSON written with
        ``ensure_ascii`` (harmony's): a covered text then yields ``json_stream.ascii_body(text)``
        (each non-ASCII character escaped), not the text itself; only with a one-character guard
        and without :attr:`plain_args_hold_space`. False (the default): the text itself."""
        return False

    def plain_content_guard(self) -> str | None:
        """When not None: the character every marker the parser looks for now starts with, or ""
        when it looks for none; feeding a text that does not contain that character would change
        nothing and return exactly ``content=text`` (so the derenderer may skip ``feed`` for such
        texts). None: no such shortcut now (the default)."""
        return None
