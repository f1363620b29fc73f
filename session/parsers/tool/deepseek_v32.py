"""``deepseek_v32``: DeepSeek-V3.2's DSML tool calls, split as vLLM 0.32's engine grammar does::

    <｜DSML｜function_calls>
    <｜DSML｜invoke name="get_weather">
    <｜DSML｜parameter name="city" string="true">Paris</｜DSML｜parameter>
    <｜DSML｜parameter name="days" string="false">3</｜DSML｜parameter>
    </｜DSML｜invoke>
    </｜DSML｜function_calls>

Content is the text before the first wrapper or invoke; a call's arguments are
``json.dumps({name: value, …})`` with ``string="true"`` values kept as text, others read as JSON,
each fitted to the tool's schema (``schema_values``). Arguments stream: a key once its tag is
read, a string value as it comes, other values when they end. The rules and the deliberate
differences from vLLM: docs/parsers.md, "deepseek_v32".
"""

from __future__ import annotations

from typing import Any

from ..base import ParserContext
from ..markers import find_first, held_suffix_len
from .deepseek_v32_tags import WS_CAP, param_head, param_lookahead
from .deepseek_v32_values import HOLD, DeepSeekV32Values
from .json_stream import JsonValueStreamer, dumps, string_body

__all__ = ["CALLS_END", "CALLS_START", "DSML", "HEAD_CAP", "HOLD", "INVOKE", "INVOKE_END", "LEAD_CAP", "NAME_CAP",
           "NAME_END", "PARAM", "PARAM_END", "DeepSeekV32ToolParser"]

DSML = "｜DSML｜"
CALLS_START = f"<{DSML}function_calls>"
CALLS_END = f"</{DSML}function_calls>"
INVOKE = f'<{DSML}invoke name="'
NAME_END = '">'
INVOKE_END = f"</{DSML}invoke>"
PARAM = f"<{DSML}parameter"
PARAM_END = f"</{DSML}parameter>"
# Every literal vLLM's lexer knows (its leftmost-longest match decides where a name ends).
_LITERALS = (CALLS_START, CALLS_END, INVOKE, NAME_END, INVOKE_END, PARAM, PARAM_END)
_CALL_ENDS = (INVOKE_END, CALLS_END)
_GAP_MARKERS = (PARAM, INVOKE_END, CALLS_END)
_VALUE_MARKERS = (PARAM_END, PARAM, INVOKE_END, CALLS_END)
# Bounds on what is held (the snapshot stays small whatever the output): a function name, a
# parameter tag, leading whitespace content (the whitespace of a lookahead: WS_CAP,
# deepseek_v32_tags.py; a non-string value still being decided: HOLD, deepseek_v32_values.py).
NAME_CAP = 160
HEAD_CAP = 200
LEAD_CAP = 64


def _safe_end(buf: str, i: int, markers: tuple[str, ...]) -> int:
    longest = max(len(m) for m in markers)
    return len(buf) - held_suffix_len(buf[max(i, len(buf) - longest):], markers)


