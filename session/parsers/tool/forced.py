"""Tool calls the request forced: a named ``tool_choice`` and ``tool_choice: "required"``.

With these, vLLM constrains generation to JSON (structured outputs) and reads the output without
the model's tool parser, so these parsers are chosen by ``tool_choice`` whatever
``--tool-call-parser`` says:

- named (``{"type": "function", "function": {"name": N}}``): the whole output is the arguments of
  one call to ``N``, passed through raw, as vLLM passes it (an empty output is still that call,
  with empty arguments);
- ``required``: the output is a JSON list of ``{"name": str, "parameters": object | null}``; each
  becomes a call with ``json.dumps(parameters, ensure_ascii=False)`` arguments (``null`` when
  absent). Output that is not such a list gives no calls and no content, as vLLM gives when
  validation fails (calls already streamed stay).
"""

from __future__ import annotations

from typing import Any

from ..base import ParserContext
from .json_calls import CallListParser, CallObjectParser
from .streaming import StreamingToolParser


def forced_function_name(tool_choice: Any) -> str | None:
    """The function a named ``tool_choice`` forces (chat and responses shapes), else None."""
    if not isinstance(tool_choice, dict):
        return None
    function = tool_choice.get("function")
    name = function.get("name") if isinstance(function, dict) else tool_choice.get("name")
    return name if isinstance(name, str) else None


class NamedToolChoiceParser(StreamingToolParser):
    name = "named_tool_choice"

    def __init__(self, ctx: ParserContext) -> None:
        super().__init__(ctx)
        function = forced_function_name(ctx.tool_choice)
        if function is None:
            raise ValueError("NamedToolChoiceParser needs a named tool_choice in the context")
        self._function = function

    def _process(self, text: str, final: bool) -> None:
        if self._calls == 0 and (text or final):
            self.open_call(self._function)
        self.add_args(text)


class RequiredToolChoiceParser(StreamingToolParser):
    """Modes: ``list`` (reading), ``done`` (list complete or broken: the rest is dropped)."""

    name = "required_tool_choice"
    initial_mode = "list"

    def __init__(self, ctx: ParserContext) -> None:
        super().__init__(ctx)
        self._list: CallListParser | None = self._new_list()

    @staticmethod
    def _new_list() -> CallListParser:
        return CallListParser(("parameters",), default_args="null", args_starts="{n")

    def _save(self) -> dict[str, Any]:
        return {"l": None if self._list is None else self._list.to_state()}

    def _load(self, state: dict[str, Any]) -> None:
        self._list = None
        if state["l"] is not None:
            self._list = self._new_list()
            self._list.load_state(state["l"])

    def _plain_args_reader(self) -> CallObjectParser | None:
        return self._list.item if self._list is not None else None

    def _process(self, text: str, final: bool) -> None:
        reader = self._list
        i, n = 0, len(text)
        while reader is not None:
            j = reader.feed(text, i)
            if final and j >= n and not (reader.done or reader.failed):
                reader.end()
            item = reader.item
            if item is not None:
                item.drain(self)
            i = j
            if reader.failed or reader.done or (item is not None and item.done and not item.committed):
                self._mode, self._list = "done", None
                return
            if i >= n:
                return
