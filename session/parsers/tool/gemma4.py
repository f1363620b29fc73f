"""``gemma4``: Gemma 4 tool calls, ``<|tool_call>call:NAME{key:value,…}<tool_call|>``.

The full rules: docs/parsers.md (the family's section: its split, state and every difference from vLLM).
"""

from __future__ import annotations

import re
from typing import Any

from ..base import ParserContext
from ..markers import find_first, held_suffix_len
from .gemma4_args import PLAIN_GUARD, ArgsReader
from .json_stream import without_lone_surrogates
from .schema_values import properties_of
from .streaming import StreamingToolParser

CHANNEL_START = "<|channel>"
CHANNEL_END = "<channel|>"
TOOL_START = "<|tool_call>"
TOOL_END = "<tool_call|>"
# Gemma 4's special tokens that vLLM's gemma4 grammar neither uses nor preserves (``<|"|>`` is
# preserved): its engine drops their text wherever it reads it.
DROPPED = ("<pad>", "<eos>", "<bos>", "<unk>", "<mask>", "<|tool>", "<tool|>", "<|tool_response>",
           "<tool_response|>", "<|think|>", "<|turn>", "<turn|>", "<|image>", "<|audio>", "<|image|>",
           "<|audio|>", "<image|>", "<audio|>", "<|video|>")
_DROPPED = frozenset(DROPPED)

_MARKERS: dict[str, tuple[str, ...]] = {
    "text": (TOOL_START, TOOL_END, *DROPPED),
    "pre": (TOOL_END, ":"),  # everything else before the name is dropped, special tokens included
    "name": (TOOL_END, "{", "(", *DROPPED),
    "args": (TOOL_END, *DROPPED),
}
_HOLD = max(len(m) for m in _MARKERS["text"])


def _rstrip_at(text: str) -> int:
    h = len(text)
    while h > 0 and text[h - 1].isspace():
        h -= 1
    return h


class Gemma4ToolParser(StreamingToolParser):
    """Modes: ``text`` (content), ``pre`` (after ``<|tool_call>``, up to ``:``), ``name``,
    ``args``."""

    name = "gemma4"
    needs_special_tokens = True
    # vLLM 0.32 builds it from its engine grammar (vllm/parser/gemma4.py): it reads "required" and a
    # named tool_choice in Gemma's format, and the output of a "none" request (dropping the calls).
    engine_based = True
    supports_required_and_named = False

    def __init__(self, ctx: ParserContext) -> None:
        super().__init__(ctx)
        choice = ctx.tool_choice if ctx.tool_choice is not None else ("auto" if ctx.tools else "none")
        self._suppress = choice == "none" and bool(ctx.tools)  # the calls' text is not content
        self._emit = choice != "none" and bool(ctx.tools)  # calls are returned
        self._fname = ""  # the name being read
        self._call = ""  # the current call's name (its schema types the arguments)
        self._args: ArgsReader | None = None
        self._drop = False  # a call had a name: the text after it is not content
        self._ws = ""  # trailing whitespace of the content, held until it is known to stay
        self._seen = False  # content other than whitespace was emitted

    def _save(self) -> dict[str, Any]:
        return {"f": self._fname, "c": self._call, "a": None if self._args is None else self._args.save(),
                "d": self._drop, "w": self._ws, "s": self._seen}

    def _load(self, state: dict[str, Any]) -> None:
        if self._mode not in _MARKERS:
            raise ValueError(self._mode)
        self._fname, self._call = str(state["f"]), str(state["c"])
        self._drop, self._ws, self._seen = bool(state["d"]), str(state["w"]), bool(state["s"])
        args = state["a"]
        self._args = None if args is None else ArgsReader.load(properties_of(self.ctx.tools, self._call), args)

    def plain_content_guard(self) -> str | None:
        # Only without the whitespace rules (tool_choice "none" with tools) is plain text content as it is.
        return "<" if self._suppress and self._mode == "text" and not self._buf else None

    def plain_args_call(self) -> int | None:
        # Inside a delimited string of a returned call, nothing held here or in the reader.
        args = self._args
        if self._buf or self._mode != "args" or args is None or not args.in_plain_string:
            return None
        index = self._calls - 1
        return index if self._kept(index) else None

    def plain_args_guard(self) -> re.Pattern[str]:
        return PLAIN_GUARD

    # -- splitting ---------------------------------------------------------------------------
    def _process(self, text: str, final: bool) -> None:
        buf, self._buf = self._buf + text, ""
        i, n = 0, len(buf)
        while i <= n:
            mode = self._mode
            lt = buf.find("<", i)  # every marker but pre's ":" and name's "{" / "(" starts with "<"
            if lt == -1 and mode in ("text", "args"):
                self._text(buf[i:])
                break
            markers = _MARKERS[mode]
            pos, marker = find_first(buf, markers, i)
            if pos == -1:
                held = 0 if final or lt == -1 else held_suffix_len(buf[max(lt, n - _HOLD) :], markers)
                end = n - held
                self._text(buf[i:end])
                self._buf = buf[end:]
                break
            self._text(buf[i:pos])
            i = pos + len(marker)
            self._marker(marker)
        if final:
            if self._mode == "name":
                self._name_done()
            if self._mode != "text":
                self._end_call()
            if self._ws:
                self._content(self._ws)
                self._ws = ""

    def _text(self, text: str) -> None:
        if not text:
            return
        mode = self._mode
        if mode == "text":
            if self._suppress:
                self._content(text)
            elif not self._drop:
                buf = self._ws + text
                h = _rstrip_at(buf)
                if h:
                    self._content(buf[:h])
                    self._seen = True
                self._ws = buf[h:]
        elif mode == "name":
            self._fname += text
        elif mode == "args" and self._args is not None:
            self.add_args(self._args.feed(text))

    def _marker(self, marker: str) -> None:
        if marker in _DROPPED:
            return
        mode = self._mode
        if mode == "text":
            if marker == TOOL_START:
                self._mode = "pre"
                if not self._seen:
                    self._ws = ""  # whitespace-only content before a call is dropped
            # a stray <tool_call|> is dropped
        elif mode == "pre":
            if marker == ":":
                self._mode, self._fname = "name", ""
            else:
                self._end_call()
        elif mode == "name":
            self._name_done()
            if marker == TOOL_END:
                self._end_call()
        elif marker == TOOL_END:
            self._end_call()

    def _name_done(self) -> None:
        """The name is complete: a call starts (its arguments follow, if any)."""
        raw, self._fname = self._fname, ""
        self._mode = "args"
        if self._suppress:
            return
        if raw:
            self._drop = True
        name = raw.strip()
        if not name:
            return
        self._ws = ""  # the content before a call that is returned is stripped
        if self._emit:
            self._call = without_lone_surrogates(name)
            self.open_call(self._call)
            self._args = ArgsReader(properties_of(self.ctx.tools, self._call))
            self.add_args(self._args.feed(""))

    def _end_call(self) -> None:
        if self._args is not None:
            self.add_args(self._args.end())
        self._mode, self._args, self._call, self._fname = "text", None, "", ""
