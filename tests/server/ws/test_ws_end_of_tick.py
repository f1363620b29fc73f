"""``EndOfTick``: the flushes registered during a loop tick run once it ends, with one callback for
all of them, and a loop that closed before its tick ended leaves nothing behind for the next."""

from __future__ import annotations

import asyncio

from server.ws.end_of_tick import EndOfTick


def test_one_callback_per_tick_runs_every_flush_registered_during_it_in_order() -> None:
    ticks, log = EndOfTick(), list[str]()

    async def main() -> None:
        loop = asyncio.get_running_loop()
        ticks.add(lambda: log.append("a"), loop)
        loop.call_soon(log.append, "other")  # scheduled between the two: one callback runs both first
        ticks.add(lambda: log.append("b"), loop)
        await asyncio.sleep(0)
        await asyncio.sleep(0)
        ticks.add(lambda: log.append("c"), loop)  # a later tick: its own callback
        await asyncio.sleep(0)

    asyncio.run(main())
    assert log == ["a", "b", "other", "c"]


def test_a_tick_left_unfinished_by_a_closed_loop_does_not_hold_back_the_next_loop() -> None:
    ticks, log = EndOfTick(), list[str]()
    dead = asyncio.new_event_loop()
    ticks.add(lambda: log.append("never"), dead)  # scheduled on a loop that never runs it
    dead.close()

    async def main() -> None:
        ticks.add(lambda: log.append("flushed"), asyncio.get_running_loop())
        await asyncio.sleep(0)

    asyncio.run(main())
    assert log == ["flushed"]
