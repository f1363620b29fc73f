"""The reference deployment (deploy/, docs/deploy.md) on loopback, losing parts mid-stream.

HAProxy in front of two ``launch render`` front ends sharing a --state-secret, whose --engine-url is
a second HAProxy in front of two ``serve --tokens-only`` engines (tests/e2e/deploy_support.py; the
engine wire here is the reference one, ``ws://``: tokenwire's multiplexed engine link). Clients
know one URL, the front balancer's. Every expected text is the uninterrupted greedy answer (fp32:
every replica computes the same tokens):

- a front end SIGKILLed mid-stream: client_sdk reconnects through the balancer, lands on the other
  front end and resumes: chat (reasoning and a tool call), completion, messages;
- an engine replica SIGKILLed mid-stream: the front end ends the stream with an ``engine_unavailable``
  error frame (docs/protocol.md §7) and the SDK resumes from its checkpoint on the surviving engine;
- a front end drained with SIGTERM: the balancer takes it out of rotation while its streams still
  run, new sessions go to the other one, the streams in flight finish (or, past a short
  --shutdown-timeout, are ended with ``shutting_down`` and resume on the other front end);
- a streaming derender whose client-carried state alternates between the front ends on every call
  through the balancer equals the same stream on one front end.
"""

from __future__ import annotations

import asyncio
import itertools
import signal
import time
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import pytest

import client_sdk
from tests.e2e.client_support import TOOL_SCRIPT, TOOLS
from tests.e2e.deploy_support import Topology, reference, regex_literal
from tests.e2e.ws_client import SessionClient
from tests.support.waiting import wait_until

pytestmark = pytest.mark.slow

CUT_AFTER = 6  # chunks / events read before the part under the stream is killed
WEATHER = [{"role": "user", "content": "Weather in Paris?"}]
RIVERS = [{"role": "user", "content": "Write a long poem about rivers."}]
CASES: dict[str, tuple[str, dict[str, Any]]] = {
    # the tiny model writes the script (reasoning, text, a tool call) because a regex makes it
    "chat-tool-reasoning": ("chat", {"messages": WEATHER, "tools": TOOLS, "max_tokens": 120, "temperature": 0,
                                     "structured_outputs": {"regex": regex_literal(TOOL_SCRIPT)}}),
    # long enough that the rest is still being generated when the kill lands (the tiny model makes
    # 60 tokens in less time than finding and killing a process takes under load)
    "completion": ("completion", {"prompt": "The river", "max_tokens": 400, "temperature": 0}),
    "messages": ("messages", {"messages": RIVERS, "max_tokens": 400, "temperature": 0}),
}
PATHS = {"chat": "/v1/chat/completions", "completion": "/v1/completions", "messages": "/v1/messages"}


@pytest.fixture(scope="module")
def topo(reference_topology: Topology) -> Iterator[Topology]:
    """tests/e2e/conftest.py's, shared with test_deploy_browser.py."""
    yield reference_topology
    logs = reference_topology.outputs()  # a killed engine replica ends its links with a one-line warning
    at = logs.find("Traceback")
    assert at < 0, logs[max(0, at - 3000):at + 3000]


# --- what a stream says ---------------------------------------------------------------------------------

def summary(kind: str, items: list[Any]) -> dict[str, Any]:
    """content / reasoning / tool-call arguments / finish of a streamed answer."""
    if kind == "messages":
        events = [e if isinstance(e, dict) else e.model_dump() for e in items]
        text = "".join(e["delta"].get("text", "") for e in events if e["type"] == "content_block_delta")
        stops = [e["delta"].get("stop_reason") for e in events if e["type"] == "message_delta"]
        starts = sum(e["type"] == "message_start" for e in events)
        return {"text": text, "stop": stops, "message_starts": starts}
    if kind == "completion":
        return {"text": "".join(c.choices[0].text for c in items if c.choices),
                "finish": [c.choices[0].finish_reason for c in items if c.choices and c.choices[0].finish_reason]}
    deltas = [c.choices[0].delta for c in items if c.choices]
    args = "".join(tc.function.arguments or "" for d in deltas for tc in d.tool_calls or () if tc.function)
    return {"content": "".join(d.content or "" for d in deltas), "reasoning": "".join(d.reasoning or "" for d in deltas),
            "arguments": args, "ids": len({c.id for c in items}),
            "finish": [c.choices[0].finish_reason for c in items if c.choices and c.choices[0].finish_reason]}