class DeepSeekV32ToolParser(DeepSeekV32Values):
    """Modes: ``text`` (content), ``between`` (after ``<｜DSML｜function_calls>`` or a call: text
    dropped until an invoke), ``name`` (the function name up to ``">``), ``args`` (inside an
    invoke; its sub-mode: ``g`` between parameters, ``h`` a parameter tag, ``v`` a value, ``k`` a dropped
    call)."""

    name = "deepseek_v32"
    needs_special_tokens = False
    engine_based = True  # vLLM 0.32 builds it from its engine grammar (vllm/parser/deepseek_v32.py)
    # vLLM reads "required" / named tool_choice output in DSML too (a structural tag constrains it)
    supports_required_and_named = False

    def __init__(self, ctx: ParserContext) -> None:
        super().__init__(ctx)
        self._lead = ""  # leading whitespace-only content, held until it is known to be content
        self._spoke = False  # non-whitespace content was emitted
        self._fn = ""  # the function name (read so far in mode "name")
        self._sub = "g"
        self._members = False  # a member was emitted in this call's arguments object
        self._pkey = ""  # the parameter being read
        self._pstr: str | None = None  # its string="…" attribute
        self._vmode = ""  # "S" string, "H" held, "J" JSON, "W" wrapper (held)
        self._raw = ""  # a held value's text
        self._json: JsonValueStreamer | None = None
        self._wrap: list[Any] | None = None  # a complete wrapper parameter: [key, string, raw]

    # -- state -------------------------------------------------------------------------------
    def _save(self) -> dict[str, Any]:
        return {"l": self._lead, "c": self._spoke, "f": self._fn, "s": self._sub, "e": self._members,
                "k": self._pkey, "t": self._pstr, "v": self._vmode, "r": self._raw,
                "j": None if self._json is None else self._json.to_state(), "x": self._wrap}

    def _load(self, state: dict[str, Any]) -> None:
        self._lead, self._spoke, self._fn = str(state["l"]), bool(state["c"]), str(state["f"])
        self._sub, self._members, self._pkey = str(state["s"]), bool(state["e"]), str(state["k"])
        self._pstr = None if state["t"] is None else str(state["t"])
        self._vmode, self._raw = str(state["v"]), str(state["r"])
        self._json = None if state["j"] is None else JsonValueStreamer.from_state(list(state["j"]))
        wrap = state["x"]
        self._wrap = None if wrap is None else [str(wrap[0]), None if wrap[1] is None else str(wrap[1]), str(wrap[2])]
        if self._mode not in ("text", "between", "name", "args") or self._sub not in ("g", "h", "v", "k"):
            raise ValueError(self._mode)

    def plain_content_guard(self) -> str | None:
        if self._mode == "text" and not self._buf and self._spoke:
            return "<"
        return None

    def plain_args_call(self) -> int | None:
        # Inside a string value with nothing held (a ``string="true"`` one, or a string inside a
        # streamed JSON value): every tag that can end it starts with "<", so a plain text without
        # "<" is exactly the value's next JSON text and changes no state.
        if self._buf or self._mode != "args" or self._sub != "v":
            return None
        if self._vmode != "S":
            js = self._json
            if self._vmode != "J" or js is None or not js.in_plain_string or js.failed:
                return None
        index = self._calls - 1
        return index if self._kept(index) else None

    def plain_args_guard(self) -> str:
        return "<"


    # -- content -------------------------------------------------------------------------------
    def _text(self, text: str) -> None:
        if not text:
            return
        if self._spoke:
            self._content(text)
            return
        text = self._lead + text
        if text.strip() or len(text) > LEAD_CAP:
            self._lead, self._spoke = "", True
            self._content(text)
        else:
            self._lead = text

    # -- the state machine ---------------------------------------------------------------------
    def _process(self, text: str, final: bool) -> None:
        if (self._mode == "args" and self._sub == "v" and self._vmode == "S" and not self._buf and text
                and "<" not in text):
            self.add_args(string_body(text))  # inside a string value, no tag can start here
            return
        buf, self._buf = self._buf + text, ""
        i, n = 0, len(buf)
        while True:
            mode = self._mode
            if mode in ("text", "between"):
                markers = (INVOKE, CALLS_START) if mode == "text" else (INVOKE,)
                pos, marker = find_first(buf, markers, i)
                end = pos if pos != -1 else n if final else _safe_end(buf, i, markers)
                if mode == "text":
                    self._text(buf[i:end])
                if pos == -1:
                    self._buf = buf[end:]
                    if final:
                        self._buf = ""
                        self._end_of_output()
                    return
                i = pos + len(marker)
                if marker == INVOKE:
                    self._lead = ""  # a call follows: whitespace-only content is dropped
                    self._mode, self._fn = "name", ""
                else:
                    self._mode = "between"
            elif mode == "name":
                i = self._read_name(buf, i, final)
                if i < 0:
                    return
            else:
                i = self._read_args(buf, i, final)
                if i < 0:
                    return

    def _end_of_output(self) -> None:
        if self._lead:
            self._content(self._lead)
            self._lead = ""

    def _read_name(self, buf: str, i: int, final: bool) -> int:
        """Up to ``">`` as vLLM's lexer finds it. Returns where to go on, or -1 (all used)."""
        n = len(buf)
        while True:
            pos, marker = find_first(buf, _LITERALS, i)
            if pos == -1:
                end = n if final else _safe_end(buf, i, _LITERALS)
                self._fn += buf[i:end]
                self._buf = buf[end:]
                if len(self._fn) > NAME_CAP:
                    self._fn, self._buf, self._mode, self._sub = "", "", "args", "k"
                    return end
                if final:
                    self._buf = ""
                    name = self._fn.strip()
                    if name:  # cut inside the name: vLLM still makes the call, with no arguments
                        self.open_call(name)
                        self.add_args("{}")
                    self._mode, self._fn = "between", ""
                    self._end_of_output()
                return -1
            if marker != NAME_END:
                self._fn += buf[i : pos + len(marker)]
                i = pos + len(marker)
                if len(self._fn) > NAME_CAP:
                    self._fn, self._mode, self._sub = "", "args", "k"
                    return i
                continue
            self._fn += buf[i:pos]
            name = self._fn.strip()
            self._mode, self._members, self._wrap = "args", False, None
            if name and len(self._fn) <= NAME_CAP:
                self._sub = "g"
                self.open_call(name)
                self.add_args("{")
            else:
                self._sub = "k"
            return pos + len(marker)

    def _read_args(self, buf: str, i: int, final: bool) -> int:
        n = len(buf)
        while True:
            sub = self._sub
            if sub in ("g", "k"):
                markers = _CALL_ENDS if sub == "k" else _GAP_MARKERS
                pos, marker = find_first(buf, markers, i)
                if pos == -1:
                    if final:
                        self._end_call()
                        self._end_of_output()
                        return -1
                    self._buf = buf[_safe_end(buf, i, markers):]
                    return -1
                i = pos + len(marker)
                if marker == PARAM:
                    self._sub = "h"
                    continue
                self._end_call()
                return i
            if sub == "h":
                i = self._read_head(buf, i, final)
                if i < 0:
                    return -1
                continue
            # sub == "v": a value, up to its end tag, the next parameter, or the end of the call
            pos, marker = find_first(buf, _VALUE_MARKERS, i)
            while marker == PARAM:
                ahead = param_lookahead(buf[pos + len(PARAM) : pos + len(PARAM) + WS_CAP + 6])
                if ahead is None and not final:
                    self._value_text(buf[i:pos])
                    self._buf = buf[pos:]
                    return -1
                if ahead:
                    break
                p2, m2 = find_first(buf, _VALUE_MARKERS, pos + 1)
                pos, marker = p2, m2
            if pos == -1:
                end = n if final else _safe_end(buf, i, _VALUE_MARKERS)
                self._value_text(buf[i:end])
                if final:
                    self._end_value()
                    self._end_call()
                    self._end_of_output()
                    return -1
                self._buf = buf[end:]
                return -1
            self._value_text(buf[i:pos])
            self._end_value()
            if marker == PARAM:
                self._sub = "h"
                i = pos + len(PARAM)
            elif marker == PARAM_END:
                self._sub = "g"
                i = pos + len(PARAM_END)
            else:
                self._end_call()
                return pos + len(marker)

    def _read_head(self, buf: str, i: int, final: bool) -> int:
        """A parameter tag (``buf[i:]`` follows its ``<｜DSML｜parameter``). Returns where to go
        on, or -1 when all is used. A tag that cannot match is not a parameter: the text after its
        marker is read again between parameters (vLLM's pattern search goes on from there)."""
        pos, _ = find_first(buf, _CALL_ENDS, i)
        seg = buf[i : pos if pos != -1 else len(buf)]
        got = param_head(seg[: HEAD_CAP + 1])
        if got is None and (len(seg) > HEAD_CAP or pos != -1 or final):
            got = False  # too long, or the call ends inside the tag
        if got is None:
            self._buf = seg
            return -1
        if got is False or got is True:
            self._sub = "g"
            return i
        key, flag, end = got
        self._begin_value(key, flag)
        self._sub = "v"
        return i + end

    def _end_call(self) -> None:
        if self._sub == "k":
            self._mode, self._sub, self._fn = "between", "g", ""
            return
        if self._sub == "v":
            self._end_value()
        tail = "}"
        if self._wrap is not None:
            wkey, wflag, wraw = self._wrap
            self._wrap = None
            inner = self._unwrapped(wkey, wflag, wraw)
            if inner is not None:
                tail = inner[1:]
            else:
                self._member(wkey)
                self.add_args(dumps(self._final(wkey, wflag, wraw)))
        self.add_args(tail)
        self._mode, self._sub, self._fn, self._members = "between", "g", "", False
