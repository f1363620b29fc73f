"""Shared machinery of the incremental tool parsers.

Every tool parser here is a small state machine over the text it is fed. What it keeps between
feeds is only: its mode, the text it holds back (a partial marker, or the part of a call that is
not committed yet), the unfinished call's reader state, and the number of calls started. Output
never leaves again once emitted, which is what makes streaming and one-shot parsing agree: the
one-shot result is ``feed(everything)`` then ``finish()``.

Subclasses implement ``_process(text, final)`` (consume ``self._buf + text``) and, for their own
fields, ``_save()`` / ``_load()``.
"""

from __future__ import annotations

import abc
from typing import Any, ClassVar, Self

from ..base import ParsedDelta, ParserContext, ToolCallDelta, ToolParser
from ..errors import MalformedSnapshot
from .json_calls import CallObjectParser
from .json_stream import is_plain_without


class StreamingToolParser(ToolParser):
    # How the derenderer should make call ids for this parser's calls: "openai" (random, as vLLM's
    # ``chatcmpl-tool-…``), "mistral" (9 random alphanumerics, what Mistral's templates accept) or
    # "kimi" (the id the model wrote, ``functions.NAME:IDX``, passed as ``ToolCallDelta.id``).
    call_id_style: ClassVar[str] = "openai"
    initial_mode: ClassVar[str] = "text"
    # Per mode where the text is plain content until a marker: the character every such marker
    # starts with ("" when that mode looks for none): ``plain_content_guard`` while nothing is held.
    content_guards: ClassVar[dict[str, str]] = {}

    def __init__(self, ctx: ParserContext) -> None:
        super().__init__(ctx)
        self._mode = self.initial_mode
        self._buf = ""  # text received but not decided yet
        self._calls = 0
        self._content_out: list[str] = []
        self._call_out: list[ToolCallDelta] = []

    # -- output (also the ``CallSink`` the JSON readers announce calls to) -------------------
    def _content(self, text: str) -> None:
        if text:
            self._content_out.append(text)

    def _kept(self, index: int) -> bool:
        # parallel_tool_calls=false keeps only the first call, as vLLM filters it.
        return self.ctx.parallel_tool_calls or index == 0

    def open_call(self, name: str, call_id: str | None = None) -> None:
        index = self._calls
        self._calls += 1
        if self._kept(index):
            self._call_out.append(ToolCallDelta(index=index, name=name, arguments="", id=call_id))

    def add_args(self, text: str) -> None:
        index = self._calls - 1
        if not text or index < 0 or not self._kept(index):
            return
        last = self._call_out[-1] if self._call_out else None
        if last is not None and last.index == index and last.name is None:
            last.arguments += text
        else:
            self._call_out.append(ToolCallDelta(index=index, arguments=text))

    def _take(self) -> ParsedDelta:
        delta = ParsedDelta(content="".join(self._content_out), tool_calls=self._call_out)
        self._content_out = []
        self._call_out = []
        return delta

    # -- the contract ------------------------------------------------------------------------
    def feed(self, text: str) -> ParsedDelta:
        if text:
            call = self.plain_args_call()
            if call is not None and is_plain_without(text, self.plain_args_guard()) \
                    and not (self.plain_args_hold_space and text[-1].isspace()):  # in a string argument
                return ParsedDelta(tool_calls=[ToolCallDelta(index=call, arguments=text)])
            self._process(text, final=False)
        return self._take()

    def plain_args_call(self) -> int | None:
        obj = self._plain_args_reader()
        if obj is None or not obj.in_plain_args:
            return None
        index = self._calls - 1
        return index if self._kept(index) else None

    def plain_content_guard(self) -> str | None:
        return None if self._buf else self.content_guards.get(self._mode)

    def finish(self) -> ParsedDelta:
        self._process("", final=True)
        return self._take()

    @property
    def calls_made(self) -> int:
        return self._calls

    def snapshot(self) -> dict[str, Any]:
        state: dict[str, Any] = {"p": self.name, "m": self._mode, "b": self._buf, "n": self._calls}
        state.update(self._save())
        return state

    @classmethod
    def restore(cls, ctx: ParserContext, snapshot: dict[str, Any]) -> Self:
        if not isinstance(snapshot, dict) or snapshot.get("p") != cls.name:
            raise MalformedSnapshot(f"not a {cls.name} tool parser snapshot")
        parser = cls(ctx)
        try:
            parser._mode = str(snapshot["m"])
            parser._buf = str(snapshot["b"])
            parser._calls = int(snapshot["n"])
            parser._load(snapshot)
        except (KeyError, TypeError, ValueError, IndexError) as exc:
            raise MalformedSnapshot(f"malformed {cls.name} tool parser snapshot") from exc
        return parser

    # -- for subclasses ----------------------------------------------------------------------
    @abc.abstractmethod
    def _process(self, text: str, final: bool) -> None:
        """Consume ``self._buf + text``; with ``final`` nothing more will come."""

    def _plain_args_reader(self) -> CallObjectParser | None:
        """The JSON call reader that text would go to next, when nothing is held before it (no
        partial marker in ``_buf``): the fast path for plain characters in a string argument
        (``CallObjectParser.in_plain_args``). None: no such reader (the default)."""
        return None

    def _save(self) -> dict[str, Any]:
        return {}

    def _load(self, state: dict[str, Any]) -> None:
        return None
