"""Minimal incremental parsers for derender tests (``<think>…</think>`` and
``<tool_call>{"name", "arguments"}</tool_call>``), independent of the real parser package, so the
derender machinery is tested against the parser contract itself."""

from __future__ import annotations

import json
from typing import Any, Self

from session.parsers.base import ParsedDelta, ParserContext, ReasoningParser, ToolCallDelta, ToolParser


def _partial_suffix(text: str, marker: str) -> int:
    for k in range(min(len(marker) - 1, len(text)), 0, -1):
        if marker.startswith(text[-k:]):
            return k
    return 0


class ToyThinkParser(ReasoningParser):
    name = "toy_think"
    OPEN, CLOSE = "<think>", "</think>"

    def __init__(self, ctx: ParserContext, *, inside: bool | None = None, ended: bool = False,
                 held: str = "", fresh: bool = True) -> None:
        super().__init__(ctx)
        self.inside = ctx.prompt_opens_reasoning if inside is None else inside
        self.ended = ended or ctx.prompt_ends_reasoning
        self.held = held
        self.fresh = fresh

    def feed(self, text: str) -> ParsedDelta:
        out = ParsedDelta()
        buf = self.held + text
        self.held = ""
        while buf:
            if self.ended:
                out.content += buf
                return out
            if not self.inside and self.fresh:
                k = _partial_suffix(buf, self.OPEN) if len(buf) < len(self.OPEN) else 0
                if buf.startswith(self.OPEN):
                    self.inside, self.fresh = True, False
                    buf = buf[len(self.OPEN):]
                    continue
                if k and self.OPEN.startswith(buf):
                    self.held = buf
                    return out
                self.fresh = False
                self.ended = True
                continue
            pos = buf.find(self.CLOSE)
            if pos != -1:
                out.reasoning += buf[:pos]
                buf = buf[pos + len(self.CLOSE):]
                self.inside, self.ended = False, True
                continue
            k = _partial_suffix(buf, self.CLOSE)
            out.reasoning += buf[: len(buf) - k]
            self.held = buf[len(buf) - k:]
            return out
        return out

    def finish(self) -> ParsedDelta:
        held, self.held = self.held, ""
        if self.inside:
            return ParsedDelta(reasoning=held)
        return ParsedDelta(content=held)

    def snapshot(self) -> dict[str, Any]:
        return {"i": self.inside, "e": self.ended, "h": self.held, "f": self.fresh}

    @classmethod
    def restore(cls, ctx: ParserContext, snapshot: dict[str, Any]) -> Self:
        return cls(ctx, inside=snapshot["i"], ended=snapshot["e"], held=snapshot["h"], fresh=snapshot["f"])

    @property
    def reasoning_ended(self) -> bool:
        return self.ended


class ToyToolParser(ToolParser):
    name = "toy_tool"
    OPEN, CLOSE = "<tool_call>", "</tool_call>"

    def __init__(self, ctx: ParserContext, *, calls: int = 0, inside: bool = False, buf: str = "") -> None:
        super().__init__(ctx)
        self.calls = calls
        self.inside = inside
        self.buf = buf

    def feed(self, text: str) -> ParsedDelta:
        out = ParsedDelta()
        buf = self.buf + text
        self.buf = ""
        while buf:
            if not self.inside:
                pos = buf.find(self.OPEN)
                if pos == -1:
                    k = _partial_suffix(buf, self.OPEN)
                    out.content += buf[: len(buf) - k]
                    self.buf = buf[len(buf) - k:]
                    return out
                out.content += buf[:pos]
                buf = buf[pos + len(self.OPEN):]
                self.inside = True
                continue
            pos = buf.find(self.CLOSE)
            if pos == -1:
                self.buf = buf
                return out
            self._call(buf[:pos], out)
            buf = buf[pos + len(self.CLOSE):]
            self.inside = False
        return out

    def _call(self, body: str, out: ParsedDelta) -> None:
        try:
            obj = json.loads(body)
            name, args = obj["name"], json.dumps(obj.get("arguments", {}), ensure_ascii=False)
        except (ValueError, KeyError, TypeError):
            out.content += self.OPEN + body + self.CLOSE
            return
        out.tool_calls.append(ToolCallDelta(self.calls, name, ""))
        out.tool_calls.append(ToolCallDelta(self.calls, None, args))
        self.calls += 1

    def finish(self) -> ParsedDelta:
        out = ParsedDelta()
        if self.inside:
            out.content = self.OPEN + self.buf
        else:
            out.content = self.buf
        self.buf, self.inside = "", False
        return out

    def snapshot(self) -> dict[str, Any]:
        return {"c": self.calls, "i": self.inside, "b": self.buf}

    @classmethod
    def restore(cls, ctx: ParserContext, snapshot: dict[str, Any]) -> Self:
        return cls(ctx, calls=snapshot["c"], inside=snapshot["i"], buf=snapshot["b"])

    @property
    def calls_made(self) -> int:
        return self.calls
