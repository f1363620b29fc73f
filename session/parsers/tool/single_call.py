"""The shared base of the tool parsers that read one JSON call object at a time (``hermes``,
``llama3_json``): each call is a ``{"name": ..., <args key>: ...}`` object read by a
:class:`~.json_calls.CallObjectParser`, and the text of a call that is not committed yet is kept
(``_raw``) so that an output that turns out not to be a call can fall back to plain content.

A subclass names its arguments keys (``args_keys``) and writes ``_process`` around
:meth:`_read_call`; what it keeps between feeds besides the base's mode and held text is this
base's: the uncommitted call text (``"r"`` in the snapshot) and the call reader's state (``"o"``).
"""

from __future__ import annotations

from typing import Any, ClassVar

from ..base import ParserContext
from .json_calls import CallObjectParser
from .json_stream import JSON_WS
from .streaming import StreamingToolParser


class SingleCallToolParser(StreamingToolParser):
    # The member names whose value is a call's arguments (the first one present counts).
    args_keys: ClassVar[tuple[str, ...]] = ("arguments",)

    def __init__(self, ctx: ParserContext) -> None:
        super().__init__(ctx)
        self._raw = ""  # the current call's text while it is not committed
        self._obj: CallObjectParser | None = None

    def _save(self) -> dict[str, Any]:
        return {"r": self._raw, "o": None if self._obj is None else self._obj.to_state()}

    def _load(self, state: dict[str, Any]) -> None:
        self._raw = str(state["r"])
        self._obj = None
        if state["o"] is not None:
            self._obj = self._new_obj()
            self._obj.load_state(state["o"])

    def _new_obj(self) -> CallObjectParser:
        return CallObjectParser(self.args_keys)

    def _plain_args_reader(self) -> CallObjectParser | None:
        return self._obj if self._mode == "call" and not self._buf else None

    def _begin_call(self, raw: str) -> None:
        """A call object starts (``raw``: the text before its ``{`` that falls back with it)."""
        self._mode, self._raw, self._obj = "call", raw, self._new_obj()

    def _read_call(self, buf: str, i: int, final: bool) -> tuple[CallObjectParser, int]:
        """Feed ``buf[i:]`` to the current call: keep its text while it is not committed, end it
        when the input ends inside it (``final``), announce it and its new arguments. Returns the
        reader and where it stopped; the caller decides what follows a failed or finished object."""
        obj = self._obj
        assert obj is not None
        j = obj.feed(buf, i)
        if not obj.committed:
            self._raw += buf[i:j]
        if final and j >= len(buf) and not (obj.done or obj.failed):
            obj.end()
        obj.drain(self)
        if obj.committed:
            self._raw = ""
        return obj, j

    def _block_step(self, buf: str, i: int, final: bool, end: str, after: str) -> int:
        """One step inside a ``<tool_call>`` … ``end`` block (``hermes``, ``granite4``): in mode
        ``call`` the call's JSON is read (a first call that is broken or no call falls back to
        content; a later one is dropped: mode ``skip``, up to ``end``); in mode ``tail`` (the JSON
        done) only whitespace may come before ``end``, which leads to mode ``after``. Returns where
        to go on in ``buf``, or -1 when this text is used up (or held back in ``_buf``)."""
        n = len(buf)
        if self._mode == "call":
            obj, i = self._read_call(buf, i, final)
            if obj.failed or (obj.done and not obj.committed):  # broken, or no name / arguments
                if not obj.committed and self._calls == 0:
                    self._fall_back(buf[i:])
                    return -1
                self._mode, self._obj, self._raw = "skip", None, ""
            elif obj.done:
                self._mode, self._obj = "tail", None
            elif i >= n:
                if final and not obj.committed and self._calls == 0:
                    self._fall_back("")
                return -1
            return i
        while i < n and buf[i] in JSON_WS:
            i += 1
        if i >= n:
            return -1
        if buf.startswith(end, i):
            self._mode = after
            return i + len(end)
        if end.startswith(buf[i:]) and not final:
            self._buf = buf[i:]
            return -1
        self._mode = "skip"
        return i

    def _fall_back(self, rest: str) -> None:
        """The output is not a call: from the current call's start on, everything is content."""
        self._content(self._raw + rest)
        self._mode, self._raw, self._obj = "raw", "", None