def expected(kind: str, answer: dict[str, Any]) -> dict[str, Any]:
    if kind == "messages":
        return {"text": "".join(b["text"] for b in answer["content"] if b["type"] == "text"),
                "stop": [answer["stop_reason"]], "message_starts": 1}
    choice = answer["choices"][0]
    if kind == "completion":
        return {"text": choice["text"], "finish": [choice["finish_reason"]]}
    message = choice["message"]
    return {"content": message["content"] or "", "reasoning": message.get("reasoning") or "",
            "arguments": "".join(tc["function"]["arguments"] for tc in message.get("tool_calls") or ()),
            "ids": 1, "finish": [choice["finish_reason"]]}


async def open_stream(client: client_sdk.AsyncClient, kind: str, body: dict[str, Any]) -> Any:
    resource: Any = {"chat": client.chat.completions, "completion": client.completions,
                     "messages": client.messages}[kind]
    return await resource.create(**body, stream=True, resumable=True)


async def read_and_break(url: str, kind: str, body: dict[str, Any],
                         breaker: Callable[[], object]) -> tuple[list[Any], int]:
    async with client_sdk.connect(url) as client:
        stream = await open_stream(client, kind, body)
        items: list[Any] = []
        async for item in stream:
            items.append(item)
            if len(items) == CUT_AFTER:
                await asyncio.to_thread(breaker)
        assert stream.status == "completed"
        return items, stream.resumes


# --- a front end killed ---------------------------------------------------------------------------------

@pytest.mark.parametrize("case", list(CASES))
def test_a_front_end_killed_mid_stream_the_sdk_resumes_on_the_other_through_the_balancer(
        topo: Topology, case: str) -> None:
    kind, body = CASES[case]
    want = expected(kind, reference(topo.url, PATHS[kind], body))
    if case == "chat-tool-reasoning":
        assert want["reasoning"] and want["arguments"] and want["finish"] == ["tool_calls"]
    killed: list[int] = []

    def kill() -> None:
        i = topo.frontend_with_session()
        topo.frontends[i].stop(signal.SIGKILL)
        killed.append(i)

    try:
        items, resumes = asyncio.run(read_and_break(topo.url, kind, body, kill))
    finally:
        for i in killed:
            topo.restart_frontend(i)
    assert killed and topo.frontends[killed[0]].proc is not None
    assert resumes == 1
    assert summary(kind, items) == want


# --- an engine replica killed ---------------------------------------------------------------------------

def engine_with_work(topo: Topology) -> int:
    def busy() -> list[int]:
        return [i for i, e in enumerate(topo.engines)
                if httpx.get(e.url + "/health", timeout=5).json()["live_sequences"]]
    found = wait_until(busy, "an engine replica to run the stream", timeout=10)
    assert len(found) == 1, found
    return found[0]


