"""``qwen3_coder`` / ``qwen3_xml`` (and ``step3p5``, ``seed_oss``, ``mimo``): the Qwen3-Coder /
Qwen3.5 XML tool-call grammar, as vLLM 0.32's engine parser reads it (``vllm/parser/qwen3.py``)::

The full rules: docs/parsers.md (the family's section: its split, state and every difference from vLLM).
"""

from __future__ import annotations

from typing import Any, ClassVar

from ..base import ParserContext
from ..markers import find_first, held_suffix_len
from .json_stream import JsonValueStreamer, is_plain
from .qwen3_xml_tags import (
    FUNC,
    FUNC_END,
    PARAM_END,
    PARAM_START,
    REGEX_WS,
    TAG_CLOSE,
    TAG_FEND,
    TAG_NONE,
    TAG_OPEN,
    TAG_PARTIAL,
    body_tag,
)
from .qwen3_xml_values import VALUE_CAP, Qwen3XmlValues

__all__ = ["NAME_CAP", "VALUE_CAP", "WS_CAP", "MiMoToolParser", "Qwen3XmlToolParser", "SeedOssToolParser"]

# Bounds on what is held (characters): leading content whitespace, a function or parameter name
# (a typed value: VALUE_CAP, qwen3_xml_values.py; whitespace inside one tag: qwen3_xml_tags.py).
WS_CAP = 64
NAME_CAP = 128


