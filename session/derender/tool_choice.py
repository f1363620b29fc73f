"""Tool parsers for a forced ``tool_choice`` (vLLM handles these in its chat server, not in a
configured ``--tool-call-parser``):

- a **named** function (``{"type": "function", "function": {"name": ...}}``): the whole output
  (after reasoning) is that function's JSON arguments: one call, streamed as argument fragments;
- ``"required"``: the output is a JSON array ``[{"name": ..., "parameters": {...}}, ...]`` (vLLM
  constrains the engine to it); each element becomes a call whose arguments are the raw text of
  its ``parameters`` value. Output that is not such an array passes through as content.

Both follow the incremental contract of :mod:`session.parsers.base` with small snapshots.
"""

from __future__ import annotations

import json
from typing import Any, Self

from session.parsers.base import ParsedDelta, ParserContext, ToolCallDelta, ToolParser

__all__ = ["NamedToolParser", "RequiredToolParser", "named_function"]

_WS = " \t\r\n"
_ARG_KEYS = ("parameters", "arguments")


def named_function(tool_choice: Any) -> str | None:
    if isinstance(tool_choice, dict):
        fn = tool_choice.get("function")
        if isinstance(fn, dict) and isinstance(fn.get("name"), str):
            return str(fn["name"])
    return None


class NamedToolParser(ToolParser):
    name = "named_tool_choice"

    def __init__(self, ctx: ParserContext, *, started: bool = False) -> None:
        super().__init__(ctx)
        self.function = named_function(ctx.tool_choice) or ""
        self.started = started

    def feed(self, text: str) -> ParsedDelta:
        if not text:
            return ParsedDelta()
        if self.started:
            return ParsedDelta(tool_calls=[ToolCallDelta(0, None, text)])
        self.started = True
        return ParsedDelta(tool_calls=[ToolCallDelta(0, self.function, text)])

    def finish(self) -> ParsedDelta:
        if self.started:
            return ParsedDelta()
        self.started = True
        return ParsedDelta(tool_calls=[ToolCallDelta(0, self.function, "")])

    def snapshot(self) -> dict[str, Any]:
        return {"s": 1} if self.started else {}

    @classmethod
    def restore(cls, ctx: ParserContext, snapshot: dict[str, Any]) -> Self:
        return cls(ctx, started=bool(snapshot.get("s")))

    @property
    def calls_made(self) -> int:
        return 1 if self.started else 0


# Scanner modes of RequiredToolParser
_START, _ARRAY, _OBJ, _KEY, _COLON, _VALUE_START, _NAME, _VALUE, _DONE, _PASS = range(10)


