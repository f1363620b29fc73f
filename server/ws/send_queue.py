"""The frames waiting for the single writer of one connection, bounded and coalescing.

- Frames leave in the order they were queued, except that all pending deltas of one request
  travel together: a request's pending frames sit in one *slot* (queued where its first pending
  frame was), a new delta merges into the slot's delta (``frame.merge``), and the request's final
  frame (``*.done``, ``render.done``, ``derender.delta``, ``error``) follows its deltas.
- Nothing grows without bound: merged deltas are at most one per request in flight (the session
  caps those), and every other frame answers a client frame, so the reader stops reading from the
  socket while :attr:`full` (the client's unread frames hold its own sends back).

Used from one event loop only; ``wait`` is the writer's, ``wait_for_room`` the reader's.
docs/serve.md, "Inside a WebSocket session".
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

import anyio

from session.server_frames import ChatDelta, CompletionDelta, GenerateDelta, MessagesDelta, ServerFrame

DELTAS = (GenerateDelta, ChatDelta, CompletionDelta, MessagesDelta)


@dataclass(slots=True)
class _Slot:
    delta: ServerFrame | None = None
    finals: list[ServerFrame] = field(default_factory=list)


class SendQueue:
    """One connection's frames waiting for its writer (while the client does not read, or without a
    direct writer)."""

    def __init__(self, capacity: int = 256) -> None:
        self.capacity = capacity
        self._order: deque[ServerFrame | str] = deque()  # a frame, or the id of a request's slot
        self._slots: dict[str, _Slot] = {}
        self._pending = 0  # frames that are not merged deltas
        self._changed = anyio.Event()
        self._interrupted = False
        self.coalesced = 0  # deltas merged into a pending one (a slow reader's saving)

    def __len__(self) -> int:
        return len(self._order)

    @property
    def full(self) -> bool:
        return self._pending >= self.capacity

    def put(self, frame: ServerFrame) -> None:
        request_id = getattr(frame, "id", None)
        if request_id is None:
            self._order.append(frame)
            self._pending += 1
        else:
            slot = self._slots.get(request_id)
            if slot is None:
                slot = self._slots[request_id] = _Slot()
                self._order.append(request_id)
            if isinstance(frame, DELTAS) and not slot.finals:
                if slot.delta is None:
                    slot.delta = frame
                else:
                    slot.delta = slot.delta.merge(frame)  # type: ignore[attr-defined]
                    self.coalesced += 1
            else:
                slot.finals.append(frame)
                self._pending += 1
        self._notify()

    def take(self) -> list[ServerFrame]:
        """The next frames to write, in order (empty when nothing is queued)."""
        if not self._order:
            return []
        head = self._order.popleft()
        if isinstance(head, ServerFrame):
            self._pending -= 1
            self._notify()
            return [head]
        slot = self._slots.pop(head)
        self._pending -= len(slot.finals)
        self._notify()
        return ([slot.delta] if slot.delta is not None else []) + slot.finals

    async def wait(self) -> None:
        """Until something is queued (or :meth:`interrupt` was called)."""
        while not self._order and not self._interrupted:
            await self._wait_change()

    def interrupt(self) -> None:
        """Make :meth:`wait` return from now on, queued or not (the connection is closing)."""
        self._interrupted = True
        self._notify()

    async def wait_for_room(self) -> None:
        """Until the reader may read another client frame."""
        while self.full:
            await self._wait_change()

    async def _wait_change(self) -> None:
        event = self._changed
        await event.wait()

    def _notify(self) -> None:
        self._changed.set()
        self._changed = anyio.Event()
