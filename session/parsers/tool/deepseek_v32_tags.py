"""DeepSeek-V3.2 DSML parameter tags as vLLM's pattern reads them: a tag's name and ``string``
attribute, and whether a ``<｜DSML｜parameter`` inside a value starts the next parameter.

The rules: docs/parsers.md, "deepseek_v32".
"""

from __future__ import annotations

__all__ = ["WS_CAP", "param_head", "param_lookahead"]

# The `regex` module's \s (Unicode White_Space), which vLLM's parameter pattern uses.
_WS = frozenset("\t\n\x0b\x0c\r \x85\xa0\u1680\u2000\u2001\u2002\u2003\u2004\u2005\u2006\u2007\u2008\u2009"
                "\u200a\u2028\u2029\u202f\u205f\u3000")
# The whitespace of a `<｜DSML｜parameter name=` lookahead held at most (the snapshot stays small).
WS_CAP = 32


def param_head(text: str) -> tuple[str, str | None, int] | bool | None:
    """Read a parameter tag after ``<｜DSML｜parameter`` as vLLM's pattern does
    (``\\s+name="([^"]+)"(?:\\s+string="([^"]*)")?\\s*>``). Returns ``(name, string, end)``
    when it matched (``end`` just after ``>``), ``False`` when it cannot match, ``None`` when
    ``text`` ends before that is known."""
    n = len(text)
    i = 0
    while i < n and text[i] in _WS:
        i += 1
    if i == 0 and n:
        return False
    if i >= n:
        return None
    if not text.startswith('name="', i):
        return None if 'name="'.startswith(text[i:]) else False
    i += 6
    close = text.find('"', i)
    if close == -1:
        return None
    if close == i:
        return False
    name = text[i:close]
    i = close + 1
    j = i
    while j < n and text[j] in _WS:
        j += 1
    if j >= n:
        return None
    if text[j] == ">":
        return name, None, j + 1
    if j == i:
        return False
    if not text.startswith('string="', j):
        return None if 'string="'.startswith(text[j:]) else False
    j += 8
    close = text.find('"', j)
    if close == -1:
        return None
    flag = text[j:close]
    j = close + 1
    while j < n and text[j] in _WS:
        j += 1
    if j >= n:
        return None
    return (name, flag, j + 1) if text[j] == ">" else False


def param_lookahead(text: str) -> bool | None:
    """Whether the text after a ``<｜DSML｜parameter`` inside a value starts with ``\\s+name=``
    (it then ends the value): None while that is not known yet."""
    n = len(text)
    i = 0
    while i < n and text[i] in _WS and i <= WS_CAP:
        i += 1
    if i == 0:
        return False if n else None
    if i > WS_CAP:
        return False
    if i >= n:
        return None
    rest = text[i : i + 5]
    if rest == "name=":
        return True
    return None if "name=".startswith(rest) else False
