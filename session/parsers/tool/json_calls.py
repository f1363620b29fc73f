"""Incremental readers for JSON tool-call objects and lists of them.

``CallObjectParser`` reads one ``{"name": "...", "arguments": {...}}`` object (the key names are
configurable: llama uses ``parameters`` too, ``tool_choice: required`` uses ``parameters``), and
``CallListParser`` reads ``[{...}, {...}]``. Each member value goes through a
``JsonValueStreamer``: the name is collected, the arguments are re-emitted in canonical
``json.dumps(..., ensure_ascii=False)`` form as they arrive, other members are only validated.

A call is *committed* once its name is known and its arguments have started (or, where a default
applies, once the object closed without them): only then does ``drain`` announce it to the sink,
so that output which turns out not to be a call before that point can still fall back to plain
content, the way vLLM's non-streaming parsers fall back.
"""

from __future__ import annotations

import json
from typing import Any, Protocol

from .json_stream import JSON_WS, JsonValueStreamer, without_lone_surrogates


class CallSink(Protocol):
    def open_call(self, name: str) -> None: ...

    def add_args(self, text: str) -> None: ...


class CallObjectParser:
    """One tool-call object. ``feed`` returns where it stopped (see ``JsonValueStreamer.feed``)."""

    __slots__ = ("_args_keys", "_args_out", "_args_starts", "_default_args", "_key", "_phase", "_role",
                 "_val", "args_state", "committed", "name", "name_buf")

    def __init__(self, args_keys: tuple[str, ...], default_args: str | None = None,
                 args_starts: str | None = None) -> None:
        self._args_keys = args_keys
        self._default_args = default_args  # arguments text when the object has no arguments member
        self._args_starts = args_starts  # allowed first characters of the arguments value (None: any)
        # "start" "key0" "key" "keystr" "colon" "value" "comma" "done" "failed"
        self._phase = "start"
        self._val: JsonValueStreamer | None = None
        self._key = ""  # canonical text of the key being read
        self._role = ""  # "name" | "args" | "skip" for the member value being read
        self._args_out: list[str] = []  # canonical arguments text not yet drained
        self.name_buf = ""
        self.name: str | None = None
        self.args_state = 0  # 0 not seen, 1 started, 2 complete
        self.committed = False

    # -- state ------------------------------------------------------------------------------
    def to_state(self) -> list[Any]:
        return [self._phase, None if self._val is None else self._val.to_state(), self._key, self._role,
                "".join(self._args_out), self.name_buf, self.name, self.args_state, self.committed]

    def load_state(self, state: list[Any]) -> None:
        (self._phase, val, self._key, self._role, args_out, self.name_buf, self.name, self.args_state,
         self.committed) = state
        self._val = None if val is None else JsonValueStreamer.from_state(val)
        self._args_out = [args_out] if args_out else []

    @property
    def done(self) -> bool:
        return self._phase == "done"

    @property
    def failed(self) -> bool:
        return self._phase == "failed"

    @property
    def started(self) -> bool:
        return self._phase != "start"

    # -- reading ----------------------------------------------------------------------------
    @property
    def in_plain_args(self) -> bool:
        """The call is committed and its reader is inside a string of the arguments, nothing
        pending: feeding a text for which ``json_stream.is_plain`` holds then changes nothing here
        and its arguments output is that text (the caller may skip ``feed`` and pass the text to
        the sink itself)."""
        val = self._val
        return (self.committed and self._phase == "value" and self._role == "args" and not self._args_out
                and val is not None and val.in_plain_string)

    def feed(self, text: str, i: int) -> int:
        n = len(text)
        while i < n:
            phase = self._phase
            if phase in ("done", "failed"):
                break
            if phase == "value" or phase == "keystr":
                i = self._feed_value(text, i)
                continue
            c = text[i]
            if c in JSON_WS:
                i += 1
                continue
            if phase == "start":
                if c != "{":
                    self._phase = "failed"
                    break
                self._phase = "key0"
            elif phase in ("key0", "key"):
                if c == '"':
                    self._phase, self._key, self._role = "keystr", "", ""
                    self._val = JsonValueStreamer()
                    continue  # the streamer reads the opening quote
                if phase == "key0" and c == "}":
                    self._phase = "done"
                else:
                    self._phase = "failed"
                    break
            elif phase == "colon":
                if c != ":":
                    self._phase = "failed"
                    break
                self._phase, self._val = "value", JsonValueStreamer()
                self._role = self._role_of(self._key)
                if self._role == "name":  # a repeated "name" is read afresh (json.loads keeps the last)
                    self.name_buf = ""
            else:  # comma
                if c == ",":
                    self._phase = "key"
                elif c == "}":
                    self._phase = "done"
                else:
                    self._phase = "failed"
                    break
            i += 1
        return i

    def end(self) -> None:
        """The input ended (nothing more will come for this object)."""
        if self._phase == "value" and self._val is not None:
            out: list[str] = []
            self._val.end(out)
            self._route(out)

    def _role_of(self, key_text: str) -> str:
        key = json.loads(key_text)
        if key == "name":
            return "name"
        if key in self._args_keys and self.args_state == 0:
            return "args"
        return "skip"

    def _route(self, out: list[str]) -> None:
        if not out:
            return
        if self._phase == "keystr":
            self._key += "".join(out)
        elif self._role == "name":
            self.name_buf += "".join(out)
        elif self._role == "args":
            self._args_out.extend(out)

    def _feed_value(self, text: str, i: int) -> int:
        val = self._val
        assert val is not None
        if self._role == "args" and not val.started and self._args_starts is not None:
            j = i
            while j < len(text) and text[j] in JSON_WS:
                j += 1
            if j < len(text) and text[j] not in self._args_starts:
                self._phase = "failed"
                return j
        out: list[str] = []
        i = val.feed(text, i, out)
        self._route(out)
        if self._role == "args" and val.started and self.args_state == 0:
            self.args_state = 1
        if val.failed:
            self._phase = "failed"
        elif val.done:
            self._val = None
            if self._phase == "keystr":
                self._phase = "colon"
            else:
                self._member_done()
        return i

    def _member_done(self) -> None:
        self._phase = "comma"
        if self._role == "name":
            name = json.loads(self.name_buf)
            self.name_buf = ""  # (read: not carried in the state any longer)
            if not isinstance(name, str):
                self._phase = "failed"
                return
            name = without_lone_surrogates(name)  # a name must survive UTF-8 encoding
            if not self.committed:  # json.loads keeps the last "name"; so do we until committed
                self.name = name
        elif self._role == "args":
            self.args_state = 2

    # -- announcing -------------------------------------------------------------------------
    def drain(self, sink: CallSink) -> None:
        """Announce the call once it is committed, then pass on new arguments text."""
        if not self.committed:
            if self.name is None:
                return
            if self.args_state == 0 and not (self._phase == "done" and self._default_args is not None):
                return
            self.committed = True
            sink.open_call(self.name)
        if self._args_out:
            sink.add_args("".join(self._args_out))
            self._args_out.clear()
        if self._phase == "done" and self.args_state == 0 and self._default_args is not None:
            self.args_state = 2
            sink.add_args(self._default_args)


