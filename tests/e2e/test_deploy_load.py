"""256 concurrent WebSocket streams on the reference deployment (deploy/, docs/deploy.md), one front
end SIGKILLed in the middle: every stream completes with exactly the uninterrupted greedy text and
token count, nothing lost or repeated.

32 client_sdk sessions through the front balancer (it spreads them over both front ends), 8
resumable streams each; the engines (two ``serve --tokens-only`` behind their own balancer) admit
128 sequences each. Resumes send ``vllm_xargs: {"resume_replay": false}`` (one prefill instead of a
decode step per token already streamed: exact in fp32, docs/engine.md "Exactness"), as a client
that expects many resumes at once should. Bounded: the test fails past its timeout.
"""

from __future__ import annotations

import asyncio
import signal
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

import client_sdk
from tests.e2e.deploy_support import Topology, reference, sessions_per_server

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]

SESSIONS = 32
PER_SESSION = 8
PROMPTS = 8
# Long enough that the killed front end still has streams in flight when the client, which reads
# 256 streams in one process and lags the servers, has seen half of them begin. With 16 tokens one
# whole-suite run on a 2-core machine saw none resumed, and with 48 one run beside a second pytest
# worker did too: it had 192 of 256 streams complete when it killed the front end at 13.6 s.
MAX_TOKENS = 128


def body(i: int) -> dict[str, Any]:
    return {"messages": [{"role": "user", "content": f"Tell me about topic {i % PROMPTS}"}], "max_tokens": MAX_TOKENS,
            "temperature": 0, "vllm_xargs": {"resume_replay": False}}


@pytest.fixture(scope="module")
def topo(asset: Callable[[str], Path]) -> Iterator[Topology]:
    with Topology(asset("tiny-qwen3"), wire="ws", engine_args=["--max-num-seqs", "128"]) as t:
        yield t


def test_256_streams_over_both_front_ends_survive_one_killed_in_the_middle(
        topo: Topology, capsys: pytest.CaptureFixture[str]) -> None:
    want = {}
    for i in range(PROMPTS):
        answer = reference(topo.url, "/v1/chat/completions", body(i))
        want[i] = (answer["choices"][0]["message"], answer["usage"]["completion_tokens"])
    assert topo.lb is not None
    lb = topo.lb

    async def main() -> dict[str, Any]:
        clients = [await client_sdk.connect(topo.url).__aenter__() for _ in range(SESSIONS)]
        try:
            spread = sessions_per_server(lb)
            started = time.monotonic()
            streams = await asyncio.gather(*(
                clients[k // PER_SESSION].chat.completions.create(
                    **body(k), stream=True, resumable=True, stream_options={"include_usage": True})
                for k in range(SESSIONS * PER_SESSION)))
            chunks: list[list[Any]] = [[] for _ in streams]
            progressed = asyncio.Event()

            async def read(k: int) -> None:
                async for chunk in streams[k]:
                    chunks[k].append(chunk)
                    if sum(1 for c in chunks if c) >= len(streams) // 2:
                        progressed.set()

            readers = asyncio.gather(*(read(k) for k in range(len(streams))))
            await progressed.wait()  # half the streams have begun, none can have finished everywhere
            done_before = sum(s.status == "completed" for s in streams)
            topo.frontends[0].stop(signal.SIGKILL)
            killed_at = time.monotonic() - started
            await readers
            return {"chunks": chunks, "status": [s.status for s in streams], "resumes": [s.resumes for s in streams],
                    "spread": spread, "done_before": done_before, "killed_at": killed_at,
                    "elapsed": time.monotonic() - started}
        finally:
            for c in clients:
                await c.__aexit__(None, None, None)

    out = asyncio.run(main())
    assert out["spread"]["fe1"] and out["spread"]["fe2"], out["spread"]
    assert out["status"] == ["completed"] * (SESSIONS * PER_SESSION)
    for k, chunks in enumerate(out["chunks"]):
        message, tokens = want[k % PROMPTS]
        deltas = [c.choices[0].delta for c in chunks if c.choices]
        assert "".join(d.content or "" for d in deltas) == (message["content"] or ""), k
        assert "".join(d.reasoning or "" for d in deltas) == (message.get("reasoning") or ""), k
        assert [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason] == ["length"]
        assert chunks[-1].usage is not None and chunks[-1].usage.completion_tokens == tokens == MAX_TOKENS
        assert len({c.id for c in chunks}) == 1
    resumed = sum(1 for r in out["resumes"] if r)
    assert resumed >= 1, {k: out[k] for k in ("spread", "killed_at", "done_before", "elapsed")}  # fe1's streams moved
    with capsys.disabled():
        print(f"\ndeploy load: {SESSIONS * PER_SESSION} streams over {out['spread']}, fe1 killed at "
              f"{out['killed_at']:.1f} s ({out['done_before']} done), {resumed} resumed, all complete in "
              f"{out['elapsed']:.1f} s")