def test_an_engine_replica_killed_mid_stream_is_an_engine_unavailable_error_frame(topo: Topology) -> None:
    # what the protocol says (§7): the request ends with an error frame, the session lives on
    body = {"messages": RIVERS, "max_tokens": 400, "temperature": 0}

    async def run() -> tuple[list[dict[str, Any]], dict[str, Any]]:
        client = await SessionClient.open(topo.ws_url)
        await client.send(type="chat", id="c", body=body, resumable=True)
        frames = [await client.next() for _ in range(3)]
        i = await asyncio.to_thread(engine_with_work, topo)
        topo.engines[i].stop(signal.SIGKILL)
        frames += await client.until("c", "chat.done")
        await client.send(type="ping", event_id="alive")
        pong = await client.next()
        await client.close()
        return frames, pong

    try:
        frames, pong = asyncio.run(run())
    finally:
        for i, e in enumerate(topo.engines):
            if e.proc is not None and e.proc.poll() is not None:
                topo.restart_engine(i)
    last = frames[-1]
    assert last["type"] == "error" and last["id"] == "c", last
    assert (last["error"]["code"], last["error"]["status"]) == ("engine_unavailable", 502), last
    assert "127.0.0.1" not in last["error"]["message"]  # the engine tier's address stays internal
    assert all(f["type"] == "chat.delta" for f in frames[:-1])
    assert pong["type"] == "pong"


@pytest.mark.parametrize("case", ["chat-tool-reasoning", "messages"])
def test_an_engine_replica_killed_mid_stream_the_sdk_resumes_on_the_survivor(topo: Topology, case: str) -> None:
    kind, body = CASES[case]
    want = expected(kind, reference(topo.url, PATHS[kind], body))
    killed: list[int] = []

    def kill() -> None:
        i = engine_with_work(topo)
        topo.engines[i].stop(signal.SIGKILL)
        killed.append(i)

    try:
        items, resumes = asyncio.run(read_and_break(topo.url, kind, body, kill))
    finally:
        for i in killed:
            topo.restart_engine(i)
    assert killed and resumes == 1
    assert summary(kind, items) == want


def test_an_engine_replica_killed_under_many_streams_every_stream_resumes(topo: Topology) -> None:
    # several streams on each engine link: the link's loss fails all of them at once (engine/link.py)
    bodies: list[dict[str, Any]] = [{"messages": [{"role": "user", "content": f"Tell me about rivers, part {k}"}],
                                     "max_tokens": 60, "temperature": 0} for k in range(4)]
    want = [expected("chat", reference(topo.url, PATHS["chat"], b)) for b in bodies]
    killed: list[int] = []

    def busiest() -> int:
        live = [httpx.get(e.url + "/health", timeout=5).json()["live_sequences"] for e in topo.engines]
        return max(range(len(live)), key=lambda i: live[i])

    async def run() -> list[tuple[list[Any], int]]:
        async with client_sdk.connect(topo.url) as a, client_sdk.connect(topo.url) as b:
            streams = [await (a if k % 2 else b).chat.completions.create(**bodies[k % 4], stream=True, resumable=True)
                       for k in range(8)]
            items: list[list[Any]] = [[] for _ in streams]

            async def read(k: int) -> None:
                async for item in streams[k]:
                    items[k].append(item)
                    if all(len(i) >= 3 for i in items) and not killed:
                        killed.append(busiest())
                        topo.engines[killed[0]].stop(signal.SIGKILL)

            await asyncio.wait_for(asyncio.gather(*(read(k) for k in range(8))), 120)
            assert [s.status for s in streams] == ["completed"] * 8
            return [(items[k], streams[k].resumes) for k in range(8)]

    try:
        out = asyncio.run(run())
    finally:
        for i in killed:
            topo.restart_engine(i)
    assert killed and sum(r for _, r in out) >= 2  # the killed replica ran several of them
    for k, (items, _) in enumerate(out):
        assert summary("chat", items) == want[k % 4], k


