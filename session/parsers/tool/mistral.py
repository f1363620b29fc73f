"""``mistral``: Mistral tool calls after the ``[TOOL_CALLS]`` special token, in both output forms (a
JSON list before tokenizer v11, ``name[ARGS]{...}`` from v11), told apart by the text after the
marker. The rules and where they differ from vLLM: docs/parsers.md, "mistral".
"""

from __future__ import annotations

from typing import Any

from ..markers import held_suffix_len
from .json_calls import CallListParser, CallObjectParser
from .streaming import StreamingToolParser

BOT = "[TOOL_CALLS]"
ARGS = "[ARGS]"


class MistralToolParser(StreamingToolParser):
    """Modes: ``text``, ``after`` (just after a marker, deciding the form), ``list`` / ``object``
    (JSON forms), ``name`` / ``args`` (v11 form), ``seek`` (dropping text until the next marker),
    ``raw`` (fallen back: all is content)."""

    name = "mistral"
    needs_special_tokens = True
    content_guards = {"text": "[", "raw": ""}  # BOT starts with "["
    call_id_style = "mistral"

    def __init__(self, ctx: Any) -> None:
        super().__init__(ctx)
        self._raw = ""  # text after the marker while no call of this list is committed
        self._list: CallListParser | None = None
        self._obj: CallObjectParser | None = None

    def _save(self) -> dict[str, Any]:
        return {"r": self._raw, "l": None if self._list is None else self._list.to_state(),
                "o": None if self._obj is None else self._obj.to_state()}

    def _load(self, state: dict[str, Any]) -> None:
        self._raw = str(state["r"])
        self._list, self._obj = None, None
        if state["l"] is not None:
            self._list = self._new_list()
            self._list.load_state(state["l"])
        if state["o"] is not None:
            self._obj = CallObjectParser(("arguments",), default_args="{}")
            self._obj.load_state(state["o"])

    @staticmethod
    def _new_list() -> CallListParser:
        return CallListParser(("arguments",), default_args="{}")

    def _hold(self, buf: str, i: int, final: bool) -> int:
        """Index up to which ``buf[i:]`` holds no partial marker (everything when final)."""
        n = len(buf)
        return n if final else n - held_suffix_len(buf[max(i, n - len(BOT)):], (BOT,))

    def _plain_args_reader(self) -> CallObjectParser | None:
        if self._buf:
            return None
        if self._mode == "object":
            return self._obj
        if self._mode == "list" and self._list is not None:
            return self._list.item
        return None

    def _process(self, text: str, final: bool) -> None:
        buf, self._buf = self._buf + text, ""
        i, n = 0, len(buf)
        while True:
            mode = self._mode
            if mode == "raw":
                self._content(buf[i:])
                return
            if mode in ("text", "seek", "args"):
                pos = buf.find(BOT, i)
                end = pos if pos != -1 else self._hold(buf, i, final)
                if mode == "text":
                    self._content(buf[i:end])
                elif mode == "args":
                    self.add_args(buf[i:end])
                if pos == -1:
                    self._buf = buf[end:]
                    return
                self._mode = "after"
                i = pos + len(BOT)
                continue
            if mode == "after":
                j = i
                while j < n and buf[j].isspace():
                    j += 1
                if j >= n:
                    if not final:
                        self._buf = buf[i:]
                    return
                if buf[j] == "[":
                    self._mode, self._raw, self._list = "list", "", self._new_list()
                    i = j
                elif buf[j] == "{":
                    self._mode, self._raw = "object", ""
                    self._obj = CallObjectParser(("arguments",), default_args="{}")
                    i = j
                else:
                    self._mode = "name"
                continue
            if mode == "name":
                brace = buf.find("{", i)
                marker = buf.find(BOT, i)
                if marker != -1 and (brace == -1 or marker < brace):  # no arguments: skipped
                    self._mode = "after"
                    i = marker + len(BOT)
                    continue
                if brace == -1:
                    if not final:
                        self._buf = buf[i:]
                    return
                self.open_call(buf[i:brace].replace(ARGS, ""))
                self._mode = "args"
                i = brace
                continue
            # list / object
            reader: CallListParser | CallObjectParser | None = self._list if mode == "list" else self._obj
            assert reader is not None
            j = reader.feed(buf, i)
            item = reader.item if isinstance(reader, CallListParser) else reader
            if final and j >= n and not (reader.done or reader.failed):
                reader.end()
            if self._calls == 0:
                self._raw += buf[i:j]
            if item is not None:
                item.drain(self)
            if self._calls:
                self._raw = ""
            i = j
            broken = reader.failed or (item is not None and item.done and not item.committed)
            if broken or (final and i >= n and not reader.done):
                if self._calls == 0:
                    self._content(self._raw + buf[i:])
                    self._mode = "raw"
                else:
                    self._mode = "seek"
                self._raw, self._list, self._obj = "", None, None
                if self._mode == "raw":
                    return
                continue
            if reader.done:
                self._mode, self._list, self._obj = "seek", None, None
                continue
            if i >= n:
                return
