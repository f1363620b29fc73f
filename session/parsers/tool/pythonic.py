"""``pythonic``: a Python list of calls with keyword arguments, ``[f(a=1, b="x"), g()]``.

Used by Llama 3.2 / Llama 4 style and ToolACE-like models. As vLLM's ``PythonicToolParser``:
tool-call mode starts only when the output starts with ``[``; each call is ``name(key=literal,
...)`` where literals are vLLM 0.32's (``_literal``: constants, lists, tuples, sets, dicts with constant
keys, signed numbers, ``true`` / ``false`` / ``null``, f-strings without placeholders; other
expressions are not); the arguments are ``json.dumps({key: value},
ensure_ascii=False)``; when calls are found the content is empty. An output that is not such a
list (before any call is complete) is returned whole as content.

Arguments stream one keyword at a time: the scanner finds where a keyword argument ends (a
top-level ``,`` or ``)``, outside strings, brackets and comments), ``ast`` reads that one
argument, and its canonical JSON is emitted. Text after the closing ``]`` is dropped (vLLM's
non-streaming parser would then fail on the whole output and return it as content; its streaming
parser drops it too).
"""

from __future__ import annotations

import ast
import json
import keyword
import re
from typing import Any

from .json_stream import escape_lone_surrogates
from .streaming import StreamingToolParser

_PY_WS = " \t\r\n\f"
_NORMAL_STOP = re.compile(r"[()\[\]{},'\"#\\]")


class _NotLiteral(Exception):
    pass


_JSON_NAMES: dict[str, Any] = {"null": None, "true": True, "false": False}


def _literal(node: ast.expr) -> Any:
    """The value of an argument node as vLLM 0.32's ``get_parameter_value`` reads it: constants
    (not bytes, ``...`` or complex), dicts with constant keys, lists, tuples and sets (as lists),
    ``+``/``-`` numbers, ``true`` / ``false`` / ``null``, and f-strings without placeholders."""
    if isinstance(node, ast.Constant):
        if node.value is None or isinstance(node.value, (str, int, float)):
            return node.value
        raise _NotLiteral
    if isinstance(node, ast.Dict):
        if not all(isinstance(k, ast.Constant) for k in node.keys):
            raise _NotLiteral
        return {k.value: _literal(v) for k, v in zip(node.keys, node.values, strict=True)}  # type: ignore[union-attr]
    if isinstance(node, (ast.List, ast.Tuple, ast.Set)):
        return [_literal(v) for v in node.elts]
    if isinstance(node, ast.JoinedStr) and all(isinstance(p, ast.Constant) for p in node.values):
        return "".join(str(p.value) for p in node.values)  # type: ignore[attr-defined]
    if isinstance(node, ast.Name) and node.id in _JSON_NAMES:
        return _JSON_NAMES[node.id]
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
        operand = _literal(node.operand)
        if isinstance(operand, (int, float)) and not isinstance(operand, bool):
            return -operand if isinstance(node.op, ast.USub) else operand
    raise _NotLiteral


def keyword_argument(segment: str) -> tuple[str, str] | None:
    """``("key", canonical JSON of the value)`` for one ``key=literal`` segment, else None."""
    try:
        tree = ast.parse("f(" + segment + "\n)", mode="eval")
        call = tree.body
        if not isinstance(call, ast.Call) or call.args or len(call.keywords) != 1:
            return None
        kw = call.keywords[0]
        if kw.arg is None:
            return None
        return kw.arg, escape_lone_surrogates(json.dumps(_literal(kw.value), ensure_ascii=False))
    except (SyntaxError, ValueError, TypeError, RecursionError, MemoryError, _NotLiteral):
        return None


