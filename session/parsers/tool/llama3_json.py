"""``llama3_json``: Llama 3.1 / 3.2 / 4 JSON tool calls.

The model answers with ``<|python_tag|>`` (optional; a special token, so usually not in the
text) and one or more ``{"name": str, "parameters"|"arguments": value}`` objects, often separated
by ``;``. As vLLM's ``Llama3JsonToolParser``: the arguments are ``json.dumps(value,
ensure_ascii=False)``; when calls are found the content is empty (text between and after the
objects is dropped); an output whose first object is not a call (invalid JSON, no ``name``, no
arguments) is returned whole as content.

Tool-call mode starts only when the output *begins* (after whitespace) with ``<|python_tag|>`` or
``{``, as vLLM's streaming parser decides. vLLM's non-streaming parser also looks for objects
after leading prose ("Sure! {...}"); a stream has sent that prose as content before any brace
arrives, so here it stays content (docs/parsers.md).
"""

from __future__ import annotations

from typing import Any

from .json_calls import CallObjectParser
from .json_stream import JSON_WS
from .streaming import StreamingToolParser

PYTHON_TAG = "<|python_tag|>"


class Llama3JsonToolParser(StreamingToolParser):
    """Modes: ``start`` (deciding), ``text`` (plain content), ``call`` (reading an object),
    ``between`` (dropping separators until the next ``{``), ``drop`` (a broken call after others:
    the rest is dropped), ``raw`` (fallen back: all is content)."""

    name = "llama3_json"
    needs_special_tokens = False
    initial_mode = "start"
    content_guards = {"text": "", "raw": ""}

    def __init__(self, ctx: Any) -> None:
        super().__init__(ctx)
        self._raw = ""  # the output since the current call began, while it is not committed
        self._obj: CallObjectParser | None = None

    def _save(self) -> dict[str, Any]:
        return {"r": self._raw, "o": None if self._obj is None else self._obj.to_state()}

    def _load(self, state: dict[str, Any]) -> None:
        self._raw = str(state["r"])
        self._obj = None
        if state["o"] is not None:
            self._obj = self._new_obj()
            self._obj.load_state(state["o"])

    @staticmethod
    def _new_obj() -> CallObjectParser:
        return CallObjectParser(("arguments", "parameters"))

    def _plain_args_reader(self) -> CallObjectParser | None:
        return self._obj if self._mode == "call" and not self._buf else None

    def _process(self, text: str, final: bool) -> None:
        buf, self._buf = self._buf + text, ""
        i, n = 0, len(buf)
        while True:
            mode = self._mode
            if mode == "raw" or mode == "text":
                self._content(buf[i:])
                return
            if mode == "drop":
                return
            if mode == "start":
                j = i
                while j < n and buf[j] in JSON_WS:
                    j += 1
                rest = buf[j:]
                if rest.startswith(PYTHON_TAG):
                    j += len(PYTHON_TAG)
                elif not rest or (PYTHON_TAG.startswith(rest) and not final):
                    if final:
                        self._content(buf[i:])
                    else:
                        self._buf = buf[i:]
                    return
                elif rest[0] != "{":
                    self._mode = "text"
                    continue
                self._mode, self._raw, self._obj = "call", buf[i:j], self._new_obj()
                i = j
                continue
            if mode == "between":
                pos = buf.find("{", i)
                if pos == -1:
                    return
                self._mode, self._raw, self._obj = "call", "", self._new_obj()
                i = pos
                continue
            # call
            obj = self._obj
            assert obj is not None
            j = obj.feed(buf, i)
            if not obj.committed:
                self._raw += buf[i:j]
            if final and j >= n and not (obj.done or obj.failed):
                obj.end()
            obj.drain(self)
            if obj.committed:
                self._raw = ""
            i = j
            if obj.failed or (obj.done and not obj.committed):
                if not obj.committed and self._calls == 0:
                    self._content(self._raw + buf[i:])
                    self._mode, self._raw, self._obj = "raw", "", None
                    return
                self._mode, self._raw, self._obj = "drop", "", None
                return
            if obj.done:
                self._mode, self._obj = "between", None
                continue
            if final and not obj.committed and self._calls == 0:
                self._content(self._raw)
                self._mode, self._raw, self._obj = "raw", "", None
            return
