"""Per-request output buffers between the engine thread and the asyncio consumers (no torch).

The engine thread hands each step's outputs to the event loop with one
``loop.call_soon_threadsafe`` per step; on the loop, :class:`Outbox.push` files each request's
output into its own bounded buffer and wakes its consumer. A slow consumer never grows memory
without bound and never blocks the engine: past ``capacity`` items, new tokens are merged into
the last pending item (token deltas concatenate). And :meth:`Outbox.get` hands over everything
that arrived since the last read as one output, so a consumer that falls behind (a loaded event
loop) derenders and sends fewer, bigger deltas, whose per-token cost is lower, and catches up (as
vLLM's output collector merges the outputs its consumer has not taken yet).
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Awaitable, Callable

from engine.errors import EngineError
from engine.interface import ChoiceDelta, EngineOutput, EngineStream

DEFAULT_CAPACITY = 64


class Outbox:
    """One request's pending outputs (loop-thread only). ``meter``: the hook that sees every
    output as it is pushed (the stream's :class:`engine.interface.StreamMeter`)."""

    __slots__ = ("_items", "_listener", "_on_end", "_waiter", "capacity", "done", "meter")

    def __init__(self, capacity: int = DEFAULT_CAPACITY) -> None:
        self._items: deque[EngineOutput | EngineError] = deque()
        self._waiter: asyncio.Future[None] | None = None
        self._listener: Callable[[EngineOutput], bool] | None = None
        self._on_end: Callable[[BaseException | None], None] | None = None
        self.capacity = capacity
        self.done = False  # the final output (or an error) has been pushed
        self.meter: Callable[[EngineOutput], None] | None = None

    def listen(self, on_output: Callable[[EngineOutput], bool],
               on_end: Callable[[BaseException | None], None]) -> None:
        """From now on hand every output to ``on_output`` as it is pushed, instead of keeping it
        for :meth:`get` (what is pending goes first, merged as ``get`` would). The consumer then
        runs inside the engine's own delivery on the event loop: no task is woken per output.
        ``on_end`` runs once, after the last output or once ``on_output`` returned True (None), or
        with the error: the engine's, or the one ``on_output`` raised. Nothing is handed after it."""
        self._listener = on_output
        self._on_end = on_end
        while self._items and self._listener is on_output:
            item = self._items.popleft()
            if isinstance(item, EngineOutput):
                while self._items and isinstance(self._items[0], EngineOutput):
                    merge_into(item, self._items.popleft())  # type: ignore[arg-type]
            self._hand(on_output, item)

    def unlisten(self) -> None:
        """Hand nothing more (the consumer left)."""
        self._listener = _ignore
        self._on_end = None

    def push(self, item: EngineOutput | EngineError) -> None:
        if self.done:
            return
        if isinstance(item, EngineOutput):
            if self.meter is not None:
                self.meter(item)
            self.done = item.finished
        else:
            self.done = True
        listener = self._listener
        if listener is not None:
            self._hand(listener, item)
            return
        if isinstance(item, EngineError):
            self._items.append(item)
        elif self._items and len(self._items) >= self.capacity and isinstance(self._items[-1], EngineOutput):
            merge_into(self._items[-1], item)
        else:
            self._items.append(item)
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    def _hand(self, listener: Callable[[EngineOutput], bool], item: EngineOutput | EngineError) -> None:
        if isinstance(item, EngineError):
            self._end(item)
            return
        try:
            if listener(item) or item.finished:
                self._end(None)
        except Exception as exc:  # the consumer failed: it ends with its error
            self._end(exc)

    def _end(self, error: BaseException | None) -> None:
        on_end = self._on_end
        self.unlisten()
        if on_end is not None:
            on_end(error)

    async def get(self) -> EngineOutput:
        while not self._items:
            self._waiter = asyncio.get_running_loop().create_future()
            try:
                await self._waiter
            finally:
                self._waiter = None
        items = self._items
        item = items.popleft()
        if isinstance(item, EngineError):
            raise item
        while items:
            later = items[0]
            if not isinstance(later, EngineOutput):  # an error: raised by the next read
                break
            items.popleft()
            merge_into(item, later)
        return item

    def __len__(self) -> int:
        return len(self._items)


def merge_into(target: EngineOutput, new: EngineOutput) -> None:
    """Append ``new``'s deltas to ``target`` (same request)."""
    by_index = {c.index: c for c in target.choices}
    for delta in new.choices:
        mine = by_index.get(delta.index)
        if mine is None:
            copy = ChoiceDelta(delta.index, list(delta.token_ids),
                               list(delta.logprobs) if delta.logprobs is not None else None,
                               delta.finish_reason, delta.stop_reason)
            target.choices.append(copy)
            by_index[delta.index] = copy
            continue
        mine.token_ids.extend(delta.token_ids)
        if delta.logprobs is not None:
            if mine.logprobs is None:
                mine.logprobs = []
            mine.logprobs.extend(delta.logprobs)
        if delta.finish_reason is not None:
            mine.finish_reason, mine.stop_reason = delta.finish_reason, delta.stop_reason
    target.choices.sort(key=lambda c: c.index)
    target.finished = target.finished or new.finished
    if new.usage is not None:
        target.usage = new.usage


class OutboxStream(EngineStream):
    """An engine request's outputs, read from its :class:`Outbox`: an :class:`EngineStream`
    (``aclose`` aborts what has not finished, as every engine stream closes) whose :meth:`listen`
    hands each output over from the engine's delivery on the event loop (no task woken per
    output). Its meter is the outbox's hook.

    ``start`` admits the request and returns its outbox (it runs at the first read, so admission
    errors raise there); ``forget`` drops the engine's bookkeeping once the request ended or was
    left; ``abort`` stops an unfinished request at the engine."""

    __slots__ = ("_abort", "_box", "_ended", "_forget", "_start")

    def __init__(self, start: Callable[[], Awaitable[Outbox]], *, forget: Callable[[], None],
                 abort: Callable[[], Awaitable[None]]) -> None:
        super().__init__()
        self._start = start
        self._forget = forget
        self._abort = abort
        self._box: Outbox | None = None
        self._ended = False

    async def _started(self) -> Outbox:
        box = self._box
        if box is None:
            box = self._box = await self._start()
            if self._meter is not None:
                box.meter = self._meter.output
        return box

    async def __anext__(self) -> EngineOutput:
        if self._ended or self._closed:
            raise StopAsyncIteration
        try:
            out = await (await self._started()).get()
        except BaseException:
            await self.aclose()
            raise
        if out.finished:
            self._end()
        return out

    async def listen(self, on_output: Callable[[EngineOutput], bool]) -> None:
        if self._ended or self._closed:
            return
        box = await self._started()
        ended: asyncio.Future[BaseException | None] = asyncio.get_running_loop().create_future()

        def on_end(error: BaseException | None) -> None:
            if not ended.done():
                ended.set_result(error)

        box.listen(on_output, on_end)
        try:
            error = await ended  # the one wake-up of the caller until the stream ends
        finally:
            box.unlisten()  # a cancelled caller gets nothing more
        if box.done:
            self._end()
        if error is not None:
            raise error

    async def _close(self) -> None:
        unfinished = self._box is not None and not self._box.done
        self._end()
        if unfinished:
            await self._abort()

    def _end(self) -> None:
        if not self._ended:
            self._ended = True
            self._forget()


def _ignore(out: EngineOutput) -> bool:
    return False
