"""The engine link's own defences (engine/link.py, engine/inbound.py), against scripted ``/v1/session``
engines on a loopback socket (websockets' own server, in the test's event loop): what a link message
may carry, the per-request ``--engine-timeout``, and what one bad frame costs the other requests on
the socket. The client-facing behaviour over every API: tests/app/test_misbehaving_engine.py."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Callable, Coroutine
from contextlib import asynccontextmanager
from typing import Any

import orjson
import pytest
from websockets.asyncio.server import ServerConnection, serve

from engine.errors import EngineError, EngineProtocolError, EngineTimeout
from engine.inbound import LOGPROB_BYTES, TOKEN_BYTES, Expect
from engine.interface import EngineOutput
from engine.link import LINK_FRAME_BYTES, LinkEngine
from engine.protocol import GenerateRequest

Script = Callable[[ServerConnection, dict[str, Any]], Coroutine[Any, Any, None]]


def request(rid: str, max_tokens: int = 4, **sp: Any) -> GenerateRequest:
    return GenerateRequest.model_validate({"request_id": rid, "token_ids": [1, 2, 3],
                                           "sampling_params": {"max_tokens": max_tokens, "temperature": 0, **sp}})


def delta(fid: str, ids: list[int], finish: str | None = None, **choice: Any) -> bytes:
    return orjson.dumps({"type": "generate.delta", "id": fid, "chunk": {
        "choices": [{"index": 0, "token_ids": ids, "finish_reason": finish, **choice}]}})


def done(fid: str, status: str = "completed") -> bytes:
    return orjson.dumps({"type": "generate.done", "id": fid, "status": status})


@asynccontextmanager
async def engine_with(script: Script, *, timeout: float | None = None) -> AsyncIterator[tuple[LinkEngine, list[Any]]]:
    """A link over an engine that runs ``script(ws, generate frame)`` for each generate frame, and
    records every frame it was sent."""
    seen: list[Any] = []

    async def session(ws: ServerConnection) -> None:
        await ws.send(orjson.dumps({"type": "session.created", "frames": ["generate"],
                                    "limits": {"max_in_flight": 8}}).decode())
        tasks: list[asyncio.Task[None]] = []
        async for text in ws:
            frame = orjson.loads(text)
            seen.append(frame)
            if frame["type"] == "generate":
                tasks.append(asyncio.create_task(script(ws, frame)))
        for t in tasks:
            t.cancel()

    async with serve(session, "127.0.0.1", 0, max_size=None) as server:
        port = next(iter(server.sockets)).getsockname()[1]
        link = LinkEngine(f"ws://127.0.0.1:{port}", model_name="m", max_model_len=100_000, read_timeout=timeout,
                          vocab_size=1000)
        try:
            yield link, seen
        finally:
            await link.close()


async def outputs(link: LinkEngine, req: GenerateRequest) -> list[EngineOutput]:
    return [out async for out in link.generate(req)]


async def until(check: Callable[[], bool], what: str) -> None:
    """Wait for ``check``; fail (naming ``what``) if it does not hold within 30 s."""
    async def poll() -> None:
        while not check():
            await asyncio.sleep(0.005)
    try:
        await asyncio.wait_for(poll(), 30)
    except TimeoutError:
        pytest.fail(f"waited 30 s for {what}")


def test_the_message_bound_is_each_requests_budget_at_its_token_size() -> None:
    plain, wide = Expect(request("a", 100), max_model_len=1000), Expect(request("b", 100, logprobs=5, n=2),
                                                                       max_model_len=1000)
    assert plain.message_bytes() == 1024 + 100 * TOKEN_BYTES
    assert wide.message_bytes() == 1024 + 2 * 100 * (TOKEN_BYTES + LOGPROB_BYTES * 7)
    # no max_tokens: the context is the budget
    unbounded = GenerateRequest.model_validate({"token_ids": [1], "sampling_params": {"max_tokens": None}})
    assert Expect(unbounded, max_model_len=1000).budget == 1000


def test_a_message_past_what_its_requests_may_receive_fails_the_link_not_the_process(
        caplog: pytest.LogCaptureFixture) -> None:
    async def script(ws: ServerConnection, frame: dict[str, Any]) -> None:
        fid = frame["id"]
        if frame["body"]["sampling_params"]["max_tokens"] == 4:  # the small one: padded past the bound
            await ws.send(orjson.dumps({"type": "generate.delta", "id": fid, "pad": "x" * (LINK_FRAME_BYTES * 2),
                                        "chunk": {"choices": []}}).decode())
            return
        await ws.send(delta(fid, [5], "length").decode())
        await ws.send(done(fid).decode())

    async def main() -> tuple[EngineError, list[EngineOutput], int]:
        async with engine_with(script) as (link, _):
            with pytest.raises(EngineProtocolError) as info:
                await outputs(link, request("small"))
            after = await outputs(link, request("next", 8))  # a new link serves the next request
            return info.value, after, link.live_sequences()

    with caplog.at_level(logging.WARNING, logger="tokenwire.link"):
        err, after, live = asyncio.run(main())
    assert (err.status, err.code) == (502, "engine_error") and "larger than" in err.message
    assert after[-1].finished and after[-1].choices[0].token_ids == [5] and live == 0
    assert any("bytes, more than the" in r.getMessage() for r in caplog.records)  # the sizes: in the log only


def test_a_cancelled_requests_last_deltas_still_fit_until_the_engine_ends_it() -> None:
    """The deltas a cancel crosses may be as large as the request's budget: its share of the bound
    stays until the engine's generate.done for it, so the other requests on the socket go on."""
    cancelled = asyncio.Event()
    big = [999] * 19_000  # 76 KB: within the leaving request's budget, past the bound without its share

    async def script(ws: ServerConnection, frame: dict[str, Any]) -> None:
        fid = frame["id"]
        if frame["body"]["sampling_params"]["max_tokens"] == 20_000:
            await ws.send(delta(fid, [1]).decode())
            await cancelled.wait()
            # what the engine had produced before it read the cancel, merged: then its done
            await ws.send(orjson.dumps({"type": "batch", "frames": [orjson.loads(delta(fid, big)),
                                                                    orjson.loads(done(fid, "cancelled"))]}))
            return
        await cancelled.wait()
        await asyncio.sleep(0.05)
        await ws.send(delta(fid, [7, 8], "length").decode())
        await ws.send(done(fid).decode())

    async def main() -> list[EngineOutput]:
        async with engine_with(script) as (link, seen):
            other = asyncio.create_task(outputs(link, request("other", 4)))
            stream = link.generate(request("leaving", 20_000))
            await anext(stream)
            await stream.aclose()  # sends cancel
            await until(lambda: any(f["type"] == "cancel" for f in seen), "the cancel to reach the engine")
            cancelled.set()
            outs = await other
            await until(lambda: link._links[0]._bound == LINK_FRAME_BYTES, "the bound to shrink back")
            return outs

    outs = asyncio.run(main())
    assert outs[-1].finished and outs[-1].choices[0].token_ids == [7, 8]


