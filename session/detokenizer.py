"""Incremental detokenization with a small, serializable continuation state.

:class:`Detokenizer` turns each chunk of ids into the text it completes (nothing for a token that
ends inside a multi-byte character), byte-level or ``DecodeStream``-style per tokenizer
(:func:`token_table`); any split gives the text of one full decode, and :meth:`Detokenizer.snapshot`
/ :func:`restore_detokenizer` continue it elsewhere. The two algorithms and their states:
docs/derender.md, "Incremental detokenization".
"""

from __future__ import annotations

import codecs
import json
from collections.abc import Iterable, Sequence
from typing import Any, Protocol

__all__ = [
    "SEED_WINDOW",
    "ByteLevelDetokenizer",
    "Detokenizer",
    "TokenTable",
    "WindowDetokenizer",
    "new_detokenizer",
    "restore_detokenizer",
    "token_table",
]

# How many prompt ids seed the window of the context-dependent algorithm (vLLM uses 5–7).
SEED_WINDOW = 6
# A window whose pending ids never complete a character (a model emitting garbage bytes, or a run
# of skipped special tokens) is flushed past this many ids, keeping the state bounded.
MAX_PENDING = 32
_KEEP_AFTER_FORCED_FLUSH = 4
# Ids in a restored window: any id a model may emit. A model's vocabulary is often padded past the
# tokenizer (those ids decode to nothing), so the tokenizer's size is not the bound; the caller
# checks ids against the model's vocab_size before they reach a detokenizer.
_MAX_ID = 2**31
_REPLACEMENT = "\ufffd"
# TokenTable text cache: a token whose bytes are not whole UTF-8 on their own (part of a character,
# or invalid). A lone surrogate, which no decoded UTF-8 text can hold, so it is no token's text.
_PARTIAL = "\ud800"
_utf8_decode = codecs.utf_8_decode
# A SentencePiece decoder without a context rule (Gemma's: no Strip of the first space, no Metaspace
# prefix scheme): a token that is not a byte piece decodes to its own text whatever precedes it.
_PIECEWISE_DECODER = {"type": "Sequence", "decoders": [
    {"type": "Replace", "pattern": {"String": "\u2581"}, "content": " "}, {"type": "ByteFallback"}, {"type": "Fuse"}]}


