"""Incremental detokenization: equal to one full decode for any chunking, U+FFFD-safe, and
resumable from a small snapshot on every real tokenizer (plus a SentencePiece-style one for the
context-dependent algorithm)."""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import Any

import orjson
import pytest
from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers
from tokenizers.decoders import DecodeStream

from session.detokenizer import (
    MAX_PENDING,
    TokenTable,
    WindowDetokenizer,
    new_detokenizer,
    restore_detokenizer,
    token_table,
)
from tests.conftest import DEFAULT_MODEL, TOKENIZERS

TEXT = ("Hello 世界 🎉 <think>\nhmm 🤔 ok</think> naïve café <tool_call>\n{\"name\": \"x\"}</tool_call> "
        "ありがとう 👍🏽 Ωμέγα — \t tabs\n\n") * 8


def _chunked(det: Any, ids: list[int], rnd: random.Random) -> list[str]:
    out, k = [], 0
    while k < len(ids):
        n = rnd.choice([0, 1, 1, 2, 3, 8])
        out.append(det.push(ids[k:k + n]))
        k += n
    out.append(det.flush())
    return out


@pytest.mark.slow
@pytest.mark.parametrize("name", [*TOKENIZERS, DEFAULT_MODEL])
def test_every_token_bytes_decode_like_the_tokenizer(name: str, tokenizer: Callable[[str], Any]) -> None:
    tok = tokenizer(name)
    table = token_table(tok)
    assert table.byte_level
    rust = tok._tokenizer
    decoded = [rust.decode([i], skip_special_tokens=False) for i in range(table.vocab_size)]
    mismatches = [i for i in range(table.vocab_size) if table.token_bytes(i).decode("utf-8", "replace") != decoded[i]]
    assert mismatches == []
    # the text cache a detokenizer with nothing pending looks up: whole tokens only, and exact
    texts = [table.token_text(i) for i in range(table.vocab_size)]
    whole = [i for i, t in enumerate(texts) if t != "\ud800"]
    assert [i for i in whole if texts[i] != decoded[i]] == []
    assert all("\ufffd" in decoded[i] for i, t in enumerate(texts) if t == "\ud800")  # partial or invalid bytes
    assert len(whole) > 0.9 * table.vocab_size


@pytest.mark.parametrize("name", TOKENIZERS)
@pytest.mark.parametrize("algorithm", ["byte-level", "window"])
@pytest.mark.parametrize("skip_special_tokens", [True, False])
def test_any_chunking_concatenates_to_the_full_decode(name: str, algorithm: str, skip_special_tokens: bool,
                                                       tokenizer: Callable[[str], Any]) -> None:
    tok = tokenizer(name)
    rust = tok._tokenizer
    table = token_table(tok) if algorithm == "byte-level" else TokenTable(rust, byte_level=False)
    rnd = random.Random(7)
    ids = [*rust.encode(TEXT, add_special_tokens=False).ids, tok.eos_token_id]
    garbage = [rnd.randrange(table.vocab_size) for _ in range(300)]  # includes stray byte tokens
    for seq in (ids, ids + garbage, garbage + ids):
        det = new_detokenizer(table, skip_special_tokens=skip_special_tokens)
        assert "".join(_chunked(det, seq, rnd)) == rust.decode(seq, skip_special_tokens=skip_special_tokens)


@pytest.mark.parametrize("name", TOKENIZERS)
def test_a_character_split_across_tokens_is_emitted_only_when_complete(name: str,
                                                                       tokenizer: Callable[[str], Any]) -> None:
    tok = tokenizer(name)
    table = token_table(tok)
    ids = tok._tokenizer.encode("𓀀𓁿𝔘🦩", add_special_tokens=False).ids
    det = new_detokenizer(table, skip_special_tokens=True)
    outs = [det.push([i]) for i in ids]
    assert "\ufffd" not in "".join(outs)
    assert "".join(outs) == "𓀀𓁿𝔘🦩"
    assert any(o == "" for o in outs)  # some token ended inside a character


def test_an_unfinished_character_is_flushed_as_replacement_at_the_end(tokenizer: Callable[[str], Any]) -> None:
    tok = tokenizer("qwen3")
    table = token_table(tok)
    ids = tok._tokenizer.encode("ok 🦩", add_special_tokens=False).ids
    det = new_detokenizer(table, skip_special_tokens=True)
    text = det.push(ids[:-1])
    assert text == "ok "
    assert det.flush() == "\ufffd"  # what tokenizer.decode gives for the same ids


