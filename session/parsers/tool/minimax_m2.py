"""``minimax_m2``: MiniMax-M2 XML tool calls, as vLLM 0.32's ``minimax_m2`` engine grammar reads them::

The full rules: docs/parsers.md (the family's section: its split, state and every difference from vLLM).
"""

from __future__ import annotations

import re
from typing import Any

from ..base import ParserContext
from .json_stream import dumps, string_body
from .schema_values import always_string, coerce, properties_of, value_types
from .streaming import StreamingToolParser

# vLLM's terminals. The ``<``-literals are matched (longest first) wherever a ``<`` starts; ``">``,
# ``'>`` and ``>`` matter only while reading a name (elsewhere they are the same text either way).
THINK_START, THINK_END = "<think>", "</think>"
TOOL_START, TOOL_END = "<minimax:tool_call>", "</minimax:tool_call>"
INVOKE_END = "</invoke>"
_INVOKES = ('<invoke name="', "<invoke name='", "<invoke name=")
_LT_LITERALS = tuple(sorted((THINK_START, THINK_END, TOOL_START, TOOL_END, "<parameter name=", "</parameter>",
                             *_INVOKES, INVOKE_END), key=len, reverse=True))
_NAME_END = ">"

# The parameter grammar of vLLM's converter (``_PARAM_RE``), in pieces: an opener
# ``<\s*parameter\s+name\s*=\s*("…"|'…'|bare)\s*>``, a value up to ``<\s*/\s*parameter\s*>`` or up to
# (not including) the next ``<\s*parameter\s+name\s*=``.
_OPENER_HEAD = re.compile(r"<\s*parameter\s+name\s*=\s*")
_OPENER_PART = re.compile(r"<\s*(?:p(?:a(?:r(?:a(?:m(?:e(?:t(?:e(?:r(?:\s+(?:n(?:a(?:m(?:e\s*(?:=\s*)?)?)?)?)?)?)?)?)?)?)?)?)?)?)?")
_CLOSE = re.compile(r"<\s*/\s*parameter\s*>")
_CLOSE_PART = re.compile(r"<\s*(?:/\s*(?:p(?:a(?:r(?:a(?:m(?:e(?:t(?:e(?:r\s*)?)?)?)?)?)?)?)?)?)?")
_NEXT_OPENER = re.compile(r"<\s*parameter\s+name\s*=")
_BARE = re.compile(r"[^>\s]+")
_SPACES = re.compile(r"\s*")
# Held text is bounded: an opener (its quoted name) longer than this, or a run of whitespace inside a
# would-be closing tag longer than this, is taken as not one (vLLM's regex has no bound).
_MAX_HEAD = 256
_MAX_CLOSE = 64
_MAX_NAME = 256

def _skip_spaces(text: str, pos: int) -> int:
    m = _SPACES.match(text, pos)
    return pos if m is None else m.end()


def _match_opener(head: str, final: bool) -> tuple[str, str, int] | None:
    """The opener at the start of ``head``: ``("match", name, length)``, ``("wait", "", 0)`` while
    more text could still decide it, or None when it is not one (vLLM's alternation order: a
    ``"…"`` name first, then ``'…'``, then a bare run without ``>`` or whitespace)."""
    m = _OPENER_HEAD.match(head)
    if m is None:
        if not final and len(head) <= _MAX_HEAD and _OPENER_PART.fullmatch(head):
            return ("wait", "", 0)
        return None
    rest, start = head[m.end():], m.end()
    if not rest:
        return None if final else ("wait", "", 0)
    if rest[0] in "\"'":
        quote = rest[0]
        end = rest.find(quote, 1)
        if end == -1:
            if not final and len(head) <= _MAX_HEAD:
                return ("wait", "", 0)
        else:
            after = _skip_spaces(rest, end + 1)
            if after < len(rest) and rest[after] == ">":
                return ("match", rest[1:end], start + after + 1)
            if after >= len(rest) and not final:
                return ("wait", "", 0)
        # the quoted form failed: the bare form (quotes and all) may still match
    bare = _BARE.match(rest)
    if bare is None:
        return None
    after = _skip_spaces(rest, bare.end())
    if after < len(rest):
        return ("match", bare.group(), start + after + 1) if rest[after] == ">" else None
    return None if final or len(head) > _MAX_HEAD else ("wait", "", 0)


