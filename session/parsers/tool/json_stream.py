"""An incremental JSON reader that re-emits the canonical form of what it has read:
``JsonValueStreamer`` reads one JSON value in pieces and appends, as soon as each part is certain,
the text of ``json.dumps(json.loads(value), ensure_ascii=False)``, for any split; small JSON-ready
state, never the consumed text. What it accepts, its one exception (lone surrogates) and its limit
(duplicate keys): docs/parsers.md, "Arguments: canonical streaming".
"""

from __future__ import annotations

import json
import re
from typing import Any

JSON_WS = " \t\n\r"
_WS_RUN = re.compile(r"[ \t\n\r]*")
_STR_RUN = re.compile(r'[^"\\\x00-\x1f]+')
# Characters json.dumps(ensure_ascii=False) writes unchanged inside a string: no quote, backslash,
# control character or (lone) surrogate.
_PLAIN_RUN = re.compile(r'[^"\\\x00-\x1f\ud800-\udfff]+')
_NUM_CHARS = frozenset("0123456789+-.eE")
_NUM_RUN = re.compile(r"[0-9+\-.eE]+")
_NUMBER = re.compile(r"-?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?(?:[eE][-+]?[0-9]+)?")
_LITERALS = {"true": "true", "false": "false", "null": "null", "NaN": "NaN", "Infinity": "Infinity",
             "-Infinity": "-Infinity"}
_LITERAL_STARTS = frozenset("tfnNI")
_SIMPLE_ESCAPES = {'"': '"', "\\": "\\", "/": "/", "b": "\b", "f": "\f", "n": "\n", "r": "\r", "t": "\t"}
_HEX = frozenset("0123456789abcdefABCDEF")

# Nesting deeper than this is refused (json.loads hits Python's recursion limit a little under 1000).
MAX_DEPTH = 900

# Frame codes on the container stack.
#   object: "o" after "{" (key or "}"), "k" after "," (key), ":" after a key, "v" after ":" (value),
#           "," after a member ("," or "}")
#   array:  "a" after "[" (value or "]"), "w" after "," (value), ";" after an element ("," or "]")
_EXPECT_VALUE = frozenset("vaw")


_LONE_SURROGATE = re.compile("[\ud800-\udfff]")


def without_lone_surrogates(text: str) -> str:
    """``text`` with any lone surrogate replaced by U+FFFD (for names, which are not JSON)."""
    return _LONE_SURROGATE.sub("\ufffd", text)


def _esc(text: str) -> str:
    """The body of ``json.dumps(text, ensure_ascii=False)`` (without the quotes), except that a
    lone surrogate (``"\\ud83d"`` not followed by its pair) stays escaped: ``json.dumps`` would
    put the raw code point in the string, which no UTF-8 encoder (orjson, the HTTP response)
    accepts. The escaped form is still valid JSON and ``json.loads`` reads the same value."""
    return escape_lone_surrogates(json.dumps(text, ensure_ascii=False)[1:-1])


def escape_lone_surrogates(json_text: str) -> str:
    """JSON text with any raw lone surrogate written as its ``\\uXXXX`` escape."""
    if _LONE_SURROGATE.search(json_text) is None:
        return json_text
    return _LONE_SURROGATE.sub(lambda m: f"\\u{ord(m.group()):04x}", json_text)


def is_plain(text: str) -> bool:
    """Whether every character of ``text`` stands for itself inside a canonical JSON string
    (``json.dumps(text, ensure_ascii=False) == '"' + text + '"'``): no quote, backslash, control
    character or surrogate."""
    if text.isprintable():  # (no control character or surrogate: the common case, without a regex)
        return '"' not in text and "\\" not in text
    return _PLAIN_RUN.fullmatch(text) is not None


def is_plain_without(text: str, guard: str | re.Pattern[str]) -> bool:
    """The test of the arguments shortcut (``ToolParser.plain_args_guard``): :func:`is_plain` holds
    and ``text`` holds no ``guard`` (a character, or a compiled pattern with no match in it)."""
    if not is_plain(text):
        return False
    return guard not in text if isinstance(guard, str) else guard.search(text) is None


def ascii_body(text: str) -> str:
    """A JSON-plain ``text`` as it appears inside a ``json.dumps`` string with ``ensure_ascii``
    (each non-ASCII character a ``\\uXXXX`` escape, a surrogate pair beyond the BMP)."""
    return text if text.isascii() else json.dumps(text)[1:-1]


