"""The Qwen3-Coder XML grammar's markers and its tag reader inside a function body (parameter tags
with the whitespace vLLM's regexes allow, ``</function>``).

The full rules: docs/parsers.md (the qwen3_coder family's section).
"""

from __future__ import annotations

__all__ = ["FUNC", "FUNC_END", "PARAM_END", "PARAM_START", "REGEX_WS", "TAG_CLOSE", "TAG_FEND", "TAG_NONE", "TAG_OPEN",
           "TAG_PARTIAL", "TAG_WS_CAP", "body_tag"]

FUNC = "<function="
FUNC_END = "</function>"
PARAM_START = "<parameter="
PARAM_END = "</parameter>"

TAG_WS_CAP = 16

# ``\s`` as vLLM's regexes read it (the ``regex`` module: Unicode White_Space).
REGEX_WS = frozenset("\t\n\x0b\x0c\r \x85\xa0\u1680\u2028\u2029\u202f\u205f\u3000") | frozenset(
    chr(c) for c in range(0x2000, 0x200B))

# What starts at a "<" inside a function body.
TAG_NONE, TAG_PARTIAL, TAG_OPEN, TAG_CLOSE, TAG_FEND = 0, 1, 2, 3, 4


def _skip_ws(buf: str, j: int) -> int:
    """Past the whitespace at ``buf[j:]``; -1 when there is more than a tag may hold."""
    k, n = j, len(buf)
    while k < n and buf[k] in REGEX_WS:
        k += 1
    return -1 if k - j > TAG_WS_CAP else k


def _param_tag(buf: str, i: int) -> tuple[int, int]:
    """``<\\s*parameter\\s*=`` (TAG_OPEN) or ``<\\s*/\\s*parameter\\s*>`` (TAG_CLOSE) at ``buf[i]``
    (a "<"), with where it ends; TAG_PARTIAL when the text ends inside one; TAG_NONE."""
    n = len(buf)
    j = _skip_ws(buf, i + 1)
    if j < 0:
        return TAG_NONE, i
    if j >= n:
        return TAG_PARTIAL, n
    closing = buf[j] == "/"
    if closing:
        j = _skip_ws(buf, j + 1)
        if j < 0:
            return TAG_NONE, i
        if j >= n:
            return TAG_PARTIAL, n
    word = buf[j : j + 9]
    if not "parameter".startswith(word):
        return TAG_NONE, i
    if len(word) < 9:
        return TAG_PARTIAL, n
    j = _skip_ws(buf, j + 9)
    if j < 0:
        return TAG_NONE, i
    if j >= n:
        return TAG_PARTIAL, n
    if buf[j] == (">" if closing else "="):
        return (TAG_CLOSE if closing else TAG_OPEN), j + 1
    return TAG_NONE, i


def body_tag(buf: str, i: int, final: bool) -> tuple[int, int]:
    """What the "<" at ``buf[i]`` starts inside a function body: ``</function>``, a parameter
    tag, TAG_PARTIAL (wait for more text; never when ``final``) or TAG_NONE."""
    if buf.startswith(FUNC_END, i):
        return TAG_FEND, i + len(FUNC_END)
    kind, end = _param_tag(buf, i)
    if kind == TAG_PARTIAL or (kind == TAG_NONE and FUNC_END.startswith(buf[i:])):
        return (TAG_NONE, i) if final else (TAG_PARTIAL, len(buf))
    return kind, end

