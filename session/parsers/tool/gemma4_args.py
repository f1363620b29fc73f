"""Gemma 4's argument syntax, read incrementally into the JSON vLLM 0.32 returns for it.

The full rules: docs/parsers.md (the family's section: its split, state and every difference from vLLM).
"""

from __future__ import annotations

import re
from typing import Any

from .json_stream import dumps, string_body
from .schema_values import always_string, coerce, types_of

DELIM = '<|"|>'
_D = 0  # the token code of a whole delimiter (every other token is a one-character str)
_SKIP_OBJ = frozenset(" ,\n\t")  # what vLLM's object reader skips before a key
_SKIP_VAL = frozenset(" \n\t")  # and between ``:`` and the value
_SKIP_ARR = _SKIP_OBJ
_END_OBJ_BARE = frozenset(",}]")  # what ends a bare value in an object
_END_ARR_BARE = frozenset(",]")  # and in an array

Token = str | int

# With ArgsReader.in_plain_string: what a JSON-plain text must not hold to stream exactly as it is
# (json_stream.is_plain + this is the whole test): a "<" (a delimiter, or a marker for the tool
# parser), a "(" or ")" (counted for the closing ")" rule), or a trailing whitespace or "}" (held:
# the converter may strip them at the end).
PLAIN_GUARD = re.compile(r"[<()]|[\s}]\Z")


def _dict_or_none(value: Any) -> dict[str, Any] | None:
    return value if isinstance(value, dict) else None


# -- the reader ------------------------------------------------------------------------------------


class _Level:
    """One open object (``k == "o"``) or array (``"a"``).

    ``s``: parse state (``skip`` before a key / item, ``key``, ``vskip`` after ``:``, ``str``,
    ``bare``, ``child`` while a nested level is open, ``dead`` after vLLM's reader gave up);
    ``key``: the key (while it is read, and while a held value waits for it); ``val``: a held
    value; ``hold``: the current string is held (its schema may convert it); ``n``: a member was
    written; ``sd`` / ``si``: the parent's bracket-depth scanner for this level (depth, inside a
    delimited string); ``step``: the key (or 0 for an array item) this level is the value of;
    ``mark``: where in the held output a bare value ending in ``.`` was written (-1: none), which
    vLLM keeps only if this level is closed (its partial reader stops before such a value).
    ``sch`` (not saved): for an object its properties' schemas, for an array its items' schema."""

    __slots__ = ("hold", "k", "key", "mark", "n", "s", "sch", "sd", "si", "step", "val")

    def __init__(self, k: str, step: str | int, sch: dict[str, Any] | None) -> None:
        self.k, self.step, self.sch = k, step, sch
        self.s, self.key, self.val = "skip", "", ""
        self.hold = self.n = self.si = False
        self.sd = 1
        self.mark = -1

    def save(self) -> list[Any]:
        return [self.k, self.s, self.key, self.val, self.hold, self.n, self.sd, self.si, self.step, self.mark]

    @classmethod
    def load(cls, state: list[Any]) -> _Level:
        k, s, key, val, hold, n, sd, si, step, mark = state
        if k not in ("o", "a") or not isinstance(step, (str, int)):
            raise ValueError("bad level")
        level = cls(k, step, None)
        level.s, level.key, level.val = str(s), str(key), str(val)
        level.hold, level.n, level.sd, level.si, level.mark = bool(hold), bool(n), int(sd), bool(si), int(mark)
        return level

    def value_schema(self) -> dict[str, Any] | None:
        """The schema of the value being read (of ``key`` in an object, of an item in an array)."""
        if self.sch is None:
            return None
        if self.k == "a":
            return self.sch
        return _dict_or_none(self.sch.get(self.key))


def _child_schema(kind: str, schema: dict[str, Any] | None) -> dict[str, Any] | None:
    """What a nested level of ``kind`` keeps from its value schema: an object's ``properties``,
    an array's ``items`` (vLLM converts inside a container only through those)."""
    if schema is None:
        return None
    return _dict_or_none(schema.get("properties" if kind == "o" else "items"))


