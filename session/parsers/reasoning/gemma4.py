"""``gemma4``: Gemma 4's thinking channel, ``<|channel>thought\\n…<channel|>``.

The full rules: docs/parsers.md (the family's section: its split, state and every difference from vLLM).
"""

from __future__ import annotations

from typing import Any, ClassVar

from ..base import ParsedDelta, ParserContext
from ..markers import find_first, held_suffix_len
from ..tool.gemma4 import CHANNEL_END, CHANNEL_START, DROPPED, TOOL_END, TOOL_START
from .shared import ModalReasoningParser

THOUGHT = "thought"
_PREFIX = THOUGHT + "\n"
_DROPPED = frozenset(DROPPED)
_MARKERS = (CHANNEL_START, CHANNEL_END, TOOL_START, TOOL_END, *DROPPED)
_HOLD = max(map(len, _MARKERS))


def _rstrip_at(text: str) -> int:
    h = len(text)
    while h > 0 and text[h - 1].isspace():
        h -= 1
    return h


def _start(text: str, final: bool) -> bool | None:
    """Whether an output that starts with ``text`` starts in reasoning; None: not known yet.

    vLLM decides it on the first text it reads: ``thought\\n``, exactly ``thought``, or a
    ``<channel|>`` with no ``<|channel>`` (here: right after a prefix of ``thought``)."""
    if text.startswith(_PREFIX):
        return True
    k = 0
    while k < len(text) and k < len(THOUGHT) and text[k] == THOUGHT[k]:
        k += 1
    rest = text[k:]
    if not rest:
        return (text == THOUGHT) if final else None
    if k and rest.startswith(CHANNEL_END):
        return True
    if k and CHANNEL_END.startswith(rest):
        return False if final else None
    return False


class Gemma4ReasoningParser(ModalReasoningParser):
    """Modes: ``start`` (the first characters may still say the output starts in reasoning),
    ``reasoning``, ``content``."""

    name = "gemma4"
    needs_special_tokens = True
    engine_based = True  # vLLM 0.32 builds it from its engine grammar (vllm/parser/gemma4.py)
    modes: ClassVar[tuple[str, ...]] = ("start", "reasoning", "content")

    def __init__(self, ctx: ParserContext) -> None:
        super().__init__(ctx)
        self._mode = "start"
        self._buf = ""  # text not decided yet: the output's start, or a partial marker
        self._head: str | None = ""  # the reasoning while it may still be (a prefix of) "thought\n"
        self._ws = ""  # the reasoning's trailing whitespace, held until more reasoning follows
        self._span = False  # inside a tool call (its <tool_call|> is content)

    # -- state -------------------------------------------------------------------------------
    def _save(self) -> dict[str, Any]:
        return {"h": self._head, "w": self._ws, "t": self._span}

    def _load(self, state: dict[str, Any]) -> None:
        head = state["h"]
        if not (head is None or isinstance(head, str)):
            raise ValueError(head)
        self._head, self._ws, self._span = head, str(state["w"]), bool(state["t"])

    plain_reasoning_hold_space = True  # (the reasoning's trailing whitespace is held: dropped at its end)

    def plain_reasoning_guard(self) -> str | None:
        # Inside the reasoning past its "thought\n", nothing held: every marker starts with "<".
        return "<" if self._mode == "reasoning" and not self._buf and self._head is None and not self._ws else None

    def plain_content_guard(self) -> str | None:
        # After the reasoning every marker still read starts with "<"; other text is content as it is.
        return "<" if self._mode == "content" and not self._buf else None

    # -- splitting ---------------------------------------------------------------------------
    def _process(self, text: str, final: bool) -> ParsedDelta:
        out = ParsedDelta()
        if text or final:
            self._split(text, final, out)
        if final:  # what is still held of the reasoning's start, and its trailing whitespace
            head, self._head = self._head, None
            if head is not None:
                head = head[: _rstrip_at(head)]
                if head != THOUGHT:
                    out.reasoning += head
            self._ws = ""
        return out

    def _split(self, text: str, final: bool, out: ParsedDelta) -> None:
        buf, self._buf = self._buf + text, ""
        if self._mode == "start":
            decided = _start(buf, final)
            if decided is None:
                self._buf = buf
                return
            self._mode = "reasoning" if decided else "content"
        i, n = 0, len(buf)
        while True:
            lt = buf.find("<", i)  # every marker starts with "<"
            pos, marker = find_first(buf, _MARKERS, lt) if lt != -1 else (-1, "")
            if pos == -1:
                held = 0 if final or lt == -1 else held_suffix_len(buf[max(lt, n - _HOLD) :], _MARKERS)
                end = n - held
                self._text(buf[i:end], out)
                self._buf = buf[end:]
                return
            self._text(buf[i:pos], out)
            i = pos + len(marker)
            self._marker(marker, out)

    def _text(self, text: str, out: ParsedDelta) -> None:
        if not text:
            return
        if self._mode == "content":
            out.content += text
            return
        if self._head is not None:
            head = self._head + text
            if head.startswith(_PREFIX):
                self._head, text = None, head[len(_PREFIX) :]
            elif _PREFIX.startswith(head) or (head.startswith(THOUGHT) and head[len(THOUGHT) :].isspace()):
                self._head = head
                return
            else:
                self._head, text = None, head
        buf = self._ws + text
        h = _rstrip_at(buf)
        out.reasoning += buf[:h]
        self._ws = buf[h:]

    def _marker(self, marker: str, out: ParsedDelta) -> None:
        if marker in _DROPPED:
            return
        if self._mode == "reasoning":
            if marker == CHANNEL_END:
                self._mode = "content"
            elif marker == TOOL_START:
                self._mode, self._span = "content", True
                out.content += marker
            elif marker == TOOL_END:
                self._span = False
                self._text(marker, out)
            # a <|channel> inside reasoning is dropped
            return
        if marker == CHANNEL_START:
            self._mode = "reasoning"
        elif marker == TOOL_START:
            self._span = True
            out.content += marker
        elif marker == TOOL_END and self._span:
            self._span = False
            out.content += marker
        # <channel|> and a <tool_call|> that closes no call are dropped
