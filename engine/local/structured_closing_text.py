"""What budget-aware closing reads of a constrained sequence's text: the vocabulary by bytes
(:class:`Vocab`, a path split into few tokens), a JSON lexer (:class:`Lexer`), a structural tag's
markers (:class:`TagShape`) and where the text stands in its JSON content (:class:`Region`).

The closing policy: engine/local/structured_closing.py; docs/structured-outputs.md, "Inside the
engine" ("The closing walk").
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

__all__ = ["ESCAPE", "NUMBER", "STRING", "STRUCTURE", "Lexer", "Region", "TagShape", "Vocab", "last_json_begin",
           "tag_shape"]

# --- the vocabulary as bytes -------------------------------------------------------------------

_MAX_PIECE = 16  # longest token (in bytes) used on a closing path


class Vocab:
    """Token ids by their bytes, to split a closing path into few tokens. Built once per tokenizer
    (any thread); read-only afterwards. ``excluded`` ids are never used (special and added tokens,
    the stop ids, tokens a JSON row may not take)."""

    def __init__(self, decoded_vocab: Sequence[bytes], excluded: Iterable[int]) -> None:
        skip = set(excluded)
        by_bytes: dict[bytes, int] = {}
        for tok, text in enumerate(decoded_vocab):
            if tok in skip or not text or len(text) > _MAX_PIECE:
                continue
            by_bytes.setdefault(bytes(text), tok)
        self._by_bytes = by_bytes

    def tokens(self, data: bytes) -> list[int] | None:
        """``data`` split into the fewest tokens (longest first token among equals); None when a
        byte has no token. Computed from the end, so the split of a suffix is the tail of the split
        of the whole (a path's tail keeps its tokens)."""
        n = len(data)
        best = [0] * (n + 1)
        pick = [0] * (n + 1)
        get = self._by_bytes.get
        for i in range(n - 1, -1, -1):
            cost, length = n + 1, 0
            for size in range(min(_MAX_PIECE, n - i), 0, -1):
                if get(data[i:i + size]) is not None and best[i + size] + 1 < cost:
                    cost, length = best[i + size] + 1, size
            if not length:
                return None
            best[i], pick[i] = cost, length
        out, i = [], 0
        while i < n:
            out.append(self._by_bytes[data[i:i + pick[i]]])
            i += pick[i]
        return out


# --- a JSON lexer: where in the text a byte string leaves us ------------------------------------

STRUCTURE, STRING, ESCAPE, NUMBER = 0, 1, 2, 3
_NUMBER_START = frozenset(b"-0123456789")
_NUMBER_PART = frozenset(b"0123456789.eE+-")


@dataclass(frozen=True, slots=True)
class Lexer:
    """JSON text read so far, as much as closing it needs: nesting depth and whether the text is
    inside a string, an escape or a number. The grammar already guarantees the text is a valid
    prefix; this only tells a closing quote from a quote inside content."""

    depth: int = 0
    mode: int = STRUCTURE

    def feed(self, data: bytes | bytearray) -> Lexer:
        depth, mode = self.depth, self.mode
        for b in data:
            if mode == STRING:
                if b == 0x22:
                    mode = STRUCTURE
                elif b == 0x5C:
                    mode = ESCAPE
                continue
            if mode == ESCAPE:
                mode = STRING
                continue
            if mode == NUMBER:
                if b in _NUMBER_PART:
                    continue
                mode = STRUCTURE
            if b == 0x22:
                mode = STRING
            elif b in (0x7B, 0x5B):
                depth += 1
            elif b in (0x7D, 0x5D):
                depth -= 1
            elif b in _NUMBER_START:
                mode = NUMBER
        if depth == self.depth and mode == self.mode:
            return self
        return Lexer(depth, mode)


# --- a structural tag's markers ------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class TagShape:
    """What closing needs of a structural tag (``structured_outputs.structural_tag``): its tags'
    ``end`` strings, their ``begin`` strings (those of the tags nearest the end of the document
    first, a tag with free-text content before its siblings), and the begins after which the content
    is JSON. The walk tries them where the grammar forces nothing: an end closes the tag it is in, a
    begin (or the rest of one the text has started) opens the next tag."""

    ends: tuple[bytes, ...]
    begins: tuple[bytes, ...]
    json_begins: tuple[bytes, ...]

    @property
    def longest(self) -> int:
        return max((len(b) for b in self.json_begins), default=0)


def tag_shape(tag: dict[str, Any]) -> TagShape:
    """The :class:`TagShape` of a structural tag (``{"type": "structural_tag", "format": …}``)."""
    ends: list[bytes] = []
    begins: list[bytes] = []
    json_begins: list[bytes] = []

    def visit(node: Any) -> None:
        if isinstance(node, list):
            for item in node:
                visit(item)
            return
        if not isinstance(node, dict):
            return
        kind = node.get("type")
        if kind == "tag":
            begin = str(node.get("begin", "")).encode()
            if begin and begin not in begins:
                begins.append(begin)
            content = node.get("content")
            if isinstance(content, dict) and content.get("type") == "json_schema" and begin:
                json_begins.append(begin)
            end = node.get("end")
            for e in end if isinstance(end, list) else [end]:
                if isinstance(e, str) and e and e.encode() not in ends:
                    ends.append(e.encode())
            visit(content)
        elif kind == "sequence":
            for item in reversed(node.get("elements") or []):  # the later an element, the nearer the end
                visit(item)
        elif kind == "or":
            elements = list(node.get("elements") or [])
            visit([e for _, e in sorted(enumerate(elements), key=lambda ie: (_or_rank(ie[1]), ie[0]))])
        else:
            for key, child in node.items():
                if key != "type" and isinstance(child, dict | list):
                    visit(child)

    visit(tag.get("format"))
    return TagShape(tuple(ends), tuple(begins), tuple(json_begins))


def _or_rank(node: Any) -> tuple[int, int]:
    """Which alternative of an ``or`` closing opens first: a tag with free-text content (an end string
    closes it at once), then a begin that names its content type with ``<|constrain|>`` (harmony's
    typed message: ``final <|constrain|>json`` is the answer for vLLM's derender, while ``final json``
    reads as a call of a tool named ``json``), then the others in their order."""
    if not isinstance(node, dict):
        return (2, 1)
    content = node.get("content")
    free = isinstance(content, dict) and content.get("type") == "any_text"
    return (0 if free else 1, 0 if "<|constrain|>" in str(node.get("begin", "")) else 1)


def last_json_begin(data: bytes | bytearray, shape: TagShape) -> int:
    """Where the JSON content of the last JSON tag opened in ``data`` begins (-1: none)."""
    best = -1
    for begin in shape.json_begins:
        at = data.rfind(begin)
        if at >= 0:
            best = max(best, at + len(begin))
    return best


@dataclass(frozen=True, slots=True)
class Region:
    """Where a structural tag's text stands in JSON content: ``at``, the offset the last JSON content
    began at (-1: none yet); ``lex``, the lexer over that content; ``started``, whether a value began."""

    at: int = -1
    lex: Lexer = Lexer()
    started: bool = False

    @classmethod
    def of(cls, text: bytes | bytearray, shape: TagShape) -> Region:
        at = last_json_begin(text, shape)
        if at < 0:
            return cls()
        return cls(at, Lexer().feed(text[at:]), bool(text[at:].strip()))

    def fed(self, text: bytes | bytearray, added: int, shape: TagShape) -> Region:
        """The region once the last ``added`` bytes of ``text`` were appended (only they, and the
        begins they may complete, are read)."""
        start = max(0, len(text) - added - shape.longest + 1)
        found = last_json_begin(text[start:], shape)
        if found >= 0 and start + found > self.at:  # a JSON tag opened: its content starts here
            at = start + found
            return Region(at, Lexer().feed(text[at:]), bool(text[at:].strip()))
        if self.at < 0:
            return self
        data = text[len(text) - added:]
        return Region(self.at, self.lex.feed(data), self.started or bool(data.strip()))

    @property
    def open(self) -> bool:
        """Inside JSON content whose value is not complete yet."""
        return self.at >= 0 and (self.lex.mode != STRUCTURE or self.lex.depth > 0 or not self.started)
