"""gpt-oss's harmony output format, split incrementally as vLLM 0.32 splits it.

The full rules: docs/parsers.md, "gpt-oss harmony".
"""

from __future__ import annotations

import functools
from typing import Any, ClassVar, Self

from .base import ParsedDelta, ParserContext, ReasoningParser, ToolCallDelta, ToolParser
from .errors import MalformedSnapshot
from .tool.json_stream import JsonValueStreamer, is_plain

__all__ = ["HEADER_MAX", "HarmonyMachine", "HarmonyReasoningParser", "HarmonyToolParser", "harmony_parser",
           "is_harmony_model", "parse_header"]

START, MESSAGE, CHANNEL, CONSTRAIN = "<|start|>", "<|message|>", "<|channel|>", "<|constrain|>"
STOPS = ("<|end|>", "<|call|>", "<|return|>")
# A header (with what the library would keep of failed headers since the last message) longer than
# this is not a header: the rest of the output is content (docs: harmony, deliberate differences).
HEADER_MAX = 256
ARGS_HOLD = 64  # raw argument text held until the JSON reader shows the arguments are JSON
ROLES = ("user", "assistant", "system", "developer", "tool")
BUILTIN_TOOLS = ("python", "browser", "container")  # vLLM's BUILTIN_TOOL_TO_MCP_SERVER_LABEL

# Rust's char::is_whitespace (Unicode White_Space) and split_ascii_whitespace's set
_WS = frozenset("\t\n\x0b\x0c\r \x85\xa0\u1680\u2000\u2001\u2002\u2003\u2004\u2005\u2006\u2007\u2008\u2009"
                "\u200a\u2028\u2029\u202f\u205f\u3000")
_ASCII_WS = " \t\n\x0c\r"


def is_harmony_model(config: dict[str, Any] | None) -> bool:
    """Whether vLLM 0.32 renders and derenders this model with harmony (``model_type: gpt_oss``)."""
    return bool(config) and config.get("model_type") == "gpt_oss"  # type: ignore[union-attr]


def _trim(s: str) -> str:
    i, j = 0, len(s)
    while i < j and s[i] in _WS:
        i += 1
    while j > i and s[j - 1] in _WS:
        j -= 1
    return s[i:j]


def _split_ascii(s: str) -> list[str]:
    parts: list[str] = []
    cur: list[str] = []
    for c in s:
        if c in _ASCII_WS:
            if cur:
                parts.append("".join(cur))
                cur = []
        else:
            cur.append(c)
    if cur:
        parts.append("".join(cur))
    return parts


def parse_header(header: str, first: bool) -> tuple[str, str | None, str | None, str | None] | None:
    """(role, channel, recipient, content type) of a message header as the harmony library reads
    it (``first``: the prompt already said ``<|start|>assistant``), or None where it refuses it."""
    channel: str | None = None
    idx = header.find(CHANNEL)
    if idx >= 0:
        after = header[idx + len(CHANNEL):]
        end = next((k for k, c in enumerate(after) if c in _WS or c == "<"), len(after))
        if end == 0:
            return None
        channel = after[:end]
        header = header[:idx] + after[end:]
    header = _trim(header)
    if CONSTRAIN in header:
        header = _trim(header.replace(CONSTRAIN, " " + CONSTRAIN))
    parts = _split_ascii(header)
    if first:
        role = "assistant"
    else:
        if not parts:
            return None
        if parts[0] in ROLES:
            role = parts[0]
        elif len(parts) > 1 or parts[0].startswith("to="):
            parts.pop(0)
            role = "tool"
        else:
            return None
    if parts and parts[0] == role:
        parts.pop(0)
    recipient: str | None = None
    content_type: str | None = None
    if parts:
        count = len(parts)
        last = parts.pop()
        if last.startswith("to="):
            recipient = last[3:]
        elif count == 1:
            recipient = last
        else:
            content_type = last
            if parts:
                raw = parts.pop()
                recipient = raw[3:] if raw.startswith("to=") else raw
    if parts:
        return None
    return role, channel, recipient, content_type


