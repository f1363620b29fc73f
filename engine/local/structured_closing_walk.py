"""The closing walk: :func:`closing_path` walks a fork of a sequence's matcher to a complete
document within its budgets, :func:`check_path` checks a path's tokens.

The search and its budgets: docs/structured-outputs.md, "Inside the engine" ("The closing walk").
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from engine.local.structured_closing_text import ESCAPE, NUMBER, STRING, STRUCTURE, Lexer, Region, TagShape

__all__ = ["check_path", "closing_path"]

# --- the walk ------------------------------------------------------------------------------------

_PRINTABLE = bytes(range(0x21, 0x7F)) + b" "
_ALL_BYTES = _PRINTABLE + bytes(range(0x80, 0x100)) + bytes(b for b in range(0x21) if b != 0x20) + b"\x7f"
# String content: one byte of each kind a format or pattern may need first, then everything.
_STRING_REPS = b"a0A-._@:/+TZ "
_NUMBER_BYTES = b"0123456789.-+eE"
_VALUE_START = b'0",:ntf123456789-[{'
_CLOSERS = b"}]"
_TERMINATORS = b"}],"
_ESCAPES = b'n"\\/bfrtu'

_BEAM = 8  # states kept per depth of a search
_MAX_RUN = 48  # longest run of content a search looks for
_MAX_BYTES = 2048  # longest closing path
_WORK = 30_000  # accept attempts per walk


class _GiveUp(Exception):
    pass


class _Walk:
    __slots__ = ("work",)

    def __init__(self) -> None:
        self.work = _WORK

    def accepts(self, m: Any, byte: int) -> bool:
        """Whether ``m`` accepts ``byte`` next (its state unchanged)."""
        self.work -= 1
        if self.work < 0:
            raise _GiveUp
        if m.accept_string(_ONE[byte]):
            m.rollback(1)
            return True
        return False

    def accepts_all(self, m: Any, data: bytes) -> bool:
        """Whether ``m`` accepts the whole of ``data`` next (``m`` unchanged)."""
        self.work -= 1
        if self.work < 0:
            raise _GiveUp
        return bool(m.fork().accept_string(data))

    def first(self, m: Any, candidates: bytes) -> bytes | None:
        for b in candidates:
            if self.accepts(m, b):
                return _ONE[b]
        return None

    def accepted(self, m: Any, alphabet: bytes) -> bytes:
        got = bytes(b for b in alphabet if self.accepts(m, b))
        if not got and alphabet is not _ALL_BYTES:
            got = bytes(b for b in _ALL_BYTES if b not in alphabet and self.accepts(m, b))
        return got

    def run(self, m: Any, alphabet: bytes, goal: Callable[[Any], bool]) -> bytes | None:
        """The shortest run of bytes over ``alphabet`` after which ``goal`` holds (breadth first,
        states that accept the same next bytes merged, ``_BEAM`` per depth); None when none is
        found within ``_MAX_RUN`` bytes."""
        frontier: list[tuple[Any, bytes, bytes]] = [(m, b"", self.accepted(m, alphabet))]
        for _ in range(_MAX_RUN):
            nxt: list[tuple[Any, bytes, bytes]] = []
            seen: set[bytes] = set()
            for node, run, acc in frontier:
                for b in acc:
                    child = node.fork()
                    child.accept_string(_ONE[b])
                    longer = run + _ONE[b]
                    if goal(child):
                        return longer
                    child_acc = self.accepted(child, alphabet)
                    if not child_acc or child_acc in seen:
                        continue
                    seen.add(child_acc)
                    nxt.append((child, longer, child_acc))
                    if len(nxt) >= _BEAM:
                        break
                if len(nxt) >= _BEAM:
                    break
            if not nxt:
                return None
            frontier = nxt
        return None


_ONE = [bytes([b]) for b in range(256)]


def closing_path(matcher: Any, json_text: Lexer | None, tag: TagShape | None = None,
                 text: bytes | bytearray = b"", region: Region | None = None) -> bytes | None:
    """The bytes that complete the document from ``matcher``'s state (the matcher is not changed),
    or None when the walk finds none within its budget. ``json_text`` is the lexer state of the
    text so far for JSON constraints, None for the others. For a structural tag, ``tag`` is its
    shape, ``text`` the text so far and ``region`` where it stands in JSON content."""
    m = matcher.fork()
    walk = _Walk()
    out = bytearray()
    lex = json_text
    full = bytearray(text) if tag is not None else bytearray()
    place = region if region is not None else Region()
    try:
        while not m.is_completed():
            if len(out) > _MAX_BYTES:
                return None
            forced = m.find_jump_forward_string()  # at most the grammar's completion bound
            if forced and len(forced) + len(out) > _MAX_BYTES:  # (engine.local.grammar_worker)
                return None  # too long to force: accepting it would cost for nothing
            if forced:
                data: bytes | None = forced.encode()
            elif tag is not None:
                data = _tag_move(m, tag, walk, full, place)
            else:
                data = _json_move(m, lex, walk) if lex is not None else _any_move(m, walk)
            if not data or not m.accept_string(data):
                return None
            out += data
            if lex is not None:
                lex = lex.feed(data)
            if tag is not None:
                full += data
                place = place.fed(full, len(data), tag)
    except _GiveUp:
        return None
    return bytes(out)


_TAG_VALUE_START = b"{" + _VALUE_START  # a free JSON value (a tool's arguments): {} first


def _tag_move(m: Any, tag: TagShape, walk: _Walk, text: bytearray, place: Region) -> bytes | None:
    """One move inside a structural tag: inside JSON content, the JSON policy; else an end string,
    a begin string, or the rest of one the text has started; else the shortest run to the end."""
    if place.open:
        lex = place.lex
        if lex.mode == STRUCTURE and lex.depth == 0:  # the value has not begun
            move = walk.first(m, _TAG_VALUE_START)
            return move if move is not None else _json_move(m, lex, walk)
        return _json_move(m, lex, walk)
    for marker in (*tag.ends, *tag.begins):
        if walk.accepts_all(m, marker):
            return marker
    for marker in (*tag.ends, *tag.begins):
        for k in range(len(marker) - 1, 0, -1):
            if text.endswith(marker[:k]) and walk.accepts_all(m, marker[k:]):
                return marker[k:]
    return _any_move(m, walk)


def _json_move(m: Any, lex: Lexer, walk: _Walk) -> bytes | None:
    if lex.mode == STRING:
        if walk.accepts(m, 0x22):
            return b'"'
        return walk.run(m, _STRING_REPS, lambda c: walk.accepts(c, 0x22))
    if lex.mode == ESCAPE:
        return walk.first(m, _ESCAPES)
    if lex.mode == NUMBER:  # end the number as soon as the grammar lets it end
        end = walk.first(m, _TERMINATORS)
        if end is not None or m.is_completed():
            return end
        return walk.run(m, _NUMBER_BYTES, lambda c: c.is_completed() or walk.first(c, _TERMINATORS) is not None)
    move = walk.first(m, _CLOSERS)
    if move is None:
        move = walk.first(m, _VALUE_START)
    if move is None:
        move = walk.first(m, _ALL_BYTES)
    return move


def _any_move(m: Any, walk: _Walk) -> bytes | None:
    return walk.run(m, _PRINTABLE, lambda c: bool(c.is_completed()))


def check_path(matcher: Any, tokens: Sequence[int], stop: int) -> bool:
    """Whether ``tokens`` then ``stop`` take ``matcher`` (not changed) to its end."""
    m = matcher.fork()
    return all(m.accept_token(t) for t in tokens) and bool(m.accept_token(stop)) and bool(m.is_terminated())
