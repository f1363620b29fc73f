"""The Qwen3-Coder XML grammar's parameter values: typed by the tool's schema (a string streamed
as it comes, a typed value held and converted, or a long one streamed as JSON), each written as
one member of the call's arguments object.

The full rules: docs/parsers.md (the qwen3_coder family's section).
"""

from __future__ import annotations

import json
from typing import Any, ClassVar

from .json_stream import JSON_WS, JsonValueStreamer, escape_lone_surrogates
from .schema_values import always_string, coerce, json_capable, properties_of, value_types
from .streaming import StreamingToolParser

__all__ = ["VALUE_CAP", "Qwen3XmlValues"]

VALUE_CAP = 128  # characters of a typed value held before it is decided


def _json_str(text: str) -> str:
    return escape_lone_surrogates(json.dumps(text, ensure_ascii=False))


def _dump(value: Any) -> str:
    return escape_lone_surrogates(json.dumps(value, ensure_ascii=False))

class Qwen3XmlValues(StreamingToolParser):
    """The value half of :class:`~session.parsers.tool.qwen3_xml.Qwen3XmlToolParser` (its state is
    set up, saved and restored there)."""

    trim_newlines: ClassVar[bool]
    _fname: str
    _key: str
    _sub: str
    _kind: str
    _raw: str
    _js: JsonValueStreamer | None
    _vstarted: bool
    _nl: bool
    _members: bool

    def _member(self) -> str:
        head = ", " if self._members else "{"
        self._members = True
        return f"{head}{_json_str(self._key)}: "

    def _types(self) -> frozenset[str] | None:
        return value_types(properties_of(self.ctx.tools, self._fname), self._key) if self.ctx.tools else None

    def _value_begins(self) -> None:
        self._sub, self._raw, self._js, self._vstarted, self._nl = "v", "", None, not self.trim_newlines, False
        if always_string(self._types()):
            self._kind = "s"
            self.add_args(self._member() + '"')
        else:
            self._kind = "h"

    def _value_text(self, text: str) -> None:
        if not text:
            return
        if not self._vstarted:
            self._vstarted = True
            if text[0] == "\n":
                text = text[1:]
                if not text:
                    return
        kind = self._kind
        if kind == "s":
            self._string_text(text)
        elif kind == "h":
            self._raw += text
            if len(self._raw) > VALUE_CAP:
                self._long_value()
        else:
            self._json_text(text)

    def _string_text(self, text: str) -> None:
        if self._nl:
            text = "\n" + text
            self._nl = False
        if self.trim_newlines and text.endswith("\n"):
            text = text[:-1]
            self._nl = True
        if text:
            self.add_args(_json_str(text)[1:-1])

    def _long_value(self) -> None:
        """A typed value past VALUE_CAP: stream it as JSON when it may be JSON and reads as JSON so
        far, otherwise as the string it will stay."""
        raw, self._raw = self._raw, ""
        if json_capable(self._types()):
            js, out = JsonValueStreamer(), list[str]()
            j = js.feed(raw, 0, out)
            if not js.failed and (not js.done or not raw[j:].strip(JSON_WS)):
                self._kind, self._js = "j", js
                self.add_args(self._member() + "".join(out))
                return
        self._kind = "s"
        self.add_args(self._member() + '"')
        self._string_text(raw)

    def _json_text(self, text: str) -> None:
        js = self._js
        assert js is not None
        out: list[str] = []
        j = 0 if js.done else js.feed(text, 0, out)
        if out:
            self.add_args("".join(out))
        if js.failed or (js.done and text[j:].strip(JSON_WS)):
            self._broken()

    def _broken(self) -> None:
        """The value can no longer become what was streamed of it: the rest of the call is dropped."""
        self._sub, self._kind, self._js, self._raw = "x", "", None, ""

    def _value_end(self) -> None:
        kind = self._kind
        if kind == "s":
            self.add_args('"')
        elif kind == "h":
            raw = self._raw[:-1] if self.trim_newlines and self._raw.endswith("\n") else self._raw
            self.add_args(self._member() + _dump(coerce(raw, self._types())))
        elif kind == "j":
            js = self._js
            assert js is not None
            out: list[str] = []
            js.end(out)
            if out:
                self.add_args("".join(out))
            if not js.done:
                self._broken()
                return
        self._sub, self._kind, self._raw, self._js, self._nl, self._key = "g", "", "", None, False, ""
