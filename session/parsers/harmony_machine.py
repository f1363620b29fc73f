"""The harmony state machine: the message walk over the text, reasoning / content routing and
the tool-call arguments (JSON streamed canonical and ASCII-escaped, or raw), with its snapshot.

The full rules: docs/parsers.md, "gpt-oss harmony".
"""

from __future__ import annotations

from typing import Any

from .base import ParsedDelta, ToolCallDelta
from .errors import MalformedSnapshot
from .harmony_grammar import (
    ARGS_HOLD,
    HEADER_MAX,
    MESSAGE,
    START,
    STOPS,
    ascii_json,
    message_kind,
    normalize_recipient,
    parse_header,
    partial_marker,
)
from .tool.json_stream import JsonValueStreamer, is_plain

__all__ = ["HarmonyMachine"]


class HarmonyMachine:
    """The state machine. ``reasoning`` / ``tools``: whether analysis messages and function calls
    are surfaced (vLLM: a reasoning / tool parser configured); content always is."""

    __slots__ = ("args_held", "calls", "committed", "content_seen", "first", "held", "js", "kind", "mode",
                 "nonempty", "raw_args", "reasoning", "reasoning_seen", "recovery", "tools")

    def __init__(self, reasoning: bool, tools: bool) -> None:
        self.reasoning = reasoning
        self.tools = tools
        self.mode = "H"
        self.first = True  # the next header is parsed with the role the prompt gave (assistant)
        self.held = ""  # H: the header so far; S / C: a partial marker
        self.recovery = ""  # S / H: failed headers and <|start|> since the last message (vLLM's recovery)
        self.kind = "i"
        self.nonempty = False  # the current message produced text
        self.reasoning_seen = False
        self.content_seen = False
        self.calls = 0
        self.raw_args = False  # the current call's arguments are not JSON (raw text)
        self.js: JsonValueStreamer | None = None
        self.committed = False  # the JSON arguments produced output: they stay canonical
        self.args_held = ""  # raw argument text read before the JSON reader produced output

    # -- state ----------------------------------------------------------------------------------
    def snapshot(self) -> dict[str, Any]:
        snap: dict[str, Any] = {"m": self.mode}
        if self.held:
            snap["b"] = self.held
        if self.recovery:
            snap["v"] = self.recovery
        if not self.first:
            snap["f"] = 0
        if self.nonempty:
            snap["e"] = 1
        if self.mode == "C":
            snap["k"] = self.kind
            if self.raw_args:
                snap["a"] = 1
            if self.js is not None:
                snap["j"] = self.js.to_state()
            if self.committed:
                snap["c"] = 1
            if self.args_held:
                snap["w"] = self.args_held
        if self.reasoning_seen:
            snap["rs"] = 1
        if self.content_seen:
            snap["cs"] = 1
        if self.calls:
            snap["n"] = self.calls
        return snap

    def load(self, snap: dict[str, Any]) -> None:
        try:
            mode = snap["m"]
            if mode not in ("S", "H", "C", "X"):
                raise ValueError(mode)
            self.mode = mode
            self.held = str(snap.get("b", ""))
            self.recovery = str(snap.get("v", ""))
            if len(self.held) + len(self.recovery) > HEADER_MAX + len(MESSAGE):
                raise ValueError("held text too long")
            self.first = bool(snap.get("f", 1))
            self.kind = str(snap.get("k", "i"))
            if self.kind not in ("t", "r", "c", "i"):
                raise ValueError(self.kind)
            self.nonempty = bool(snap.get("e"))
            self.raw_args = bool(snap.get("a"))
            js = snap.get("j")
            self.js = None if js is None else JsonValueStreamer.from_state(list(js))
            self.committed = bool(snap.get("c"))
            self.args_held = str(snap.get("w", ""))
            if len(self.args_held) > ARGS_HOLD:
                raise ValueError("held arguments too long")
            self.reasoning_seen = bool(snap.get("rs"))
            self.content_seen = bool(snap.get("cs"))
            calls = snap.get("n", 0)
            if type(calls) is not int or calls < 0:
                raise ValueError("calls")
            self.calls = calls
        except (KeyError, TypeError, ValueError) as exc:
            raise MalformedSnapshot(f"not a harmony parser state ({exc})") from None

    # -- feeding --------------------------------------------------------------------------------
    def feed(self, text: str) -> ParsedDelta:
        out = ParsedDelta()
        if text:
            self._feed(text, out)
        return out

    def finish(self) -> ParsedDelta:
        out = ParsedDelta()
        mode = self.mode
        if mode == "C":
            if self.held:
                held, self.held = self.held, ""
                self._content(held, out)
            self._end_message(out)
        elif mode == "H":
            text = self.recovery + self.held
            self.recovery = self.held = ""
            if text:
                self._emit("c", text, out)
        self.mode = "S"
        self.held = ""
        return out

    def _feed(self, text: str, out: ParsedDelta) -> None:
        i = 0
        n = len(text)
        while i < n:
            mode = self.mode
            if mode == "X":
                self._emit("c", text[i:], out)
                return
            if mode == "C":
                buf = self.held + text[i:] if self.held else text[i:]
                self.held = ""
                cut, marker = self._find_stop(buf)
                if cut < 0:
                    keep = partial_marker(buf, STOPS)
                    body = buf[:len(buf) - keep] if keep else buf
                    if body:
                        self._content(body, out)
                    self.held = buf[len(buf) - keep:] if keep else ""
                    return
                if cut:
                    self._content(buf[:cut], out)
                self._end_message(out)
                self.mode = "S"
                text, i, n = buf, cut + len(marker), len(buf)
                continue
            if mode == "S":
                buf = self.held + text[i:] if self.held else text[i:]
                self.held = ""
                k = buf.find(START)
                if k < 0:
                    keep = partial_marker(buf, (START,))
                    self.held = buf[len(buf) - keep:] if keep else ""
                    return
                self.recovery += START
                self.mode = "H"
                text, i, n = buf, k + len(START), len(buf)
                if len(self.recovery) > HEADER_MAX:
                    self._overflow(out)
                continue
            # mode == "H": the header runs to <|message|>
            start = max(0, len(self.held) - len(MESSAGE) + 1)
            buf = self.held + text[i:]
            k = buf.find(MESSAGE, start)
            if k < 0:
                self.held = buf
                if len(self.recovery) + len(buf) - partial_marker(buf, (MESSAGE,)) > HEADER_MAX:
                    self._overflow(out)
                return
            if len(self.recovery) + k > HEADER_MAX:
                self.held = buf[:k]
                self._overflow(out)
                text, i, n = buf, k, len(buf)
                continue
            header = buf[:k]
            self.held = ""
            text, i, n = buf, k + len(MESSAGE), len(buf)
            parsed = parse_header(header, self.first)
            if parsed is None:  # the library refuses it: back to expecting <|start|>
                self.recovery += header
                self.mode = "S"
                if len(self.recovery) > HEADER_MAX:
                    self._overflow(out)
                continue
            self.first = False
            self.recovery = ""
            self._begin_message(*parsed, out)

    def _overflow(self, out: ParsedDelta) -> None:
        text = self.recovery + self.held
        self.recovery = self.held = ""
        self.mode = "X"
        if text:
            self._emit("c", text, out)

    @staticmethod
    def _find_stop(buf: str) -> tuple[int, str]:
        best, marker = -1, ""
        k = buf.find("<|")
        while k >= 0:
            for m in STOPS:
                if buf.startswith(m, k):
                    return k, m
            k = buf.find("<|", k + 1)
        return best, marker

    def _begin_message(self, role: str, channel: str | None, recipient: str | None, content_type: str | None,
                       out: ParsedDelta) -> None:
        recipient = normalize_recipient(recipient)
        kind = message_kind(role, channel, recipient)
        if (kind == "t" and not self.tools) or (kind == "r" and not self.reasoning):
            kind = "i"  # (vLLM: no tool / reasoning parser configured, so no case takes it)
        self.mode = "C"
        self.kind = kind
        self.nonempty = False
        self.raw_args = False
        self.js = None
        self.committed = False
        self.args_held = ""
        if kind == "t":
            assert recipient is not None
            out.tool_calls.append(ToolCallDelta(self.calls, recipient.removeprefix("functions."), ""))
            self.calls += 1
            if content_type is not None and "json" not in content_type:
                self.raw_args = True
            else:
                self.js = JsonValueStreamer()

    def _content(self, text: str, out: ParsedDelta) -> None:
        kind = self.kind
        if kind == "t":
            if self.raw_args:
                out.tool_calls.append(ToolCallDelta(self.calls - 1, None, text))
                return
            js = self.js
            if js is None or js.done or js.failed:
                return  # text after the value (or after the point it broke): dropped
            if self.committed and js.in_plain_string and is_plain(text):  # inside a string argument
                out.tool_calls.append(ToolCallDelta(self.calls - 1, None, ascii_json(text)))
                return
            parts: list[str] = []
            js.feed(text, 0, parts)
            args = ascii_json("".join(parts))
            if args:
                self.committed = True
                self.args_held = ""
                out.tool_calls.append(ToolCallDelta(self.calls - 1, None, args))
            elif not self.committed:
                if js.failed:  # not JSON from its start: vLLM returns the raw text, so do we
                    self.raw_args = True
                    self.js = None
                    raw, self.args_held = self.args_held + text, ""
                    out.tool_calls.append(ToolCallDelta(self.calls - 1, None, raw))
                elif len(self.args_held) + len(text) <= ARGS_HOLD:
                    self.args_held += text
                else:  # (a run of whitespace or digits this long: no fallback any more)
                    self.committed = True
                    self.args_held = ""
        elif kind != "i":
            self._emit(kind, text, out)

    def _emit(self, kind: str, text: str, out: ParsedDelta) -> None:
        """Reasoning or content text of the current message, joined to an earlier message's with
        "\\n" as vLLM's non-streaming answer joins them."""
        if not self.nonempty:
            self.nonempty = True
            if kind == "r":
                if self.reasoning_seen:
                    text = "\n" + text
                self.reasoning_seen = True
            else:
                if self.content_seen:
                    text = "\n" + text
                self.content_seen = True
        if kind == "r":
            out.reasoning += text
        else:
            out.content += text

    def _end_message(self, out: ParsedDelta) -> None:
        js = self.js
        if js is not None:
            parts: list[str] = []
            js.end(parts)
            args = ascii_json("".join(parts))
            if not args and not self.committed:
                args = self.args_held  # never valid JSON: the raw text, as vLLM
            if args:
                out.tool_calls.append(ToolCallDelta(self.calls - 1, None, args))
        self.js = None
        self.committed = False
        self.args_held = ""
        self.kind = "i"
        self.nonempty = False
        self.raw_args = False
        self.recovery = ""

    def in_plain_reasoning(self) -> bool:
        return self.mode == "C" and self.kind == "r" and self.nonempty and not self.held

    def in_plain_content(self) -> bool:
        """In a content message past its first text, nothing held: a text without "<" is content."""
        return self.mode == "C" and self.kind == "c" and self.nonempty and not self.held

    def plain_args_call(self, parallel: bool) -> int | None:
        """The call whose arguments a JSON-plain text without "<" (every stop marker starts with
        one) goes to (ToolParser.plain_args_call): inside a JSON string of arguments that already
        streamed (ASCII-escaped: :meth:`plain_args_ascii`), or in raw (non-JSON) arguments (as it
        is), nothing held."""
        if self.mode != "C" or self.kind != "t" or self.held:
            return None
        if not self.raw_args:
            js = self.js
            if js is None or not self.committed or js.failed or not js.in_plain_string:
                return None
        index = self.calls - 1
        return index if parallel or index == 0 else None

    def plain_args_ascii(self) -> bool:
        """JSON arguments are ``json.dumps`` with ``ensure_ascii``; raw ones are the text."""
        return not self.raw_args