class PythonicToolParser(StreamingToolParser):
    """Modes: ``start``; ``text``; ``list0`` / ``listN`` (a call name or ``]`` expected);
    ``name``; ``args`` (scanning keyword arguments); ``after`` (``,`` or ``]`` expected);
    ``done`` (dropping the rest); ``raw`` (fallen back: all is content)."""

    name = "pythonic"
    needs_special_tokens = False
    initial_mode = "start"
    content_guards = {"text": "", "raw": ""}

    def __init__(self, ctx: Any) -> None:
        super().__init__(ctx)
        self._raw = ""  # everything since the start, until the first call is committed
        self._fname = ""
        self._seg = ""  # the keyword argument scanned so far
        self._depth = ""  # open brackets inside the argument
        self._quote = ""  # the open string's delimiter: ' " ''' or """
        self._comment = False
        self._kws: list[str] = []  # keywords of the current call (a repeated one is an error)

    def _save(self) -> dict[str, Any]:
        return {"r": self._raw, "f": self._fname, "s": self._seg, "d": self._depth, "q": self._quote,
                "c": self._comment, "k": list(self._kws)}

    def _load(self, state: dict[str, Any]) -> None:
        self._raw, self._fname, self._seg = str(state["r"]), str(state["f"]), str(state["s"])
        self._depth, self._quote, self._comment = str(state["d"]), str(state["q"]), bool(state["c"])
        self._kws = [str(k) for k in state["k"]]

    # -- outcomes ----------------------------------------------------------------------------
    def _broken(self) -> None:
        """Not a list of calls. Before any call all of it (``_raw`` holds everything fed so far)
        is content; after one, the rest is dropped."""
        if self._calls == 0:
            self._content(self._raw)
            self._mode = "raw"
        else:
            self._mode = "done"
        self._raw, self._seg, self._buf = "", "", ""

    def _commit(self, args: str) -> None:
        if not self._kws:
            self.open_call(self._fname)
            self._raw = ""
        self.add_args(args)

    def _argument_end(self, closer: str) -> bool:
        """A keyword argument ended at a top-level ``,`` or ``)``; False when it is not valid."""
        segment, self._seg = self._seg, ""
        if not segment.strip(_PY_WS):
            if closer == ",":  # "f(,)" / "f(a=1,,)": an empty argument
                return False
            if self._kws:  # "f(a=1,)"
                self.add_args("}")
            else:  # "f()"
                self._commit("{}")
            return True
        kwarg = keyword_argument(segment)
        if kwarg is None or kwarg[0] in self._kws:
            return False
        key, value = kwarg
        self._commit(("{" if not self._kws else ", ") + json.dumps(key, ensure_ascii=False) + ": " + value)
        self._kws.append(key)
        if closer == ")":
            self.add_args("}")
        return True

    # -- reading -----------------------------------------------------------------------------
    def _process(self, text: str, final: bool) -> None:
        if self._calls == 0 and self._mode not in ("text", "raw"):
            self._raw += text
        buf, self._buf = self._buf + text, ""
        i, n = 0, len(buf)
        while True:
            mode = self._mode
            if mode == "raw" or mode == "text":
                self._content(buf[i:])
                return
            if mode == "done":
                return
            if mode == "start":
                if i >= n:
                    return
                if buf[i] != "[":
                    self._mode, self._raw = "text", ""
                    continue
                self._mode, i = "list0", i + 1
                continue
            if mode == "args":
                i, event = self._scan(buf, i, final)
                if event == "":
                    if final:
                        self._broken()
                    return
                if event == "!" or not self._argument_end(event):
                    self._broken()
                    i = n
                    continue
                if event == ")":
                    self._mode, self._kws = "after", []
                continue
            if mode == "name":
                j = i
                while j < n and (buf[j].isalnum() or buf[j] == "_"):
                    j += 1
                self._fname += buf[i:j]
                i = j
                if i >= n:
                    if final:
                        self._broken()
                    return
                if buf[i] != "(" or keyword.iskeyword(self._fname):  # "[if()]" is not Python
                    self._broken()
                    i = n
                    continue
                self._mode, i = "args", i + 1
                self._seg, self._depth, self._quote, self._comment, self._kws = "", "", "", False, []
                continue
            while i < n and buf[i] in _PY_WS:
                i += 1
            if i >= n:
                if final and mode != "after":
                    self._broken()
                return
            c = buf[i]
            if mode in ("list0", "listN"):
                if c.isascii() and c.isalpha():
                    self._mode, self._fname = "name", ""
                else:
                    self._broken()
                    i = n
                continue
            # after
            if c == ",":
                self._mode, i = "listN", i + 1
            elif c == "]":
                self._mode, i = "done", i + 1
            else:
                self._broken()
                i = n

    def _scan(self, buf: str, i: int, final: bool) -> tuple[int, str]:
        """Scan the current keyword argument from ``buf[i]``. Returns the index after the event
        and the event: ``","`` or ``")"`` at top level, or ``""`` when more text is needed (the
        unscanned lookahead is then held in ``self._buf``)."""
        n = len(buf)
        start = i
        while i < n:
            if self._comment:
                nl = buf.find("\n", i)
                if nl == -1:
                    i = n
                    break
                self._comment, i = False, nl + 1
                continue
            quote = self._quote
            if quote:
                q = quote[0]
                j = i
                while j < n and buf[j] != q and buf[j] != "\\":
                    j += 1
                if j >= n:
                    i = n
                    break
                if buf[j] == "\\":
                    if j + 1 >= n:
                        i = j
                        break  # the escaped character has not arrived
                    i = j + 2
                    continue
                if len(quote) == 3:
                    if j + 3 > n and not final:
                        i = j
                        break  # is it the closing '''? wait for two more characters
                    if buf.startswith(quote, j):
                        self._quote, i = "", j + 3
                    else:
                        i = j + 1
                    continue
                self._quote, i = "", j + 1
                continue
            m = _NORMAL_STOP.search(buf, i)
            if m is None:
                i = n
                break
            j = m.start()
            c = buf[j]
            if c in "'\"":
                if j + 3 > n and not final:
                    i = j
                    break  # '' or '''? wait for two more characters
                if buf.startswith(c * 3, j):
                    self._quote, i = c * 3, j + 3
                elif buf.startswith(c * 2, j):
                    i = j + 2  # an empty string
                else:
                    self._quote, i = c, j + 1
                continue
            if c == "#":
                self._comment, i = True, j + 1
                continue
            if c == "\\":
                i = j + 2 if j + 1 < n else j
                if j + 1 >= n:
                    break
                continue
            if c in "([{":
                self._depth += c
                i = j + 1
                continue
            if c in ")]}":
                if not self._depth:
                    self._seg += buf[start:j]
                    return j + 1, (")" if c == ")" else "!")  # "!": an unbalanced bracket
                self._depth = self._depth[:-1]
                i = j + 1
                continue
            # ","
            if not self._depth:
                self._seg += buf[start:j]
                return j + 1, ","
            i = j + 1
        self._seg += buf[start:i]
        self._buf = buf[i:]
        return n, ""
