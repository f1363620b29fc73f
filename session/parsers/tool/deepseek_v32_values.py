"""DeepSeek-V3.2 DSML parameter values: ``string="true"`` values kept as text, others read as
JSON, each fitted to the tool's schema (``schema_values``), streamed as members of the call's
arguments object; a lone ``arguments`` / ``input`` wrapper unwrapped as vLLM does.

The rules: docs/parsers.md, "deepseek_v32".
"""

from __future__ import annotations

import json
from typing import Any

from .json_stream import JSON_WS, JsonValueStreamer, dumps, string_body
from .schema_values import always_string, fit, fit_members, may_be_container, properties_of, types_of
from .streaming import StreamingToolParser

__all__ = ["HOLD", "DeepSeekV32Values"]

_JSON_START = frozenset('"{[-0123456789tfnNI')
_WRAPPERS = ("arguments", "input")
HOLD = 160  # characters of a non-string value held while it is decided (the snapshot stays small)


def _key(name: str) -> str:
    return '"' + string_body(name) + '": '


def _loads_or_text(raw: str) -> Any:
    try:
        return json.loads(raw)
    except (ValueError, RecursionError):
        return raw


class DeepSeekV32Values(StreamingToolParser):
    """The value half of :class:`~session.parsers.tool.deepseek_v32.DeepSeekV32ToolParser` (its
    state is set up, saved and restored there)."""

    _fn: str
    _members: bool
    _pkey: str
    _pstr: str | None
    _vmode: str
    _raw: str
    _json: JsonValueStreamer | None
    _wrap: list[Any] | None

    # -- the schema ----------------------------------------------------------------------------
    def _props(self, name: str) -> dict[str, Any]:
        return properties_of(self.ctx.tools, name) if self.ctx.tools else {}

    def _prop(self, key: str) -> Any:
        return self._props(self._fn.strip()).get(key)

    # -- values --------------------------------------------------------------------------------
    def _begin_value(self, key: str, flag: str | None) -> None:
        if self._wrap is not None:  # another parameter: the wrapper stays a plain member
            wkey, wflag, wraw = self._wrap
            self._wrap = None
            self._member(wkey)
            self.add_args(dumps(self._final(wkey, wflag, wraw)))
        self._pkey, self._pstr, self._raw, self._json = key, flag, "", None
        props = self._props(self._fn.strip())
        if (not self._members and key in _WRAPPERS and key not in self._props(self._fn)
                and self._props(self._fn)):
            self._vmode = "W"
            return
        self._member(key)
        prop = props.get(key) if props else None
        if flag == "true" and always_string(types_of(prop)):
            self._vmode = "S"
            self.add_args('"')
        else:
            self._vmode = "H"

    def _member(self, key: str) -> None:
        self.add_args((", " if self._members else "") + _key(key))
        self._members = True

    def _value_text(self, text: str) -> None:
        if not text:
            return
        mode = self._vmode
        if mode == "S":
            self.add_args(string_body(text))
        elif mode == "J":
            assert self._json is not None
            if not (self._json.done or self._json.failed):
                out: list[str] = []
                self._json.feed(text, 0, out)
                self.add_args("".join(out))
        else:
            self._raw += text
            if mode == "H" and self._pstr != "true" and always_string(types_of(self._prop(self._pkey))):
                first = self._raw.lstrip(JSON_WS)
                if first and first[0] not in _JSON_START:  # not JSON: the text is a string
                    self._vmode, raw, self._raw = "S", self._raw, ""
                    self.add_args('"' + string_body(raw))
                    return
            if len(self._raw) > HOLD:
                self._commit()

    def _commit(self) -> None:
        """A held value grew past ``HOLD``: stream it from here on (as a string, or as JSON)."""
        raw, self._raw = self._raw, ""
        if self._vmode == "W":
            self._member(self._pkey)
        first = raw.lstrip(JSON_WS)[:1]
        as_json = first in _JSON_START if self._pstr != "true" else (
            first in ("{", "[") and may_be_container(types_of(self._prop(self._pkey))))
        if as_json:
            self._vmode = "J"
            self._json = JsonValueStreamer()
            out: list[str] = []
            self._json.feed(raw, 0, out)
            self.add_args("".join(out))
        else:
            self._vmode = "S"
            self.add_args('"' + string_body(raw))

    def _final(self, key: str, flag: str | None, raw: str) -> Any:
        value = raw if flag == "true" else _loads_or_text(raw)
        prop = self._prop(key)
        return fit(value, prop) if isinstance(prop, dict) else value

    def _end_value(self) -> None:
        mode = self._vmode
        if mode == "S":
            self.add_args('"')
        elif mode == "J":
            assert self._json is not None
            out: list[str] = []
            self._json.end(out)
            self.add_args("".join(out))
        elif mode == "H":
            self.add_args(dumps(self._final(self._pkey, self._pstr, self._raw)))
        elif mode == "W":
            self._wrap = [self._pkey, self._pstr, self._raw]
        self._vmode, self._raw, self._json, self._pkey, self._pstr = "", "", None, "", None

    def _unwrapped(self, key: str, flag: str | None, raw: str) -> str | None:
        """vLLM's ``_unwrap_wrapper_args`` for a call whose only parameter is ``key``: the JSON of
        the object inside it when every key of that object is a parameter of the function."""
        inner: Any = raw if flag == "true" else _loads_or_text(raw)
        if isinstance(inner, str):
            try:
                inner = json.loads(inner)
            except (ValueError, RecursionError):
                return None
        allowed = self._props(self._fn)
        if not isinstance(inner, dict) or not set(inner) <= set(allowed):
            return None
        props = self._props(self._fn.strip())
        if props:
            fit_members(inner, props)
        return dumps(inner)
