"""``glm45`` / ``glm47``: GLM-4.5 / 4.6 / 4.7 / 5 ``<think>`` … ``</think>`` reasoning.

The full rules: docs/parsers.md (the family's section: its split, state and every difference from vLLM).
"""

from __future__ import annotations

from typing import Any, ClassVar

from ..base import ParsedDelta, ParserContext
from ..markers import find_first, held_suffix_len
from .shared import ModalReasoningParser, hold_trailing_space, thinking_enabled

THINK_START = "<think>"
THINK_END = "</think>"
TOOL_CALL = "<tool_call>"
# The most trailing reasoning whitespace held back; a longer run is emitted (not stripped) beyond it.
WS_HOLD = 256

_REASONING_MARKERS = (THINK_START, THINK_END, TOOL_CALL)
_CONTENT_MARKERS = (THINK_START, THINK_END)


class GlmReasoningParser(ModalReasoningParser):
    """Modes: ``r`` reasoning, ``c`` content (watching for ``<think>`` / ``</think>``), ``x``
    thinking off (all content)."""

    name: ClassVar[str] = "glm45"
    # <think>, </think> and <tool_call> are special tokens in GLM's tokenizer
    needs_special_tokens: ClassVar[bool] = True
    engine_based: ClassVar[bool] = True  # vLLM 0.32 builds it from its engine grammar (vllm/parser/glm47_moe.py)
    modes: ClassVar[tuple[str, ...]] = ("r", "c", "x")

    def __init__(self, ctx: ParserContext) -> None:
        super().__init__(ctx)
        self._mode = "r" if thinking_enabled(ctx.chat_template_kwargs) else "x"
        self._buf = ""  # a partial tag
        self._ws = ""  # trailing reasoning whitespace not emitted yet

    @property
    def reasoning_ended(self) -> bool:
        return self._mode != "r"

    @property
    def passthrough(self) -> bool:
        return self._mode == "x"

    plain_reasoning_hold_space: ClassVar[bool] = True  # (its trailing whitespace is held: stripped at the end)

    def plain_reasoning_guard(self) -> str | None:
        # Every marker starts with "<"; with trailing whitespace held, a text is not simply reasoning.
        return "<" if self._mode == "r" and not self._buf and not self._ws else None

    def plain_content_guard(self) -> str | None:
        # After the reasoning only <think> / </think> are looked for, both starting with "<".
        return "<" if self._mode == "c" and not self._buf else None

    # -- state -------------------------------------------------------------------------------
    def _save(self) -> dict[str, Any]:
        return {"w": self._ws}

    def _load(self, state: dict[str, Any]) -> None:
        buf, ws = state["b"], state["w"]
        if not isinstance(buf, str) or not isinstance(ws, str) or len(ws) > WS_HOLD or ws.strip():
            raise ValueError(ws)
        self._ws = ws

    # -- splitting ---------------------------------------------------------------------------
    def _process(self, text: str, final: bool) -> ParsedDelta:
        if self._mode == "x":
            return ParsedDelta(content=text)
        if not self._buf and "<" not in text:  # every tag starts with "<": no tag here
            if self._mode == "c":
                return ParsedDelta(content=text)
            reasoning: list[str] = []
            self._text(text, reasoning, [])
            if final:
                self._ws = ""
            return ParsedDelta(reasoning="".join(reasoning))
        buf, self._buf = self._buf + text, ""
        reasoning = []
        content: list[str] = []
        i, n = 0, len(buf)
        while True:
            markers = _REASONING_MARKERS if self._mode == "r" else _CONTENT_MARKERS
            # every tag starts with "<"
            pos, marker = (-1, "") if buf.find("<", i) == -1 else find_first(buf, markers, i)
            if pos == -1:
                end = n if final else n - held_suffix_len(buf[max(i, n - len(TOOL_CALL)):], markers)
                self._text(buf[i:end], reasoning, content)
                self._buf = buf[end:]
                break
            self._text(buf[i:pos], reasoning, content)
            i = pos + len(marker)
            if self._mode == "r":
                if marker == THINK_END:
                    self._mode = "c"
                elif marker == TOOL_CALL:  # the call ends reasoning; the marker is content
                    self._mode = "c"
                    content.append(marker)
            elif marker == THINK_START:
                self._mode = "r"
            # (<think> while reasoning and </think> in content are dropped)
        if final:
            self._ws = ""  # the reasoning's trailing whitespace is stripped
        return ParsedDelta(reasoning="".join(reasoning), content="".join(content))

    def _text(self, text: str, reasoning: list[str], content: list[str]) -> None:
        if not text:
            return
        if self._mode == "c":
            content.append(text)
            return
        # (a run longer than WS_HOLD is emitted but for its last WS_HOLD characters)
        sent, self._ws = hold_trailing_space(self._ws, text, WS_HOLD)
        reasoning.append(sent)
