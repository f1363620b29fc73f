"""``llama4_pythonic``: Llama 4's pythonic calls, ``[f(a=1), g()]``, optionally wrapped in
``<|python_start|>`` … ``<|python_end|>``.

The full rules: docs/parsers.md (the family's section: its split, state and every difference from vLLM).
"""

from __future__ import annotations

from typing import Any

from ..base import ParserContext
from ..markers import held_suffix_len
from .pythonic import PythonicToolParser

PYTHON_START = "<|python_start|>"
PYTHON_END = "<|python_end|>"
class Llama4PythonicToolParser(PythonicToolParser):
    name = "llama4_pythonic"
    needs_special_tokens = False

    def __init__(self, ctx: ParserContext) -> None:
        super().__init__(ctx)
        self._stage = "pre"
        self._held = ""
        self._orig = ""

    def _save(self) -> dict[str, Any]:
        state = super()._save()
        state.update(x=self._stage, h=self._held, o=self._orig)
        return state

    def _load(self, state: dict[str, Any]) -> None:
        super()._load(state)
        stage = state["x"]
        if stage not in ("pre", "on", "off", "raw"):
            raise ValueError(stage)
        self._stage, self._held, self._orig = stage, str(state["h"]), str(state["o"])

    def plain_content_guard(self) -> str | None:
        if self._stage == "raw":
            return ""
        if self._stage != "off":
            return None
        return super().plain_content_guard()

    def _process(self, text: str, final: bool) -> None:
        if self._stage == "raw":
            self._content(text)
            return
        buf, self._held = self._held + text, ""
        if self._stage == "pre":
            if buf.startswith(PYTHON_START):
                self._stage, self._orig, buf = "on", buf, buf[len(PYTHON_START):]
            elif PYTHON_START.startswith(buf) and not final:
                self._held = buf  # "" or a partial marker: not decided yet
                return
            else:
                self._stage = "off"
        elif self._stage == "on" and not self._calls:
            self._orig += text
        if self._stage == "on" and "<" in buf:
            # As one str.replace over the whole output: markers are found left to right in the
            # text itself (the pieces around a removed one never join into a new one), and only
            # the text after the last one may be the start of the next.
            pieces = buf.split(PYTHON_END)
            last = pieces[-1]
            keep = 0 if final else held_suffix_len(last[-len(PYTHON_END):], (PYTHON_END,))
            if keep:
                pieces[-1], self._held = last[:-keep], last[-keep:]
            buf = "".join(pieces)
        if buf or final:
            super()._process(buf, final)
        if self._stage != "on":
            return
        if self._calls:
            self._orig = ""
        elif self._mode in ("text", "raw") or final:  # no call after the marker: the output as written is content
            self._content_out.clear()
            self._content(self._orig)
            self._stage, self._orig, self._held = "raw", "", ""
