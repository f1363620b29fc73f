"""The one way an engine stream closes (engine/interface.py ``EngineStream.aclose``, docs/engine.md
"Closing a stream"): an unfinished request is aborted at the engine even from a cancelled task, the
abort is bounded by a grace, its failure is logged and never replaces the caller's error, and a
second close does nothing. Both stream kinds are checked: the outbox stream (local engine, engine
link) and the iterator stream (the HTTP engine)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator

import anyio
import pytest

from engine import interface
from engine.interface import ChoiceDelta, EngineOutput, EngineStream, IteratorStream
from engine.outbox import Outbox, OutboxStream


def _outbox_stream(log: list[str], *, abort_waits: anyio.Event | None = None,
                   abort_fails: bool = False) -> tuple[Outbox, OutboxStream]:
    box = Outbox()

    async def start() -> Outbox:
        return box

    async def abort() -> None:
        log.append("abort sent")
        if abort_waits is not None:
            await abort_waits.wait()  # an abort that has to wait (a socket write, an HTTP call)
        else:
            await anyio.sleep(0)  # any abort that yields to the loop
        if abort_fails:
            raise ConnectionError("the engine went away")
        log.append("aborted")

    return box, OutboxStream(start, forget=lambda: log.append("forget"), abort=abort)


async def _first_then_cancelled_close(stream: EngineStream) -> None:
    """Read one output, then close the stream from a task whose scope is cancelled (what a client
    that disconnects does to the task serving it)."""
    await stream.__anext__()
    with anyio.CancelScope() as scope:
        scope.cancel()
        try:
            await anyio.sleep(1)  # the cancellation is delivered here
        finally:
            await stream.aclose()


def test_an_outbox_stream_closed_from_a_cancelled_task_still_aborts_at_the_engine() -> None:
    async def main() -> list[str]:
        log: list[str] = []
        box, stream = _outbox_stream(log)
        box.push(EngineOutput("r", [ChoiceDelta(0, [1])]))
        await _first_then_cancelled_close(stream)
        return log

    assert anyio.run(main) == ["forget", "abort sent", "aborted"]


def test_an_iterator_stream_closed_from_a_cancelled_task_runs_its_abort_to_the_end() -> None:
    log: list[str] = []

    async def outputs() -> AsyncIterator[EngineOutput]:
        try:
            yield EngineOutput("r", [ChoiceDelta(0, [1])])
            yield EngineOutput("r", [ChoiceDelta(0, [2])])
        finally:
            log.append("abort sent")
            await anyio.sleep(0)  # the HTTP engine posts /abort_requests here
            log.append("aborted")

    async def main() -> None:
        await _first_then_cancelled_close(IteratorStream(outputs()))

    anyio.run(main)
    assert log == ["abort sent", "aborted"]


def test_an_abort_that_does_not_end_is_given_up_after_the_grace_and_logged(
        monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    monkeypatch.setattr(interface, "ABORT_GRACE_S", 0.05)

    async def main() -> list[str]:
        log: list[str] = []
        box, stream = _outbox_stream(log, abort_waits=anyio.Event())  # never set
        box.push(EngineOutput("r", [ChoiceDelta(0, [1])]))
        await stream.__anext__()
        with anyio.fail_after(60):  # a hang guard, not a timing assertion
            await stream.aclose()
        return log

    with caplog.at_level(logging.WARNING, logger="tokenwire.engine"):
        assert anyio.run(main) == ["forget", "abort sent"]
    assert "the engine may still run it" in caplog.text


def test_a_failing_abort_is_logged_and_never_replaces_the_callers_error(caplog: pytest.LogCaptureFixture) -> None:
    async def main() -> list[str]:
        log: list[str] = []
        box, stream = _outbox_stream(log, abort_fails=True)
        box.push(EngineOutput("r", [ChoiceDelta(0, [1])]))
        with pytest.raises(KeyError, match="the caller's own error"):
            try:
                await stream.__anext__()
                raise KeyError("the caller's own error")
            finally:
                await stream.aclose()
        await stream.aclose()  # a second close does nothing
        return log

    with caplog.at_level(logging.WARNING, logger="tokenwire.engine"):
        assert anyio.run(main) == ["forget", "abort sent"]
    assert "closing an engine stream failed: ConnectionError: the engine went away" in caplog.text


def test_a_finished_stream_closes_without_an_abort_and_a_closed_one_iterates_nothing() -> None:
    async def main() -> tuple[list[str], list[EngineOutput]]:
        log: list[str] = []
        box, stream = _outbox_stream(log)
        box.push(EngineOutput("r", [ChoiceDelta(0, [1], finish_reason="length")], finished=True))
        async with stream:
            got = [out async for out in stream]
        assert stream.closed
        return log, [out async for out in stream] + got

    log, got = anyio.run(main)
    assert log == ["forget"]
    assert [c.token_ids for out in got for c in out.choices] == [[1]]


class _Meter:
    def __init__(self, log: list[str]) -> None:
        self.log = log

    def output(self, out: EngineOutput) -> None:
        self.log.append(f"measured {out.choices[0].token_ids}")

    def closed(self) -> None:
        self.log.append("meter closed")


def test_every_stream_can_be_listened_to_and_its_meter_sees_each_output_and_the_close() -> None:
    """The pull-only stream listens through the interface's default; the outbox stream from the
    engine's delivery. Either way ``on_output`` returning True (a stop string) ends the listening."""
    async def outputs() -> AsyncIterator[EngineOutput]:
        for i in range(1, 4):
            yield EngineOutput("r", [ChoiceDelta(0, [i])], finished=i == 3)

    async def main() -> list[str]:
        log: list[str] = []
        pulled = IteratorStream(outputs())
        pulled.measure(_Meter(log))
        await pulled.listen(lambda out: log.append(f"got {out.choices[0].token_ids}") is None and False)
        await pulled.aclose()
        box, pushed = _outbox_stream(log)
        pushed.measure(_Meter(log))
        for i in (1, 2):
            asyncio.get_running_loop().call_soon(box.push, EngineOutput("r", [ChoiceDelta(0, [i])]))
        await pushed.listen(lambda out: log.append(f"pushed {out.choices[0].token_ids}") is None)  # stop at once
        await pushed.aclose()
        return log

    log = anyio.run(main)
    assert log == ["measured [1]", "got [1]", "measured [2]", "got [2]", "measured [3]", "got [3]", "meter closed",
                   # the engine's second output is measured (it was generated) but handed to no one
                   "measured [1]", "pushed [1]", "measured [2]", "meter closed", "forget", "abort sent", "aborted"]
