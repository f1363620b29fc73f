"""Per-session memory of derender-state sequence numbers, to refuse replayed or reordered states.

A signed derender state names its stream (request id, choice index, request digest) and a sequence
number that grows by one per step. Within one session, the states a client sends for a stream must
have strictly increasing sequence numbers: an equal one is a replay, a smaller one is reordered.
A stream the session has not seen (first step, or continued from another socket) is accepted, and
so is a stream restarted from its start (the session forgets the stream when that first step succeeds).
The ledger is bounded (least recently used streams are forgotten first).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Hashable
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class StateTag:
    """What the session needs to know of a signed state: its stream (any hashable) and ``seq``."""

    stream: Hashable
    seq: int


# Reads a state's tag: None when it cannot (the derender step then refuses the state with the codec's
# own reason); may raise session.errors.StateError for a state it refuses itself.
StateTagger = Callable[[str], StateTag | None]


@dataclass(frozen=True, slots=True)
class Undo:
    stream: Hashable
    previous: int | None


class OutOfOrder(Exception):
    def __init__(self, reason: str, seq: int, last: int) -> None:
        super().__init__(reason)
        self.reason = reason  # "replayed" or "reordered"
        self.seq = seq
        self.last = last


class StateLedger:
    def __init__(self, size: int = 4096) -> None:
        self.size = size
        self._last: OrderedDict[Hashable, int] = OrderedDict()

    def __len__(self) -> int:
        return len(self._last)

    def consume(self, tag: StateTag) -> Undo:
        """Accept ``tag`` (remembering it) or raise :class:`OutOfOrder`."""
        last = self._last.get(tag.stream)
        if last is not None and tag.seq <= last:
            raise OutOfOrder("replayed" if tag.seq == last else "reordered", tag.seq, last)
        self._remember(tag.stream, tag.seq)
        return Undo(tag.stream, last)

    def undo(self, undo: Undo) -> None:
        """Forget a consumption whose step failed, so the client may retry with the same state."""
        if undo.previous is None:
            self._last.pop(undo.stream, None)
        else:
            self._remember(undo.stream, undo.previous)

    def forget(self, stream: Hashable) -> None:
        """Forget ``stream``: its states are checked afresh (a stream restarted from its start)."""
        self._last.pop(stream, None)

    def _remember(self, stream: Hashable, seq: int) -> None:
        self._last[stream] = seq
        self._last.move_to_end(stream)
        while len(self._last) > self.size:
            self._last.popitem(last=False)
