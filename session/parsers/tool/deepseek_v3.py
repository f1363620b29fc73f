"""``deepseek_v3``: DeepSeek-V3 / R1-0528 and DeepSeek-V3.1 tool calls.

Both formats live inside ``<｜tool▁calls▁begin｜>`` … ``<｜tool▁calls▁end｜>``:

- V3:   ``<｜tool▁call▁begin｜>function<｜tool▁sep｜>NAME\\n```json\\nARGS\\n```<｜tool▁call▁end｜>``
- V3.1: ``<｜tool▁call▁begin｜>NAME<｜tool▁sep｜>ARGS<｜tool▁call▁end｜>``

The text before ``<｜tool▁sep｜>`` tells them apart: ``function`` followed by anything but a JSON
opening bracket is V3's type field; anything else is a V3.1 name. As vLLM's ``DeepSeekV3`` /
``DeepSeekV31`` parsers: content is the text before ``<｜tool▁calls▁begin｜>`` (everything else
outside calls is dropped); arguments are the raw text the model wrote; a call that does not
match the format is dropped. Unlike vLLM's regexes (which stop at a newline), arguments may span
lines, and a V3 call whose arguments end at ``<｜tool▁call▁end｜>`` without the closing fence
still counts. The markers are special tokens: decode with them kept.
"""

from __future__ import annotations

from typing import Any

from ..markers import find_first, held_suffix_len
from .streaming import StreamingToolParser

CALLS_BEGIN = "<｜tool▁calls▁begin｜>"
CALLS_END = "<｜tool▁calls▁end｜>"
CALL_BEGIN = "<｜tool▁call▁begin｜>"
CALL_END = "<｜tool▁call▁end｜>"
SEP = "<｜tool▁sep｜>"
V3_FENCE = "```json\n"
V3_END = "\n```" + CALL_END


class DeepSeekV3ToolParser(StreamingToolParser):
    """Modes: ``text``; ``section`` (inside the calls section, between calls); ``head`` (up to
    ``<｜tool▁sep｜>``); ``sep`` (deciding V3 or V3.1); ``v3name`` / ``v3fence`` / ``v3args``;
    ``v31args``; ``skip`` (dropping a malformed call up to ``<｜tool▁call▁end｜>``)."""

    name = "deepseek_v3"
    needs_special_tokens = True
    content_guards = {"text": CALLS_BEGIN[0]}

    def __init__(self, ctx: Any) -> None:
        super().__init__(ctx)
        self._head = ""  # text before <｜tool▁sep｜>, until the first argument character decides
        self._fname = ""  # a V3 function name waiting for its ```json fence

    def _save(self) -> dict[str, Any]:
        return {"h": self._head, "f": self._fname}

    def _load(self, state: dict[str, Any]) -> None:
        self._head, self._fname = str(state["h"]), str(state["f"])

    def _process(self, text: str, final: bool) -> None:
        buf, self._buf = self._buf + text, ""
        i, n = 0, len(buf)
        while True:
            mode = self._mode
            if mode in ("text", "section", "skip"):
                marker = {"text": CALLS_BEGIN, "section": CALL_BEGIN, "skip": CALL_END}[mode]
                pos = buf.find(marker, i)
                end = pos if pos != -1 else n if final else _safe_end(buf, i, (marker,))
                if mode == "text":
                    self._content(buf[i:end])
                if pos == -1:
                    self._buf = buf[end:] if not final else ""
                    return
                self._mode = {"text": "section", "section": "head", "skip": "section"}[mode]
                i = pos + len(marker)
            elif mode == "head":
                sep = buf.find(SEP, i)
                stop = sep if sep != -1 else n
                if buf.find("\n", i, stop) != -1 or buf.find(CALL_END, i, stop) != -1:
                    self._mode = "skip"  # vLLM's pattern cannot match this call: it is dropped
                    continue
                if sep == -1:
                    self._buf = "" if final else buf[i:]
                    return
                self._head, self._mode, i = buf[i:sep], "sep", sep + len(SEP)
            elif mode == "sep":
                if i >= n:
                    return
                if self._head == "function" and buf[i] not in "{[":
                    self._mode = "v3name"
                else:
                    self.open_call(self._head)
                    self._mode = "v31args"
                self._head = ""
            elif mode == "v3name":
                nl = buf.find("\n", i)
                if nl == -1:
                    self._buf = "" if final else buf[i:]
                    return
                self._fname, self._mode, i = buf[i:nl], "v3fence", nl + 1
            elif mode == "v3fence":
                rest = buf[i:]
                if rest.startswith(V3_FENCE):
                    self.open_call(self._fname)
                    self._fname, self._mode, i = "", "v3args", i + len(V3_FENCE)
                elif V3_FENCE.startswith(rest) and not final:
                    self._buf = rest
                    return
                else:
                    self._fname, self._mode = "", "skip"
            else:  # v3args / v31args: raw arguments up to the end of the call
                ends = (V3_END, CALL_END) if mode == "v3args" else (CALL_END,)
                pos, marker = find_first(buf, ends, i)
                if pos == -1:
                    end = n if final else _safe_end(buf, i, ends)
                    self.add_args(buf[i:end])
                    self._buf = buf[end:]
                    return
                self.add_args(buf[i:pos])
                self._mode, i = "section", pos + len(marker)


def _safe_end(buf: str, i: int, markers: tuple[str, ...]) -> int:
    """End of what in ``buf[i:]`` cannot be the start of one of ``markers``."""
    longest = max(len(m) for m in markers)
    return len(buf) - held_suffix_len(buf[max(i, len(buf) - longest):], markers)
