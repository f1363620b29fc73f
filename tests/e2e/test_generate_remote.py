"""Two real processes: ``tokenwire serve --tokens-only`` (the engine) and ``tokenwire launch render
--engine-url`` (render, and full pipelines through a RemoteEngine). Render → generate over SSE →
the remote engine; cancelling aborts at the remote; a remote that is down or hangs is a clear error.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import socket
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from engine.errors import EngineTimeout, EngineUnavailable
from engine.interface import EngineOutput
from engine.protocol import GenerateRequest
from engine.remote import RemoteEngine
from tests.support.server_proc import ServerProcess

pytestmark = pytest.mark.slow

MODEL = "tiny-qwen3"
CHAT = {"model": MODEL, "messages": [{"role": "user", "content": "Name three colours."}], "max_tokens": 12,
        "temperature": 0}


@pytest.fixture(scope="module")
def engine_proc(asset: Callable[[str], Path]) -> Iterator[ServerProcess]:
    with ServerProcess(["serve", str(asset(MODEL)), "--tokens-only", "--dtype", "float32"],
                       startup_timeout=180) as srv:
        yield srv


@pytest.fixture(scope="module")
def render_proc(asset: Callable[[str], Path], engine_proc: ServerProcess) -> Iterator[ServerProcess]:
    with ServerProcess(["launch", "render", str(asset(MODEL)), "--engine-url", engine_proc.url]) as srv:
        yield srv


def remote(url: str, **kw: Any) -> RemoteEngine:
    return RemoteEngine(url, model_name=MODEL, max_model_len=4096, **kw)


async def drain(engine: RemoteEngine, req: GenerateRequest, stop_after: int | None = None) -> list[EngineOutput]:
    outs: list[EngineOutput] = []
    agen = engine.generate(req)
    async with contextlib.aclosing(agen):
        async for out in agen:
            outs.append(out)
            if stop_after is not None and len(outs) >= stop_after:
                break
    return outs


def test_render_then_generate_over_sse_through_the_remote_engine(render_proc: ServerProcess,
                                                                  engine_proc: ServerProcess) -> None:
    rendered = httpx.post(render_proc.url + "/v1/chat/completions/render", json=CHAT, timeout=60)
    assert rendered.status_code == 200, rendered.text
    wire = rendered.json()
    direct = httpx.post(engine_proc.url + "/inference/v1/generate", json=wire, timeout=60).json()

    async def main() -> list[EngineOutput]:
        engine = remote(engine_proc.url)
        try:
            return await drain(engine, GenerateRequest.model_validate(wire))
        finally:
            await engine.close()

    outs = asyncio.run(main())
    tokens = [t for o in outs for c in o.choices for t in c.token_ids]
    assert tokens == direct["choices"][0]["token_ids"]
    assert all(len(o.choices[0].token_ids) == 1 for o in outs)  # one SSE event per engine step
    assert outs[-1].finished and outs[-1].usage is not None
    assert outs[-1].usage.prompt_tokens == len(wire["token_ids"])
    assert outs[-1].choices[0].finish_reason == direct["choices"][0]["finish_reason"]
    health = httpx.get(render_proc.url + "/health").json()
    assert (health["status"], health["engine"]) == ("ok", "RemoteEngine")


def test_chat_through_the_render_process_streams_from_the_remote_engine(
        render_proc: ServerProcess, engine_proc: ServerProcess, tokenizer: Callable[[str], Any]) -> None:
    r = httpx.post(render_proc.url + "/v1/chat/completions", json={**CHAT, "stream": True}, timeout=60)
    assert r.status_code == 200, r.text
    events = [line[6:] for line in r.text.split("\n") if line.startswith("data: ")]
    assert events[-1] == "[DONE]"
    content = "".join((json.loads(e)["choices"] or [{}])[0].get("delta", {}).get("content") or ""
                      for e in events[:-1])
    wire = httpx.post(render_proc.url + "/v1/chat/completions/render", json=CHAT, timeout=60).json()
    direct = httpx.post(engine_proc.url + "/inference/v1/generate", json=wire, timeout=60).json()
    tokens = direct["choices"][0]["token_ids"]
    assert content == tokenizer(MODEL).decode(tokens, skip_special_tokens=True)


def test_leaving_a_remote_stream_aborts_it_at_the_engine(engine_proc: ServerProcess) -> None:
    req = GenerateRequest.model_validate({"request_id": "leave-early", "token_ids": [1, 2, 3],
                                          "sampling_params": {"max_tokens": 3000, "ignore_eos": True}})

    async def main() -> tuple[int, int, int]:
        engine = remote(engine_proc.url)
        async with httpx.AsyncClient(base_url=engine_proc.url) as client:
            before = (await client.get("/engine/stats")).json()["stats"]["generated_tokens"]
            try:
                outs = await drain(engine, req, stop_after=3)
            finally:
                await engine.close()
            for _ in range(300):
                stats = (await client.get("/engine/stats")).json()
                if stats["live_sequences"] == 0:
                    break
                await asyncio.sleep(0.05)
            return len(outs), stats["live_sequences"], stats["stats"]["generated_tokens"] - before

    received, live, generated = asyncio.run(main())
    assert received == 3 and live == 0
    assert generated < 3000


def test_a_remote_that_is_down_is_a_clear_error(asset: Callable[[str], Path]) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        dead = f"http://127.0.0.1:{s.getsockname()[1]}"  # closed again below: nothing listens there

    async def main() -> None:
        engine = remote(dead, connect_timeout=2)
        try:
            await drain(engine, GenerateRequest.model_validate({"token_ids": [1], "sampling_params": {}}))
        finally:
            await engine.close()

    with pytest.raises(EngineUnavailable) as info:
        asyncio.run(main())
    assert info.value.message == "Cannot reach the remote engine (connection failed)."
    with ServerProcess(["launch", "render", str(asset(MODEL)), "--engine-url", dead]) as render:
        health = httpx.get(render.url + "/health")
    assert health.status_code == 503
    assert health.json()["status"] == "degraded" and "unreachable" in health.json()["detail"]


def test_a_remote_that_hangs_times_out() -> None:
    with socket.socket() as s:  # accepts connections (kernel backlog) and never answers
        s.bind(("127.0.0.1", 0))
        s.listen(8)
        url = f"http://127.0.0.1:{s.getsockname()[1]}"

        async def main() -> None:
            engine = remote(url, connect_timeout=2, read_timeout=1)
            try:
                await drain(engine, GenerateRequest.model_validate({"token_ids": [1], "sampling_params": {}}))
            finally:
                await engine.close()

        with pytest.raises(EngineTimeout) as info:
            asyncio.run(main())
    assert info.value.message == "The remote engine did not answer within 1 s."
    assert info.value.status == 504