def test_engine_timeout_is_per_request_silence_and_frees_the_slot() -> None:
    async def script(ws: ServerConnection, frame: dict[str, Any]) -> None:
        fid = frame["id"]
        if frame["body"]["sampling_params"]["max_tokens"] == 4:  # silent after one delta
            await ws.send(delta(fid, [1]).decode())
            return
        for k in range(30):  # a busy request on the same socket: its outputs are not the other's progress
            await ws.send(delta(fid, [k + 1]).decode())
            await asyncio.sleep(0.05)
        await ws.send(delta(fid, [2], "length").decode())
        await ws.send(done(fid).decode())

    async def main() -> tuple[EngineError, list[EngineOutput], list[Any], int]:
        async with engine_with(script, timeout=0.3) as (link, seen):
            busy = asyncio.create_task(outputs(link, request("busy", 64)))
            with pytest.raises(EngineTimeout) as info:
                await outputs(link, request("silent", 4))
            assert link.live_sequences() == 1  # its slot is free at once; the busy one goes on
            outs = await busy
            await until(lambda: any(f["type"] == "cancel" for f in seen), "the cancel of the silent request")
            return info.value, outs, seen, link.live_sequences()

    err, outs, seen, live = asyncio.run(main())
    assert (err.status, err.code) == (504, "engine_timeout") and "did not answer within 0.3 s" in err.message
    assert outs[-1].finished and live == 0
    silent = next(f for f in seen if f["type"] == "generate" and f["body"]["sampling_params"]["max_tokens"] == 4)
    assert {"type": "cancel", "id": silent["id"]} in seen


@pytest.mark.parametrize(("frame", "says"), [
    ({"choices": [{"index": 0, "token_ids": [1, "2"]}]}, "choices[0].token_ids[1] is not a token id"),
    ({"choices": [{"index": 0, "token_ids": [1000]}]}, "token_ids[0] is not a token id of this model (an int in 0..999)"),
    ({"choices": [{"index": 0, "token_ids": [True]}]}, "token_ids[0] is not a token id"),
    ({"choices": [{"index": 1, "token_ids": [1]}]}, "index is not a choice index of this request (0..0)"),
    ({"choices": [{"index": 0, "token_ids": [1], "stop_reason": "see 10.0.0.1"}]}, "stop_reason is neither"),
    ({"choices": [{"index": 0, "token_ids": [1], "logprobs": {"content": [{"token_id": 1, "logprob": "x"}]}}]},
     "logprobs is not a list of token logprobs"),
    ({"choices": [{"index": 0, "token_ids": [1], "logprobs": {"content": [
        {"token_id": 1, "logprob": -0.1, "top_logprobs": [{"token_id": 2, "logprob": -1.0}] * 3}]}}]},
     "too many alternatives"),
    ({"request_id": "generate-tokens-tw-someone-else-1", "choices": []}, "names another request"),
    ([1, 2], "chunk is not an object"),
])
def test_one_bad_frame_fails_its_request_and_not_the_others_on_the_socket(frame: Any, says: str) -> None:
    async def script(ws: ServerConnection, generate: dict[str, Any]) -> None:
        fid = generate["id"]
        if generate["body"]["sampling_params"]["max_tokens"] == 4:
            await ws.send(orjson.dumps({"type": "generate.delta", "id": fid, "chunk": frame}).decode())
            return
        await asyncio.sleep(0.05)
        await ws.send(delta(fid, [3], "length").decode())
        await ws.send(done(fid).decode())

    async def main() -> tuple[EngineError, list[EngineOutput], list[Any]]:
        async with engine_with(script) as (link, seen):
            good = asyncio.create_task(outputs(link, request("good", 8, logprobs=1)))
            with pytest.raises(EngineProtocolError) as info:
                await outputs(link, request("bad", 4, logprobs=1))
            await until(lambda: any(f["type"] == "cancel" for f in seen), "the bad request's cancel")
            return info.value, await good, seen

    err, good, _ = asyncio.run(main())
    assert (err.status, err.code) == (502, "engine_error") and says in err.message, err.message
    assert "10.0.0.1" not in err.message and "someone" not in err.message
    assert good[-1].finished and good[-1].choices[0].token_ids == [3]
