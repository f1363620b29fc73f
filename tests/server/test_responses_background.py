"""The bounds of background responses (server/responses_background.py): an event log drops its
oldest events past its count and byte bounds (a resume from before them is a 400 that says so, a
reader that falls behind them gets an ``error`` event), and a finished log is kept for a bounded
time and count."""

from __future__ import annotations

import functools
from typing import Any

import anyio
import orjson
import pytest

from server.errors import ApiError
from server.responses_background import BackgroundRuns, EventLog


def delta(seq: int, text: str = "x") -> dict[str, Any]:
    return {"type": "response.output_text.delta", "sequence_number": seq, "delta": text}


def done(seq: int) -> dict[str, Any]:
    return {"type": "response.completed", "sequence_number": seq, "response": {"status": "completed"}}


def seqs(chunks: list[bytes]) -> list[int]:
    return [orjson.loads(c.split(b"data: ", 1)[1])["sequence_number"] for c in chunks]


async def read(log: EventLog, after: int) -> list[bytes]:
    return [chunk async for chunk in log.after(after)]


def test_past_its_count_the_oldest_events_go_and_a_resume_from_before_them_is_a_400() -> None:
    log = EventLog("resp_1", max_events=8, max_bytes=1 << 20)
    for seq in range(9):
        log.append(delta(seq))
    assert log.first == 3 and log.size[0] == 6  # trimmed to three quarters of the bound
    log.append(done(9))
    assert log.done and log.next == 10
    assert seqs(anyio.run(read, log, 2)) == list(range(3, 10))
    with pytest.raises(ApiError) as info:
        log.check_after(1)
    assert info.value.status == 400 and info.value.param == "starting_after"
    assert "before sequence number 3 are no longer kept" in info.value.message
    log.check_after(2)
    with pytest.raises(ApiError, match="has no event after it"):
        log.check_after(9)


def test_past_its_bytes_the_oldest_go_but_the_last_event_stays() -> None:
    log = EventLog("resp_2", max_events=1000, max_bytes=400)
    for seq in range(3):
        log.append(delta(seq))
    log.append(delta(3, "y" * 1000))  # larger than the whole bound
    assert log.first == 3 and log.size[0] == 1 and log.size[1] > 400
    with pytest.raises(ValueError, match="out of order"):
        log.append(delta(7))


def test_a_reader_that_falls_behind_dropped_events_gets_an_error_event() -> None:
    async def main() -> list[bytes]:
        log = EventLog("resp_3", max_events=4, max_bytes=1 << 20)
        log.append(delta(0))
        reader = log.after(-1)
        got = [await reader.__anext__()]  # event 0; the reader then waits
        for seq in range(1, 6):
            log.append(delta(seq))  # 0..3 dropped before the reader comes back
        got += [chunk async for chunk in reader]
        return got

    got = anyio.run(main)
    assert seqs(got[:1]) == [0]
    last = orjson.loads(got[-1].split(b"data: ", 1)[1])
    assert len(got) == 2 and last["type"] == "error" and last["code"] == "events_dropped"


def test_a_live_reader_gets_each_new_event_then_the_end() -> None:
    async def main() -> list[bytes]:
        log = EventLog("resp_4")
        got: list[bytes] = []

        async def reader() -> None:
            got.extend([chunk async for chunk in log.after(-1)])

        async with anyio.create_task_group() as tg:
            tg.start_soon(reader)
            for seq in range(3):
                await anyio.sleep(0.01)
                log.append(delta(seq))
            log.append(done(3))
        return got

    assert seqs(anyio.run(main)) == [0, 1, 2, 3]


def test_finished_logs_are_kept_for_a_bounded_time_and_count() -> None:
    now = [0.0]

    async def events(n: int) -> Any:
        for seq in range(n):
            yield delta(seq)
        yield done(n)

    async def main() -> BackgroundRuns:
        runs = BackgroundRuns(keep_s=10, max_kept=2, clock=lambda: now[0])
        async with runs.serving():
            for k in range(3):
                runs.start(f"resp_{k}", "addr:1", functools.partial(events, k))
            while runs.running:
                await anyio.sleep(0.01)
        return runs

    runs = anyio.run(main)
    assert runs.log_of("resp_0") is None  # past the count: the oldest went
    kept = runs.log_of("resp_2")
    assert kept is not None and kept.done and kept.next == 3
    now[0] = 11.0
    assert runs.log_of("resp_1") is None and runs.log_of("resp_2") is None  # past the time


def test_starting_needs_the_server_s_task_group_and_respects_the_bounds() -> None:
    runs = BackgroundRuns(max_running=2, max_per_client=1)
    with pytest.raises(ApiError) as info:
        runs.check("addr:1")
    assert info.value.status == 503

    async def hang() -> Any:
        yield delta(0)
        await anyio.sleep(3600)

    def status(client: str) -> int:
        try:
            runs.check(client)
        except ApiError as exc:
            return exc.status
        return 200

    async def main() -> list[int]:
        async with runs.serving():
            runs.start("resp_a", "addr:1", hang)
            statuses = [status("addr:1"), status("addr:2")]  # the client's bound, then another client
            runs.start("resp_b", "addr:2", hang)
            statuses.append(status("addr:3"))  # the server's bound
            await anyio.sleep(0.01)
            assert runs.drain.in_flight == 2  # the shutdown drain waits for them
            return statuses

    assert anyio.run(main) == [429, 200, 503]
    assert runs.running == 0 and runs.drain.in_flight == 0  # leaving serving() cancelled the runs
