"""``TaskHost`` (engine/task_host.py): an object's task group between two calls — its tasks end by
``aclose``, and a task that fails cancels the others and is raised by ``aclose`` and a later
``open``."""

from __future__ import annotations

import asyncio

import anyio
import pytest

from engine.task_host import TaskHost


def others() -> list[str]:
    current = asyncio.current_task()
    return sorted(t.get_name() for t in asyncio.all_tasks() if t is not current and not t.done())


def test_aclose_cancels_the_tasks_and_returns_once_they_ended() -> None:
    ended: list[str] = []

    async def forever(name: str) -> None:
        try:
            await anyio.sleep_forever()
        finally:
            ended.append(name)

    async def main() -> tuple[list[str], list[str], bool]:
        host = TaskHost("host")
        group = await host.open()
        assert await host.open() is group  # one group, however many calls
        group.start_soon(forever, "a", name="a")
        assert host.start_soon(forever, "b", name="b")
        await asyncio.sleep(0)
        running = others()
        await host.aclose()
        return running, others(), host.start_soon(forever, "c", name="c")

    running, after, started = asyncio.run(main())
    assert running == ["a", "b", "host"] and after == [] and sorted(ended) == ["a", "b"]
    assert not started  # a closed host runs nothing more


def test_a_task_that_fails_cancels_the_others_and_its_error_is_raised_by_aclose_and_open() -> None:
    cancelled: list[bool] = []

    async def fails() -> None:
        await asyncio.sleep(0.01)
        raise ValueError("broken")

    async def waits() -> None:
        try:
            await anyio.sleep_forever()
        except anyio.get_cancelled_exc_class():
            cancelled.append(True)
            raise

    async def main() -> tuple[BaseException, BaseException, list[str]]:
        host = TaskHost("host")
        group = await host.open()
        group.start_soon(waits)
        group.start_soon(fails)
        await asyncio.sleep(0.1)
        with pytest.raises(ExceptionGroup) as reopened:
            await host.open()
        with pytest.raises(ExceptionGroup) as closed:
            await host.aclose()
        return reopened.value, closed.value, others()

    reopened, closed, after = asyncio.run(main())
    for error in (reopened, closed):
        assert isinstance(error, ExceptionGroup) and [str(e) for e in error.exceptions] == ["broken"]
    assert cancelled == [True] and after == []