class ArgsReader:
    """The arguments of one call: ``feed(text)`` / ``end()`` return the next piece of vLLM's
    final ``json.dumps`` text (the first piece is ``{``)."""

    def __init__(self, props: dict[str, Any] | None) -> None:
        self._props = props
        self._started = False  # leading whitespace skipped (the converter strips it)
        self._pend = ""  # the trailing run the converter may strip: whitespace, or } or ) then whitespace
        self._po = self._pc = 0  # "(" and ")" seen (a final ")" is stripped when ")" outnumber "(")
        self._dp = ""  # a partial delimiter
        self._levels = [_Level("o", "", props)]
        self._out: list[str] = ["{"]
        self._held = ""  # output after a mark, while a marked level is open

    # -- state -----------------------------------------------------------------------------
    def save(self) -> list[Any]:
        return [self._started, self._pend, self._po, self._pc, self._dp, self._held,
                [lv.save() for lv in self._levels]]

    @classmethod
    def load(cls, props: dict[str, Any] | None, state: list[Any]) -> ArgsReader:
        started, pend, po, pc, dp, held, levels = state
        reader = cls(props)
        reader._out = []
        reader._started, reader._pend, reader._po, reader._pc = bool(started), str(pend), int(po), int(pc)
        reader._dp, reader._held = str(dp), str(held)
        reader._levels = [_Level.load(lv) for lv in levels]
        if not reader._levels or reader._levels[0].k != "o":
            raise ValueError("bad levels")
        reader._levels[0].sch = props
        for parent, level in zip(reader._levels, reader._levels[1:], strict=False):
            if parent.k == "o":
                value_schema = None if parent.sch is None else _dict_or_none(parent.sch.get(str(level.step)))
            else:
                value_schema = parent.sch
            level.sch = _child_schema(level.k, value_schema)
        return reader

    @property
    def in_plain_string(self) -> bool:
        """Inside a delimited string that streams as it is, nothing held (no partial delimiter, no
        trailing run, no output held after a "." value): :data:`PLAIN_GUARD` says which texts then
        come out exactly as they are and change nothing."""
        if not self._started or self._pend or self._dp:
            return False
        levels = self._levels
        top = levels[-1]
        if top.s != "str" or top.hold or any(lv.mark >= 0 for lv in levels):
            return False
        return all(lv.si for lv in levels[1:])

    def _take(self) -> str:
        out = "".join(self._out)
        self._out = []
        return out

    def _emit(self, text: str) -> None:
        if any(lv.mark >= 0 for lv in self._levels):
            self._held += text
        else:
            self._out.append(text)

    # -- raw text: outer whitespace and the closing bracket ----------------------------------
    def feed(self, text: str) -> str:
        if not self._started:
            k = 0
            while k < len(text) and text[k].isspace():
                k += 1
            if k == len(text):
                return self._take()
            self._started = True
            text = text[k:]
        self._po += text.count("(")
        self._pc += text.count(")")
        buf = self._pend + text
        h = len(buf)
        while h > 0 and buf[h - 1].isspace():
            h -= 1
        if h > 0 and buf[h - 1] in "})":
            h -= 1
        self._pend = buf[h:]
        if h:
            self._tokens(buf[:h])
        return self._take()

    def end(self) -> str:
        pend = self._pend.rstrip()
        self._pend = ""
        if pend == ")" and self._po >= self._pc:
            self._tokens(pend)
        tail, self._dp = self._dp, ""
        if tail:
            top = self._levels[-1]
            if top.s == "str":  # a string the output left open, ending in a partial delimiter
                if not (top.k == "o" and len(self._levels) > 1):  # vLLM's partial object reader drops it
                    self._string_text(top, tail)
            else:
                for c in tail:
                    self._token(c)
        while len(self._levels) > 1:
            self._close(partial=True)
        self._close(partial=False)
        return self._take()

    # -- tokens: <|"|> or one character -------------------------------------------------------
    def _tokens(self, text: str) -> None:
        i, n = 0, len(text)
        if self._dp:
            while i < n and self._dp:
                cand = self._dp + text[i]
                if cand == DELIM:
                    self._dp = ""
                    self._token(_D)
                    i += 1
                elif DELIM.startswith(cand):
                    self._dp = cand
                    i += 1
                else:
                    held, self._dp = self._dp, ""
                    for c in held:
                        self._token(c)
        while i < n:
            top = self._levels[-1]
            if top.s == "str" and all(lv.si for lv in self._levels[1:]):
                # inside a delimited string every scanner skips it too: take the run up to a "<"
                j = text.find("<", i)
                stop = n if j == -1 else j
                if stop > i:
                    self._string_text(top, text[i:stop])
                    i = stop
                    continue
            c = text[i]
            if c == "<":
                rest = text[i : i + len(DELIM)]
                if rest == DELIM:
                    self._token(_D)
                    i += len(DELIM)
                    continue
                if DELIM.startswith(rest):  # the text ends inside what may be a delimiter
                    self._dp = rest
                    return
            self._token(c)
            i += 1

    def _token(self, t: Token) -> None:
        levels = self._levels
        for j in range(1, len(levels)):  # the parents' scanners, outermost first
            lv = levels[j]
            if t == _D:
                lv.si = not lv.si
            elif lv.si:
                continue
            elif t == ("{" if lv.k == "o" else "["):
                lv.sd += 1
            elif t == ("}" if lv.k == "o" else "]"):
                lv.sd -= 1
                if lv.sd == 0:  # level j ends here; its parent goes on after this character
                    while len(levels) > j + 1:
                        self._close(partial=True)
                    self._close(partial=False)
                    levels[-1].s = "skip"
                    return
        self._parse(levels[-1], t)

    # -- vLLM's key/value reader --------------------------------------------------------------
    def _prefix(self, lv: _Level) -> str:
        sep = ", " if lv.n else ""
        lv.n = True
        return sep if lv.k == "a" else f"{sep}{dumps(lv.key)}: "

    def _value(self, lv: _Level, raw: str) -> None:
        schema = lv.value_schema()
        value: Any = raw if schema is None else coerce(raw, types_of(schema))
        self._emit(self._prefix(lv) + dumps(value))

    def _bare(self, lv: _Level) -> None:
        raw = lv.val.strip()
        if raw.endswith(".") and lv.mark < 0 and lv is not self._levels[0]:
            lv.mark = len(self._held)  # ("." may still be a number's start: vLLM's partial reader stops here)
        self._value(lv, raw)

    def _string_text(self, lv: _Level, text: str) -> None:
        if lv.hold:
            lv.val += text
        else:
            self._emit(string_body(text))

    def _open(self, lv: _Level, kind: str) -> None:
        prefix = self._prefix(lv)
        self._emit(prefix + ("{" if kind == "o" else "["))
        lv.s = "child"
        step: str | int = lv.key if lv.k == "o" else 0
        self._levels.append(_Level(kind, step, _child_schema(kind, lv.value_schema())))

    def _start_string(self, lv: _Level) -> None:
        lv.s = "str"
        lv.hold = not always_string(types_of(lv.value_schema()))
        lv.val = ""
        if not lv.hold:
            self._emit(self._prefix(lv) + '"')

    def _end_string(self, lv: _Level) -> None:
        if lv.hold:
            self._value(lv, lv.val)
        else:
            self._emit('"')
        lv.s, lv.val, lv.hold = "skip", "", False

    def _parse(self, lv: _Level, t: Token) -> None:
        s = lv.s
        if s == "dead":
            return
        if s == "str":
            if t == _D:
                self._end_string(lv)
            else:
                self._string_text(lv, str(t))
            return
        text = DELIM if t == _D else str(t)
        if lv.k == "a":
            if s == "skip":
                if t == _D:
                    self._start_string(lv)
                elif t in _SKIP_ARR:
                    pass
                elif t in ("{", "["):
                    self._open(lv, "o" if t == "{" else "a")
                elif t == "]":
                    lv.s = "dead"
                else:
                    lv.s, lv.val = "bare", text
            elif s == "bare":
                if t in _END_ARR_BARE:
                    self._bare(lv)
                    lv.s, lv.val = ("dead" if t == "]" else "skip"), ""
                else:
                    lv.val += text
            return
        if s == "skip":
            if t in _SKIP_OBJ:
                return
            lv.s, lv.key = "key", ""
            s = "key"
        if s == "key":
            if t == ":":
                key = lv.key.strip()
                if key.startswith(DELIM) and key.endswith(DELIM):
                    key = key[len(DELIM) : -len(DELIM)]
                lv.key, lv.s = key, "vskip"
            else:
                lv.key += text
        elif s == "vskip":
            if t == _D:
                self._start_string(lv)
            elif t in _SKIP_VAL:
                pass
            elif t in ("{", "["):
                self._open(lv, "o" if t == "{" else "a")
            elif t in _END_OBJ_BARE:
                lv.s = "dead"  # vLLM's reader stops when a value is missing
            else:
                lv.s, lv.val = "bare", text
        elif s == "bare":
            if t in _END_OBJ_BARE:
                self._bare(lv)
                lv.s, lv.val = "skip", ""
                if t != ",":  # a } or ] is not skipped: it starts the next key
                    self._parse(lv, t)
            else:
                lv.val += text

    def _close(self, partial: bool) -> None:
        """The innermost level's text ended: closed by its bracket, or cut off by the end
        (``partial``: vLLM then omits a key with no value and an unfinished bare value)."""
        lv = self._levels[-1]
        s = lv.s
        if s == "str":
            self._end_string(lv)
        elif s == "bare" and not partial:
            self._value(lv, lv.val.strip())
        elif s == "vskip" and not partial:
            self._value(lv, "")
        self._levels.pop()
        if lv.mark >= 0:
            if partial:
                self._held = self._held[: lv.mark]
            lv.mark = -1
            if not any(m.mark >= 0 for m in self._levels):
                self._out.append(self._held)
                self._held = ""
        self._emit("}" if lv.k == "o" else "]")
