"""The engine link's tasks (engine/link.py, engine/task_host.py): every one of them runs in the
engine's task group, a link's in a group of its own, so that closing the engine leaves nothing
running, a request whose task is cancelled still stops at the engine, and a failing task beside the
reader ends its link's requests with an error instead of leaving them waiting. Against the scripted
engine (tests/support/scripted_engine.py), which runs on a thread of its own: every task in the
test's event loop is the link's or the test's."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import pytest

from engine.errors import EngineShutDown, EngineUnavailable
from engine.link import LinkEngine, _Link
from engine.protocol import GenerateRequest
from tests.support.scripted_engine import ScriptedEngine


def request(rid: str, max_tokens: int = 4) -> GenerateRequest:
    return GenerateRequest.model_validate({"request_id": rid, "token_ids": [1, 2, 3],
                                           "sampling_params": {"max_tokens": max_tokens, "temperature": 0}})


def others() -> list[str]:
    """The tasks of this event loop besides the one running the test."""
    current = asyncio.current_task()
    return sorted(t.get_name() for t in asyncio.all_tasks() if t is not current and not t.done())


async def until(check: Any, what: str) -> None:
    async def poll() -> None:
        while not check():
            await asyncio.sleep(0.005)
    try:
        await asyncio.wait_for(poll(), 30)
    except TimeoutError:
        pytest.fail(f"waited 30 s for {what}")


def test_close_ends_every_task_of_the_link_even_with_a_reader_waiting() -> None:
    with ScriptedEngine([5, 6, 7, 8], fault="hang") as scripted:
        async def main() -> tuple[list[str], list[str], BaseException | None, bool]:
            link = LinkEngine(scripted.ws_url, model_name="m", max_model_len=64, read_timeout=30.0)
            stream = link.generate(request("waiting"))
            waiting = asyncio.create_task(anext(stream), name="test reader")
            await until(lambda: link.live_sequences() == 1, "the request to be on the link")
            running = others()  # the reader is blocked in recv, the watchdog sleeps
            links = list(link._links)
            await link.close()
            right_after = [n for n in others() if n != "test reader"]  # before anything else runs
            try:
                await waiting
                error = None
            except EngineShutDown as exc:
                error = exc
            ws_closed = bool(links) and all(lk.ws.state.name == "CLOSED" for lk in links)
            return running, right_after + others(), error, ws_closed

        running, after, error, ws_closed = asyncio.run(main())
    assert any(n.startswith("engine link timeout") for n in running), running
    assert after == []  # close() returned: not a task of the link is left
    assert isinstance(error, EngineShutDown) and ws_closed


def test_a_request_cancelled_while_it_waits_still_cancels_at_the_engine() -> None:
    with ScriptedEngine([5, 6, 7, 8], fault="hang") as scripted:
        async def main() -> tuple[int, list[str]]:
            link = LinkEngine(scripted.ws_url, model_name="m", max_model_len=64)
            stream = link.generate(request("leaving"))

            async def read() -> None:
                async for _ in stream:
                    pass

            reader = asyncio.create_task(read(), name="test reader")
            await until(lambda: link.live_sequences() == 1, "the request to be on the link")
            reader.cancel()  # the client went away: its task is cancelled mid-wait
            with pytest.raises(asyncio.CancelledError):
                await reader
            await until(lambda: len(scripted.aborted) == 1, "the cancel to reach the engine")
            live = link.live_sequences()
            await link.close()
            return live, others()

        live, after = asyncio.run(main())
        assert len(scripted.aborted) == 1
    assert live == 0 and after == []


def test_a_failing_task_beside_the_reader_ends_its_requests_with_an_error_not_a_hang(
        monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    async def broken(self: _Link, timeout: float) -> None:
        await asyncio.sleep(0.05)
        raise RuntimeError("a bug in the watchdog")

    monkeypatch.setattr(_Link, "_watchdog", broken)
    with ScriptedEngine([5, 6, 7, 8], fault="hang") as scripted:
        async def main() -> tuple[BaseException, bool, list[str]]:
            link = LinkEngine(scripted.ws_url, model_name="m", max_model_len=64, read_timeout=30.0)
            with pytest.raises(EngineUnavailable) as info:
                async for _ in link.generate(request("hung")):
                    pass
            closed = all(lk.closed for lk in link._links)
            await link.close()
            return info.value, closed, others()

        with caplog.at_level(logging.ERROR, logger="tokenwire.link"):
            error, closed, after = asyncio.run(main())
    assert "connection to the remote engine was lost" in str(error)
    assert closed and after == []
    failed = [r for r in caplog.records if "failed" in r.getMessage()]
    assert failed and failed[0].exc_info is not None  # the bug, with its traceback, in the log
    assert "a bug in the watchdog" in caplog.text


def test_the_link_ending_by_itself_ends_its_tasks_and_the_next_request_opens_another() -> None:
    with ScriptedEngine([5, 6, 7, 8], fault="die_mid_stream") as scripted:
        async def main() -> tuple[BaseException, list[str], list[str], int]:
            link = LinkEngine(scripted.ws_url, model_name="m", max_model_len=64, read_timeout=30.0)
            with pytest.raises(EngineUnavailable) as info:
                async for _ in link.generate(request("dies")):
                    pass
            first = link._links[0]
            await until(lambda: first._ended.is_set(), "the dead link's tasks to end")
            between = [n for n in others() if n.startswith("engine link ")]  # its reader and watchdog gone
            scripted.fault = None
            outs = [out async for out in link.generate(request("next"))]
            await link.close()
            return info.value, between, others(), len(outs)

        error, between, after, outs = asyncio.run(main())
    assert isinstance(error, EngineUnavailable) and between == [] and after == [] and outs > 0