class CallListParser:
    """A JSON array of tool-call objects. After each ``feed`` the caller drains ``item`` (the
    current object, if any); ``feed`` returns right after an object completes so that no two
    objects are read in one step."""

    __slots__ = ("_args_keys", "_args_starts", "_default_args", "_phase", "item", "items")

    def __init__(self, args_keys: tuple[str, ...], default_args: str | None = None,
                 args_starts: str | None = None) -> None:
        self._args_keys = args_keys
        self._default_args = default_args
        self._args_starts = args_starts
        self._phase = "start"  # "start" "item0" "item" "sep" "itemN" "done" "failed"
        self.item: CallObjectParser | None = None
        self.items = 0  # objects started so far

    def _new_item(self) -> CallObjectParser:
        return CallObjectParser(self._args_keys, self._default_args, self._args_starts)

    def to_state(self) -> list[Any]:
        return [self._phase, None if self.item is None else self.item.to_state(), self.items]

    def load_state(self, state: list[Any]) -> None:
        self._phase, item, self.items = state
        self.item = None
        if item is not None:
            self.item = self._new_item()
            self.item.load_state(item)

    @property
    def done(self) -> bool:
        return self._phase == "done"

    @property
    def failed(self) -> bool:
        return self._phase == "failed"

    def end(self) -> None:
        if self._phase == "item" and self.item is not None:
            self.item.end()

    def feed(self, text: str, i: int) -> int:
        n = len(text)
        while i < n:
            phase = self._phase
            if phase in ("done", "failed"):
                break
            if phase == "item":
                item = self.item
                assert item is not None
                i = item.feed(text, i)
                if item.failed:
                    self._phase = "failed"
                elif item.done:
                    self._phase = "sep"
                    return i
                continue
            c = text[i]
            if c in JSON_WS:
                i += 1
                continue
            if phase == "start":
                if c != "[":
                    self._phase = "failed"
                    break
                self._phase = "item0"
            elif phase in ("item0", "itemN"):
                if c == "{":
                    self._phase, self.item = "item", self._new_item()
                    self.items += 1
                    continue  # the object parser reads the brace
                if phase == "item0" and c == "]":
                    self._phase = "done"
                else:
                    self._phase = "failed"
                    break
            else:  # sep
                if c == ",":
                    self._phase, self.item = "itemN", None
                elif c == "]":
                    self._phase, self.item = "done", None
                else:
                    self._phase = "failed"
                    break
            i += 1
        return i