def _normalize_recipient(recipient: str | None) -> str | None:
    if recipient is None:
        return None
    idx = recipient.find(CONSTRAIN)
    if idx < 0:
        return recipient
    return recipient[:idx].rstrip() or None


def _is_function(recipient: str) -> bool:
    if not recipient or recipient.startswith("<|"):
        return False
    if recipient.startswith("functions."):
        return len(recipient) > len("functions.")
    if recipient == "assistant" or recipient in BUILTIN_TOOLS:
        return False
    return recipient.split(".", 1)[0] not in BUILTIN_TOOLS


def message_kind(role: str, channel: str | None, recipient: str | None) -> str:
    """``t`` tool call, ``r`` reasoning, ``c`` content or ``i`` ignored (vLLM's ``_SegmentType``,
    with its non-streaming rule that only assistant messages count)."""
    if role != "assistant":
        return "i"
    if recipient and _is_function(recipient):
        return "t"
    if channel == "analysis":
        return "r"
    if channel == "final" or (channel == "commentary" and recipient is None):
        return "c"
    return "i"


def _ascii(text: str) -> str:
    """Canonical JSON text with every non-ASCII character escaped as ``json.dumps`` does."""
    if text.isascii():
        return text
    out: list[str] = []
    for c in text:
        o = ord(c)
        if o < 0x80:
            out.append(c)
        elif o < 0x10000:
            out.append(f"\\u{o:04x}")
        else:
            o -= 0x10000
            out.append(f"\\u{0xD800 + (o >> 10):04x}\\u{0xDC00 + (o & 0x3FF):04x}")
    return "".join(out)


def _partial(text: str, markers: tuple[str, ...]) -> int:
    """Length of the longest suffix of ``text`` that is a proper prefix of one of ``markers``."""
    k = text.rfind("<", max(0, len(text) - 10))
    while k >= 0:
        tail = text[k:]
        if any(m.startswith(tail) and m != tail for m in markers):
            return len(text) - k
        k = text.rfind("<", max(0, len(text) - 10), k)
    return 0


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
                    keep = _partial(buf, STOPS)
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
                    keep = _partial(buf, (START,))
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
                if len(self.recovery) + len(buf) - _partial(buf, (MESSAGE,)) > HEADER_MAX:
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
        recipient = _normalize_recipient(recipient)
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
                out.tool_calls.append(ToolCallDelta(self.calls - 1, None, _ascii(text)))
                return
            parts: list[str] = []
            js.feed(text, 0, parts)
            args = _ascii("".join(parts))
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
            args = _ascii("".join(parts))
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


class _HarmonyReasoningBase(ReasoningParser):
    """The machine in the reasoning slot: it returns reasoning, content and tool calls."""

    needs_special_tokens = True
    surface_reasoning: ClassVar[bool] = True
    surface_tools: ClassVar[bool] = False

    def __init__(self, ctx: ParserContext) -> None:
        super().__init__(ctx)
        self.machine = HarmonyMachine(self.surface_reasoning, self.surface_tools)

    def feed(self, text: str) -> ParsedDelta:
        return self.machine.feed(text)

    def finish(self) -> ParsedDelta:
        return self.machine.finish()

    def snapshot(self) -> dict[str, Any]:
        return {"p": self.name, **self.machine.snapshot()}

    @classmethod
    def restore(cls, ctx: ParserContext, snapshot: dict[str, Any]) -> Self:
        if not isinstance(snapshot, dict) or snapshot.get("p") != cls.name:
            raise MalformedSnapshot(f"not a {cls.name} parser state")
        parser = cls(ctx)
        parser.machine.load(snapshot)
        return parser

    @property
    def reasoning_ended(self) -> bool:
        return False  # the machine splits everything itself (no tool parser follows it)

    @property
    def calls_made(self) -> int:
        return self.machine.calls

    def plain_reasoning_guard(self) -> str | None:
        return "<" if self.machine.in_plain_reasoning() else None

    def plain_content_guard(self) -> str | None:
        return "<" if self.machine.in_plain_content() else None

    def plain_args_call(self) -> int | None:
        return self.machine.plain_args_call(self.ctx.parallel_tool_calls)

    def plain_args_guard(self) -> str:
        return "<"

    def plain_args_ascii(self) -> bool:
        return self.machine.plain_args_ascii()


