"""A real ``tokenwire serve --tokens-only`` process under 32 concurrent generate requests.

Mixed prompt lengths, greedy and seeded sampling, penalties, max_tokens and stop ids, JSON and
SSE; eight requests are aborted midway (four by closing the connection, four through
``/abort_requests``). Every other request must get exactly the tokens it gets when run alone,
the aborted ones a prefix of theirs ending in an abort, and afterwards the engine must hold no
sequence. fp32, so that sharing the batch cannot change a greedy argmax (see
``tests/engine/local/test_engine_parity.py``).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.support.server_proc import ServerProcess

pytestmark = pytest.mark.slow

MODEL = "tiny-qwen3"
GENERATE = "/inference/v1/generate"
TEXTS = [
    "The quick brown fox jumps over the lazy dog.",
    "Explain why the sea is salty.",
    "def add(a, b):",
    "Once upon a time",
    "List the planets of the solar system in order from the sun, with one fact about each.",
    "Hi",
]
N_CHOICES = {5: 2, 6: 3}  # seeded requests with n > 1 (one streamed, one JSON)
DISCONNECT = {3, 11, 19, 27}
ABORT_ROUTE = {7, 15, 23, 31}
ABORTED = DISCONNECT | ABORT_ROUTE
REFERENCE_PREFIX = 16  # aborted requests are checked against the first tokens of their solo run


@pytest.fixture(scope="module")
def server(asset: Callable[[str], Path]) -> Iterator[ServerProcess]:
    # No prefix cache: a prompt that reuses cached blocks is prefilled in other shapes than when it
    # runs alone, which moves the logits by an ulp and can flip a seeded draw on this random model;
    # this test is about requests not leaking into each other (the cache's own exactness tests are
    # tests/engine/local/test_engine_prefix.py).
    with ServerProcess(["serve", str(asset(MODEL)), "--tokens-only", "--dtype", "float32", "--max-num-seqs", "32"],
                       env={"TOKENWIRE_PREFIX_CACHE_MB": "0"}, startup_timeout=180) as srv:
        yield srv


def spec(i: int, prompt: list[int]) -> dict[str, Any]:
    sp: dict[str, Any]
    kind = i % 4
    if kind == 0:
        sp = {"temperature": 0.0}
    elif kind == 1:
        sp = {"temperature": 0.8, "top_p": 0.9, "seed": i}
    elif kind == 2:
        sp = {"temperature": 1.0, "top_k": 20, "seed": 100 + i}
    else:
        sp = {"temperature": 0.0, "repetition_penalty": 1.3, "presence_penalty": 0.5}
    sp["max_tokens"] = 300 if i in ABORTED else 6 + (i * 7) % 35
    if i in ABORTED:
        sp["ignore_eos"] = True
    if i in N_CHOICES:
        sp["n"] = N_CHOICES[i]
    return {"request_id": f"c{i}", "token_ids": prompt, "sampling_params": sp}


def sse_lines(text: str) -> list[Any]:
    return [line[6:] if line == "data: [DONE]" else json.loads(line[6:])
            for line in text.split("\n") if line.startswith("data: ")]


async def solo(client: httpx.AsyncClient, body: dict[str, Any]) -> dict[int, list[int]]:
    """Tokens per choice index."""
    r = await client.post(GENERATE, json=body)
    assert r.status_code == 200, r.text
    return {c["index"]: c["token_ids"] for c in r.json()["choices"]}


async def streamed(client: httpx.AsyncClient, body: dict[str, Any], *, abort_after: int | None = None,
                   disconnect: bool = False) -> tuple[dict[int, list[int]], list[Any]]:
    """Stream one request; optionally abort after ``abort_after`` chunks. Returns the tokens per
    choice index and the finish reasons seen."""
    tokens: dict[int, list[int]] = {}
    finishes: list[Any] = []
    chunks = 0
    async with client.stream("POST", GENERATE, json={**body, "stream": True,
                                                     "stream_options": {"include_usage": True}}) as r:
        assert r.status_code == 200
        async for line in r.aiter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            event = json.loads(line[6:])
            for choice in event["choices"]:
                tokens.setdefault(choice["index"], []).extend(choice["token_ids"])
                if choice["finish_reason"] is not None:
                    finishes.append(choice["finish_reason"])
            chunks += bool(event["choices"])
            if abort_after is not None and chunks == abort_after:
                if disconnect:
                    return tokens, finishes  # leaving the block closes the connection mid-stream
                a = await client.post("/abort_requests", json={"request_ids": [body["request_id"]]})
                assert (a.status_code, a.content) == (200, b"")
    return tokens, finishes


def test_32_concurrent_requests_get_their_own_tokens_and_aborts_free_memory(
        server: ServerProcess, tokenizer: Callable[[str], Any]) -> None:
    tok = tokenizer(MODEL)
    prompts = [list(tok(f"{TEXTS[i % len(TEXTS)]} ({i})" * (1 + i % 3))["input_ids"]) for i in range(32)]
    bodies = [spec(i, p) for i, p in enumerate(prompts)]

    async def main() -> None:
        limits = httpx.Limits(max_connections=100)
        async with httpx.AsyncClient(base_url=server.url, timeout=120, limits=limits) as client:
            # stop ids taken from the middle of each solo output (every fifth request)
            for i in range(0, 32, 5):
                if i not in ABORTED:
                    free = (await solo(client, bodies[i]))[0]
                    bodies[i]["sampling_params"]["stop_token_ids"] = [free[len(free) // 2]]
            reference: dict[int, dict[int, list[int]]] = {}
            for i, body in enumerate(bodies):  # each request alone, one after the other
                if i in ABORTED:
                    short = {**body, "sampling_params": {**body["sampling_params"], "max_tokens": REFERENCE_PREFIX}}
                    reference[i] = await solo(client, short)
                else:
                    reference[i] = await solo(client, body)

            async def run(i: int) -> tuple[dict[int, list[int]], list[Any]]:
                body = bodies[i]
                if i in DISCONNECT:
                    return await streamed(client, body, abort_after=2 + i % 3, disconnect=True)
                if i in ABORT_ROUTE:
                    return await streamed(client, body, abort_after=2 + i % 3)
                if i % 2:
                    return await streamed(client, body)
                return await solo(client, body), []

            results = await asyncio.gather(*(run(i) for i in range(32)))

            for i, (choices, finishes) in enumerate(results):
                if i in ABORTED:
                    tokens = choices[0]
                    assert len(tokens) < 300, i
                    n = min(len(tokens), REFERENCE_PREFIX)
                    assert tokens[:n] == reference[i][0][:n], i
                    if i in ABORT_ROUTE:
                        assert finishes == ["abort"], (i, finishes)
                else:
                    assert choices == reference[i], i
                    assert len(choices) == N_CHOICES.get(i, 1)
                    if i % 5 == 0:
                        assert choices[0][-1] == bodies[i]["sampling_params"]["stop_token_ids"][0]

            live = -1
            for _ in range(300):  # the disconnects reach the engine as the server notices them
                stats = (await client.get("/engine/stats")).json()
                live = stats["live_sequences"]
                if live == 0 and stats["stats"]["running"] == 0:
                    break
                await asyncio.sleep(0.1)
            assert live == 0

    asyncio.run(main())


def test_client_that_disconnects_from_a_json_request_aborts_it(server: ServerProcess) -> None:
    async def main() -> tuple[int, int]:
        body = {"token_ids": [1, 2, 3], "sampling_params": {"max_tokens": 3000, "ignore_eos": True}}
        async with httpx.AsyncClient(base_url=server.url, timeout=60) as client:
            before = (await client.get("/engine/stats")).json()["stats"]["generated_tokens"]
            task = asyncio.create_task(client.post(GENERATE, json=body))
            for _ in range(200):
                await asyncio.sleep(0.05)
                if (await client.get("/engine/stats")).json()["live_sequences"] == 1:
                    break
            task.cancel()  # closes the connection while the server is still generating
            with pytest.raises(asyncio.CancelledError):
                await task
            for _ in range(300):
                stats = (await client.get("/engine/stats")).json()
                if stats["live_sequences"] == 0:
                    break
                await asyncio.sleep(0.1)
            return stats["live_sequences"], stats["stats"]["generated_tokens"] - before

    live, generated = asyncio.run(main())
    assert live == 0
    assert 0 < generated < 3000  # it had started, and was stopped long before max_tokens
