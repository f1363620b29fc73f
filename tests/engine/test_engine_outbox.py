"""Per-request output buffers: bounded, coalescing for slow readers, errors delivered once."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from engine.errors import EngineInternalError, EngineUnavailable
from engine.interface import ChoiceDelta, EngineOutput
from engine.outbox import Outbox, OutboxStream
from engine.protocol import TokenLogprob, UsageInfo


def out(*tokens: int, index: int = 0, finish: str | None = None) -> EngineOutput:
    lp = [TokenLogprob(token_id=t, logprob=-1.0) for t in tokens]
    return EngineOutput("r", [ChoiceDelta(index, list(tokens), lp, finish)], finished=finish is not None,
                        usage=UsageInfo.of(3, 9) if finish else None)


def test_slow_reader_gets_merged_deltas_and_memory_stays_bounded() -> None:
    async def main() -> list[EngineOutput]:
        box = Outbox(capacity=3)
        for t in range(10):
            box.push(out(t, index=t % 2))
        box.push(out(99, finish="length"))
        assert len(box) == 3
        got = [await box.get()]  # everything pending, as one output
        assert len(box) == 0
        return got

    got = asyncio.run(main())
    tokens = {0: [], 1: []}  # type: dict[int, list[int]]
    for o in got:
        for c in o.choices:
            tokens[c.index] += c.token_ids
            assert c.logprobs is not None and [x.token_id for x in c.logprobs] == c.token_ids
    assert tokens == {0: [0, 2, 4, 6, 8, 99], 1: [1, 3, 5, 7, 9]}
    assert got[-1].finished and got[-1].usage is not None
    assert [c.finish_reason for c in got[-1].choices] == ["length", None]


def test_consumer_waits_for_the_next_push() -> None:
    async def main() -> EngineOutput:
        box = Outbox()
        loop = asyncio.get_running_loop()
        loop.call_later(0.01, box.push, out(5))
        return await box.get()

    assert asyncio.run(main()).choices[0].token_ids == [5]


def test_error_is_raised_once_and_nothing_follows_it() -> None:
    async def main() -> None:
        box = Outbox()
        box.push(out(1))
        box.push(EngineInternalError("boom"))
        box.push(out(2))
        assert (await box.get()).choices[0].token_ids == [1]
        with pytest.raises(EngineInternalError):
            await box.get()
        assert len(box) == 0 and box.done

    asyncio.run(main())


def test_a_reader_that_fell_behind_gets_what_arrived_as_one_output_and_the_next_waits() -> None:
    async def main() -> tuple[EngineOutput, EngineOutput]:
        box = Outbox()
        for t in (1, 2, 3):
            box.push(out(t))
        first = await box.get()
        asyncio.get_running_loop().call_later(0.01, box.push, out(4, finish="stop"))
        return first, await box.get()

    first, second = asyncio.run(main())
    assert first.choices[0].token_ids == [1, 2, 3] and not first.finished
    assert [x.token_id for x in first.choices[0].logprobs or []] == [1, 2, 3]
    assert second.choices[0].token_ids == [4] and second.finished


def test_outputs_before_an_error_merge_and_the_error_comes_next() -> None:
    async def main() -> list[int]:
        box = Outbox()
        box.push(out(1))
        box.push(out(2))
        box.push(EngineInternalError("boom"))
        got = (await box.get()).choices[0].token_ids
        with pytest.raises(EngineInternalError):
            await box.get()
        return got

    assert asyncio.run(main()) == [1, 2]


# --- OutboxStream: iteration and the step-wise listen path over one outbox ----------------------

def _stream(box: Outbox, log: list[str]) -> OutboxStream:
    async def start() -> Outbox:
        log.append("start")
        return box

    async def abort() -> None:
        log.append("abort")

    return OutboxStream(start, forget=lambda: log.append("forget"), abort=abort)


def test_a_listener_gets_what_was_pending_merged_then_each_output_as_it_is_pushed() -> None:
    async def main() -> tuple[list[Any], list[str]]:
        box, log, got = Outbox(), list[str](), list[Any]()
        stream = _stream(box, log)
        box.push(EngineOutput("r", [ChoiceDelta(0, [1])]))
        assert (await stream.__anext__()).choices[0].token_ids == [1]
        box.push(EngineOutput("r", [ChoiceDelta(0, [2])]))
        box.push(EngineOutput("r", [ChoiceDelta(0, [3])]))
        loop = asyncio.get_running_loop()
        loop.call_soon(box.push, EngineOutput("r", [ChoiceDelta(0, [4], finish_reason="length")], finished=True))
        await stream.listen(lambda out: got.append(out) is not None)  # returns after the finished output
        await stream.aclose()
        return got, log

    got, log = asyncio.run(main())
    assert [c.token_ids for out in got for c in out.choices] == [[2, 3], [4]]
    assert got[-1].finished
    assert log == ["start", "forget"]  # finished: forgotten once, nothing to abort


def test_closing_an_unfinished_stream_aborts_it_once_and_an_error_ends_a_listener() -> None:
    async def main() -> tuple[list[str], list[Any], BaseException | None]:
        box, log, got = Outbox(), list[str](), list[Any]()
        stream = _stream(box, log)
        box.push(EngineOutput("r", [ChoiceDelta(0, [1])]))
        await stream.__anext__()
        await stream.aclose()
        await stream.aclose()
        other, other_log = Outbox(), list[str]()
        listened = _stream(other, other_log)
        other.push(EngineOutput("r", [ChoiceDelta(0, [1])]))
        await listened.__anext__()
        loop = asyncio.get_running_loop()
        loop.call_soon(other.push, EngineUnavailable("gone"))
        loop.call_soon(other.push, EngineOutput("r", [ChoiceDelta(0, [2])]))  # after the end: never delivered
        raised = None
        try:
            await listened.listen(lambda out: got.append(out) is not None)
        except EngineUnavailable as exc:
            raised = exc
        await listened.aclose()
        return log + other_log, got, raised

    log, got, raised = asyncio.run(main())
    assert log == ["start", "forget", "abort", "start", "forget"]
    assert got == [] and isinstance(raised, EngineUnavailable)


def test_on_end_runs_once_after_the_last_output_whether_pending_or_pushed_later() -> None:
    log: list[str] = []

    def on_output(out: EngineOutput) -> bool:
        log.append(f"out finished={out.finished}")
        return False

    def on_end(error: BaseException | None) -> None:
        log.append("end" if error is None else f"end {type(error).__name__}")

    pushed = Outbox()
    pushed.listen(on_output, on_end)
    pushed.push(EngineOutput("r", [ChoiceDelta(0, [1])]))
    pushed.push(EngineOutput("r", [ChoiceDelta(0, [2])], finished=True))
    pushed.push(EngineOutput("r", [ChoiceDelta(0, [3])]))  # after the end: never handed
    assert log == ["out finished=False", "out finished=True", "end"]

    log.clear()
    pending = Outbox()
    pending.push(EngineOutput("r", [ChoiceDelta(0, [1])]))
    pending.push(EngineOutput("r", [ChoiceDelta(0, [2])], finished=True))
    pending.listen(on_output, on_end)  # the pending outputs merge into the last one
    assert log == ["out finished=True", "end"]

    log.clear()
    failed = Outbox()
    failed.listen(on_output, on_end)
    failed.push(EngineUnavailable("gone"))
    assert log == ["end EngineUnavailable"] and failed.done


def test_a_listener_that_needs_no_more_or_fails_ends_the_listening_with_nothing_handed_after() -> None:
    log: list[str] = []
    stopped = Outbox()
    stopped.listen(lambda out: log.append(f"out {out.choices[0].token_ids}") is None, lambda e: log.append(f"end {e}"))
    stopped.push(EngineOutput("r", [ChoiceDelta(0, [1])]))  # True: a stop string, say
    stopped.push(EngineOutput("r", [ChoiceDelta(0, [2])]))
    assert log == ["out [1]", "end None"] and not stopped.done  # still running at the engine: the reader aborts it

    def broken(out: EngineOutput) -> bool:
        raise ValueError("derender failed")

    errors: list[BaseException | None] = []
    failing = Outbox()
    failing.listen(broken, errors.append)
    failing.push(EngineOutput("r", [ChoiceDelta(0, [1])]))
    failing.push(EngineOutput("r", [ChoiceDelta(0, [2])]))
    assert len(errors) == 1 and isinstance(errors[0], ValueError)


def test_the_meter_sees_every_pushed_output_whichever_way_the_outbox_is_read() -> None:
    seen: list[list[int]] = []
    box = Outbox(capacity=1)
    box.meter = lambda out: seen.append(list(out.choices[0].token_ids))
    box.push(EngineOutput("r", [ChoiceDelta(0, [1])]))
    box.push(EngineOutput("r", [ChoiceDelta(0, [2])]))  # merged into the pending one, still seen
    box.listen(lambda out: False, lambda e: None)
    box.push(EngineOutput("r", [ChoiceDelta(0, [3])], finished=True))
    assert seen == [[1], [2], [3]]
