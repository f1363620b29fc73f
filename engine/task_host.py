"""``TaskHost``: one anyio task group in a task of its own, for an object whose lifetime is a pair of
calls (``start`` / ``close``, ``connect`` / ``aclose``) rather than one ``async with`` block: the
engine link (engine/link.py) and the client's transports (client_sdk/connection.py,
client_sdk/http_fallback.py). Every background task of the object runs in the group; a task that
fails cancels the others and its error is raised by :meth:`TaskHost.aclose` (and by a later
:meth:`TaskHost.open`); ``aclose`` cancels what still runs and returns once all of it has ended.
"""

from __future__ import annotations

import asyncio
from typing import Any

import anyio
from anyio.abc import TaskGroup


class TaskHost:
    """The task group of one object, from the first :meth:`open` to :meth:`aclose`."""

    def __init__(self, name: str) -> None:
        self.name = name  # the host task's name (what asyncio.all_tasks() shows)
        self._group: TaskGroup | None = None
        self._task: asyncio.Task[None] | None = None
        self.closed = False

    @property
    def group(self) -> TaskGroup | None:
        """The live task group; None before :meth:`open` and once the group ended."""
        return self._group

    async def open(self) -> TaskGroup:
        """The task group, started in its host task at the first call. Raises what ended a group
        that failed (a task of it raised)."""
        if self._group is not None:
            return self._group
        if self._task is not None and self._task.done() and not self._task.cancelled():
            self._task.result()  # a failed group: its error
        if self.closed or self._task is not None:
            raise RuntimeError(f"{self.name} is closed")
        loop = asyncio.get_running_loop()
        ready: asyncio.Future[TaskGroup] = loop.create_future()
        # The one task not in a group: the group's host (the object has no block to hold it).
        self._task = loop.create_task(self._host(ready), name=self.name)
        return await asyncio.shield(ready)

    def start_soon(self, fn: Any, *args: Any, name: str | None = None) -> bool:
        """Run ``fn(*args)`` in the group; False (and nothing runs) when the group is not live."""
        if self._group is None or self.closed:
            return False
        self._group.start_soon(fn, *args, name=name)
        return True

    async def aclose(self) -> None:
        """Cancel every task of the group and wait until they all ended; raise what failed one."""
        self.closed = True
        if self._group is not None:
            self._group.cancel_scope.cancel()
        if self._task is not None:
            try:
                await asyncio.shield(self._task)  # a closer cancelled meanwhile: the group still ends
            except asyncio.CancelledError:
                if not self._task.cancelled():  # the closer's own cancellation, not the host's
                    raise

    async def _host(self, ready: asyncio.Future[TaskGroup]) -> None:
        try:
            async with anyio.create_task_group() as group:
                self._group = group
                ready.set_result(group)
                await anyio.sleep_forever()
        finally:
            self._group = None
