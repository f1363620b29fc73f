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

from .json_stream import JSON_WS
from .single_call import SingleCallToolParser

PYTHON_TAG = "<|python_tag|>"


class Llama3JsonToolParser(SingleCallToolParser):
    """Modes: ``start`` (deciding), ``text`` (plain content), ``call`` (reading an object),
    ``between`` (dropping separators until the next ``{``), ``drop`` (a broken call after others:
    the rest is dropped), ``raw`` (fallen back: all is content)."""

    name = "llama3_json"
    needs_special_tokens = False
    initial_mode = "start"
    args_keys = ("arguments", "parameters")
    content_guards = {"text": "", "raw": ""}

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
                self._begin_call(buf[i:j])
                i = j
                continue
            if mode == "between":
                pos = buf.find("{", i)
                if pos == -1:
                    return
                self._begin_call("")
                i = pos
                continue
            # call
            obj, i = self._read_call(buf, i, final)
            if obj.failed or (obj.done and not obj.committed):
                if not obj.committed and self._calls == 0:
                    self._fall_back(buf[i:])
                    return
                self._mode, self._raw, self._obj = "drop", "", None
                return
            if obj.done:
                self._mode, self._obj = "between", None
                continue
            if final and not obj.committed and self._calls == 0:
                self._fall_back("")
            return
