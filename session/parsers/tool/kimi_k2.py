"""``kimi_k2``: Kimi-K2 (Instruct, Thinking, K2.5) tool calls.

The full rules: docs/parsers.md (the family's section: its split, state and every difference from vLLM).
"""

from __future__ import annotations

import re
from typing import Any

from ..base import ParserContext
from ..markers import find_first, held_suffix_len
from .streaming import StreamingToolParser

SECTION_BEGIN = "<|tool_calls_section_begin|>"
SECTION_END = "<|tool_calls_section_end|>"
CALL_BEGIN = "<|tool_call_begin|>"
ARG_BEGIN = "<|tool_call_argument_begin|>"
CALL_END = "<|tool_call_end|>"
_ARGS_ENDS = (CALL_END, SECTION_END)

HEAD_MAX = 256  # a longer call header is not an id a model writes: the call is dropped
WS_MAX = 256  # whitespace held back (leading content, trailing arguments, trailing reasoning) at most

_CALL_ID = re.compile(r"(?P<id>.+:\d+)")


def call_id_and_name(header: str) -> tuple[str, str] | None:
    """vLLM's reading of a call header: ``(id, name)``, or None when it is not an id."""
    m = _CALL_ID.match(header.strip())
    if m is None:
        return None
    call_id = m.group("id").strip()
    name = call_id.split(":")[0].removeprefix("functions.").strip()
    return (call_id, name) if name else None


def hold_short_trailing_space(held: str, text: str) -> tuple[str, str]:
    """``(to send, to hold)``: ``held + text`` with its trailing whitespace held back until more
    follows; a run longer than ``WS_MAX`` is sent, not held (the arguments' and, in
    ``reasoning.kimi_k2``, the reasoning's trailing whitespace)."""
    text = held + text
    body = text.rstrip()
    if len(text) - len(body) <= WS_MAX:
        return body, text[len(body):]
    return text, ""