class HarmonyReasoningParser(_HarmonyReasoningBase):
    """``--reasoning-parser openai_gptoss``: analysis → reasoning, final / preamble → content."""

    name = "openai_gptoss"


class HarmonyToolParser(ToolParser):
    """``--tool-call-parser openai``: the machine in the tool slot (content and function calls;
    analysis dropped, as vLLM's HarmonyParser without a reasoning parser drops it). With a gpt_oss
    model the derenderer runs :func:`harmony_parser` in the reasoning slot instead."""

    name = "openai"
    needs_special_tokens = True

    def __init__(self, ctx: ParserContext) -> None:
        super().__init__(ctx)
        self.machine = HarmonyMachine(False, True)

    def feed(self, text: str) -> ParsedDelta:
        return self.machine.feed(text)

    def finish(self) -> ParsedDelta:
        return self.machine.finish()

    def snapshot(self) -> dict[str, Any]:
        return {"p": self.name, **self.machine.snapshot()}

    @classmethod
    def restore(cls, ctx: ParserContext, snapshot: dict[str, Any]) -> Self:
        if not isinstance(snapshot, dict) or snapshot.get("p") != cls.name:
            raise MalformedSnapshot(f"not a {cls.name} parser state")
        parser = cls(ctx)
        parser.machine.load(snapshot)
        return parser

    @property
    def calls_made(self) -> int:
        return self.machine.calls

    def plain_content_guard(self) -> str | None:
        return "<" if self.machine.in_plain_content() else None

    def plain_args_call(self) -> int | None:
        return self.machine.plain_args_call(self.ctx.parallel_tool_calls)

    def plain_args_guard(self) -> str:
        return "<"

    def plain_args_ascii(self) -> bool:
        return self.machine.plain_args_ascii()


@functools.cache
def harmony_parser(reasoning: bool, tools: bool) -> type[ReasoningParser]:
    """The parser a gpt_oss model's derender runs in the reasoning slot (no tool parser after it):
    reasoning surfaced when ``--reasoning-parser openai_gptoss`` is configured, function calls when
    ``--tool-call-parser openai`` is (with ``--enable-auto-tool-choice``), as vLLM's HarmonyParser."""
    if reasoning and not tools:
        return HarmonyReasoningParser
    name = f"harmony{'+r' if reasoning else ''}{'+t' if tools else ''}"
    return type(f"Harmony{'R' if reasoning else ''}{'T' if tools else ''}Parser", (_HarmonyReasoningBase,),
                {"name": name, "surface_reasoning": reasoning, "surface_tools": tools,
                 "__module__": __name__})


def harmony_for(tool_parser: type[ToolParser] | None, reasoning_parser: type[ReasoningParser] | None,
                enable_auto_tool_choice: bool) -> type[ReasoningParser] | None:
    """The one parser the derender runs (in the reasoning slot, with no tool parser after it) when
    the configured parsers are the harmony ones (``--tool-call-parser openai`` and / or
    ``--reasoning-parser openai_gptoss``), else None. As vLLM's HarmonyParser it parses function
    calls whatever the request's ``tool_choice`` and tools (with ``--enable-auto-tool-choice``)."""
    reasoning = reasoning_parser is HarmonyReasoningParser
    tools = tool_parser is HarmonyToolParser
    if not (reasoning or tools):
        return None
    return harmony_parser(reasoning, tools and enable_auto_tool_choice)
