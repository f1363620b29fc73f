"""The harmony token grammar: markers, message headers as the harmony library reads them, and
which kind of message (call, reasoning, content, ignored) a header opens.

The full rules: docs/parsers.md, "gpt-oss harmony".
"""

from __future__ import annotations

__all__ = ["ARGS_HOLD", "BUILTIN_TOOLS", "CHANNEL", "CONSTRAIN", "HEADER_MAX", "MESSAGE", "ROLES", "START", "STOPS",
           "ascii_json", "message_kind", "normalize_recipient", "parse_header", "partial_marker"]

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


def normalize_recipient(recipient: str | None) -> str | None:
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


def ascii_json(text: str) -> str:
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


def partial_marker(text: str, markers: tuple[str, ...]) -> int:
    """Length of the longest suffix of ``text`` that is a proper prefix of one of ``markers``."""
    k = text.rfind("<", max(0, len(text) - 10))
    while k >= 0:
        tail = text[k:]
        if any(m.startswith(tail) and m != tail for m in markers):
            return len(text) - k
        k = text.rfind("<", max(0, len(text) - 10), k)
    return 0
