"""``glm45`` / ``glm47``: GLM-4.5 / 4.6 / 4.7 / 5 tool calls,
``<tool_call>NAME<arg_key>k</arg_key><arg_value>v</arg_value>…</tool_call>``.

The full rules: docs/parsers.md (the family's section: its split, state and every difference from vLLM).
"""

from __future__ import annotations

from typing import Any, ClassVar

from ..base import ParserContext
from ..markers import find_first, held_suffix_len
from .json_stream import JsonValueStreamer, dumps, string_body, without_lone_surrogates
from .schema_values import always_string, coerce, json_capable, value_types
from .streaming import StreamingToolParser

START = "<tool_call>"
END = "</tool_call>"
KEY = "<arg_key>"
KEY_END = "</arg_key>"
VALUE = "<arg_value>"
VALUE_END = "</arg_value>"

# Bounds of what is held (the snapshot stays small whatever the output):
WS_HOLD = 256  # trailing content whitespace held back (a longer run is sent beyond it)
KEY_HOLD = 256  # a key longer than this drops its pair
NAME_HOLD = 256  # a name longer than this (and than every tool name) drops its call
VALUE_HOLD = 256  # a value the schema may convert, held until it closes or grows past this

# The whitespace vLLM's ``\s`` (``regex`` module) allows between ``</arg_key>`` and ``<arg_value>``:
# ``str.isspace`` but for the four information separators.
_RE_WS = frozenset(" \t\n\v\f\r\x85\xa0\u1680\u2000\u2001\u2002\u2003\u2004\u2005\u2006\u2007\u2008"
                   "\u2009\u200a\u2028\u2029\u202f\u205f\u3000")

_MARKERS: dict[str, tuple[str, ...]] = {
    "text": (START,), "drop": (START,), "name": (KEY, END), "skip": (END,),
    "seek": (KEY, END), "key": (KEY_END, END), "val": (VALUE_END, END),
}
_LONGEST = max(len(m) for m in (START, END, KEY, KEY_END, VALUE, VALUE_END))

def _trailing_ws(text: str) -> int:
    return len(text) - len(text.rstrip())


