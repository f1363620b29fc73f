"""Budget-aware closing: a constrained sequence always completes its document within max_tokens.

:func:`closing_path` walks a fork of a sequence's matcher to a complete document, :meth:`Vocab.tokens`
splits the bytes into few tokens, :func:`check_path` checks them; :class:`Closing` (one per
constrained sequence, on the engine thread) forces the path at the last moment and checks drawn
tokens near the end. The policy, the search and its budgets: docs/structured-outputs.md, "How the
local engine enforces it" and "Inside the engine" ("The closing walk").
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

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


# --- steering one sequence -----------------------------------------------------------------------

MARGIN = 32  # slack (tokens) under which every drawn token is checked against a fresh path (more
# than one token can add: a "," in a tool-call array adds a whole call, about 15 tokens)


class Closing:
    """One constrained sequence's closing path and when to walk it again (engine thread only).

    :meth:`before` runs before the step's draw and may restrict the row to one token;
    :meth:`after` runs once the matcher accepted the drawn token and may replace it."""

    __slots__ = ("_bytes_of", "_vocab", "check", "due", "estimate", "lexer", "off", "path", "region", "stop_ids",
                 "tag", "text", "walks")

    def __init__(self, vocab: Vocab, bytes_of: Sequence[bytes], stop_ids: Sequence[int], json_text: bool,
                 prefix: Sequence[int], tag: TagShape | None = None) -> None:
        self._vocab = vocab
        self._bytes_of = bytes_of
        self.stop_ids = list(stop_ids)
        self.lexer = Lexer().feed(b"".join(bytes_of[t] for t in prefix)) if json_text else None
        # a structural tag: the text so far, and where it stands in JSON content
        self.tag = tag
        self.text = bytearray(b"".join(bytes_of[t] for t in prefix)) if tag is not None else bytearray()
        self.region = Region.of(self.text, tag) if tag is not None else Region()
        self.path: list[int] | None = None  # tokens completing the document from the current state
        self.estimate = 0  # the last path's length, while ``path`` is stale
        self.due = 0  # tokens generated when the next walk is due
        self.check = False  # check the token drawn in this step (slack at most MARGIN)
        self.off = not self.stop_ids  # not steered (no stop id, a walk that gave up, too late)
        self.walks = 0

    def walk(self, matcher: Any) -> list[int] | None:
        """A checked closing path from ``matcher``'s state (tokens, the stop token not included)."""
        self.walks += 1
        data = closing_path(matcher, self.lexer, self.tag, self.text, self.region)
        tokens = self._vocab.tokens(data) if data is not None else None
        if tokens is None or not check_path(matcher, tokens, self.stop_ids[0]):
            return None
        return tokens

    def before(self, matcher: Any, generated: int, remaining: int) -> list[int] | None:
        """The ids the row is restricted to in this step (None: the grammar's mask alone).
        ``remaining``: tokens the sequence may still produce, this one included."""
        self.check = False
        if self.off:
            return None
        if self.path is None:
            if generated < self.due and remaining - 1 - self.estimate > MARGIN:
                return None
            self.path = self.walk(matcher)
            if self.path is None:
                self.off = True
                return None
        slack = remaining - 1 - len(self.path)
        if slack < 0:  # too late (or max_tokens too small): the sequence ends with "length"
            self.off = True
            return None
        if slack == 0:
            return [self.path[0]] if self.path else self.stop_ids
        if slack <= MARGIN:
            self.check = True
        else:
            self.due = generated + max(1, (slack - MARGIN) // 4)
        return None

    def after(self, matcher: Any, token: int, remaining: int) -> int | None:
        """``matcher`` has accepted ``token``; ``remaining`` is what is left after it. Returns the
        token that replaces it (the matcher then stands after that one), or None."""
        path = self.path
        if self.off or matcher.is_terminated():
            return None
        lexer, size, region = self.lexer, len(self.text), self.region
        if path and token == path[0]:
            self.path = path[1:]
            self._feed(token)
            return None
        self._feed(token)
        if not self.check:
            if path is not None:
                self.estimate, self.path = len(path), None
            return None
        fresh = self.walk(matcher)
        if fresh is not None and len(fresh) + 1 <= remaining:
            self.path = fresh
            return None
        assert path is not None  # check is set only with a path
        matcher.rollback(1)
        self.lexer, self.region = lexer, region
        del self.text[size:]
        replacement = path[0] if path else self.stop_ids[0]
        matcher.accept_token(replacement)
        self.path = path[1:]
        self._feed(replacement)
        return replacement

    def _feed(self, token: int) -> None:
        if self.lexer is not None:
            self.lexer = self.lexer.feed(self._bytes_of[token])
        tag = self.tag
        if tag is not None:
            data = self._bytes_of[token]
            self.text += data
            self.region = self.region.fed(self.text, len(data), tag)