def test_an_engine_replica_drained_past_its_shutdown_timeout_the_sdk_resumes_on_the_survivor(topo: Topology) -> None:
    # the engine ends the stream with shutting_down, which the front end (not draining) passes on:
    # the SDK resumes, on the same session once it sees that session stay open
    kind, body = "chat", {**LONG, "max_tokens": 120}
    topo.restart_engines([0, 1], "--shutdown-timeout", "0.5")
    drained: list[int] = []

    def drain() -> None:
        i = engine_with_work(topo)
        topo.engines[i].proc.send_signal(signal.SIGTERM)  # type: ignore[union-attr]
        drained.append(i)

    async def run() -> tuple[list[Any], int, list[str | None]]:
        async with client_sdk.connect(topo.url) as client:
            sessions = [client.info.session_id]
            stream = await open_stream(client, kind, body)
            items: list[Any] = []
            async for item in stream:
                items.append(item)
                if len(items) == CUT_AFTER:
                    await asyncio.to_thread(drain)
            assert stream.status == "completed"
            return items, stream.resumes, [*sessions, client.info.session_id]

    ended = False
    try:
        want = expected(kind, reference(topo.url, PATHS[kind], body))
        items, resumes, sessions = asyncio.run(run())
        code = topo.engines[drained[0]].proc.wait(30)  # type: ignore[union-attr]
        ended = True
    finally:
        # the drained replica comes back with the survivor's flags; the short --shutdown-timeout matters
        # only when an engine is drained, which no later test does, so the survivor keeps running (both
        # start again when the test stopped half-way)
        topo.restart_engines(topo.stopped_engines() if ended else [0, 1], "--shutdown-timeout", "0.5")
    assert resumes >= 1 and code == 0
    assert sessions[0] == sessions[1]  # the front end did not drain: its session was used again
    assert summary(kind, items) == want


# --- a front end drained --------------------------------------------------------------------------------

LONG: dict[str, Any] = {"messages": RIVERS, "max_tokens": 240, "temperature": 0}


async def drain_streams(topo: Topology, count: int) -> dict[str, Any]:
    """``count`` sessions with one long stream each; SIGTERM the front end holding the first one
    once every stream has produced; watch the balancer and open a new session meanwhile."""
    clients = [await client_sdk.connect(topo.url).__aenter__() for _ in range(count)]
    try:
        streams = [await c.chat.completions.create(**LONG, stream=True, resumable=True) for c in clients]
        assert topo.lb is not None
        per_server = topo.lb.stats()
        on = {name: int(row["scur"]) for name, row in per_server.items()}
        assert on["fe1"] and on["fe2"], on  # the balancer spread the sessions
        chunks: list[list[Any]] = [[] for _ in streams]
        last_chunk_at = [0.0] * count
        first = asyncio.Event()

        async def read(k: int) -> None:
            async for chunk in streams[k]:
                chunks[k].append(chunk)
                last_chunk_at[k] = time.monotonic()
                if all(chunks):
                    first.set()

        readers = [asyncio.create_task(read(k)) for k in range(count)]
        await first.wait()
        target = 0 if on["fe1"] >= on["fe2"] else 1
        name = f"fe{target + 1}"
        topo.frontends[target].proc.send_signal(signal.SIGTERM)  # type: ignore[union-attr]
        signalled = time.monotonic()
        await asyncio.to_thread(topo.lb.wait_status, {name: "DOWN"}, 10)
        down_at = time.monotonic()
        async with client_sdk.connect(topo.url) as late:  # a new session after the drain began
            answer = await late.chat.completions.create(messages=RIVERS, max_tokens=4, temperature=0)
            late_on = [n for n, row in topo.lb.stats().items() if int(row["scur"]) and n != name]
        await asyncio.gather(*readers)
        code = await asyncio.to_thread(topo.frontends[target].proc.wait, 60)  # type: ignore[union-attr]
        return {"chunks": chunks, "resumes": [s.resumes for s in streams], "status": [s.status for s in streams],
                "down_after_s": down_at - signalled, "last_chunk_at": last_chunk_at, "down_at": down_at,
                "late": answer, "late_on": late_on, "exit": code, "target": target,
                "log": topo.frontends[target].output()}
    finally:
        for c in clients:
            await c.__aexit__(None, None, None)