class GlmToolParser(StreamingToolParser):
    """Modes: ``text`` (content, no call accepted yet), ``drop`` (after an accepted call: text is
    dropped), ``name`` (reading a call's name), ``skip`` (inside a dropped call), and inside an
    accepted call ``seek`` (between pairs), ``key``, ``gap`` (between ``</arg_key>`` and
    ``<arg_value>``), ``val`` (a value; its kind ``s`` streamed string, ``h`` held, ``j`` streamed
    JSON)."""

    name: ClassVar[str] = "glm45"
    # The tags are special tokens in GLM's tokenizer.
    needs_special_tokens: ClassVar[bool] = True
    # vLLM reads GLM's own call format for ``required`` and named ``tool_choice`` too (its structural
    # tags constrain generation to that format), as for ``auto``.
    supports_required_and_named: ClassVar[bool] = False
    # vLLM 0.32 builds it from its engine grammar (vllm/parser/glm47_moe.py): with tool_choice
    # "none" it still reads the output; this parser then reports no call (see ``_none``).
    engine_based: ClassVar[bool] = True

    def __init__(self, ctx: ParserContext) -> None:
        super().__init__(ctx)
        self._ws = ""  # trailing content whitespace not sent yet
        self._acc = False  # a call was accepted: content is over
        self._seen = False  # a <tool_call> was read (vLLM: a tool slot exists)
        self._sent = False  # content other than whitespace was sent
        self._fn = ""  # the name read so far (name mode), the accepted call's name (in a call)
        self._key = ""  # the pair's key (key / gap / val)
        self._gap = ""  # whitespace after </arg_key>
        self._kind = ""  # the value's kind: "s", "h", "j"
        self._val = ""  # a held value
        self._js: JsonValueStreamer | None = None
        self._first = True  # no pair sent yet in this call
        self._tools: dict[str, Any] | None = None  # name -> properties (from ctx, not state)
        # tool_choice "none" (vLLM still runs this grammar then, and drops the calls): with tools,
        # every call is dropped and the text around them is content; without, calls are read as
        # usual (accepted whatever their name) but not reported.
        choice = ctx.tool_choice
        self._none = choice == "none" or (choice is None and not ctx.tools)

    # -- state -------------------------------------------------------------------------------
    def _save(self) -> dict[str, Any]:
        return {"w": self._ws, "a": self._acc, "c": self._seen, "s": self._sent, "f": self._fn, "k": self._key, "g": self._gap,
                "t": self._kind, "v": self._val, "j": None if self._js is None else self._js.to_state(),
                "1": self._first}

    def _load(self, state: dict[str, Any]) -> None:
        if self._mode not in ("text", "drop", "name", "skip", "seek", "key", "gap", "val"):
            raise ValueError(self._mode)
        self._ws, self._fn, self._key = str(state["w"]), str(state["f"]), str(state["k"])
        self._gap, self._kind, self._val = str(state["g"]), str(state["t"]), str(state["v"])
        self._acc, self._first = bool(state["a"]), bool(state["1"])
        self._seen, self._sent = bool(state["c"]), bool(state["s"])
        if self._kind not in ("", "s", "h", "j"):
            raise ValueError(self._kind)
        js = state["j"]
        self._js = None if js is None else JsonValueStreamer.from_state(list(js))

    # -- the derenderer's shortcut -----------------------------------------------------------
    def plain_args_call(self) -> int | None:
        # Inside a value that streams as a string, or inside a string of a value that streams as
        # JSON, nothing held: a plain text without "<" (every marker's start) is sent as it is.
        if self._buf or self._mode != "val":
            return None
        kind = self._kind
        if kind != "s" and not (kind == "j" and self._js is not None and self._js.in_plain_string
                                and not (self._js.done or self._js.failed)):
            return None
        index = self._calls - 1  # (tool_choice "none" opens no call: -1)
        return index if index >= 0 and self._kept(index) and not self._none else None

    def plain_args_guard(self) -> str:
        return "<"

    # -- the request's tools -----------------------------------------------------------------
    def _tool_map(self) -> dict[str, Any]:
        if self._tools is None:
            tools: dict[str, Any] = {}
            for tool in self.ctx.tools:
                fn = tool.get("function") if isinstance(tool, dict) else None
                if isinstance(fn, dict) and isinstance(fn.get("name"), str) and fn["name"] not in tools:
                    params = fn.get("parameters")
                    props = params.get("properties", {}) if isinstance(params, dict) else {}
                    tools[fn["name"]] = props if isinstance(props, dict) else {}
            self._tools = tools
        return self._tools

    def _name_cap(self) -> int:
        tools = self._tool_map()
        return max(map(len, tools)) if tools else NAME_HOLD

    def _accepts(self, name: str) -> bool:
        """vLLM's ``validate_tool_names``: a non-empty name that is one of the request's tools
        (any name when the request has none)."""
        tools = self._tool_map()
        if self._none and tools:
            return False
        return bool(name) and (name in tools if tools else True)

    def _value_types(self, key: str) -> frozenset[str] | None:
        """The normalized types the schema allows for ``key`` of the current call; None when its
        value can only stay a string (no schema, no property, or only ``string``)."""
        types = value_types(self._tool_map().get(self._fn) or {}, key)
        return None if always_string(types) else types

    # -- output helpers ----------------------------------------------------------------------
    def _text(self, text: str) -> None:
        """Content before any accepted call: sent, but for its trailing whitespace."""
        if not text:
            return
        k = _trailing_ws(text)
        if k == len(text):
            ws = self._ws + text
        else:
            self._content(self._ws + text[: len(text) - k])
            self._sent = True
            ws = text[len(text) - k :]
        if len(ws) > WS_HOLD:
            self._content(ws[: len(ws) - WS_HOLD])
            ws = ws[len(ws) - WS_HOLD :]
        self._ws = ws

    def _pair_head(self) -> str:
        head = ("" if self._first else ", ") + dumps(self._key) + ": "
        self._first = False
        return head

    def _end_name(self) -> bool:
        """The name is complete: accept the call (announce it, open its arguments) or drop it."""
        name = self._fn.strip()
        if not self._accepts(name):
            self._fn = ""
            return False
        name = without_lone_surrogates(name)
        self._fn, self._acc, self._ws, self._first = name, True, "", True
        if not self._none:  # (unreported: no call is open, so add_args sends nothing either)
            self.open_call(name)
        self.add_args("{")
        return True

    def _start_value(self) -> None:
        self._key = self._key.strip()
        self._gap, self._val, self._js = "", "", None
        if self._value_types(self._key) is None:
            self._kind = "s"
            self.add_args(self._pair_head() + '"')
        else:
            self._kind = "h"

    def _value_text(self, text: str) -> None:
        if not text:
            return
        kind = self._kind
        if kind == "s":
            self.add_args(string_body(text))
        elif kind == "h":
            self._val += text
            if len(self._val) > VALUE_HOLD:
                self._release_value()
        elif self._js is not None and not (self._js.done or self._js.failed):
            out: list[str] = []
            self._js.feed(text, 0, out)
            self.add_args("".join(out))

    def _release_value(self) -> None:
        """A held value grew past VALUE_HOLD: stream it from here on, as JSON if it starts as
        JSON where the schema takes it as JSON, else as a string."""
        types = self._value_types(self._key)
        held, self._val = self._val, ""
        first = held.lstrip()[:1]
        if first in ("{", "[") and json_capable(types):
            self._kind, self._js = "j", JsonValueStreamer()
            self.add_args(self._pair_head())
            self._value_text(held)
        else:
            self._kind = "s"
            self.add_args(self._pair_head() + '"' + string_body(held))

    def _end_value(self, closed: bool) -> None:
        """The value ends: at its ``</arg_value>`` (``closed``), or cut off by the call's end."""
        kind = self._kind
        if kind == "s":
            self.add_args('"')
        elif kind == "h":
            if closed:  # (an unclosed held value is dropped, as vLLM drops the pair)
                self.add_args(self._pair_head() + dumps(coerce(self._val, self._value_types(self._key))))
        elif self._js is not None:
            out: list[str] = []
            self._js.end(out)
            self.add_args("".join(out))
        self._kind, self._val, self._js, self._key = "", "", None, ""

    def _end_call(self) -> None:
        mode = self._mode
        if mode == "name":
            if self._end_name():
                self.add_args("}")
        elif mode != "skip":
            if mode == "val":
                self._end_value(closed=False)
            self.add_args("}")
        self._fn = self._key = self._gap = ""
        self._mode = "drop" if self._acc else "text"

    # -- the state machine -------------------------------------------------------------------
    def _process(self, text: str, final: bool) -> None:
        if not final and not self._buf and "<" not in text and self._mode in ("text", "drop", "val", "skip", "seek"):
            self._mode_text(text)  # every marker starts with "<": none here
            return
        buf, self._buf = self._buf + text, ""
        i, n = 0, len(buf)
        while i < n or final:
            mode = self._mode
            if mode == "gap":
                while i < n and buf[i] in _RE_WS:
                    i += 1
                    if len(self._gap) <= KEY_HOLD:
                        self._gap += buf[i - 1]
                if i >= n:
                    if final:
                        self._finish_modes()
                    return
                if buf.startswith(VALUE, i):
                    i += len(VALUE)
                    self._mode = "val"
                    self._start_value()
                    continue
                if buf.startswith(END, i):
                    i += len(END)
                    self._end_call()
                    continue
                rest = buf[i:]
                if not final and (VALUE.startswith(rest) or END.startswith(rest)):
                    self._buf = rest
                    return
                # not <arg_value>: the key goes on past this </arg_key> (vLLM's lazy regex)
                self._key += KEY_END + self._gap
                self._gap, self._mode = "", "key"
                if len(self._key) > KEY_HOLD:
                    self._key, self._mode = "", "seek"
                continue
            markers = _MARKERS[mode]
            pos, marker = (-1, "") if buf.find("<", i) == -1 else find_first(buf, markers, i)
            if pos == -1:
                end = n if final else n - held_suffix_len(buf[max(i, n - _LONGEST):], markers)
                self._mode_text(buf[i:end])
                self._buf = buf[end:]
                if final:
                    self._finish_modes()
                return
            self._mode_text(buf[i:pos])
            if self._mode != mode:  # the text dropped the call or the pair: look again from the marker
                i = pos
                continue
            i = pos + len(marker)
            self._marker(marker)

    def _mode_text(self, text: str) -> None:
        if not text:
            return
        mode = self._mode
        if mode == "text":
            self._text(text)
        elif mode == "name":
            name = (self._fn + text).lstrip()
            k = _trailing_ws(name)
            if k > 32:  # a long whitespace run: keep its start (no tool name has such a run)
                name = name[: len(name) - k + 32]
            self._fn = name
            if len(name.rstrip()) > self._name_cap():  # longer than every tool name
                self._fn, self._mode = "", "skip"
        elif mode == "key":
            self._key += text
            if len(self._key) > KEY_HOLD:
                self._key, self._mode = "", "seek"
        elif mode == "val":
            self._value_text(text)
        # drop, skip, seek: ignored

    def _marker(self, marker: str) -> None:
        mode = self._mode
        if marker == END:  # ends the call in every mode that looks for it
            self._end_call()
        elif marker == START:  # text / drop
            self._mode, self._fn = "name", ""
            # (vLLM's tool_choice "none" with tools suppresses the calls before they make a slot)
            self._seen = self._seen or not (self._none and self._tool_map())
        elif marker == KEY:
            if mode == "name" and not self._end_name():
                self._mode = "skip"
                return
            self._mode, self._key, self._gap = "key", "", ""
        elif marker == KEY_END:
            self._mode, self._gap = "gap", ""
        elif marker == VALUE_END:
            self._end_value(closed=True)
            self._mode = "seek"

    def _finish_modes(self) -> None:
        """The output ended: an unclosed call counts. Held whitespace is content if no call was
        accepted, unless the content is only whitespace and a call was read (vLLM drops
        whitespace-only content once a tool slot exists, accepted or not)."""
        if self._mode not in ("text", "drop"):
            self._end_call()
        if self._ws and not self._acc and (self._sent or not self._seen):
            self._content(self._ws)
        self._ws = ""