def _value_end(held: str, final: bool) -> tuple[str, int]:
    """What the ``<…`` at the start of ``held`` is inside a value: ``("close", length)`` for a
    ``</parameter>``, ``("open", 0)`` for the start of the next opener (the value ends before it),
    ``("wait", 0)`` while undecided, ``("text", 1)`` when the ``<`` is value text."""
    m = _CLOSE.match(held)
    if m is not None:
        return ("close", m.end())
    if _NEXT_OPENER.match(held) is not None:
        return ("open", 0)
    if not final and len(held) <= _MAX_CLOSE and (_CLOSE_PART.fullmatch(held) or _OPENER_PART.fullmatch(held)):
        return ("wait", 0)
    return ("text", 1)


def pack_space(text: str) -> Any:
    """Held whitespace for the snapshot: as is when short, else run-length encoded."""
    if len(text) <= 64:
        return text
    runs: list[list[Any]] = []
    for ch in text:
        if runs and runs[-1][0] == ch:
            runs[-1][1] += 1
        else:
            runs.append([ch, 1])
    return runs


def unpack_space(packed: Any) -> str:
    if isinstance(packed, str):
        return packed
    return "".join(str(ch) * int(count) for ch, count in packed)


def _trailing_space(text: str) -> int:
    """Where the trailing whitespace of ``text`` starts (``str.rstrip``'s whitespace)."""
    return len(text.rstrip())


