"""The piece cache gives exactly the tokenizer's ids, stays bounded, and keeps salted requests apart."""

from __future__ import annotations

from typing import Any

import pytest

from session.render import segments
from session.render.encoder import Encoder
from tests.conftest import TOKENIZERS

TRICKY = [
    "",
    "plain text only",
    "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n",
    "<|im_start|><|im_end|><|im_start|>",  # adjacent added tokens, empty pieces between
    "<|im_start|>\u0301 combining accent right after a token (NFC works per piece)",
    "e\u0301<|im_end|>e\u0301",
    "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nhé<|eot_id|>",
    "[INST]question[/INST]answer</s>[INST]again[/INST]",
    "<｜begin▁of▁sentence｜><｜User｜>你好<｜Assistant｜><think></think>",
    "<|im_start", "im_end|>", "<<|im_end|>>", "<|im_end|>|>",
    "   leading spaces<|im_end|>   trailing   ",
    "\n\n\n<|im_end|>\n\n",
    "emoji 🎉🚀 and <tool_call>{\"a\": 1}</tool_call>",
]


@pytest.mark.parametrize("name", TOKENIZERS)
def test_piece_by_piece_ids_equal_the_tokenizers_ids(name: str, tokenizer: Any) -> None:
    tok = tokenizer(name)
    enc = Encoder(tok)
    assert enc._segments is not None, "every real chat tokenizer works piece by piece"
    for text in TRICKY * 2:  # the second round is served from the cache
        assert enc.ids(text, add_special_tokens=False) == tok.encode(text, add_special_tokens=False), text


def test_the_cache_is_bounded_in_entries_and_text(tokenizer: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(segments, "MAX_ENTRIES", 8)
    monkeypatch.setattr(segments, "MAX_CACHED_CHARS", 200)
    tok = tokenizer("qwen3")
    enc = Encoder(tok)
    cache = segments.SegmentCache(enc._rust, segments.plan_for(enc._rust))  # type: ignore[arg-type]
    for i in range(50):
        text = f"<|im_start|>user\nmessage number {i} " + "x" * (i % 7) + "<|im_end|>"
        assert cache.encode(text) == tok.encode(text, add_special_tokens=False)
        assert len(cache) <= 8 and cache.cached_chars <= 200


def test_salted_requests_do_not_share_pieces(tokenizer: Any) -> None:
    enc = Encoder(tokenizer("qwen3"))
    cache = segments.SegmentCache(enc._rust, segments.plan_for(enc._rust))  # type: ignore[arg-type]
    text = "<|im_start|>system\nsecret system prompt<|im_end|>"
    cache.encode(text, salt="tenant-a")
    before = len(cache)
    cache.encode(text, salt="tenant-b")
    assert len(cache) == before + 1  # the same piece again, under the other salt
    cache.encode(text, salt="tenant-a")
    assert len(cache) == before + 1


def test_tokenizers_that_do_not_work_piece_by_piece_are_not_cut(tokenizer: Any) -> None:
    from tokenizers import Tokenizer, models, pre_tokenizers

    metaspace = Tokenizer(models.BPE())
    metaspace.pre_tokenizer = pre_tokenizers.Metaspace(prepend_scheme="first")
    metaspace.add_special_tokens(["<s>"])
    assert segments.plan_for(metaspace) is None
    split = Tokenizer.from_str(tokenizer("qwen3")._tokenizer.to_str())
    split.encode_special_tokens = True
    assert segments.plan_for(split) is None


def test_threads_sharing_one_cache_get_exact_ids(tokenizer: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    from concurrent.futures import ThreadPoolExecutor

    monkeypatch.setattr(segments, "MAX_ENTRIES", 16)  # constant eviction while threads race
    monkeypatch.setattr(segments, "MAX_CACHED_CHARS", 400)
    tok = tokenizer("qwen3")
    enc = Encoder(tok)
    cache = segments.SegmentCache(enc._rust, segments.plan_for(enc._rust))  # type: ignore[arg-type]
    texts = [f"<|im_start|>system\nshared prompt<|im_end|>\n<|im_start|>user\nmessage {i % 40} ✓<|im_end|>"
             for i in range(400)]
    expected = {t: tok.encode(t, add_special_tokens=False) for t in set(texts)}
    with ThreadPoolExecutor(8) as pool:
        results = list(pool.map(cache.encode, texts))
    assert all(r == expected[t] for r, t in zip(results, texts, strict=True))
    assert len(cache) <= 16 + 8  # at most one in-flight insert per thread above the bound
