"""``mistral``: Magistral / Ministral-3 reasoning, ``[THINK]`` … ``[/THINK]`` (v13 tokenizers' special
tokens).

The full rules: docs/parsers.md (the family's section: its split, state and every difference from vLLM).
"""

from __future__ import annotations

from typing import Any

from ..base import ParsedDelta, ParserContext
from ..markers import find_first, held_suffix_len
from .shared import ModalReasoningParser, hold_trailing_space

THINK_START = "[THINK]"
THINK_END = "[/THINK]"
TOOL_CALLS = "[TOOL_CALLS]"
_CONTENT_MARKERS = (THINK_START, THINK_END)
_REASONING_MARKERS = (THINK_START, THINK_END, TOOL_CALLS)
_LONGEST = len(TOOL_CALLS)


class MistralReasoningParser(ModalReasoningParser):
    name = "mistral"
    needs_special_tokens = True
    engine_based = True  # vLLM 0.32 builds it from its engine grammar (vllm/parser/mistral.py)

    def __init__(self, ctx: ParserContext) -> None:
        super().__init__(ctx)
        self._mode = "content"
        self._buf = ""
        self._space = ""

    def _save(self) -> dict[str, Any]:
        return {"w": self._space}

    def _load(self, state: dict[str, Any]) -> None:
        self._space = str(state["w"])

    def _process(self, text: str, final: bool) -> ParsedDelta:
        buf, self._buf = self._buf + text, ""
        reasoning: list[str] = []
        content: list[str] = []
        if "[" in buf:
            i, n = 0, len(buf)
            while True:
                markers = _REASONING_MARKERS if self._mode == "reasoning" else _CONTENT_MARKERS
                out = reasoning if self._mode == "reasoning" else content
                pos, marker = find_first(buf, markers, i)
                if pos == -1:
                    end = n if final else n - held_suffix_len(buf[max(i, n - _LONGEST):], markers)
                    out.append(buf[i:end])
                    self._buf = buf[end:]
                    break
                out.append(buf[i:pos])
                i = pos + len(marker)
                if marker == THINK_START:
                    self._mode = "reasoning"
                elif marker == THINK_END:
                    self._mode = "content"
                else:  # [TOOL_CALLS] while reasoning: the call (marker included) is content
                    self._mode, i = "content", pos
        elif self._mode == "reasoning":
            reasoning.append(buf)
        else:
            content.append(buf)
        sent, self._space = hold_trailing_space(self._space, "".join(reasoning))
        if final:
            self._space = ""
        return ParsedDelta(reasoning=sent, content="".join(content))
