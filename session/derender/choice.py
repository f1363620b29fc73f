"""The incremental machinery of one choice: token ids → text → stop strings → reasoning parser →
tool parser, with a small snapshot (never the output so far, so a push costs O(chunk + what a
parser holds)). The order of the stages, which end token is held and dropped, and the steps that
skip the parsers: docs/derender.md, "One pipeline per choice".
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from session.detokenizer import (
    ByteLevelDetokenizer,
    TokenTable,
    WindowDetokenizer,
    new_detokenizer,
    restore_detokenizer,
)
from session.errors import DerenderError
from session.parsers.base import ParsedDelta, ParserContext, ReasoningParser, ToolCallDelta, ToolParser
from session.parsers.tool.json_stream import ascii_body, is_plain
from session.stop import StopStrings

log = logging.getLogger("tokenwire.derender")

__all__ = ["ArgsPiece", "ChoiceStream", "Piece", "StreamSpec"]

# ChoiceStream.route: where a text that holds nothing the parsers look for goes (see _route)
_SLOW = object()  # feed the parsers
_REASONING = object()  # no character route_guard in the text (route_space: nor trailing space): all reasoning
_CONTENT = object()  # no character route_guard in the text: all content
_ARGS = object()  # a JSON-plain text without route_guard (route_space: nor trailing space): call route_call's arguments
_ARGS_MATCH = object()  # a JSON-plain text route_match finds nothing in: call route_call's arguments
_ARGS_ASCII = object()  # as _ARGS, the arguments being ASCII-escaped JSON (harmony): ascii_body(text)
_ANY_CONTENT = object()  # any text is content
_NO_MATCH = re.compile("(?!)").search


@dataclass(frozen=True, slots=True)
class StreamSpec:
    """What every choice of one request shares; rebuilt from the request on every call."""

    table: TokenTable
    skip_special_tokens: bool = True
    stop: tuple[str, ...] = ()
    include_stop_str_in_output: bool = False
    hold_ids: frozenset[int] = frozenset()
    reasoning_parser: type[ReasoningParser] | None = None
    tool_parser: type[ToolParser] | None = None
    parser_ctx: ParserContext = field(default_factory=ParserContext)
    include_reasoning: bool = True
    parallel_tool_calls: bool = True
    tool_calls_finish: bool = True  # calls made turn finish_reason "stop" into "tool_calls"
    drop_tool_calls: bool = False  # the tool parser reads the output, its calls are dropped (tool_choice "none")
    prompt_tail: tuple[int, ...] = ()


class Piece:
    """What one push produced for one choice. (A plain slotted class: one is made per engine step
    of every stream, so it must be cheap.)"""

    __slots__ = ("content", "counted", "finish_reason", "reasoning", "stop_engine", "stop_reason", "tool_calls")

    def __init__(self, content: str = "", reasoning: str = "", tool_calls: Sequence[ToolCallDelta] = (),
                 counted: int = 0, finish_reason: str | None = None, stop_reason: int | str | None = None,
                 stop_engine: bool = False) -> None:
        self.content = content
        self.reasoning = reasoning
        self.tool_calls = tool_calls
        self.counted = counted  # how many of the pushed ids count (all, unless a stop string cut the chunk)
        self.finish_reason = finish_reason
        self.stop_reason = stop_reason
        self.stop_engine = stop_engine  # a stop string matched: the engine should stop this choice now

    def __bool__(self) -> bool:
        return bool(self.content or self.reasoning or self.tool_calls or self.finish_reason)

    def __repr__(self) -> str:
        fields = ", ".join(f"{k}={getattr(self, k)!r}" for k in Piece.__slots__)
        return f"{type(self).__name__}({fields})"


class ArgsPiece(Piece):
    """A piece that is only more arguments of one tool call (the step inside a string argument,
    the most common step of a long call): the call index and the text, with ``tool_calls`` made
    from them only when asked, so the chat derenderer can build the delta without it."""

    __slots__ = ("arguments", "call")

    def __init__(self, call: int, arguments: str, counted: int) -> None:  # (no super().__init__: see tool_calls)
        self.call = call
        self.arguments = arguments
        self.content = self.reasoning = ""
        self.counted = counted
        self.finish_reason = self.stop_reason = None
        self.stop_engine = False

    @property
    def tool_calls(self) -> Sequence[ToolCallDelta]:  # type: ignore[override]  # (read-only: the base's slot is unused)
        return (ToolCallDelta(self.call, None, self.arguments),)


class ChoiceStream:
    __slots__ = ("count", "detok", "finished", "held", "index", "reasoning", "route", "route_call", "route_guard",
                 "route_match", "route_space", "spec", "started", "stops", "text_offset", "tool")

    def __init__(self, spec: StreamSpec, index: int, *, detok: ByteLevelDetokenizer | WindowDetokenizer,
                 stops: StopStrings | None, reasoning: ReasoningParser | None, tool: ToolParser | None,
                 held: int | None = None, count: int = 0, finished: bool = False,
                 started: bool = False, text_offset: int = 0) -> None:
        self.spec = spec
        self.index = index
        self.detok = detok
        self.stops = stops
        self.reasoning = reasoning
        self.tool = tool
        self.held = held
        self.count = count
        self.finished = finished
        self.started = started  # the first chunk (role / echo) went out
        self.text_offset = text_offset  # completion logprobs: characters before the next token
        # Where the next text goes when it holds nothing a parser looks for, so the step may skip
        # the parsers (feeding it would change neither and yield exactly that): see _route. Not
        # part of the snapshot: derived from the parsers' state again after every parse and on
        # restore.
        self.route = _SLOW
        self.route_guard = ""
        self.route_call = 0
        self.route_space = False
        self.route_match: Callable[[str], object] = _NO_MATCH

    # --- construction ----------------------------------------------------------------------------
    @classmethod
    def new(cls, spec: StreamSpec, index: int) -> ChoiceStream:
        ctx = spec.parser_ctx
        stream = cls(
            spec, index,
            detok=new_detokenizer(spec.table, skip_special_tokens=spec.skip_special_tokens,
                                  prompt_ids=spec.prompt_tail),
            stops=StopStrings(spec.stop, include_in_output=spec.include_stop_str_in_output) if spec.stop else None,
            reasoning=spec.reasoning_parser(ctx) if spec.reasoning_parser else None,
            tool=spec.tool_parser(ctx) if spec.tool_parser else None,
        )
        stream._route()
        return stream

    def snapshot(self) -> dict[str, Any]:
        """The continuation state (JSON-ready; small keys, defaults omitted)."""
        snap: dict[str, Any] = {"d": self.detok.snapshot(), "n": self.count}
        if self.held is not None:
            snap["h"] = self.held
        if self.stops is not None and self.stops.tail:
            snap["t"] = self.stops.tail
        if self.reasoning is not None:
            snap["rp"] = self.reasoning.snapshot()
        if self.tool is not None:
            snap["tp"] = self.tool.snapshot()
        if self.started:
            snap["s"] = 1
        if self.finished:
            snap["f"] = 1
        if self.text_offset:
            snap["o"] = self.text_offset
        return snap

    @classmethod
    def restore(cls, spec: StreamSpec, index: int, snap: dict[str, Any]) -> ChoiceStream:
        """Rebuild from :meth:`snapshot`. Raises :class:`DerenderError` when the snapshot does not
        fit this request (e.g. it was made with other parsers)."""
        try:
            detok = restore_detokenizer(spec.table, skip_special_tokens=spec.skip_special_tokens, snapshot=snap["d"])
            ctx = spec.parser_ctx
            if ("rp" in snap) != (spec.reasoning_parser is not None) or ("tp" in snap) != (spec.tool_parser is not None):
                raise ValueError("parser set changed")
            held = snap.get("h")
            if held is not None and (type(held) is not int or held not in spec.hold_ids):  # only end / special ids are held
                raise ValueError("bad held id")
            tail = snap.get("t", "")
            stops = None
            if spec.stop:
                stops = StopStrings(spec.stop, include_in_output=spec.include_stop_str_in_output, tail=str(tail))
                if len(stops.tail) > stops.hold:
                    raise ValueError("stop tail too long")
            elif tail:
                raise ValueError("stop strings changed")
            stream = _FromState(
                spec, index, detok=detok, stops=stops,
                reasoning=spec.reasoning_parser.restore(ctx, snap["rp"]) if spec.reasoning_parser else None,
                tool=spec.tool_parser.restore(ctx, snap["tp"]) if spec.tool_parser else None,
                held=held, count=int(snap["n"]), finished=bool(snap.get("f")),
                started=bool(snap.get("s")), text_offset=int(snap.get("o", 0)),
            )
            if not stream.finished:
                stream._route()
            return stream
        except DerenderError:
            raise
        except Exception:  # a parser's restore may raise anything on a state it did not write
            raise DerenderError(STATE_DOES_NOT_FIT, param="stream_state") from None

    # --- the step --------------------------------------------------------------------------------
    @property
    def calls_made(self) -> int:
        if self.spec.drop_tool_calls:
            return 0
        tool: ToolParser | ReasoningParser | None = self.tool or self.reasoning  # (harmony: the reasoning slot)
        made: int = getattr(tool, "calls_made", 0)
        if not made:
            return 0
        return min(made, 1) if not self.spec.parallel_tool_calls else made

    def push(self, ids: Sequence[int], finish_reason: str | None = None,
             stop_reason: int | str | None = None, *, final: bool = False) -> Piece:
        """Derender the next ids. ``finish_reason`` (or ``final``) ends the stream: everything
        held is flushed and further pushes are refused."""
        if self.finished:
            raise DerenderError(f"choice {self.index} already finished; a finished stream takes no more tokens.")
        if finish_reason is None and not final and self.held is None and self.stops is None:
            return self._push_plain(ids)
        spec = self.spec
        finishing = finish_reason is not None or final
        n_in = len(ids)
        offset = 0
        work: Sequence[int] = ids
        if self.held is not None:
            work = [self.held, *ids]
            offset = 1
            self.held = None
        if work and work[-1] in spec.hold_ids:
            if not finishing:
                self.held = work[-1]
                work = work[:-1]
            elif finish_reason == "stop" and not isinstance(stop_reason, str):
                work = work[:-1]  # the eos / stop token the engine stopped on is not part of the text

        stops = self.stops
        matched = False
        if stops is None:
            text = self.detok.push(work) if work else ""
            counted = n_in
        else:
            parts: list[str] = []
            counted = n_in
            detok = self.detok
            for k, tid in enumerate(work):
                t = detok.push((tid,))
                if t:
                    out = stops.feed(t)
                    if out:
                        parts.append(out)
                    if stops.matched is not None:
                        matched = True
                        counted = max(0, k + 1 - offset)
                        self.held = None
                        break
            text = "".join(parts)
        self.count += counted

        done = finishing or matched
        if done:
            if not matched:
                tail = self.detok.flush()
                if stops is not None:
                    if tail:
                        text += stops.feed(tail)
                        matched = stops.matched is not None
                    if not matched:
                        text += stops.flush()
                else:
                    text += tail
            self.finished = True
            self.held = None

        piece = self._parse(text, done)
        piece.counted = counted
        if done:
            if matched and stops is not None:
                piece.finish_reason, piece.stop_reason, piece.stop_engine = "stop", stops.matched, True
            else:
                piece.finish_reason, piece.stop_reason = finish_reason, stop_reason
            if piece.finish_reason == "stop" and spec.tool_calls_finish and self.calls_made:
                piece.finish_reason = "tool_calls"
        return piece

    def _push_plain(self, ids: Sequence[int]) -> Piece:
        """The common step (no stop strings, nothing held, not the end), kept short: it runs once
        per engine step of every stream."""
        n = len(ids)
        self.count += n
        if not n:
            return Piece()
        if ids[-1] in self.spec.hold_ids:
            self.held = ids[-1]
            ids = ids[:-1]
            if not ids:
                return Piece(counted=n)
        text = self.detok.push(ids)
        if not text:
            return Piece(counted=n)
        route = self.route
        if route is _REASONING:
            if self.route_guard not in text and not (self.route_space and text[-1].isspace()):
                return Piece("", text if self.spec.include_reasoning else "", (), n)
        elif route is _CONTENT:
            if self.route_guard not in text:
                return Piece(text, "", (), n)
        elif route is _ARGS:
            if is_plain(text) and self.route_guard not in text and not (self.route_space and text[-1].isspace()):
                return ArgsPiece(self.route_call, text, n)
        elif route is _ARGS_MATCH:
            if is_plain(text) and self.route_match(text) is None:  # (plain_args_guard a pattern)
                return ArgsPiece(self.route_call, text, n)
        elif route is _ARGS_ASCII:
            if is_plain(text) and self.route_guard not in text:  # (plain_args_ascii)
                return ArgsPiece(self.route_call, ascii_body(text), n)
        elif route is _ANY_CONTENT:
            return Piece(text, "", (), n)
        piece = self._parse(text, False)
        piece.counted = n
        return piece

    def _route(self) -> None:
        """Where a text that holds nothing the parsers look for goes next (``route``), from the
        parsers' state: reasoning (without ``route_guard``: ReasoningParser.plain_reasoning_guard),
        content (ToolParser.plain_content_guard), the arguments of call ``route_call`` (a JSON-plain
        text: ToolParser.plain_args_call), any text as content, or _SLOW (feed the parsers). A
        reasoning parser past its reasoning is skipped too when it is ``passthrough``, or for a
        text without its ReasoningParser.plain_content_guard, when that is the tool route's guard
        as well."""
        self.route = _SLOW
        tool, reasoning = self.tool, self.reasoning
        outer = ""  # the reasoning parser's guard on content ("": none)
        if reasoning is not None and not reasoning.passthrough:
            guard = reasoning.plain_reasoning_guard()
            if guard:
                self.route, self.route_guard, self.route_space = _REASONING, guard, reasoning.plain_reasoning_hold_space
                return
            if tool is None:  # (harmony: the parser in the reasoning slot makes the calls too)
                call = reasoning.plain_args_call()
                if call is not None and (self.spec.parallel_tool_calls or call == 0):
                    self._route_args(call, reasoning.plain_args_guard(), "", False, reasoning.plain_args_ascii())
                    return
            outer = reasoning.plain_content_guard() or ""
            if not outer:
                return
        if tool is None:
            self.route, self.route_guard = (_CONTENT, outer) if outer else (_ANY_CONTENT, "")
            return
        call = tool.plain_args_call()  # (only a call it reports: parallel_tool_calls applied)
        if call is not None and not self.spec.drop_tool_calls:
            self._route_args(call, tool.plain_args_guard(), outer, tool.plain_args_hold_space, tool.plain_args_ascii())
            return
        guard = tool.plain_content_guard()
        if guard is None or (outer and guard not in (outer, "")):
            return
        guard = guard or outer
        self.route, self.route_guard = (_CONTENT, guard) if guard else (_ANY_CONTENT, "")

    def _route_args(self, call: int, guard: str | re.Pattern[str], outer: str, space: bool, escaped: bool) -> None:
        """The arguments route of call ``call`` under the parser's ``guard`` (a character: _ARGS, or
        _ARGS_ASCII for ASCII-escaped arguments; a pattern: _ARGS_MATCH) and ``outer``, the
        reasoning parser's content guard ("": none); none where one test cannot hold them all."""
        if isinstance(guard, str):
            if (outer and guard not in (outer, "\x00")) or (escaped and space):
                return
            self.route, self.route_call, self.route_guard = (_ARGS_ASCII if escaped else _ARGS), call, outer or guard
            self.route_space = space
        elif not space and not escaped and (not outer or guard.search(outer) is not None):
            self.route, self.route_call, self.route_match = _ARGS_MATCH, call, guard.search

    def _parse(self, text: str, done: bool) -> Piece:
        piece = self._split(text, done)
        if not done:
            self._route()
        return piece

    def _split(self, text: str, done: bool) -> Piece:
        reasoning_parser, tool_parser = self.reasoning, self.tool
        if reasoning_parser is None and tool_parser is None:
            return Piece(content=text)
        reasoning = ""
        content = text
        harmony_calls: Sequence[ToolCallDelta] = ()  # a harmony parser also makes the calls
        if reasoning_parser is not None:
            d = reasoning_parser.feed(text) if text else None
            if done:
                f = reasoning_parser.finish()
                if d is None:
                    d = f
                else:
                    d.extend(f)
            if d is None:
                return Piece()
            reasoning, content, harmony_calls = d.reasoning, d.content, d.tool_calls
            if not self.spec.include_reasoning:
                reasoning = ""
        if tool_parser is None:
            if harmony_calls and not self.spec.parallel_tool_calls:
                harmony_calls = [c for c in harmony_calls if c.index == 0]
            return Piece(content=content, reasoning=reasoning, tool_calls=harmony_calls)
        t: ParsedDelta | None = tool_parser.feed(content) if content else None
        if done:
            f = tool_parser.finish()
            if t is None:
                t = f
            else:
                t.extend(f)
        if t is None:
            return Piece(reasoning=reasoning)
        calls = t.tool_calls
        if calls and self.spec.drop_tool_calls:
            calls = []
        elif calls and not self.spec.parallel_tool_calls:
            calls = [c for c in calls if c.index == 0]
        return Piece(content=t.content, reasoning=reasoning, tool_calls=calls)


STATE_DOES_NOT_FIT = ("stream_state does not fit this request (different tokenizer, parsers or stop strings than "
                      "the call that produced it); send the same request on every call.")


class _FromState(ChoiceStream):
    """A stream restored from a client-carried state. Its parsers' state was checked for shape
    only, so an exception while pushing comes from the state (a body signed with a leaked secret,
    issue 19 item 5): a 400 naming ``stream_state``, never a 500. Fresh streams do not pay for the
    guard."""

    __slots__ = ()

    def push(self, ids: Sequence[int], finish_reason: str | None = None,
             stop_reason: int | str | None = None, *, final: bool = False) -> Piece:
        try:
            return super().push(ids, finish_reason, stop_reason, final=final)
        except DerenderError:
            raise
        except Exception:
            log.warning("a derender step failed on a restored stream_state; refused as not fitting", exc_info=True)
            raise DerenderError(STATE_DOES_NOT_FIT, param="stream_state") from None
