"""How long can a grammar make the text it still needs? :func:`completion_bound` estimates, from the
grammar xgrammar prints, the shortest completion from any state (an upper bound of any forced
jump-forward string), so the compile worker refuses a tiny constraint that demands an enormous
document. The estimate per expression: docs/structured-outputs.md, "Inside the engine" ("The
completion bound").
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

__all__ = ["GrammarShapeError", "completion_bound"]

CAP = 10**15  # lengths saturate here (the bound only has to be compared with a limit)

_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_.\-]*")
_REPEAT = re.compile(r"\{\s*(\d+)\s*,\s*(-?\d+)\s*\}")
_OPTION = re.compile(r"([A-Za-z_]+)\s*=")
_RULE_NAME = re.compile(r"([A-Za-z_][A-Za-z0-9_.\-]*)(?:\[[^\]]*\])?")  # any_text[max_chars=5]


class GrammarShapeError(ValueError):
    """The printed grammar uses a construct this reader does not know."""


# --- the printed grammar as a tree ---------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class _Lit:
    size: int


@dataclass(frozen=True, slots=True)
class _Cls:
    star: bool


@dataclass(frozen=True, slots=True)
class _Ref:
    name: str


@dataclass(frozen=True, slots=True)
class _Rep:
    body: _Node
    lo: int


@dataclass(frozen=True, slots=True)
class _Seq:
    items: tuple[_Node, ...]


@dataclass(frozen=True, slots=True)
class _Alt:
    branches: tuple[_Node, ...]


@dataclass(frozen=True, slots=True)
class _Dispatch:
    """xgrammar's ``TagDispatch`` (a structural tag's free text and triggered tags): free text that
    may end anywhere, or a trigger and then its rule; ``stops``: the sizes of its stop strings."""

    targets: tuple[_Ref, ...]
    stops: tuple[int, ...]
    must_stop: bool  # stop_eos=false with stop strings: the text ends only with one of them


_Node = _Lit | _Cls | _Ref | _Rep | _Seq | _Alt | _Dispatch


class _Reader:
    def __init__(self, text: str, prefix: str = "") -> None:
        self.text = text
        self.prefix = prefix
        self.i = 0

    def skip(self) -> None:
        while self.i < len(self.text) and self.text[self.i] in " \t":
            self.i += 1

    def peek(self) -> str:
        self.skip()
        return self.text[self.i] if self.i < len(self.text) else ""

    def expr(self) -> _Node:
        branches = [self.seq()]
        while self.peek() == "|":
            self.i += 1
            branches.append(self.seq())
        return branches[0] if len(branches) == 1 else _Alt(tuple(branches))

    def seq(self) -> _Node:
        items: list[_Node] = []
        while self.peek() not in ("", "|", ")"):
            if self.text.startswith("(=", self.i):  # a lookahead: constrains, adds no text
                self.i += 2
                self.expr()
                self.expect(")")
                continue
            items.append(self.postfix(self.atom()))
        return items[0] if len(items) == 1 else _Seq(tuple(items))

    def expect(self, ch: str) -> None:
        if self.peek() != ch:
            raise GrammarShapeError(f"expected {ch!r} at {self.i}")
        self.i += 1

    def atom(self) -> _Node:
        ch = self.peek()
        if ch == "(":
            self.i += 1
            node = self.expr()
            self.expect(")")
            return node
        if ch == '"':
            return _Lit(self.literal())
        if ch == "[":
            self.char_class()
            star = self.text.startswith("*", self.i)
            if star:
                self.i += 1
            return _Cls(star)
        m = _IDENT.match(self.text, self.i)
        if m is not None and m.group() == "TagDispatch" and self.text.startswith("(", m.end()):
            self.i = m.end() + 1
            return self.dispatch()
        if m is None or self.text.startswith("(", m.end()):  # another builtin call
            raise GrammarShapeError(f"unknown construct at {self.i}: {self.text[self.i:self.i + 20]!r}")
        self.i = m.end()
        return _Ref(self.prefix + m.group())

    def dispatch(self) -> _Dispatch:
        """``TagDispatch(("trigger", rule), …, key=value, …)`` after its ``(``."""
        targets: list[_Ref] = []
        stops: tuple[int, ...] = ()
        stop_eos = True
        while self.peek() != ")":
            if self.peek() == "(":  # a ("trigger", rule) pair
                self.i += 1
                if self.peek() != '"':
                    raise GrammarShapeError(f"bad TagDispatch pair at {self.i}")
                self.literal()
                self.expect(",")
                self.skip()
                m = _IDENT.match(self.text, self.i)
                if m is None:
                    raise GrammarShapeError(f"bad TagDispatch rule at {self.i}")
                self.i = m.end()
                targets.append(_Ref(self.prefix + m.group()))
                self.expect(")")
            else:
                self.skip()
                m = _OPTION.match(self.text, self.i)
                if m is None:
                    raise GrammarShapeError(f"bad TagDispatch option at {self.i}")
                self.i = m.end()
                if self.peek() == "(":
                    self.i += 1
                    sizes = []
                    while self.peek() == '"':
                        sizes.append(self.literal())
                        if self.peek() == ",":
                            self.i += 1
                    self.expect(")")
                    if m.group(1) == "stop_str":
                        stops = tuple(sizes)
                else:
                    word = _IDENT.match(self.text, self.i)
                    if word is None:
                        raise GrammarShapeError(f"bad TagDispatch value at {self.i}")
                    self.i = word.end()
                    if m.group(1) == "stop_eos":
                        stop_eos = word.group() != "false"
            if self.peek() == ",":
                self.i += 1
        self.i += 1
        return _Dispatch(tuple(targets), stops, not stop_eos and bool(stops))

    def postfix(self, node: _Node) -> _Node:
        while True:
            ch = self.text[self.i] if self.i < len(self.text) else ""
            if ch == "{":
                m = _REPEAT.match(self.text, self.i)
                if m is None:
                    raise GrammarShapeError(f"bad repetition at {self.i}")
                self.i = m.end()
                node = _Rep(node, int(m.group(1)))
            elif ch and ch in "*?":
                self.i += 1
                node = _Rep(node, 0)
            elif ch == "+":
                self.i += 1
                node = _Rep(node, 1)
            else:
                return node

    def literal(self) -> int:
        text, i, size = self.text, self.i + 1, 0
        while i < len(text) and text[i] != '"':
            if text[i] == "\\" and i + 1 < len(text):
                kind = text[i + 1]
                if kind == "x":
                    size += 1 if text[i + 2:i + 4] < "80" else 2
                    i += 4
                elif kind in "uU":
                    size += 4
                    i += 6 if kind == "u" else 10
                else:
                    size += 1
                    i += 2
                continue
            size += len(text[i].encode("utf-8", "surrogatepass"))
            i += 1
        if i >= len(text):
            raise GrammarShapeError("unterminated literal")
        self.i = i + 1
        return size

    def char_class(self) -> None:
        text, i = self.text, self.i + 1
        while i < len(text) and text[i] != "]":
            i += 2 if text[i] == "\\" else 1
        if i >= len(text):
            raise GrammarShapeError("unterminated character class")
        self.i = i + 1


_REGEX_RULE = re.compile(r'Regex\("((?:[^"\\]|\\.)*)"(?:, json_string=\w+)?\)')
_ESCAPES = {"n": "\n", "r": "\r", "t": "\t", "0": "\0", '"': '"', "\\": "\\", "'": "'"}


def _unescape(text: str) -> str:
    """A printed literal's text (xgrammar's escapes: \\n, \\", \\xHH, \\uHHHH…)."""
    out: list[str] = []
    i = 0
    while i < len(text):
        ch = text[i]
        if ch != "\\" or i + 1 == len(text):
            out.append(ch)
            i += 1
            continue
        kind = text[i + 1]
        width = {"x": 2, "u": 4, "U": 8}.get(kind)
        if width is not None:
            out.append(chr(int(text[i + 2:i + 2 + width], 16)))
            i += 2 + width
        else:
            out.append(_ESCAPES.get(kind, kind))
            i += 2
    return "".join(out)


def _rules(printed: str, expand_regex: Callable[[str], str] | None, prefix: str = "") -> dict[str, _Node]:
    rules: dict[str, _Node] = {}
    lines: list[str] = []
    for line in printed.splitlines():  # a TagDispatch rule spans lines: the others start indented or with ")"
        if lines and line[:1] in (" ", ")"):
            lines[-1] += " " + line.strip()
        elif line.strip():
            lines.append(line)
    for line in lines:
        name, sep, body = line.partition(" ::= ")
        named = _RULE_NAME.fullmatch(name.strip())
        if not sep or named is None:
            raise GrammarShapeError(f"not a rule: {line[:40]!r}")
        name = named.group(1)
        regex = _REGEX_RULE.fullmatch(body.strip())
        if regex is not None:  # a JSON-schema string pattern, kept as a regex: read its own grammar
            if expand_regex is None:
                raise GrammarShapeError("a Regex rule, and no way to read it")
            inner = f"{prefix}{name.strip()}/"
            try:
                pattern = _unescape(regex.group(1))
            except ValueError:
                raise GrammarShapeError(f"cannot read the pattern of rule {name.strip()!r}") from None
            rules.update(_rules(expand_regex(pattern), expand_regex, inner))
            rules[prefix + name.strip()] = _Ref(inner + "root")
            continue
        reader = _Reader(body, prefix)
        node = reader.expr()
        if reader.peek():
            raise GrammarShapeError(f"trailing text in rule {name.strip()!r}")
        rules[prefix + name.strip()] = node
    if prefix + "root" not in rules:
        raise GrammarShapeError("no root rule")
    return rules


# --- the bound -------------------------------------------------------------------------------------

def _sat(n: int) -> int:
    return n if n < CAP else CAP


def _shortest(rules: dict[str, _Node]) -> dict[str, int]:
    """The length of each rule's shortest string (a fixpoint: recursion converges within as many
    rounds as there are rules; a rule that derives no finite string keeps CAP)."""
    best = dict.fromkeys(rules, CAP)

    def length(node: _Node) -> int:
        if isinstance(node, _Lit):
            return node.size
        if isinstance(node, _Cls):
            return 0 if node.star else 1
        if isinstance(node, _Ref):
            return best.get(node.name, CAP)
        if isinstance(node, _Rep):
            return _sat(node.lo * length(node.body)) if node.lo else 0
        if isinstance(node, _Seq):
            return _sat(sum(length(x) for x in node.items))
        if isinstance(node, _Dispatch):
            return min(node.stops) if node.must_stop else 0
        return min(length(b) for b in node.branches)

    for _ in range(len(rules) + 1):
        changed = False
        for name, body in rules.items():
            value = length(body)
            if value < best[name]:
                best[name], changed = value, True
        if not changed:
            break
    return best


def completion_bound(printed: str, expand_regex: Callable[[str], str] | None = None) -> int:
    """An upper estimate of the shortest completion from any state of the grammar ``printed``
    (``str(xgrammar.Grammar)``), in bytes, saturating at :data:`CAP`. ``expand_regex(pattern)``
    prints the grammar of a regex that ``printed`` keeps as a ``Regex(...)`` rule (JSON-schema
    string patterns). Raises :class:`GrammarShapeError` for a construct it does not know."""
    rules = _rules(printed, expand_regex)
    shortest = _shortest(rules)
    memo: dict[str, int] = {}
    active: set[str] = set()

    def length(node: _Node) -> int:
        if isinstance(node, _Lit):
            return node.size
        if isinstance(node, _Cls):
            return 0 if node.star else 1
        if isinstance(node, _Ref):
            return shortest.get(node.name, CAP)
        if isinstance(node, _Rep):
            return _sat(node.lo * length(node.body)) if node.lo else 0
        if isinstance(node, _Seq):
            return _sat(sum(length(x) for x in node.items))
        if isinstance(node, _Dispatch):
            return min(node.stops) if node.must_stop else 0
        return min(length(b) for b in node.branches)

    def worst(node: _Node) -> int:
        if isinstance(node, _Lit):
            return node.size
        if isinstance(node, _Cls):
            return 1
        if isinstance(node, _Ref):
            return rule(node.name)
        if isinstance(node, _Rep):
            return _sat(worst(node.body) + max(node.lo - 1, 0) * length(node.body))
        if isinstance(node, _Seq):
            out, rest = 0, 0
            for item in reversed(node.items):
                out = max(out, _sat(worst(item) + rest))
                rest = _sat(rest + length(item))
            return out
        if isinstance(node, _Dispatch):  # inside a triggered rule, then a stop string
            return _sat(max((rule(t.name) for t in node.targets), default=0) + max(node.stops, default=0))
        return max(worst(b) for b in node.branches)

    def rule(name: str) -> int:
        if name in memo:
            return memo[name]
        if name in active or name not in rules:  # recursion (or an unknown rule): see the module doc
            return 0
        active.add(name)
        try:
            value = worst(rules[name])
        finally:
            active.discard(name)
        memo[name] = value
        return value

    return rule("root")