class KimiK2ToolParser(StreamingToolParser):
    """Modes: ``text`` (content, before the section), ``section`` (between calls: dropping text
    until ``<|tool_call_begin|>``), ``head`` (the call header), ``drop`` (a header too long:
    dropped up to its arguments), ``args`` (a call's arguments), ``skip`` (the arguments of a
    header that is not an id: dropped)."""

    name = "kimi_k2"
    needs_special_tokens = True
    call_id_style = "kimi"
    engine_based = True  # vLLM 0.32 builds it from its engine grammar (vllm/parser/kimi_k2.py)
    # vLLM reads "required" / named tool_choice in Kimi's own format (structural tag "kimi")
    supports_required_and_named = False
    plain_args_hold_space = True  # (the arguments' trailing whitespace is held: stripped at their end)

    def __init__(self, ctx: ParserContext) -> None:
        super().__init__(ctx)
        self._head = ""  # head: the header so far; skip: the header (for the empty-arguments call)
        self._ws = ""  # whitespace held: leading content (text), trailing arguments (args)
        self._lead = True  # text: no content but whitespace yet
        self._any = False  # args: arguments emitted; skip: an argument character seen
        self._made = 0  # ids this parser made (calls named by a whole header): vLLM counts them from 0
        # tool_choice "none" (the derenderer drops the calls): vLLM makes no call slots then, so
        # whitespace-only content before a call stays
        self._keep_ws = ctx.tool_choice == "none" or (ctx.tool_choice is None and not ctx.tools)

    def _save(self) -> dict[str, Any]:
        return {"h": self._head, "w": self._ws, "l": self._lead, "a": self._any, "k": self._made}

    def _load(self, state: dict[str, Any]) -> None:
        self._head, self._ws = str(state["h"]), str(state["w"])
        self._lead, self._any, self._made = bool(state["l"]), bool(state["a"]), int(state["k"])
        if self._mode not in ("text", "section", "head", "drop", "args", "skip"):
            raise ValueError(self._mode)

    def plain_content_guard(self) -> str | None:
        # Every marker starts with "<"; while only whitespace came, a text is not simply content.
        if self._mode != "text" or self._buf or self._lead:
            return None
        return "<"

    def plain_args_call(self) -> int | None:
        # Inside the arguments past their first character, no whitespace held, nothing held: a
        # text without "<" (every marker's start) that does not end in whitespace is sent as it is.
        if self._mode != "args" or self._buf or self._ws or not self._any:
            return None
        index = self._calls - 1
        return index if self._kept(index) else None

    def plain_args_guard(self) -> str:
        return "<"

    # -- output helpers ------------------------------------------------------------------------
    def _text(self, text: str) -> None:
        if not text:
            return
        if self._lead:
            text, self._ws = self._ws + text, ""
            if text.isspace() and len(text) <= WS_MAX:
                self._ws = text  # held: dropped if a call follows
                return
            self._lead = False
        self._content(text)

    def _args(self, text: str) -> None:
        if not self._any:
            text = text.lstrip()
        if not text:
            return
        body, self._ws = hold_short_trailing_space(self._ws, text)
        if body:
            self._any = True
            self.add_args(body)

    def _end_args(self) -> None:
        if not self._any:
            self.add_args("{}")
        self._ws, self._any, self._mode = "", False, "section"

    def _end_skip(self) -> None:
        name = self._head.strip()
        if not self._any and name:  # an empty-arguments call: vLLM names it by its whole header
            self._fallback_call(name)
        self._head, self._any, self._mode = "", False, "section"

    def _fallback_call(self, name: str) -> None:
        """A call named by its whole header, with ``{}``: vLLM makes its id, Kimi's way
        (``functions.NAME:K``, K counting the ids it made for this output)."""
        self.open_call(name, f"functions.{name}:{self._made}")
        self._made += 1
        self.add_args("{}")

    def _end_head(self, header: str) -> None:
        """The header is complete (its arguments start next)."""
        parsed = call_id_and_name(header) if len(header) <= HEAD_MAX else None
        if parsed is not None:
            call_id, name = parsed
            self.open_call(name, call_id)
            self._head, self._mode = "", "args"
        else:
            self._head = header if len(header) <= HEAD_MAX else ""
            self._mode = "skip"
        self._any = False

    # -- the state machine ---------------------------------------------------------------------
    def _process(self, text: str, final: bool) -> None:
        if self._mode == "text" and not self._buf and not self._lead and "<" not in text:
            self._content(text)  # no marker can start here: plain content
            return
        buf, self._buf = self._buf + text, ""
        i, n = 0, len(buf)
        while True:
            mode = self._mode
            if mode == "head":
                head = self._head + buf[i:]
                pos = head.find(ARG_BEGIN)
                if pos != -1:
                    self._end_head(head[:pos])
                    buf, i, n = head, pos + len(ARG_BEGIN), len(head)
                    continue
                if final:
                    self._head = head
                    self._final_head()
                elif len(head) > HEAD_MAX + len(ARG_BEGIN):  # not an id a model writes
                    self._head, self._mode = "", "drop"
                    self._buf = head[len(head) - held_suffix_len(head[-len(ARG_BEGIN):], (ARG_BEGIN,)):]
                else:
                    self._head = head
                return
            if mode in ("args", "skip"):
                pos, marker = find_first(buf, _ARGS_ENDS, i)
                end = pos if pos != -1 else n if final else _safe_end(buf, i, _ARGS_ENDS)
                piece = buf[i:end]
                if mode == "args":
                    self._args(piece)
                elif piece:
                    self._any = True
                if pos == -1 and not final:
                    self._buf = buf[end:]
                    return
                if mode == "args":
                    self._end_args()
                else:
                    self._end_skip()
                if pos == -1:
                    return
                i = pos + len(marker)
                continue
            # text, section, drop: look for one marker
            marker = SECTION_BEGIN if mode == "text" else CALL_BEGIN if mode == "section" else ARG_BEGIN
            pos = buf.find(marker, i)
            end = pos if pos != -1 else n if final else _safe_end(buf, i, (marker,))
            if mode == "text":
                self._text(buf[i:end])
            if pos == -1:
                self._buf = buf[end:]
                if final and self._ws and mode != "drop":
                    self._lead = False  # no call came: the whitespace is content after all
                    self._content(self._ws)
                    self._ws = ""
                return
            i = pos + len(marker)
            if mode == "text":
                self._mode = "section"
            elif mode == "section":
                if self._lead:  # whitespace-only content before a call is dropped
                    if self._keep_ws:
                        self._content(self._ws)
                    self._ws, self._lead = "", False
                self._mode, self._head = "head", ""
            else:
                self._mode, self._head, self._any = "skip", "", False

    def _final_head(self) -> None:
        """The output ended inside a header: vLLM still makes that call, with ``{}``."""
        header = self._head
        parsed = call_id_and_name(header) if len(header) <= HEAD_MAX else None
        if parsed is not None:
            self.open_call(parsed[1], parsed[0])
            self.add_args("{}")
        elif header.strip() and len(header) <= HEAD_MAX:
            self._fallback_call(header.strip())
        self._head, self._mode = "", "section"


def _safe_end(buf: str, i: int, markers: tuple[str, ...]) -> int:
    """End of what in ``buf[i:]`` cannot be the start of one of ``markers``."""
    longest = max(len(m) for m in markers)
    return len(buf) - held_suffix_len(buf[max(i, len(buf) - longest):], markers)
