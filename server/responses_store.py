"""Where stored responses live (``store: true``): the embedded store, in-process and bounded.

A record is what ``previous_response_id``, ``GET /v1/responses/{id}`` and ``input_items`` need: the
response object, the request's own input items and the items of the turns before it. Records are
kept as JSON bytes, so the bound in bytes is the memory they hold, and an entry is the same
whichever store keeps it. The embedded store keeps at most :data:`MAX_RESPONSES` records,
:data:`MAX_BYTES` bytes in all and each for :data:`MAX_AGE_S` seconds; past a bound the oldest go
first. docs/responses.md, "The store".
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from typing import Any, Protocol

import orjson

MAX_RESPONSES = 10_000
MAX_BYTES = 128 * 1024 * 1024
MAX_AGE_S = 6 * 3600


class ResponseStore(Protocol):
    async def put(self, response_id: str, record: dict[str, Any]) -> None: ...
    async def get(self, response_id: str) -> dict[str, Any] | None: ...
    async def delete(self, response_id: str) -> bool: ...


class MemoryStore:
    """The embedded store: bounded in count, bytes and age (oldest out first)."""

    def __init__(self, *, max_responses: int = MAX_RESPONSES, max_bytes: int = MAX_BYTES,
                 max_age_s: float = MAX_AGE_S, clock: Callable[[], float] = time.monotonic) -> None:
        self.max_responses = max_responses
        self.max_bytes = max_bytes
        self.max_age_s = max_age_s
        self._clock = clock
        self._entries: OrderedDict[str, tuple[float, bytes]] = OrderedDict()
        self._bytes = 0
        self._lock = threading.Lock()

    def limits(self) -> dict[str, Any]:
        return {"kind": "memory", "max_responses": self.max_responses, "max_bytes": self.max_bytes,
                "max_age_s": self.max_age_s}

    @property
    def size(self) -> tuple[int, int]:
        """(records, bytes) held now."""
        return len(self._entries), self._bytes

    async def put(self, response_id: str, record: dict[str, Any]) -> None:
        data = orjson.dumps(record)
        with self._lock:
            self._drop(response_id)
            if len(data) > self.max_bytes:
                return  # larger than the whole store: not kept (a later lookup is "not found")
            self._entries[response_id] = (self._clock(), data)
            self._bytes += len(data)
            self._expire()
            while len(self._entries) > self.max_responses or self._bytes > self.max_bytes:
                oldest = next(iter(self._entries))
                self._drop(oldest)

    async def get(self, response_id: str) -> dict[str, Any] | None:
        with self._lock:
            self._expire()
            entry = self._entries.get(response_id)
        if entry is None:
            return None
        record: dict[str, Any] = orjson.loads(entry[1])
        return record

    async def delete(self, response_id: str) -> bool:
        with self._lock:
            self._expire()
            return self._drop(response_id)

    def _drop(self, response_id: str) -> bool:
        entry = self._entries.pop(response_id, None)
        if entry is None:
            return False
        self._bytes -= len(entry[1])
        return True

    def _expire(self) -> None:
        limit = self._clock() - self.max_age_s
        while self._entries:
            oldest, (stamp, _) = next(iter(self._entries.items()))
            if stamp >= limit:
                return
            self._drop(oldest)