@pytest.mark.parametrize("name", TOKENIZERS)
@pytest.mark.parametrize("algorithm", ["byte-level", "window"])
def test_snapshot_between_every_token_resumes_identically(name: str, algorithm: str,
                                                          tokenizer: Callable[[str], Any]) -> None:
    tok = tokenizer(name)
    rust = tok._tokenizer
    table = token_table(tok) if algorithm == "byte-level" else TokenTable(rust, byte_level=False)
    ids = rust.encode(TEXT[:400], add_special_tokens=False).ids
    det = new_detokenizer(table, skip_special_tokens=True)
    out = []
    largest = 0
    for i in ids:
        snap = orjson.loads(orjson.dumps(det.snapshot()))
        largest = max(largest, len(orjson.dumps(snap)))
        det = restore_detokenizer(table, skip_special_tokens=True, snapshot=snap)
        out.append(det.push([i]))
    out.append(det.flush())
    assert "".join(out) == rust.decode(ids, skip_special_tokens=True)
    assert largest < 200  # a few pending bytes or a short window, never the output


def _sentencepiece_style() -> Tokenizer:
    """A small Metaspace + byte-fallback BPE tokenizer in the Llama-2 / Mistral-v1 layout."""
    vocab: dict[str, int] = {"<unk>": 0, "<s>": 1, "</s>": 2}
    for b in range(256):
        vocab[f"<0x{b:02X}>"] = len(vocab)
    merges: list[tuple[str, str]] = []
    for ch in "▁abcdefghijklmnopqrstuvwxyz":
        vocab.setdefault(ch, len(vocab))
    for word in ("▁the", "▁quick", "▁brown", "▁fox", "▁jumps", "▁over"):
        left = word[0]
        for ch in word[1:]:
            merges.append((left, ch))
            left += ch
            vocab.setdefault(left, len(vocab))
    tok = Tokenizer(models.BPE(vocab, merges, byte_fallback=True, unk_token="<unk>"))
    tok.normalizer = normalizers.Sequence([normalizers.Prepend("▁"), normalizers.Replace(" ", "▁")])
    tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="never", split=False)
    tok.decoder = decoders.Sequence([decoders.Replace("▁", " "), decoders.ByteFallback(), decoders.Fuse(),
                                     decoders.Strip(" ", 1, 0)])
    tok.add_special_tokens(["<s>", "</s>"])
    return tok


def vocab_id(tok: Tokenizer, piece: str) -> int:
    i = tok.token_to_id(piece)
    assert i is not None
    return i


def test_window_algorithm_keeps_the_leading_space_of_the_first_output_token() -> None:
    tok = _sentencepiece_style()
    table = TokenTable(tok)
    assert not table.byte_level
    prompt = tok.encode("the quick brown").ids
    output = tok.encode("fox jumps 🦊 over").ids
    assert tok.decode(output) == "fox jumps 🦊 over"  # decoding alone strips the leading space
    det = new_detokenizer(table, skip_special_tokens=True, prompt_ids=prompt)
    got = "".join(det.push([i]) for i in output) + det.flush()
    stream = DecodeStream(ids=prompt[-6:], skip_special_tokens=True)
    expected = "".join(t for i in output if (t := stream.step(tok, i)) is not None)
    assert got == expected == " fox jumps 🦊 over"


def test_window_state_stays_bounded_on_output_that_never_completes_a_character() -> None:
    tok = _sentencepiece_style()
    table = TokenTable(tok)
    lone_byte = vocab_id(tok, "<0xF0>")  # a 4-byte lead, repeated: never a character
    det = new_detokenizer(table, skip_special_tokens=True)
    for _ in range(10 * MAX_PENDING):
        det.push([lone_byte])
    assert isinstance(det, WindowDetokenizer)
    assert len(det.snapshot()[1]) <= 2 * MAX_PENDING


def test_a_snapshot_for_another_kind_of_tokenizer_is_refused(tokenizer: Callable[[str], Any]) -> None:
    table = token_table(tokenizer("qwen3"))
    with pytest.raises(ValueError):
        restore_detokenizer(table, skip_special_tokens=True, snapshot=["w", [1, 2], 1])
    with pytest.raises(ValueError):
        restore_detokenizer(table, skip_special_tokens=True, snapshot=["b", "f0f0f0f0"])