def test_a_front_end_drained_leaves_the_rotation_first_and_its_streams_finish(topo: Topology) -> None:
    want = expected("chat", reference(topo.url, PATHS["chat"], LONG))
    out = asyncio.run(drain_streams(topo, 4))
    topo.restart_frontend(out["target"])
    assert out["exit"] == 0, out["log"][-6000:]  # a graceful drain
    assert out["status"] == ["completed"] * 4
    for c in out["chunks"]:
        assert summary("chat", c) == want, (summary("chat", c), want, out["resumes"])
    assert out["resumes"] == [0] * 4  # they finished where they were (--shutdown-timeout 20 s)
    assert max(out["last_chunk_at"]) > out["down_at"]  # out of the rotation while streams still ran
    assert out["late"].choices[0].finish_reason == "length" and out["late_on"]


def test_a_front_end_drained_past_its_shutdown_timeout_hands_its_streams_over(topo: Topology) -> None:
    topo.restart_frontends([0, 1], "--shutdown-timeout", "0.5")
    ended = False
    try:
        want = expected("chat", reference(topo.url, PATHS["chat"], LONG))
        out = asyncio.run(drain_streams(topo, 4))
        ended = True
    finally:
        # as with the engines above: the drained front end comes back with the survivor's flags (no later
        # test drains one)
        topo.restart_frontends(topo.stopped_frontends() if ended else [0, 1], "--shutdown-timeout", "0.5")
    assert out["status"] == ["completed"] * 4
    for c in out["chunks"]:
        assert summary("chat", c) == want, (summary("chat", c), want, out["resumes"])
    assert sum(out["resumes"]) >= 1  # the drained front end's streams moved to the other one
    assert out["exit"] == 0, out["log"][-6000:]


# --- HTTP derender alternating front ends ---------------------------------------------------------------

DERENDER_OUTPUT = ('<think>\nTwo cities: Paris 🇫🇷 and 東京. I will call the tool twice.\n</think>\n\n'
                   'Checking both.<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris", "unit": "°C"}}\n'
                   '</tool_call>\n<tool_call>\n{"name": "get_weather", "arguments": {"city": "東京", "note": "🌸"}}\n'
                   '</tool_call>')


def test_a_streaming_http_derender_alternating_front_ends_through_the_balancer_equals_one_front_end(
        topo: Topology, tokenizer: Callable[[str], Any]) -> None:
    tok = tokenizer("tiny-qwen3")
    output = [*tok.encode(DERENDER_OUTPUT, add_special_tokens=False), tok.eos_token_id]
    chat_request = {"messages": WEATHER, "tools": [TOOLS[0]], "stream": True}
    prompt = httpx.post(topo.url + "/v1/chat/completions/render", json=chat_request, timeout=30).json()["token_ids"]

    def stream(base: str) -> tuple[list[dict[str, Any]], list[str]]:
        state, chunks, served = None, [], []
        for k in range(0, len(output), 3):
            piece = output[k:k + 3]
            with httpx.Client(timeout=30) as c:  # a new connection per call: the balancer picks each time
                r = c.post(base + "/v1/chat/completions/derender", json={
                    "stream": True, "stream_state": state, "prompt_token_ids": prompt, "prompt_tokens": len(prompt),
                    "chat_request": chat_request,
                    "generate_chunk": {"request_id": "chatcmpl-deploy", "output_mode": "tokens", "choices": [
                        {"index": 0, "token_ids": piece, "finish_reason": "stop" if k + 3 >= len(output) else None}]}})
            assert r.status_code == 200, r.text
            chunks.append(r.json()["chunk"])
            state = r.json()["stream_state"]
            served.append(r.headers.get("x-tokenwire-frontend", ""))
        return chunks, served

    through_lb, served = stream(topo.url)
    alone, _ = stream(topo.frontends[0].url)
    assert all(a != b for a, b in itertools.pairwise(served)), served  # every call switched
    assert set(served) == {"fe1", "fe2"}
    assert [c["choices"] for c in through_lb] == [c["choices"] for c in alone]
    calls = [tc for c in through_lb for tc in c["choices"][0]["delta"].get("tool_calls") or ()]
    assert through_lb[-1]["choices"][0]["finish_reason"] == "tool_calls" and len({tc["index"] for tc in calls}) == 2