class Qwen3XmlToolParser(Qwen3XmlValues):
    """Modes: ``text`` (content), ``pre`` (after ``<tool_call>``), ``name`` (after
    ``<function=``), ``args`` (the function body; ``_sub``: ``g`` between parameters, ``k`` a
    parameter name, ``v`` a value, ``x`` skipping a broken or unreported call), ``between``
    (after ``</function>``)."""

    name = "qwen3_coder"
    needs_special_tokens = False
    tool_start: ClassVar[str] = "<tool_call>"
    tool_end: ClassVar[str] = "</tool_call>"
    think_start: ClassVar[str] = "<think>"
    think_end: ClassVar[str] = "</think>"
    # One newline at each end of a value is template markup (MiMo's compact form keeps it).
    trim_newlines: ClassVar[bool] = True
    # vLLM 0.32 reads this grammar for "required" and named tool_choice too (as "auto": structural
    # tags constrain the model to its own format), and, being an engine grammar, for "none" and for
    # requests without tools (the calls' markup leaves the content, no call is reported).
    supports_required_and_named = False
    engine_based = True

    def __init__(self, ctx: ParserContext) -> None:
        super().__init__(ctx)
        choice = ctx.tool_choice if ctx.tool_choice is not None else ("auto" if ctx.tools else "none")
        # tool_choice "none" (or no tools): calls are read and dropped, never reported. With tools
        # and "none", vLLM suppresses the calls before they make a slot, so they do not end the
        # leading whitespace of the content.
        self._report = choice != "none"
        # vLLM drops a </think> in content when a reasoning parser is configured (the grammar's
        # duplicate-end rule) and keeps it when none is (its reasoning markup is then plain text).
        drop_think = ctx.reasoning_configured
        self._text_markers = (self.tool_start, FUNC, self.think_end) if drop_think else (self.tool_start, FUNC)
        self._slots = self._report or not ctx.tools
        self._ws = 0  # content: 0 nothing but whitespace yet, 1 the same after a call began, 2 text seen
        self._wsbuf = ""  # leading whitespace held while _ws == 0
        self._fname = ""  # the name being read, then the reported call's name (for its schema)
        self._sub = "g"
        self._key = ""
        self._kind = ""  # the value: "s" streams as a string, "h" held typed, "j" streamed JSON
        self._raw = ""  # a held value
        self._js: JsonValueStreamer | None = None
        self._vstarted = False  # a value character came (its leading newline is decided)
        self._nl = False  # a newline at the end of a string value, held: it may be markup
        self._members = False  # the arguments object was opened
        self._lit = tuple(sorted({self.think_start, self.think_end, self.tool_start, self.tool_end, FUNC, FUNC_END,
                                  PARAM_START, PARAM_END}, key=len, reverse=True))

    # -- state -------------------------------------------------------------------------------
    def _save(self) -> dict[str, Any]:
        state: dict[str, Any] = {"w": self._ws, "h": self._wsbuf, "f": self._fname, "s": self._sub, "k": self._key,
                                 "t": self._kind, "r": self._raw, "q": self._vstarted, "l": self._nl,
                                 "e": self._members}
        state["j"] = None if self._js is None else self._js.to_state()
        return state

    def _load(self, state: dict[str, Any]) -> None:
        ws = state["w"]
        if ws not in (0, 1, 2) or self._mode not in ("text", "pre", "name", "args", "between"):
            raise ValueError("bad qwen3_xml mode")
        self._ws, self._wsbuf, self._fname = int(ws), str(state["h"]), str(state["f"])
        self._sub, self._key, self._kind, self._raw = str(state["s"]), str(state["k"]), str(state["t"]), str(state["r"])
        if self._sub not in ("g", "k", "v", "x") or self._kind not in ("", "s", "h", "j"):
            raise ValueError("bad qwen3_xml value state")
        self._vstarted, self._nl, self._members = bool(state["q"]), bool(state["l"]), bool(state["e"])
        self._js = None if state["j"] is None else JsonValueStreamer.from_state(list(state["j"]))
        if (self._js is None) != (self._kind != "j" or self._sub != "v"):
            raise ValueError("bad qwen3_xml JSON value state")

    def plain_content_guard(self) -> str | None:
        # Markers in content all start with "<"; before the first non-whitespace character the
        # whitespace rules still apply, so no shortcut then.
        return "<" if self._mode == "text" and self._ws == 2 and not self._buf else None

    def plain_args_call(self) -> int | None:
        # Inside a string value past its leading newline, nothing held (no "<" piece, no trailing
        # newline that may be markup): a text without "\n" (is_plain) and "<" streams unchanged.
        if self._buf or self._mode != "args" or self._sub != "v" or self._kind != "s" or not self._vstarted \
                or self._nl:
            return None
        index = self._calls - 1
        return index if self._kept(index) else None

    def plain_args_guard(self) -> str:
        return "<"

    # -- the split ---------------------------------------------------------------------------
    def _process(self, text: str, final: bool) -> None:
        if not self._buf and self._mode == "args" and self._sub == "v" and self._kind == "s" and self._vstarted \
                and "<" not in text and "\n" not in text and text and is_plain(text):
            if self._nl:
                self.add_args("\\n")
                self._nl = False
            self.add_args(text)  # the common step inside a long string value
            return
        buf, self._buf = self._buf + text, ""
        i, n = 0, len(buf)
        while 0 <= i < n:  # each reader returns where it stopped, or -1 when it needs more text
            mode = self._mode
            if mode == "text":
                i = self._text(buf, i, final)
            elif mode in ("pre", "between"):
                i = self._outside(buf, i, final)
            elif mode == "name":
                i = self._name(buf, i, final)
            else:
                i = self._args(buf, i, final)
        if final:
            self._end_of_output()

    def _text(self, buf: str, i: int, final: bool) -> int:
        markers = self._text_markers
        n = len(buf)
        while True:
            pos, marker = find_first(buf, markers, i)
            if pos == -1:
                keep = 0 if final else held_suffix_len(buf[max(i, n - max(map(len, markers))) :], markers)
                self._plain(buf[i : n - keep])
                self._buf = buf[n - keep :]
                return -1
            self._plain(buf[i:pos])
            i = pos + len(marker)
            if marker != self.think_end:  # (a </think> in content is dropped)
                self._call_begins()
                self._mode = "pre" if marker == self.tool_start else "name"
                self._fname = ""
                return i

    def _plain(self, text: str) -> None:
        """Content text, with the whitespace rules (see the module docstring)."""
        if not text:
            return
        if self._ws == 2:
            self._content(text)
            return
        j = 0
        while j < len(text) and text[j].isspace():
            j += 1
        if j == len(text):  # whitespace only so far
            if self._ws == 0:
                held = self._wsbuf + text
                if len(held) > WS_CAP:
                    self._content(held[:-WS_CAP])
                    held = held[-WS_CAP:]
                self._wsbuf = held
            return
        if self._ws == 0:
            self._content(self._wsbuf + text)
        else:
            self._content(text[j:])
        self._wsbuf = ""
        self._ws = 2

    def _call_begins(self) -> None:
        if self._slots and self._ws == 0:
            self._wsbuf = ""
            self._ws = 1

    def _outside(self, buf: str, i: int, final: bool) -> int:
        """``pre``: until ``<function=`` or ``</tool_call>``; ``between``: until ``</tool_call>``,
        ``<tool_call>`` or ``<function=``. The text there is dropped."""
        pre = self._mode == "pre"
        markers = (FUNC, self.tool_end) if pre else (self.tool_end, self.tool_start, FUNC)
        pos, marker = find_first(buf, markers, i)
        if pos == -1:
            if not final:
                n = len(buf)
                keep = held_suffix_len(buf[max(i, n - max(map(len, markers))) :], markers)
                self._buf = buf[n - keep :]
            return -1
        i = pos + len(marker)
        if marker == self.tool_end:
            self._mode = "text"
        elif marker == FUNC:
            if not pre:
                self._call_begins()
            self._mode, self._fname = "name", ""
        else:
            self._call_begins()
            self._mode = "pre"
        return i

    def _name(self, buf: str, i: int, final: bool) -> int:
        """The function name: the text up to ``>``, where a marker holding a ``>`` (``<think>``…)
        is part of the name, and ``</function>`` ends the call (with no arguments)."""
        n = len(buf)
        while i < n:
            gt, lt = buf.find(">", i), buf.find("<", i)
            if gt != -1 and (lt == -1 or gt < lt):
                self._name_text(buf[i:gt])
                self._open()
                return gt + 1
            if lt == -1:
                self._name_text(buf[i:])
                return -1
            self._name_text(buf[i:lt])
            lit = next((m for m in self._lit if buf.startswith(m, lt)), None)
            if lit == FUNC_END:
                self._open()
                self._end_call()
                return lt + len(FUNC_END)
            if lit is not None:
                self._name_text(lit)
                i = lt + len(lit)
                continue
            if not final and any(m.startswith(buf[lt:]) for m in self._lit):
                self._buf = buf[lt:]
                return -1
            self._name_text("<")
            i = lt + 1
        return -1

    def _name_text(self, text: str) -> None:
        if text and len(self._fname) < NAME_CAP:
            self._fname = (self._fname + text)[:NAME_CAP]

    def _open(self) -> None:
        """The name is complete: report the call (unless it is empty or calls are not reported)."""
        name = self._fname.strip()
        self._mode, self._members, self._key = "args", False, ""
        if name and self._report:
            self.open_call(name)
            self._fname, self._sub = name, "g"
        else:
            self._fname, self._sub = "", "x"

    def _end_call(self) -> None:
        """``</function>`` (or the end of the output) ends the body."""
        sub, kind = self._sub, self._kind
        if sub == "v" and kind == "s":  # a string value still open keeps what streamed, closed
            self.add_args('"}')
        elif sub in ("g", "k") or (sub == "v" and kind == "h"):  # a typed value still open is dropped
            self.add_args("}" if self._members else "{}")
        self._mode, self._sub, self._kind, self._key, self._raw, self._js = "between", "g", "", "", "", None
        self._fname, self._nl, self._vstarted, self._members = "", False, False, False

    def _end_of_output(self) -> None:
        mode = self._mode
        if mode == "name":
            self._open()
            self._end_call()
        elif mode == "args":
            self._end_call()
        if self._ws == 0 and self._wsbuf:  # whitespace-only content, and no call made it markup
            self._content(self._wsbuf)
            self._wsbuf = ""

    # -- the function body -------------------------------------------------------------------
    def _args(self, buf: str, i: int, final: bool) -> int:
        n = len(buf)
        while i < n:
            sub = self._sub
            if sub == "k":
                i = self._key_text(buf, i, final)
                if i < 0 or self._mode != "args":  # (</function> inside the name ended the call)
                    return i
                continue
            lt = buf.find("<", i)
            if sub == "v":
                self._value_text(buf[i : n if lt == -1 else lt])
            if lt == -1:
                return -1
            kind, end = body_tag(buf, lt, final)
            if kind == TAG_PARTIAL:
                self._buf = buf[lt:]
                return -1
            if kind == TAG_FEND:
                self._end_call()
                return end
            if sub == "v" and kind in (TAG_OPEN, TAG_CLOSE):
                self._value_end()
            elif sub == "v":
                self._value_text("<")
                i = lt + 1
                continue
            if kind == TAG_OPEN and self._sub != "x":
                self._sub, self._key = "k", ""
                i = end
            else:
                i = lt + 1 if kind == TAG_NONE else end
        return -1

    def _key_text(self, buf: str, i: int, final: bool) -> int:
        """A parameter name: the text up to ``>`` (leading whitespace skipped)."""
        n = len(buf)
        if not self._key:
            while i < n and buf[i] in REGEX_WS:
                i += 1
        gt, lt = buf.find(">", i), buf.find("<", i)
        while lt != -1 and (gt == -1 or lt < gt):
            if buf.startswith(FUNC_END, lt):
                self._end_call()
                return lt + len(FUNC_END)
            if not final and FUNC_END.startswith(buf[lt:]):
                self._key_add(buf[i:lt])
                self._buf = buf[lt:]
                return -1
            lt = buf.find("<", lt + 1)
        if gt == -1:
            self._key_add(buf[i:])
            return -1
        self._key_add(buf[i:gt])
        self._value_begins()
        return gt + 1

    def _key_add(self, text: str) -> None:
        if text and len(self._key) < NAME_CAP:
            self._key = (self._key + text)[:NAME_CAP]


class SeedOssToolParser(Qwen3XmlToolParser):
    """``seed_oss``: the same grammar with ByteDance Seed-OSS's wrappers (``<seed:tool_call>``,
    ``</seed:think>``); ``<function=…>`` and ``<parameter=…>`` are the same bytes."""

    name = "seed_oss"
    supports_required_and_named = True  # (vLLM gives it no structural tag: forced JSON, as hermes)
    tool_start = "<seed:tool_call>"
    tool_end = "</seed:tool_call>"
    think_start = "<seed:think>"
    think_end = "</seed:think>"


class MiMoToolParser(Qwen3XmlToolParser):
    """``mimo``: Xiaomi MiMo's compact parameters, whose values are verbatim (no newline is markup)."""

    name = "mimo"
    trim_newlines = False