class MinimaxM2ToolParser(StreamingToolParser):
    """Modes (vLLM's states): ``content``, ``preamble`` (after ``<minimax:tool_call>``), ``name``
    (inside ``<invoke name=…``), ``args`` (up to ``</invoke>``), ``between`` (after a call, inside
    the block). ``_buf`` holds a partial terminal; the arguments reader keeps its phase
    (``seek`` / ``head`` / ``str`` / ``typed`` / ``skip``), the text it holds (a partial opener or
    closing tag), and for a typed value its key and raw text."""

    name = "minimax_m2"
    needs_special_tokens = False
    initial_mode = "content"
    # vLLM 0.32's engine grammar: it also reads tool_choice "none" and requests without tools (the call
    # markup leaves the content; calls are not reported), and "required" / named ones as "auto" (the
    # model writes its own format under a structural tag: vLLM's supports_required_and_named is False).
    engine_based = True
    supports_required_and_named = False

    def __init__(self, ctx: ParserContext) -> None:
        super().__init__(ctx)
        self._tool_names = {
            str(fn["name"]) for tool in ctx.tools
            if isinstance(tool, dict) and tool.get("type", "function") == "function"
            and isinstance(fn := tool.get("function"), dict) and isinstance(fn.get("name"), str)
        }
        # "none" with tools: calls are read, never reported, and the rest is content as it is.
        self._suppress = ctx.tool_choice == "none" and bool(ctx.tools)
        self._report = bool(ctx.tools) and not self._suppress
        self._fname = ""  # the name being read (leading whitespace dropped)
        self._func = ""  # the current call's function (its schema types the values)
        self._phase = "seek"
        self._held = ""  # the arguments reader's undecided text
        self._key = ""
        self._raw = ""  # a typed value's text so far
        self._emitted = False  # a parameter of this call was sent (the next one needs ", ")
        self._scan = False  # this call's arguments are reported
        self._ws = ""  # whitespace content held back
        self._nonspace = False  # non-whitespace content was sent
        self._started = False  # a call started (whitespace-only content is then dropped)
        self._accepted = False  # a call was accepted (content is then stripped, and ends)

    # -- state ------------------------------------------------------------------------------------
    def _save(self) -> dict[str, Any]:
        state: dict[str, Any] = {"w": pack_space(self._ws), "f": [self._nonspace, self._started, self._accepted]}
        if self._mode in ("name", "args"):
            state["c"] = [self._fname, self._func, self._phase, self._held, self._key, self._raw, self._emitted,
                          self._scan]
        return state

    def _load(self, state: dict[str, Any]) -> None:
        if self._mode not in ("content", "preamble", "name", "args", "between"):
            raise ValueError(self._mode)
        self._ws = unpack_space(state["w"])
        self._nonspace, self._started, self._accepted = (bool(v) for v in state["f"])
        if self._mode in ("name", "args"):
            fname, func, phase, held, key, raw, emitted, scan = state["c"]
            if phase not in ("seek", "head", "str", "typed", "skip"):
                raise ValueError(phase)
            self._fname, self._func, self._phase, self._held = str(fname), str(func), phase, str(held)
            self._key, self._raw, self._emitted, self._scan = str(key), str(raw), bool(emitted), bool(scan)

    def plain_args_call(self) -> int | None:
        # Inside a reported string value with nothing held: every terminal, closing tag and next
        # opener starts with "<", so a plain text without "<" is exactly the value's next JSON text.
        if self._buf or self._mode != "args" or self._phase != "str" or self._held:
            return None
        return self._calls - 1  # (values are read only in a call that is reported)

    def plain_args_guard(self) -> str:
        return "<"

    # -- lexing -----------------------------------------------------------------------------------
    def _process(self, text: str, final: bool) -> None:
        if not self._buf and "<" not in text and not final:  # no terminal can start here
            if self._mode == "args":
                if not self._scan:  # a call that is not reported: its arguments are not read
                    return
                if self._phase == "str" and not self._held:
                    self.add_args(string_body(text))  # the common case: inside a streamed string value
                    return
            elif self._mode != "name":
                self._text(text)
                return
        buf, self._buf = self._buf + text, ""
        i, n = 0, len(buf)
        while i < n:
            if self._mode == "name":
                i = self._lex_name(buf, i, final)
                if i < 0:
                    return
                continue
            j = buf.find("<", i)
            if j == -1:
                self._text(buf[i:])
                break
            if j > i:
                self._text(buf[i:j])
            lit = self._lex_lt(buf, j, final)
            if lit is None:  # may still become a terminal
                self._buf = buf[j:]
                return
            if lit:
                self._terminal(lit)
                i = j + len(lit)
            else:
                self._text("<")
                i = j + 1
        if final:
            self._end_of_output()

    @staticmethod
    def _lex_lt(buf: str, j: int, final: bool) -> str | None:
        """The terminal starting at ``buf[j] == "<"`` (the longest literal), "" when none, None
        when a longer literal could still follow (only when not ``final``)."""
        rest = buf[j : j + len(_LT_LITERALS[0])]
        if not final and len(rest) < len(_LT_LITERALS[0]):
            for lit in _LT_LITERALS:
                if len(lit) > len(rest) and lit.startswith(rest):
                    return None
        for lit in _LT_LITERALS:
            if rest.startswith(lit):
                return lit
        return ""

    def _lex_name(self, buf: str, i: int, final: bool) -> int:
        """Read name text from ``buf[i]`` up to and including its end (``>``, ``">`` or ``'>`` not
        inside another terminal). Returns where to go on, or -1 when the rest is held."""
        n = len(buf)
        j = i
        while j < n:
            ch = buf[j]
            if ch == "<":
                lit = self._lex_lt(buf, j, final)
                if lit is None:
                    self._name_text(buf[i:j])
                    self._buf = buf[j:]
                    return -1
                j += len(lit) if lit else 1
            elif ch in "\"'":
                if j + 1 < n:
                    if buf[j + 1] == _NAME_END:
                        self._name_text(buf[i:j])
                        self._name_end()
                        return j + 2
                    j += 1
                elif final:
                    j += 1
                else:
                    self._name_text(buf[i:j])
                    self._buf = buf[j:]
                    return -1
            elif ch == _NAME_END:
                self._name_text(buf[i:j])
                self._name_end()
                return j + 1
            else:
                j += 1
        self._name_text(buf[i:])
        return n

    # -- vLLM's states ----------------------------------------------------------------------------
    def _terminal(self, lit: str) -> None:
        mode = self._mode
        if mode == "args":
            if lit == INVOKE_END:
                self._end_call()
                self._mode = "between"
            else:
                self._args_text(lit)
        elif lit in _INVOKES:  # from content, preamble or between: a call starts
            self._start_call()
        elif mode == "content":
            if lit == TOOL_START:
                self._mode = "preamble"
            elif lit != TOOL_END:  # a stray </minimax:tool_call> is dropped
                self._content_text(lit)
        elif lit == TOOL_END:  # preamble, between
            self._mode = "content"

    def _text(self, text: str) -> None:
        mode = self._mode
        if mode == "content":
            self._content_text(text)
        elif mode == "args":
            self._args_text(text)
        # preamble, between: dropped

    # -- content ----------------------------------------------------------------------------------
    def _content_text(self, text: str) -> None:
        if self._suppress:
            self._content(text)
            return
        if self._accepted:  # after a call: dropped (vLLM's non-streaming answer)
            return
        text = self._ws + text
        cut = _trailing_space(text)
        if cut:
            self._content(text[:cut])
            self._nonspace = True
        self._ws = text[cut:]

    def _end_of_output(self) -> None:
        if self._mode == "name":
            self._name_end()
        if self._mode == "args":
            self._end_call()
        self._mode = "content"
        if self._ws and not self._accepted and (self._nonspace or not self._started):
            self._content(self._ws)
        self._ws = ""

    # -- calls ------------------------------------------------------------------------------------
    def _start_call(self) -> None:
        self._mode, self._fname, self._func = "name", "", ""
        self._phase, self._held, self._key, self._raw, self._emitted, self._scan = "seek", "", "", "", False, False
        if not self._suppress:
            self._started = True

    def _name_text(self, text: str) -> None:
        if text and len(self._fname) <= _MAX_NAME:
            self._fname = (self._fname + text).lstrip()[: _MAX_NAME + 1]

    def _name_end(self) -> None:
        self._mode = "args"
        name = self._fname.strip()
        self._fname = ""
        if self._suppress or not name:
            return
        if self._report and (len(name) > _MAX_NAME or name not in self._tool_names):
            return  # vLLM refuses a name the request does not list
        self._accepted, self._ws = True, ""
        if not self._report:
            return
        index = self._calls
        self.open_call(name)
        self._func = name
        if self._kept(index):
            self._scan = True
            self.add_args("{")

    def _end_call(self) -> None:
        if self._scan:
            self._args_scan("", final=True)  # an unclosed value is closed (a string) or dropped
            self.add_args("}")
        self._scan = False
        self._phase, self._held, self._key, self._raw, self._func = "seek", "", "", "", ""

    # -- arguments --------------------------------------------------------------------------------
    def _param_types(self, key: str) -> frozenset[str] | None:
        """The schema types of parameter ``key`` (None: no conversion, it stays a string)."""
        return value_types(properties_of(self.ctx.tools, self._func), key)

    def _args_text(self, text: str) -> None:
        if self._scan:
            self._args_scan(text, final=False)

    def _args_scan(self, text: str, final: bool) -> None:
        data, self._held = self._held + text, ""
        i = 0
        while True:
            phase = self._phase
            if phase == "seek":
                j = data.find("<", i)
                if j == -1:
                    return
                self._phase, i = "head", j
                continue
            if phase == "head":
                got = _match_opener(data[i:], final)
                if got is None:  # not an opener: scanning goes on after its "<"
                    self._phase, i = "seek", i + 1
                    continue
                if got[0] == "wait":
                    self._held = data[i:]
                    return
                self._open_param(got[1].strip())
                i += got[2]
                continue
            # a value: str (streamed), typed (held), skip (an empty name)
            j = data.find("<", i)
            if j == -1:
                self._value_text(data[i:])
                if final:
                    self._close_value(complete=False)
                return
            self._value_text(data[i:j])
            end, length = _value_end(data[j:], final)
            if end == "wait":
                self._held = data[j:]
                return
            if end == "text":
                self._value_text("<")
                i = j + 1
                continue
            self._close_value(complete=True)
            i = j + length  # "open": the next opener starts at this "<"

    def _open_param(self, key: str) -> None:
        if not key:
            self._phase = "skip"
            return
        types = self._param_types(key)
        sep = ", " if self._emitted else ""
        if always_string(types):
            self.add_args(f"{sep}{dumps(key)}: \"")
            self._emitted, self._phase = True, "str"
        else:
            self._phase, self._key, self._raw = "typed", key, ""

    def _value_text(self, text: str) -> None:
        if not text:
            return
        if self._phase == "str":
            self.add_args(string_body(text))
        elif self._phase == "typed":
            self._raw += text

    def _close_value(self, complete: bool) -> None:
        """The value ends: at its closing tag or the next opener (``complete``), or with the call. A
        string value is closed either way; a typed one is sent converted when complete, else dropped
        (vLLM's converter finds no parameter there)."""
        phase = self._phase
        if phase == "str":
            self.add_args('"')
        elif phase == "typed" and complete:
            sep = ", " if self._emitted else ""
            self.add_args(f"{sep}{dumps(self._key)}: {dumps(coerce(self._raw, self._param_types(self._key)))}")
            self._emitted = True
        self._phase, self._key, self._raw = "seek", "", ""
