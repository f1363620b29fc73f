"""``hermes``: Hermes 2 Pro / Qwen2.5 / Qwen3 tool calls, ``<tool_call>{json}</tool_call>``.

The split follows vLLM's ``Hermes2ProToolParser``:

- content is the text before the first ``<tool_call>``; text between and after calls is dropped;
- each block holds ``{"name": str, "arguments": value}``; the arguments are returned as
  ``json.dumps(value, ensure_ascii=False)`` (streamed in that canonical form as they arrive);
- an unclosed last block counts when its JSON is complete (vLLM's ``<tool_call>(.*)`` branch);
- a first block that is not such an object (broken JSON, a missing ``name`` or ``arguments``, an
  empty block) makes the whole output content, exactly as vLLM returns the raw output.

Where this differs from vLLM (a stream cannot take back what it sent; see docs/parsers.md):
a block that breaks *after* a call was announced keeps that call (with the arguments read so far)
and the broken rest is dropped up to ``</tool_call>``, as vLLM's streaming drops it; a
``</tool_call>`` inside a JSON string is part of the string (vLLM cuts the block there).
"""

from __future__ import annotations

from ..markers import held_suffix_len
from .single_call import SingleCallToolParser

START = "<tool_call>"
END = "</tool_call>"


class HermesToolParser(SingleCallToolParser):
    """Modes: ``text`` (before the first call), ``call`` (reading a block's JSON), ``tail`` (JSON
    done, expecting ``</tool_call>``), ``skip`` (dropping the rest of a broken block), ``between``
    (after a call: dropping text until the next block), ``raw`` (fallen back: all is content)."""

    name = "hermes"
    needs_special_tokens = False
    content_guards = {"text": "<", "raw": ""}  # START starts with "<"

    def _process(self, text: str, final: bool) -> None:
        if not self._buf and "<" not in text and self._mode in ("text", "between"):
            if self._mode == "text":  # no marker can start here: plain content
                self._content(text)
            return
        buf, self._buf = self._buf + text, ""
        i, n = 0, len(buf)
        while True:
            mode = self._mode
            if mode == "raw":
                self._content(buf[i:])
                return
            if mode in ("text", "between", "skip"):
                marker = END if mode == "skip" else START
                pos = buf.find(marker, i)
                if pos == -1:
                    keep = 0 if final else held_suffix_len(buf[max(i, n - len(marker)):], (marker,))
                    if mode == "text":
                        self._content(buf[i : n - keep])
                    self._buf = buf[n - keep :]
                    return
                if mode == "text":
                    self._content(buf[i:pos])
                i = pos + len(marker)
                if mode == "skip":
                    self._mode = "between"
                else:
                    self._begin_call(START)
                continue
            i = self._block_step(buf, i, final, END, "between")  # call, tail
            if i < 0:
                return