class RequiredToolParser(ToolParser):
    """An incremental scanner over ``[{"name": ..., "parameters": ...}, ...]``."""

    name = "required_tool_choice"

    def __init__(self, ctx: ParserContext) -> None:
        super().__init__(ctx)
        self.mode = _START
        self.calls = 0  # calls started (named)
        self.elem = -1  # index of the element being read
        self.named = False  # the current element's name was emitted
        self.key = ""  # the key whose value is being read
        self.buf = ""  # key / name characters, or arguments waiting for the name
        self.depth = 0
        self.in_str = False
        self.esc = False
        self.lead = ""  # leading whitespace, emitted as content if this turns out not to be an array
        self.name_chars = ""  # the raw (escaped) characters of the current name string

    def feed(self, text: str) -> ParsedDelta:
        out = ParsedDelta()
        args: list[str] = []
        for ch in text:
            self._char(ch, out, args)
        self._flush_args(out, args)
        return out

    def _flush_args(self, out: ParsedDelta, args: list[str]) -> None:
        if args:
            out.tool_calls.append(ToolCallDelta(self.calls - 1, None, "".join(args)))
            args.clear()

    def _arg(self, ch: str, args: list[str]) -> None:
        if self.key not in _ARG_KEYS:
            return
        if self.named:
            args.append(ch)
        else:
            self.buf += ch

    def _char(self, ch: str, out: ParsedDelta, args: list[str]) -> None:
        mode = self.mode
        if mode == _PASS:
            out.content += ch
        elif mode == _DONE:
            return
        elif mode == _START:
            if ch in _WS:
                self.lead += ch
            elif ch == "[":
                self.mode = _ARRAY
            else:
                self.mode = _PASS
                out.content += self.lead + ch
                self.lead = ""
        elif mode == _ARRAY:
            if ch == "{":
                self.mode, self.elem, self.named, self.buf, self.key = _OBJ, self.elem + 1, False, "", ""
            elif ch not in _WS and ch != ",":  # "]" ends the array; anything else is not a call
                self.mode = _DONE
        elif mode == _OBJ:
            if ch == '"':
                self.mode, self.key, self.esc = _KEY, "", False
            elif ch == "}":
                self._end_element(out, args)
        elif mode == _KEY:
            if self.esc:
                self.esc = False
                self.key += ch
            elif ch == "\\":
                self.esc = True
                self.key += ch
            elif ch == '"':
                self.mode = _COLON
            else:
                self.key += ch
        elif mode == _COLON:
            if ch == ":":
                self.mode = _VALUE_START
        elif mode == _VALUE_START:
            if ch in _WS:
                return
            if self.key == "name" and ch == '"':
                self.mode, self.esc, self.name_chars = _NAME, False, ""
                return
            self.mode, self.depth, self.in_str, self.esc = _VALUE, 0, False, False
            self._value_char(ch, out, args)
        elif mode == _NAME:
            if self.esc:
                self.esc = False
                self.name_chars += ch
            elif ch == "\\":
                self.esc = True
                self.name_chars += ch
            elif ch == '"':
                self._named(out, args)
                self.mode = _OBJ
            else:
                self.name_chars += ch
        elif mode == _VALUE:
            self._value_char(ch, out, args)

    def _value_char(self, ch: str, out: ParsedDelta, args: list[str]) -> None:
        if self.in_str:
            self._arg(ch, args)
            if self.esc:
                self.esc = False
            elif ch == "\\":
                self.esc = True
            elif ch == '"':
                self.in_str = False
                if self.depth == 0:
                    self.mode = _OBJ
            return
        if self.depth == 0 and ch in ",}":
            self.mode = _OBJ
            if ch == "}":
                self._end_element(out, args)
            return
        if self.depth == 0 and ch in _WS:
            return
        self._arg(ch, args)
        if ch == '"':
            self.in_str = True
        elif ch in "{[":
            self.depth += 1
        elif ch in "}]":
            self.depth -= 1
            if self.depth == 0:
                self.mode = _OBJ

    def _named(self, out: ParsedDelta, args: list[str]) -> None:
        try:
            name = json.loads('"' + self.name_chars + '"')
        except ValueError:
            name = self.name_chars
        self._flush_args(out, args)
        self.calls += 1
        self.named = True
        out.tool_calls.append(ToolCallDelta(self.calls - 1, str(name), self.buf))
        self.buf = ""

    def _end_element(self, out: ParsedDelta, args: list[str]) -> None:
        self._flush_args(out, args)
        self.mode, self.key, self.buf = _ARRAY, "", ""

    def finish(self) -> ParsedDelta:
        out = ParsedDelta()
        if self.mode == _START and self.lead:
            out.content = self.lead
            self.lead = ""
        return out

    _FIELDS = ("mode", "calls", "elem", "named", "key", "buf", "depth", "in_str", "esc", "lead")

    def snapshot(self) -> dict[str, Any]:
        snap = {f: getattr(self, f) for f in self._FIELDS}
        snap["nc"] = self.name_chars
        return snap

    @classmethod
    def restore(cls, ctx: ParserContext, snapshot: dict[str, Any]) -> Self:
        parser = cls(ctx)
        for f in cls._FIELDS:
            if f in snapshot:
                setattr(parser, f, snapshot[f])
        parser.name_chars = str(snapshot.get("nc", ""))
        return parser

    @property
    def calls_made(self) -> int:
        return self.calls
