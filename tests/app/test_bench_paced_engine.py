"""The benchmarks' paced engine (bench/paced_engine.py) in process: it speaks vLLM's generate stream,
gives exactly max_tokens single-word tokens one per chunk, and records when each left."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import httpx
import orjson
import pytest

from bench.paced_engine import PacedEngine, word_token_ids


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(scope="module")
def words(asset: Callable[[str], Path]) -> list[int]:
    return word_token_ids(asset("smollm2-135m-instruct"))


def _events(body: bytes) -> list[bytes]:
    return [line[6:] for line in body.split(b"\n\n") if line.startswith(b"data: ")]


@pytest.mark.anyio
async def test_a_stream_has_max_tokens_chunks_of_one_token_then_usage_and_done(words: list[int]) -> None:
    engine = PacedEngine(words, step_s=0.002)
    transport = httpx.ASGITransport(app=engine.app())
    async with httpx.AsyncClient(transport=transport, base_url="http://paced") as client:
        r = await client.post("/inference/v1/generate", json={
            "request_id": "chatcmpl-1", "token_ids": [1, 2, 3], "stream": True,
            "sampling_params": {"max_tokens": 5, "output_kind": 1}})
        stamps = (await client.get("/bench/emissions", params={"clear": "1"})).json()
        after = (await client.get("/bench/emissions")).json()
    events = _events(r.content)
    assert r.headers["content-type"].startswith("text/event-stream")
    assert events[-1] == b"[DONE]"
    chunks = [orjson.loads(e) for e in events[:-1]]
    token_chunks = [c for c in chunks if c["choices"]]
    assert [len(c["choices"][0]["token_ids"]) for c in token_chunks] == [1] * 5
    assert all(t in words for c in token_chunks for t in c["choices"][0]["token_ids"])
    assert [c["choices"][0]["finish_reason"] for c in token_chunks] == [None] * 4 + ["length"]
    assert chunks[-1]["usage"] == {"prompt_tokens": 3, "completion_tokens": 5, "total_tokens": 8}
    assert chunks[0]["request_id"] == "generate-tokens-chatcmpl-1"
    assert len(stamps["emissions"]["chatcmpl-1"]) == 5 and "chatcmpl-1" in stamps["arrivals"]
    assert stamps["emissions"]["chatcmpl-1"] == sorted(stamps["emissions"]["chatcmpl-1"])
    assert after == {"emissions": {}, "arrivals": {}, "aborted": 0}


@pytest.mark.anyio
async def test_a_json_request_gets_every_token_at_once(words: list[int]) -> None:
    engine = PacedEngine(words, step_s=0.001)
    transport = httpx.ASGITransport(app=engine.app())
    async with httpx.AsyncClient(transport=transport, base_url="http://paced") as client:
        r = await client.post("/inference/v1/generate", json={"token_ids": [7], "sampling_params": {"max_tokens": 3}})
        health = await client.get("/health")
    body = r.json()
    assert health.status_code == 200
    assert len(body["choices"][0]["token_ids"]) == 3 and body["usage"]["completion_tokens"] == 3


@pytest.mark.slow
def test_the_word_list_gives_single_token_words_of_the_default_model(words: list[int],
                                                                      tokenizer: Callable[[str], object]) -> None:
    tok = tokenizer("smollm2-135m-instruct")
    texts = [tok.decode([t]) for t in words]  # type: ignore[attr-defined]
    assert len(words) >= 16
    assert all(t.startswith(" ") and t[1:].isalpha() for t in texts)