def _bytes_to_unicode() -> dict[int, str]:
    """GPT-2's byte ↔ printable-character map used by ``ByteLevel`` pre-tokenizers/decoders."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(
        range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {b: chr(c) for b, c in zip(bs, cs, strict=True)}


_BYTE_OF_CHAR = {c: b for b, c in _bytes_to_unicode().items()}
# str.translate table: byte-level character → the latin-1 character of its byte.
_TO_LATIN1 = {ord(c): b for c, b in _BYTE_OF_CHAR.items()}


class _RustTokenizer(Protocol):  # the parts of ``tokenizers.Tokenizer`` used here
    def decode(self, ids: Sequence[int], skip_special_tokens: bool = ...) -> str: ...
    def id_to_token(self, id: int) -> str | None: ...
    def get_vocab_size(self, with_added_tokens: bool = ...) -> int: ...
    def get_added_tokens_decoder(self) -> dict[int, Any]: ...
    def to_str(self) -> str: ...


class TokenTable:
    """Per-tokenizer decoding facts, built once and shared by every stream of that tokenizer.

    ``vocab_size`` bounds valid ids; ``special_ids`` are the ids ``skip_special_tokens`` drops;
    ``byte_level`` says whether the context-free algorithm applies. ``token_bytes(id)`` is a
    token's exact bytes (byte-level tokenizers), also used for logprob ``bytes``. ``piecewise``
    (a SentencePiece decoder with no context rule, :data:`_PIECEWISE_DECODER`): every token but a
    byte piece decodes to ``token_text(id)`` after any text, which the window algorithm's step
    takes when nothing is pending.
    """

    __slots__ = ("_bytes", "_rust", "_text", "byte_level", "eos_ids", "piecewise", "special_ids", "vocab_size")

    def __init__(self, rust: _RustTokenizer, *, eos_ids: Iterable[int] = (), byte_level: bool | None = None,
                 piecewise: bool | None = None) -> None:
        self._rust = rust
        added = rust.get_added_tokens_decoder()
        self.vocab_size = max(rust.get_vocab_size(with_added_tokens=True), max(added, default=-1) + 1)
        self.special_ids = frozenset(i for i, tok in added.items() if getattr(tok, "special", False))
        self.eos_ids = frozenset(eos_ids)
        if byte_level is None:
            byte_level = _decoder_is_byte_level(rust)
        self.byte_level = byte_level
        if piecewise is None:
            piecewise = not byte_level and _decoder_is_piecewise(rust) and not any(
                "\u2581" in str(tok.content) for tok in added.values())  # (added tokens' text is kept as it is)
        self.piecewise = piecewise
        self._bytes: list[bytes | None] = [None] * self.vocab_size
        for i, tok in added.items():
            self._bytes[i] = str(tok.content).encode()
        self._text: list[str | None] = [None] * self.vocab_size  # see token_text

    def decode(self, ids: Sequence[int], skip_special_tokens: bool) -> str:
        return self._rust.decode(ids, skip_special_tokens=skip_special_tokens)

    def token_bytes(self, token_id: int) -> bytes:
        """The bytes this token contributes to the text (special tokens: their content). An id past
        the tokenizer (a model's padded vocabulary, which random or undertrained weights do sample)
        contributes nothing, as ``tokenizers`` decodes it."""
        try:
            b = self._bytes[token_id]
        except IndexError:
            return b""
        if b is None:
            b = self._compute_bytes(token_id)
            self._bytes[token_id] = b
        return b

    def chunk_bytes(self, ids: Sequence[int], skip: frozenset[int]) -> bytes:
        """The bytes of ``ids`` without those in ``skip``, joined."""
        if skip.isdisjoint(ids):
            try:
                return b"".join(map(self._bytes.__getitem__, ids))  # type: ignore[arg-type]  # (a None raises)
            except (IndexError, TypeError):  # an id past the tokenizer, or one not looked up yet
                pass
        return b"".join([self.token_bytes(i) for i in ids if i not in skip])

    def token_text(self, token_id: int) -> str:
        """``token_bytes(id).decode()`` when those bytes are whole UTF-8 on their own, else
        ``_PARTIAL`` (cached; ids past the tokenizer: ""). Decoding such a token after a finished
        character gives exactly this text, so a detokenizer with nothing pending looks it up. (Not
        byte-level: a byte piece ``<0xNN>`` is ``_PARTIAL`` too, its text depending on its
        neighbours.)"""
        try:
            s = self._text[token_id]
        except IndexError:
            return ""
        if s is None:
            if not self.byte_level and _is_byte_piece(self._rust.id_to_token(token_id) or ""):
                s = _PARTIAL
            else:
                try:
                    s = self.token_bytes(token_id).decode("utf-8")
                except UnicodeDecodeError:
                    s = _PARTIAL
            self._text[token_id] = s
        return s

    def _compute_bytes(self, token_id: int) -> bytes:
        piece = self._rust.id_to_token(token_id) or ""
        if self.byte_level:
            if all(c in _BYTE_OF_CHAR for c in piece):
                return piece.translate(_TO_LATIN1).encode("latin-1")
            return piece.encode()
        if _is_byte_piece(piece):
            return bytes([int(piece[3:5], 16)])
        return piece.replace("\u2581", " ").encode()


def _is_byte_piece(piece: str) -> bool:
    """``<0xNN>``, a byte-fallback piece (as ``tokenizers``' ByteFallback decoder reads it)."""
    if len(piece) == 6 and piece.startswith("<0x") and piece.endswith(">"):
        try:
            int(piece[3:5], 16)
        except ValueError:
            return False
        return True
    return False


def _decoder_is_piecewise(rust: _RustTokenizer) -> bool:
    decoder = getattr(rust, "decoder", None)
    try:
        state = json.loads(decoder.__getstate__()) if decoder is not None else None
    except (AttributeError, TypeError, ValueError):
        return False
    return bool(state == _PIECEWISE_DECODER)


def _decoder_is_byte_level(rust: _RustTokenizer) -> bool:
    decoder = getattr(rust, "decoder", None)
    if decoder is not None:
        return type(decoder).__name__ == "ByteLevel"
    try:  # an object without the ``decoder`` property: read its serialized form
        config = json.loads(rust.to_str()).get("decoder") or {}
    except (ValueError, AttributeError):
        return False
    return bool(config.get("type") == "ByteLevel")


# id(tokenizer) → (tokenizer, table); the tokenizer is kept so its id is never reused
_TABLES: dict[int, tuple[Any, TokenTable]] = {}


def token_table(tokenizer: Any) -> TokenTable:
    """The cached :class:`TokenTable` of a ``transformers`` tokenizer (or a ``tokenizers.Tokenizer``)."""
    hit = _TABLES.get(id(tokenizer))
    if hit is not None and hit[0] is tokenizer:
        return hit[1]
    rust = getattr(tokenizer, "_tokenizer", None) or getattr(tokenizer, "backend_tokenizer", None) or tokenizer
    eos: set[int] = set()
    eos_id = getattr(tokenizer, "eos_token_id", None)
    if isinstance(eos_id, int):
        eos.add(eos_id)
    elif isinstance(eos_id, list):
        eos.update(i for i in eos_id if isinstance(i, int))
    table = TokenTable(rust, eos_ids=eos)
    _TABLES[id(tokenizer)] = (tokenizer, table)
    return table


class Detokenizer(Protocol):
    """An incremental detokenizer of one stream."""

    def push(self, ids: Sequence[int]) -> str:
        """The text the ids complete (possibly "")."""
        ...

    def flush(self) -> str:
        """At the end of the stream: what is still held (an unfinished character, as U+FFFD)."""
        ...

    def snapshot(self) -> list[Any]:
        """The continuation state, JSON-ready and small."""
        ...


class ByteLevelDetokenizer:
    """Context-free detokenization for byte-level tokenizers. State: the unfinished bytes.

    While no character is unfinished (``_pending`` empty), tokens that are whole UTF-8 on their
    own are looked up (``TokenTable.token_text``); anything else is decoded as UTF-8 with the bytes
    of an unfinished last character kept in ``_pending`` for the next push (what an incremental
    UTF-8 decoder does, without its Python-level wrapper)."""

    __slots__ = ("_pending", "_skip", "_table")
    KIND = "b"

    def __init__(self, table: TokenTable, skip_special_tokens: bool, pending: bytes = b"") -> None:
        self._table = table
        self._skip = table.special_ids if skip_special_tokens else frozenset()
        self._pending = pending  # the bytes of an unfinished character

    def push(self, ids: Sequence[int]) -> str:
        table = self._table
        skip = self._skip
        if not self._pending:
            text = table._text
            if len(ids) == 1:  # the common step
                i = ids[0]
                if i in skip:
                    return ""
                try:
                    s = text[i]
                except IndexError:  # past the tokenizer: no text (see TokenTable.token_bytes)
                    return ""
                if s is None:
                    s = table.token_text(i)
                if s is not _PARTIAL:
                    return s
            elif skip.isdisjoint(ids):  # a chunk of whole tokens: looked up (else decoded below)
                try:
                    s = "".join(map(text.__getitem__, ids))  # type: ignore[arg-type]  # (a None raises)
                except (IndexError, TypeError):  # an id past the tokenizer, or one not looked up yet
                    s = "".join([table.token_text(i) for i in ids])
                if _PARTIAL not in s:  # (no token's own text holds a lone surrogate)
                    return s
        data = self._pending + table.chunk_bytes(ids, skip)
        out, used = _utf8_decode(data, "replace", False)
        self._pending = data[used:]
        return out

    def flush(self) -> str:
        pending, self._pending = self._pending, b""
        return _utf8_decode(pending, "replace", True)[0] if pending else ""

    def snapshot(self) -> list[Any]:
        return [self.KIND, self._pending.hex()] if self._pending else [self.KIND]


class WindowDetokenizer:
    """The ``DecodeStream`` algorithm with visible state, for context-dependent decoders.

    ``ids`` is the window; ``ids[:prefix_index]`` decodes to ``prefix``, text already emitted (or
    the prompt's, for the seed); ids after it are pending. A step decodes the window and emits what
    extends the prefix once the text does not end in an unfinished character.
    """

    __slots__ = ("_ids", "_prefix", "_prefix_index", "_skip", "_table")
    KIND = "w"

    def __init__(self, table: TokenTable, skip_special_tokens: bool, ids: Sequence[int] = (),
                 prefix_index: int | None = None) -> None:
        self._table = table
        self._skip = skip_special_tokens
        self._ids = list(ids)
        self._prefix_index = len(self._ids) if prefix_index is None else prefix_index
        self._prefix = table.decode(self._ids[: self._prefix_index], skip_special_tokens) if self._ids else ""

    def push(self, ids: Sequence[int]) -> str:
        if len(ids) == 1:  # the common step
            return self._step(ids[0])
        return "".join([self._step(i) for i in ids])

    def _step(self, token_id: int) -> str:
        table = self._table
        if table.piecewise and self._prefix_index == len(self._ids):
            # nothing pending, a decoder with no context rule: the window would decode to the prefix
            # and this token's own text, emit it and keep just this token; so, without decoding
            try:
                s = table._text[token_id]
            except IndexError:  # past the tokenizer: no text
                s = ""
            if s is None:
                s = table.token_text(token_id)
            if s and s is not _PARTIAL and s[-1] != _REPLACEMENT and not (
                    self._skip and token_id in table.special_ids):
                self._ids = [token_id]
                self._prefix = s
                self._prefix_index = 1
                return s
        self._ids.append(token_id)
        text = self._table.decode(self._ids, self._skip)
        prefix = self._prefix
        if len(text) > len(prefix) and not text.endswith(_REPLACEMENT):
            # (a decoder that rewrites the prefix makes DecodeStream fail; continue after it)
            new = text[len(prefix):]
            self._ids = self._ids[self._prefix_index:]
            self._prefix = self._table.decode(self._ids, self._skip)
            self._prefix_index = len(self._ids)
            return new
        if len(self._ids) - self._prefix_index > MAX_PENDING:
            return self._force_flush(text)
        return ""

    def _force_flush(self, text: str) -> str:
        new = text[len(self._prefix):] if text.startswith(self._prefix) else ""
        self._ids = self._ids[-_KEEP_AFTER_FORCED_FLUSH:]
        self._prefix = self._table.decode(self._ids, self._skip)
        self._prefix_index = len(self._ids)
        return new

    def flush(self) -> str:
        if self._prefix_index >= len(self._ids):
            return ""
        text = self._table.decode(self._ids, self._skip)
        new = text[len(self._prefix):] if text.startswith(self._prefix) else ""
        self._ids = self._ids[self._prefix_index:]
        self._prefix = self._table.decode(self._ids, self._skip)
        self._prefix_index = len(self._ids)
        return new

    def snapshot(self) -> list[Any]:
        return [self.KIND, list(self._ids), self._prefix_index]


def new_detokenizer(table: TokenTable, *, skip_special_tokens: bool,
                    prompt_ids: Sequence[int] = ()) -> ByteLevelDetokenizer | WindowDetokenizer:
    """A fresh detokenizer; ``prompt_ids`` (the prompt's last ids) seed the context window."""
    if table.byte_level:
        return ByteLevelDetokenizer(table, skip_special_tokens)
    return WindowDetokenizer(table, skip_special_tokens, list(prompt_ids[-SEED_WINDOW:]))


def restore_detokenizer(table: TokenTable, *, skip_special_tokens: bool,
                        snapshot: Sequence[Any]) -> ByteLevelDetokenizer | WindowDetokenizer:
    """Rebuild a detokenizer from :meth:`Detokenizer.snapshot`. Raises ``ValueError`` when the
    snapshot does not fit this tokenizer."""
    if not snapshot:
        raise ValueError("empty detokenizer state")
    kind = snapshot[0]
    if kind == ByteLevelDetokenizer.KIND and table.byte_level:
        pending = bytes.fromhex(snapshot[1]) if len(snapshot) > 1 else b""
        if len(pending) > 3:
            raise ValueError("detokenizer state holds too many pending bytes")
        return ByteLevelDetokenizer(table, skip_special_tokens, pending)
    if kind == WindowDetokenizer.KIND and not table.byte_level:
        ids, prefix_index = snapshot[1], snapshot[2]
        if (not isinstance(ids, list) or len(ids) > 2 * MAX_PENDING + SEED_WINDOW + 2
                or not all(isinstance(i, int) and 0 <= i < _MAX_ID for i in ids)
                or not isinstance(prefix_index, int) or not 0 <= prefix_index <= len(ids)):
            raise ValueError("detokenizer window is invalid")
        return WindowDetokenizer(table, skip_special_tokens, ids, prefix_index)
    raise ValueError("detokenizer state does not match this tokenizer")
