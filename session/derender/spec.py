"""From a request (and the server's parser configuration) to the :class:`StreamSpec` every choice
of that request shares: which parsers run, how to decode, stop strings, what the prompt says about
reasoning. Rebuilt from the request on every call, so states never need to carry it.

Tool parsing follows vLLM's chat server (:func:`session.parsers.tool_parser_class`): no tools or
``tool_choice: "none"`` → none; a named function or ``"required"`` → the forced-choice parsers;
``"auto"`` → the configured ``--tool-call-parser``, only when ``--enable-auto-tool-choice`` is on.
The configured reasoning parser always runs.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from session.derender.choice import StreamSpec
from session.detokenizer import SEED_WINDOW, TokenTable
from session.errors import DerenderError
from session.parsers import REASONING_PARSERS, TOOL_PARSERS, effective_tool_choice, tool_parser_class
from session.parsers.base import ParserContext, ReasoningParser, ToolParser
from session.parsers.harmony import harmony_for
from session.protocol.openai import ChatCompletionRequest, CompletionRequest

__all__ = ["PARSER_REQUIRES_CHAT_REQUEST", "ParserConfig", "chat_spec", "completion_spec", "resolve_parsers"]

PARSER_REQUIRES_CHAT_REQUEST = (
    "chat_request is required when a tool or reasoning parser is configured because plain "
    "detokenization would leak raw parser markup into content."
)
_REASONING_TAIL = 16
_THINK_OPEN, _THINK_CLOSE = "<think>", "</think>"


@dataclass(frozen=True, slots=True)
class ParserConfig:
    """The server's parser configuration (``--tool-call-parser``, ``--reasoning-parser``,
    ``--enable-auto-tool-choice``)."""

    tool_parser: type[ToolParser] | None = None
    reasoning_parser: type[ReasoningParser] | None = None
    enable_auto_tool_choice: bool = False

    @property
    def any(self) -> bool:
        return self.tool_parser is not None or self.reasoning_parser is not None

    @property
    def names(self) -> tuple[str | None, str | None]:
        return (getattr(self.tool_parser, "name", None), getattr(self.reasoning_parser, "name", None))


def resolve_parsers(tool_parser: str | type[ToolParser] | None, reasoning_parser: str | type[ReasoningParser] | None,
                    *, enable_auto_tool_choice: bool = False) -> ParserConfig:
    """Parser classes for configured names (or classes). Raises ``ValueError`` (the parser
    package's ``UnknownParser``) naming the valid parsers."""
    tool_cls = _lookup("tool call", TOOL_PARSERS, tool_parser)
    reasoning_cls = _lookup("reasoning", REASONING_PARSERS, reasoning_parser)
    return ParserConfig(tool_cls, reasoning_cls, enable_auto_tool_choice)


def _lookup(kind: str, known: dict[str, Any], value: str | type | None) -> Any:
    if value is None or isinstance(value, type):
        return value
    cls = known.get(value)
    if cls is None:
        raise ValueError(f"unknown {kind} parser {value!r}; valid names: {', '.join(sorted(known))}")
    return cls


def _hold_ids(table: TokenTable, stop_token_ids: Sequence[int] | None) -> frozenset[int]:
    return table.special_ids | table.eos_ids | frozenset(stop_token_ids or ())


def _stops(stop: str | list[str] | None) -> tuple[str, ...]:
    if stop is None:
        return ()
    return (stop,) if isinstance(stop, str) else tuple(s for s in stop if s)


def prompt_reasoning_flags(table: TokenTable, prompt_ids: Sequence[int]) -> tuple[bool, bool]:
    """(opens, ends): whether the generation prompt opened ``<think>`` (e.g. DeepSeek-R1's
    template) or already closed it (e.g. Qwen3 with ``enable_thinking: false``). Looks only at the
    text after the last special token of the prompt's tail (the generation prompt)."""
    tail = list(prompt_ids[-_REASONING_TAIL:])
    last_special = max((k for k, i in enumerate(tail) if i in table.special_ids), default=-1)
    text = table.decode(tail[last_special + 1:], False) if tail else ""
    opened, closed = text.rfind(_THINK_OPEN), text.rfind(_THINK_CLOSE)
    return opened > closed, closed > opened


def _engine_based(config: ParserConfig) -> bool:
    """vLLM 0.32's ``_engine_based``: every configured parser is one of its engine-grammar parsers."""
    return all(p is None or p.engine_based for p in (config.tool_parser, config.reasoning_parser))


def _tool_parser(config: ParserConfig, ctx: ParserContext) -> tuple[type[ToolParser] | None, bool]:
    """The tool parser a request gets and whether its calls are dropped, as vLLM 0.32's
    ``_extract_tool_calls`` decides (docs/parsers.md, "Which parser a request gets"):

    - ``"none"`` (or no tools): an engine-grammar parser still reads the output and its calls are
      dropped (their markup never reaches the content); any other parser reads nothing;
    - ``"auto"``: the configured parser, with ``--enable-auto-tool-choice``;
    - ``"required"`` / named: the forced JSON parsers, unless the configured parser reads them in the
      model's own format (``supports_required_and_named`` false: then as ``"auto"``).
    """
    choice = effective_tool_choice(ctx)
    cls = config.tool_parser
    if choice == "none":
        return (cls, True) if cls is not None and _engine_based(config) else (None, False)
    if choice == "auto":
        # vLLM parses "auto" tool calls only with --enable-auto-tool-choice and a parser
        if ctx.tools and cls is not None and config.enable_auto_tool_choice:
            return cls, False
        return None, False
    if cls is not None and not cls.supports_required_and_named:
        return (cls, False) if config.enable_auto_tool_choice else (None, False)
    return tool_parser_class(None, ctx), False  # named / required → the forced parsers


def chat_spec(table: TokenTable, config: ParserConfig, request: ChatCompletionRequest | None,
              prompt_ids: Sequence[int] = ()) -> StreamSpec:
    if request is None:
        if config.any:
            raise DerenderError(PARSER_REQUIRES_CHAT_REQUEST)
        return StreamSpec(table=table, hold_ids=_hold_ids(table, None), prompt_tail=tuple(prompt_ids[-SEED_WINDOW:]))
    tool_choice = request.tool_choice
    choice_value: str | dict[str, Any] | None
    choice_value = tool_choice if tool_choice is None or isinstance(tool_choice, str) else tool_choice.model_dump(mode="json")
    reasoning_cls = config.reasoning_parser
    opens = ends = False
    if reasoning_cls is not None and prompt_ids:
        opens, ends = prompt_reasoning_flags(table, prompt_ids)
    ctx = ParserContext(
        tools=tuple(t.model_dump(mode="json", exclude_none=True) for t in request.tools or ()),
        tool_choice=choice_value,
        parallel_tool_calls=request.parallel_tool_calls is not False,
        chat_template_kwargs=request.template_kwargs(),  # what the template saw (the render's merge)
        prompt_ends_reasoning=ends,
        prompt_opens_reasoning=opens,
        reasoning_configured=reasoning_cls is not None,
    )
    tool_cls, drop_calls = _tool_parser(config, ctx)
    tool_calls_finish = not isinstance(effective_tool_choice(ctx), dict)  # OpenAI: a forced function ends "stop"
    harmony = harmony_for(config.tool_parser, config.reasoning_parser, config.enable_auto_tool_choice)
    if harmony is not None:  # gpt-oss: one harmony parser splits everything (session/parsers/harmony.py)
        reasoning_cls, tool_cls, drop_calls = harmony, None, False
    needs_special = any(getattr(p, "needs_special_tokens", False) for p in (tool_cls, reasoning_cls) if p)
    return StreamSpec(
        table=table,
        skip_special_tokens=request.skip_special_tokens and not needs_special,
        stop=_stops(request.stop),
        include_stop_str_in_output=request.include_stop_str_in_output,
        hold_ids=_hold_ids(table, request.stop_token_ids),
        reasoning_parser=reasoning_cls,
        tool_parser=tool_cls,
        parser_ctx=ctx,
        include_reasoning=request.include_reasoning,
        parallel_tool_calls=ctx.parallel_tool_calls,
        tool_calls_finish=tool_calls_finish,
        drop_tool_calls=drop_calls,
        prompt_tail=tuple(prompt_ids[-SEED_WINDOW:]),
    )


def completion_spec(table: TokenTable, request: CompletionRequest | None,
                    prompt_ids: Sequence[int] = ()) -> StreamSpec:
    if request is None:
        return StreamSpec(table=table, hold_ids=_hold_ids(table, None), prompt_tail=tuple(prompt_ids[-SEED_WINDOW:]))
    return StreamSpec(
        table=table,
        skip_special_tokens=request.skip_special_tokens,
        stop=_stops(request.stop),
        include_stop_str_in_output=request.include_stop_str_in_output,
        hold_ids=_hold_ids(table, request.stop_token_ids),
        prompt_tail=tuple(prompt_ids[-SEED_WINDOW:]),
    )
