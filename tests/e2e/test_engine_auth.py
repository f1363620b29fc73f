"""The engine key on the real two-tier topology (issue 39 item 1): a ``serve --tokens-only --api-key K``
engine process and ``launch render --engine-url ws://… | http://…`` front end processes.

- with ``--engine-api-key K`` (or ``TOKENWIRE_ENGINE_API_KEY``) requests succeed over both wires;
- a missing or wrong key is a 502 whose message says the engine refused the key and names
  ``--engine-api-key``, with one such line in the front end's log (not ``InvalidStatus``);
- the engine's generate, abort and link endpoints refuse callers without the key;
- the engine never sees a client-visible id: aborting a stream's ``chatcmpl-…`` id at the engine,
  even with the key, ends nothing, nor does aborting the id two sessions resumed one stream under.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest
from websockets.asyncio.client import connect
from websockets.exceptions import InvalidStatus

from tests.e2e.client_support import SECRET
from tests.e2e.deploy_support import ENGINE_KEY, NO_TORCH, Topology, side_by_side
from tests.e2e.ws_client import SessionClient
from tests.support.server_proc import ServerProcess

pytestmark = pytest.mark.slow  # real processes loading models: the full suite only

KEY = "engine-tier-key-0123456789abcdef"
LONG = 400  # tokens: a stream still running when the abort reaches the engine (about 4 s here)
ABORT_PATHS = ("/abort_requests", "/inference/v1/abort_requests")


@pytest.fixture(scope="module")
def tiers(asset: Callable[[str], Path]) -> Iterator[tuple[ServerProcess, dict[str, ServerProcess]]]:
    """(engine, front ends by name): ``ws`` and ``http`` with the key (the flag, the environment
    variable), and ``<wire>-none`` / ``<wire>-wrong`` without it or with another."""
    model = str(asset("tiny-qwen3"))
    with ServerProcess(["serve", model, "--tokens-only", "--dtype", "float32", "--api-key", KEY]) as engine:
        urls = {"ws": engine.ws_url, "http": engine.url}
        env: dict[str, str | None] = {"TOKENWIRE_ENGINE_API_KEY": None}

        def frontend(wire: str, *extra: str, key_env: str | None = None) -> ServerProcess:
            return ServerProcess(["launch", "render", model, "--engine-url", urls[wire], "--state-secret", SECRET,
                                  *extra], env={**env, "TOKENWIRE_ENGINE_API_KEY": key_env}, preamble=NO_TORCH)

        fronts = {"ws": frontend("ws", "--engine-api-key", KEY), "http": frontend("http", key_env=KEY),
                  "ws-none": frontend("ws"), "ws-wrong": frontend("ws", "--engine-api-key", "not-the-key"),
                  "http-none": frontend("http"), "http-wrong": frontend("http", key_env="not-the-key")}
        with contextlib.ExitStack() as stack:
            for srv in fronts.values():
                stack.callback(srv.stop)
            side_by_side(*(srv.start for srv in fronts.values()))
            yield engine, fronts


def body(max_tokens: int = 12, **extra: Any) -> dict[str, Any]:
    return {"messages": [{"role": "user", "content": "Tell me a long story"}], "max_tokens": max_tokens,
            "temperature": 0, **extra}


def test_requests_succeed_over_both_wires_with_the_key(tiers: tuple[ServerProcess, dict[str, ServerProcess]]) -> None:
    _, fronts = tiers
    answers = []
    for wire in ("ws", "http"):
        r = httpx.post(fronts[wire].url + "/v1/chat/completions", json=body(), timeout=120)
        assert r.status_code == 200, r.text
        answers.append(r.json()["choices"][0]["message"])
        with httpx.stream("POST", fronts[wire].url + "/v1/chat/completions", json={**body(), "stream": True},
                          timeout=120) as s:
            assert s.status_code == 200
            assert any(line == "data: [DONE]" for line in s.iter_lines())
    assert answers[0] == answers[1]  # fp32 greedy: the same tokens over either wire

    async def chat() -> str:
        client = await SessionClient.open(fronts["ws"].ws_url)
        await client.send(type="chat", id="c", body=body())
        frames = await client.until("c", "chat.done")
        await client.close()
        return str(frames[-1]["type"])

    assert asyncio.run(chat()) == "chat.done"


@pytest.mark.parametrize("name", ["ws-none", "ws-wrong", "http-none", "http-wrong"])
def test_a_missing_or_wrong_key_is_a_502_that_says_so(tiers: tuple[ServerProcess, dict[str, ServerProcess]],
                                                      name: str) -> None:
    _, fronts = tiers
    srv = fronts[name]
    for payload in (body(), {**body(), "stream": True}):
        r = httpx.post(srv.url + "/v1/chat/completions", json=payload, timeout=120)
        assert r.status_code == 502, r.text
        message = r.json()["error"]["message"]
        assert "refused" in message and "--engine-api-key" in message, message
        assert ("sent none" in message) == name.endswith("-none"), message
    # the link's health opens a link, which the engine refuses; an engine's /health needs no key
    assert httpx.get(srv.url + "/health", timeout=30).status_code == (503 if name.startswith("ws") else 200)
    lines = [line for line in srv.output().splitlines() if "--engine-api-key" in line]
    assert lines, srv.output()[-3000:]
    assert "InvalidStatus" not in srv.output() and "Traceback" not in srv.output()


def test_the_engine_refuses_generate_abort_and_links_without_the_key(
        tiers: tuple[ServerProcess, dict[str, ServerProcess]]) -> None:
    engine, _ = tiers
    gen = {"token_ids": [1, 2, 3], "sampling_params": {"max_tokens": 2, "temperature": 0}}
    for headers in ({}, {"Authorization": "Bearer not-the-key"}, {"x-api-key": "not-the-key"}):
        r = httpx.post(engine.url + "/inference/v1/generate", json=gen, headers=headers, timeout=30)
        assert r.status_code == 401, (headers, r.text)
        for path in ABORT_PATHS:
            r = httpx.post(engine.url + path, json={"request_ids": ["x"]}, headers=headers, timeout=30)
            assert r.status_code == 401, (path, headers, r.text)
    ok = httpx.post(engine.url + "/inference/v1/generate", json=gen, headers={"Authorization": f"Bearer {KEY}"},
                    timeout=60)
    assert ok.status_code == 200, ok.text

    async def upgrade(headers: dict[str, str]) -> int:
        try:
            async with connect(engine.ws_url + "/v1/session", subprotocols=["tokenwire.v1"],  # type: ignore[list-item]
                               additional_headers=headers) as ws:
                created = orjson.loads(await ws.recv())
                assert created["type"] == "session.created"
                return 101
        except InvalidStatus as exc:
            return exc.response.status_code

    assert asyncio.run(upgrade({})) == 401
    assert asyncio.run(upgrade({"Authorization": "Bearer not-the-key"})) == 403
    assert asyncio.run(upgrade({"Authorization": f"Bearer {KEY}"})) == 101


def abort_at_engine(engine: ServerProcess, request_id: str) -> None:
    """What anyone holding the engine key could send: an abort by the id a client sees."""
    for path in ABORT_PATHS:
        r = httpx.post(engine.url + path, json={"request_ids": [request_id]},
                       headers={"Authorization": f"Bearer {KEY}"}, timeout=30)
        assert r.status_code == 200, r.text


@pytest.mark.parametrize("wire", ["ws", "http"])
def test_aborting_a_streams_visible_id_at_the_engine_ends_nothing(
        tiers: tuple[ServerProcess, dict[str, ServerProcess]], wire: str) -> None:
    engine, fronts = tiers
    finish, tokens, aborted = None, 0, False
    payload = {**body(LONG, ignore_eos=True), "stream": True, "stream_options": {"include_usage": True}}
    with httpx.stream("POST", fronts[wire].url + "/v1/chat/completions", json=payload, timeout=300) as s:
        assert s.status_code == 200
        for line in s.iter_lines():
            if not line.startswith("data: {"):
                continue
            chunk = orjson.loads(line[6:])
            if not aborted:  # the first chunk: its id is what every client of this stream sees
                assert chunk["id"].startswith("chatcmpl-")
                abort_at_engine(engine, chunk["id"])
                aborted = True
            for choice in chunk["choices"]:
                finish = choice.get("finish_reason") or finish
            if chunk.get("usage"):
                tokens = chunk["usage"]["completion_tokens"]
    assert (finish, tokens) == ("length", LONG)


def test_two_sessions_resuming_one_stream_are_not_aborted_by_its_id(
        tiers: tuple[ServerProcess, dict[str, ServerProcess]]) -> None:
    """One resumable stream, interrupted; two sessions resume it under the same ``request_id``
    (the stream's id, which both know); an abort of that id at the engine ends neither."""
    engine, fronts = tiers
    url = fronts["ws"].ws_url
    request = body(LONG, ignore_eos=True)

    async def run() -> list[tuple[str | None, int]]:
        first = await SessionClient.open(url)
        await first.send(type="chat", id="a", body=request, resumable=True)
        delta, covered = await until_checkpoint(first, "a")
        await first.send(type="cancel", id="a")
        await first.until("a", "chat.done")
        await first.close()
        resume = {"request_id": delta["stream_id"], "checkpoint": delta["checkpoint"], "output_token_ids": covered}
        sessions = [await SessionClient.open(url) for _ in range(2)]
        for k, client in enumerate(sessions):
            await client.send(type="chat", id=f"r{k}", body=request, resume=resume)
        started = []
        for k, client in enumerate(sessions):  # both resumed streams are running at the engine
            frame = await client.next()
            assert frame["type"] == "chat.delta" and frame["id"] == f"r{k}", frame
            started.append(frame)
        abort_at_engine(engine, delta["stream_id"])
        out = []
        for k, client in enumerate(sessions):
            frames = [started[k], *await client.until(f"r{k}", "chat.done")]
            assert frames[-1]["type"] == "chat.done", frames[-1]
            out.append((finish_of(frames), len(covered) + sum(len(f.get("output_token_ids") or ()) for f in frames)))
            await client.close()
        return out

    assert asyncio.run(run()) == [("length", LONG), ("length", LONG)]


async def until_checkpoint(client: SessionClient, request_id: str) -> tuple[dict[str, Any], list[int]]:
    """The first delta of ``request_id`` that carries a checkpoint, and every output id up to it."""
    ids: list[int] = []
    while True:
        frame = await client.next()
        if frame.get("id") == request_id:
            assert frame["type"] == "chat.delta", frame
            ids += frame.get("output_token_ids") or ()
            if frame.get("checkpoint"):
                return frame, ids


def finish_of(frames: list[dict[str, Any]]) -> str | None:
    finish = None
    for f in frames:
        for chunk in f.get("chunks") or ():
            for choice in chunk.get("choices") or ():
                finish = choice.get("finish_reason") or finish
    return finish


def test_the_reference_topology_runs_with_the_engine_key(reference_topology: Topology) -> None:
    """deploy/'s recipe on loopback (tests/e2e/deploy_support.py): the engine balancer refuses a
    caller without the key, and clients are answered through the front ends, which hold it."""
    topo = reference_topology
    engine_lb = "http://" + topo.engine_url.split("//", 1)[1]
    gen = {"token_ids": [1, 2, 3], "sampling_params": {"max_tokens": 2, "temperature": 0}}
    assert httpx.post(engine_lb + "/inference/v1/generate", json=gen, timeout=30).status_code == 401
    assert httpx.post(engine_lb + "/inference/v1/generate", json=gen, timeout=60,
                      headers={"Authorization": f"Bearer {ENGINE_KEY}"}).status_code == 200
    r = httpx.post(topo.url + "/v1/chat/completions", json=body(), timeout=120)
    assert r.status_code == 200, r.text