def dumps(value: Any) -> str:
    """``json.dumps(value, ensure_ascii=False)`` with any lone surrogate left escaped (see
    :func:`_esc`): the JSON text a parser writes for a whole value."""
    return escape_lone_surrogates(json.dumps(value, ensure_ascii=False))


def string_body(text: str) -> str:
    """``text`` as it appears inside a JSON string (:func:`dumps` of it without the quotes)."""
    return text if is_plain(text) else _esc(text)


def canonical_number(text: str) -> str | None:
    """``json.dumps(json.loads(text))`` for a complete number token, or None if it is not one."""
    if _NUMBER.fullmatch(text) is None:
        return None
    try:
        if "." in text or "e" in text or "E" in text:
            return json.dumps(float(text))
        return str(int(text))
    except ValueError:  # e.g. more digits than int() accepts: json.loads refuses it too
        return None


class JsonValueStreamer:
    """Reads one JSON value incrementally. See the module docstring.

    ``feed(text, i, out)`` consumes ``text`` from index ``i``, appends canonical output to ``out``
    and returns the index where it stopped: at the end of ``text``, just after the value once it is
    complete (``done``), or at the offending character (``failed``). A number at the very end of
    the value needs one more character (or ``end()``) to be known complete; that character is not
    consumed.
    """

    __slots__ = ("_hs", "_pend", "_stack", "_tok", "_tok_key", "done", "failed", "started")

    def __init__(self) -> None:
        self._stack: list[str] = []
        self._tok = ""  # "" none, "s" string, "n" number, "l" literal
        self._tok_key = False  # the string being read is an object key
        self._pend = ""  # number/literal text so far, or an unfinished escape in a string
        self._hs = 0  # a decoded high surrogate waiting to see whether a low one follows
        self.started = False
        self.done = False
        self.failed = False

    # -- state ------------------------------------------------------------------------------
    def to_state(self) -> list[Any]:
        return ["".join(self._stack), self._tok, self._tok_key, self._pend, self._hs, self.started,
                self.done, self.failed]

    @classmethod
    def from_state(cls, state: list[Any]) -> JsonValueStreamer:
        s = cls()
        stack, s._tok, s._tok_key, s._pend, s._hs, s.started, s.done, s.failed = state
        s._stack = list(stack)
        return s

    @property
    def depth(self) -> int:
        return len(self._stack)

    # -- driving ----------------------------------------------------------------------------
    def end(self, out: list[str]) -> None:
        """The input ended: a number still being read at the top level is complete now."""
        if self._tok == "n" and not self._stack and not self.done and not self.failed:
            self._finish_number(out)

    def feed(self, text: str, i: int, out: list[str]) -> int:
        n = len(text)
        while i < n and not self.done and not self.failed:
            tok = self._tok
            if tok == "s":
                i = self._string(text, i, out)
                continue
            if tok == "n":
                i = self._number(text, i, out)
                continue
            if tok == "l":
                i = self._literal(text, i, out)
                continue
            c = text[i]
            if c in JSON_WS:
                i = _WS_RUN.match(text, i).end()  # type: ignore[union-attr]
                continue
            state = self._stack[-1] if self._stack else "v"
            if state in _EXPECT_VALUE:
                if state == "a" and c == "]":
                    self._close(out, "]")
                    i += 1
                    continue
                if not self._start_value(c, out):
                    self.failed = True
                    break
                i += 1
                continue
            if state in "ok":
                if c == '"':
                    self._tok, self._tok_key = "s", True
                    out.append('"')
                    i += 1
                    continue
                if state == "o" and c == "}":
                    self._close(out, "}")
                    i += 1
                    continue
                self.failed = True
                break
            if state == ":":
                if c != ":":
                    self.failed = True
                    break
                self._stack[-1] = "v"
                out.append(": ")
                i += 1
                continue
            if state == ",":
                if c == ",":
                    self._stack[-1] = "k"
                    out.append(", ")
                elif c == "}":
                    self._close(out, "}")
                else:
                    self.failed = True
                    break
                i += 1
                continue
            # state == ";"
            if c == ",":
                self._stack[-1] = "w"
                out.append(", ")
            elif c == "]":
                self._close(out, "]")
            else:
                self.failed = True
                break
            i += 1
        return i

    @property
    def in_plain_string(self) -> bool:
        """Inside a string with no escape or surrogate pending: feeding a text for which
        :func:`is_plain` holds then emits exactly that text and changes nothing else (the fast
        path of the tool parsers)."""
        return self._tok == "s" and not self._pend and not self._hs

    # -- values -----------------------------------------------------------------------------
    def _start_value(self, c: str, out: list[str]) -> bool:
        self.started = True
        if c == '"':
            self._tok, self._tok_key = "s", False
            out.append('"')
        elif c == "{" or c == "[":
            if len(self._stack) >= MAX_DEPTH:
                return False
            self._stack.append("o" if c == "{" else "a")
            out.append(c)
        elif c == "-" or "0" <= c <= "9":
            self._tok, self._pend = "n", c
        elif c in _LITERAL_STARTS:
            self._tok, self._pend = "l", c
        else:
            return False
        return True

    def _value_done(self) -> None:
        if not self._stack:
            self.done = True
            return
        top = self._stack[-1]
        self._stack[-1] = "," if top == "v" else ";"

    def _close(self, out: list[str], c: str) -> None:
        self._stack.pop()
        out.append(c)
        self._value_done()

    def _finish_number(self, out: list[str]) -> None:
        canon = canonical_number(self._pend)
        if canon is None:
            self.failed = True
            return
        out.append(canon)
        self._tok, self._pend = "", ""
        self._value_done()

    def _number(self, text: str, i: int, out: list[str]) -> int:
        m = _NUM_RUN.match(text, i)
        if m is not None:
            self._pend += m.group()
            i = m.end()
            if i >= len(text):
                return i
        if self._pend == "-" and text[i] == "I":  # -Infinity
            self._tok = "l"
            return i
        self._finish_number(out)
        return i

    def _literal(self, text: str, i: int, out: list[str]) -> int:
        pend = self._pend
        while i < len(text):
            if pend in _LITERALS:
                break
            pend += text[i]
            if not any(lit.startswith(pend) for lit in _LITERALS):
                self._pend = pend[:-1]
                self.failed = True
                return i
            i += 1
        self._pend = pend
        if pend in _LITERALS:
            out.append(_LITERALS[pend])
            self._tok, self._pend = "", ""
            self._value_done()
        return i

    # -- strings ----------------------------------------------------------------------------
    def _emit_char(self, code: int, dec: list[str]) -> None:
        """A decoded code point; high surrogates wait to see whether a low one follows."""
        if 0xD800 <= code <= 0xDBFF:
            self._hs = code
        else:
            dec.append(chr(code))

    def _string(self, text: str, i: int, out: list[str]) -> int:
        dec: list[str] = []
        n = len(text)
        while i < n:
            pend = self._pend
            if pend:
                c = text[i]
                if pend == "\\":
                    if c == "u":
                        self._pend = "\\u"
                    elif c in _SIMPLE_ESCAPES:
                        if self._hs:
                            dec.append(chr(self._hs))
                            self._hs = 0
                        dec.append(_SIMPLE_ESCAPES[c])
                        self._pend = ""
                    else:
                        self.failed = True
                        break
                    i += 1
                    continue
                # pend is "\\u" + up to 3 hex digits
                if c not in _HEX:
                    self.failed = True
                    break
                pend += c
                i += 1
                if len(pend) < 6:
                    self._pend = pend
                    continue
                self._pend = ""
                code = int(pend[2:], 16)
                if self._hs:
                    high, self._hs = self._hs, 0
                    if 0xDC00 <= code <= 0xDFFF:
                        dec.append(chr(0x10000 + ((high - 0xD800) << 10) + (code - 0xDC00)))
                        continue
                    dec.append(chr(high))
                self._emit_char(code, dec)
                continue
            c = text[i]
            if c == "\\":
                self._pend = "\\"
                i += 1
                continue
            if self._hs:  # anything but an escape after a high surrogate: it stays alone
                dec.append(chr(self._hs))
                self._hs = 0
            if c == '"':
                i += 1
                if dec:
                    out.append(_esc("".join(dec)))
                out.append('"')
                self._tok = ""
                if self._tok_key:
                    self._tok_key = False
                    self._stack[-1] = ":"
                else:
                    self._value_done()
                return i
            m = _STR_RUN.match(text, i)
            if m is None:  # a raw control character: json.loads (strict) refuses it
                self.failed = True
                break
            dec.append(m.group())
            i = m.end()
        if dec:
            out.append(_esc("".join(dec)))
        return i