# -- found by the HTTP fuzzing (docs/reliability.md): a tiny random model sampled an id of its padded
# vocabulary (151680 rows) past the tokenizer (151669 tokens), and the pipeline answered 500.
@pytest.mark.parametrize("algorithm", ["byte-level", "window"])
def test_ids_past_the_tokenizer_decode_to_nothing_as_the_tokenizer_does(algorithm: str,
                                                                         tokenizer: Callable[[str], Any]) -> None:
    tok = tokenizer("qwen3")
    rust = tok._tokenizer
    table = token_table(tok) if algorithm == "byte-level" else TokenTable(rust, byte_level=False)
    past = [table.vocab_size, table.vocab_size + 10]
    ids = rust.encode("Hello 世界 🎉", add_special_tokens=False).ids
    seq = [past[0], *ids[:2], *past, *ids[2:], past[1]]
    for chunks in ([seq], [[t] for t in seq]):
        det = new_detokenizer(table, skip_special_tokens=True)
        text = "".join(det.push(c) for c in chunks) + det.flush()
        assert text == rust.decode(seq, skip_special_tokens=True) == "Hello 世界 🎉"
    assert table.token_bytes(table.vocab_size) == b""


# -- the window algorithm's step without decoding, for a decoder with no context rule (Gemma 4) ------


def test_a_piecewise_decoder_is_told_apart(tokenizer: Callable[[str], Any]) -> None:
    assert token_table(tokenizer("gemma-4")).piecewise  # Replace "▁" → " ", ByteFallback, Fuse
    assert not token_table(tokenizer("qwen3")).piecewise  # byte-level
    assert not TokenTable(_sentencepiece_style()).piecewise  # Strip: the first space depends on context


@pytest.mark.slow
def test_every_piece_of_a_piecewise_tokenizer_decodes_to_its_text_after_any_other(
        tokenizer: Callable[[str], Any]) -> None:
    rust = tokenizer("gemma-4")._tokenizer
    table = token_table(tokenizer("gemma-4"))
    decoded = rust.decode_batch([[i] for i in range(table.vocab_size)], skip_special_tokens=False)
    texts = [table.token_text(i) for i in range(table.vocab_size)]
    assert [i for i, t in enumerate(texts) if t != "\ud800" and t != decoded[i]] == []
    pieces = [i for i, t in enumerate(texts) if t == "\ud800"]
    assert [rust.id_to_token(i) for i in pieces] == [f"<0x{b:02X}>" for b in range(256)]  # the byte pieces only
    rnd = random.Random(3)
    whole = [i for i, t in enumerate(texts) if t != "\ud800"]
    for _ in range(3000):  # after any ids, byte pieces (valid or not) included
        before = [rnd.choice(pieces if rnd.random() < 0.5 else whole) for _ in range(rnd.randrange(6))]
        after = rnd.choice(whole)
        assert rust.decode([*before, after], skip_special_tokens=False) == \
            rust.decode(before, skip_special_tokens=False) + texts[after]


@pytest.mark.parametrize("skip_special_tokens", [True, False])
def test_the_piecewise_step_is_the_window_algorithm(tokenizer: Callable[[str], Any], skip_special_tokens: bool) -> None:
    """Token by token, the step that skips decoding emits what the window algorithm emits and
    leaves the same state (so snapshots are the same too), on text, special tokens, byte pieces
    that make characters or never do, and ids past the tokenizer; and the text is the full decode."""
    tok = tokenizer("gemma-4")
    rust = tok._tokenizer
    fast = token_table(tok)
    slow = TokenTable(rust, piecewise=False)
    assert fast.piecewise and not fast.byte_level and not slow.piecewise
    rnd = random.Random(11)
    ids = rust.encode(TEXT + "<|channel>thought\n𓀀𓁿 ok<channel|><turn|>", add_special_tokens=False).ids
    pieces = [rust.token_to_id(f"<0x{b:02X}>") for b in range(256)]
    # (and tokens whose own text ends in U+FFFD, which the window algorithm holds as unfinished)
    ending = [i for i in range(fast.vocab_size) if fast.token_text(i).endswith("\ufffd")]
    assert ending
    garbage = [rnd.choice([*pieces, *ending[:3], rnd.randrange(fast.vocab_size), fast.vocab_size + 3])
               for _ in range(300)]
    prompt = rust.encode("Plan my week.", add_special_tokens=False).ids
    for seq in (ids, ids + garbage, garbage + ids, [*ids[:9], ending[0], *ids[9:20], ending[1], ending[2]]):
        a = new_detokenizer(fast, skip_special_tokens=skip_special_tokens, prompt_ids=prompt)
        b = new_detokenizer(slow, skip_special_tokens=skip_special_tokens, prompt_ids=prompt)
        out = []
        for i in seq:
            out.append(a.push([i]))
            assert out[-1] == b.push([i])
            assert a.snapshot() == b.snapshot()
        out.append(a.flush())
        assert out[-1] == b.flush()
        if seq is ids:
            assert "".join(out) == rust.decode(seq, skip_special_tokens=skip_special_tokens)
