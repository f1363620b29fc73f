"""``llama4_pythonic``: Llama 4's pythonic calls, ``[f(a=1), g()]``, optionally wrapped in
``<|python_start|>`` … ``<|python_end|>``.

As vLLM's ``Llama4PythonicToolParser``, which is its ``pythonic`` parser plus one rule (non-streaming
``extract_tool_calls``): an output that *starts* with ``<|python_start|>`` has that marker removed
and every ``<|python_end|>`` in it removed, and the rest is read as ``pythonic`` reads an output —
a list of calls when it starts with ``[``, else content (the content then has the markers
removed too). An output that does not start with ``<|python_start|>`` is read exactly as
``pythonic`` reads it (``<|python_end|>`` is then plain text; after the list's ``]`` it is dropped
with the rest, as ``pythonic`` drops text after the list).

This parser is a filter in front of :class:`~.pythonic.PythonicToolParser`: it decides whether the
output starts with the marker (holding a partial ``<|python_start|>`` at the start), then strips
``<|python_end|>`` from what it passes on (holding a partial one at the end of a chunk). Its own
state: ``x`` the stage (``"pre"`` deciding, ``"on"`` the marker was there, ``"off"`` it was not) and
``h`` the held partial marker.

On Llama 4 both markers are special tokens: decoded with ``skip_special_tokens`` (the default,
``needs_special_tokens`` is false as for vLLM's parser, which does not ask for them) they are not
in the text and the output reads as plain ``pythonic``; kept or spelled out as text, they are
handled as above.
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

    def _save(self) -> dict[str, Any]:
        state = super()._save()
        state.update(x=self._stage, h=self._held)
        return state

    def _load(self, state: dict[str, Any]) -> None:
        super()._load(state)
        stage = state["x"]
        if stage not in ("pre", "on", "off"):
            raise ValueError(stage)
        self._stage, self._held = stage, str(state["h"])

    def plain_content_guard(self) -> str | None:
        if self._held or self._stage == "pre":
            return None
        guard = super().plain_content_guard()
        if self._stage == "on" and guard == "":  # content, but <|python_end|> is still removed
            return "<"
        return guard

    def _process(self, text: str, final: bool) -> None:
        buf, self._held = self._held + text, ""
        if self._stage == "pre":
            if buf.startswith(PYTHON_START):
                self._stage, buf = "on", buf[len(PYTHON_START):]
            elif PYTHON_START.startswith(buf) and not final:
                self._held = buf  # "" or a partial marker: not decided yet
                return
            else:
                self._stage = "off"
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
