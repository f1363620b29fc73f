"""Where stored responses live (``store: true``): the embedded store, in-process and bounded, or a
Redis that several front ends share (``--responses-store redis://HOST:PORT/DB``).

A record is what ``previous_response_id``, ``GET /v1/responses/{id}`` and ``input_items`` need: the
response object, the request's own input items and the items of the turns before it. Records are
kept as JSON bytes, so the bound in bytes is the memory they hold, and an entry is the same
whichever store keeps it. The embedded store keeps at most :data:`MAX_RESPONSES` records,
:data:`MAX_BYTES` bytes in all and each for :data:`MAX_AGE_S` seconds; past a bound the oldest go
first; Redis expires each record after the same age. docs/responses.md, "The store".
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from typing import Any, Protocol
from urllib.parse import urlsplit

import orjson

from server.errors import ApiError

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


# --- Redis ------------------------------------------------------------------------------------

REDIS_PREFIX = "tokenwire:response:"
MAX_RECORD_BYTES = 16 * 1024 * 1024  # a record past this is not kept (a later lookup is "not found")
STORE_VARIABLE = "TOKENWIRE_RESPONSES_STORE"  # redis://[:PASSWORD@]HOST[:PORT][/DB]


class StoreUnavailable(ApiError):
    """The shared store did not answer (a 503 for the request that needed it)."""

    def __init__(self, message: str) -> None:
        super().__init__(503, message)


def check_store_url(url: str) -> tuple[str, int, int, str | None]:
    """(host, port, db, password) of ``redis://[:PASSWORD@]HOST[:PORT][/DB]``; ``ValueError`` otherwise."""
    try:
        parsed = urlsplit(url)
        port = parsed.port or 6379
    except ValueError:
        raise ValueError(f"the responses store must be redis://[:PASSWORD@]HOST[:PORT][/DB], got {url!r}") from None
    if parsed.scheme != "redis" or not parsed.hostname:
        raise ValueError(f"the responses store must be redis://[:PASSWORD@]HOST[:PORT][/DB], got {url!r}")
    path = parsed.path.strip("/")
    if path and not path.isdigit():
        raise ValueError(f"the Redis database in {url!r} must be a number")
    return parsed.hostname, port, int(path or 0), parsed.password


class RedisStore:
    """Responses shared by every front end pointed at one Redis (``redis://HOST:PORT/DB``): each
    record a key ``tokenwire:response:<id>`` holding its JSON, expiring after :data:`MAX_AGE_S`;
    the count and bytes are bounded by Redis' own ``maxmemory`` (docs/responses.md, "The store").
    One connection, one command at a time, reconnected after an error; RESP spoken directly."""

    def __init__(self, url: str, *, max_age_s: float = MAX_AGE_S, timeout: float = 5.0) -> None:
        self.host, self.port, self.db, self.password = check_store_url(url)
        self.max_age_s = max_age_s
        self.timeout = timeout
        self._reader: asyncio.StreamReader | None = None
        self._writer: asyncio.StreamWriter | None = None
        self._lock = asyncio.Lock()

    def limits(self) -> dict[str, Any]:
        return {"kind": "redis", "address": f"{self.host}:{self.port}/{self.db}", "max_age_s": self.max_age_s,
                "max_record_bytes": MAX_RECORD_BYTES}

    async def put(self, response_id: str, record: dict[str, Any]) -> None:
        data = orjson.dumps(record)
        if len(data) > MAX_RECORD_BYTES:
            await self.delete(response_id)
            return
        await self._command(b"SET", (REDIS_PREFIX + response_id).encode(), data, b"PX",
                            str(int(self.max_age_s * 1000)).encode())

    async def get(self, response_id: str) -> dict[str, Any] | None:
        data = await self._command(b"GET", (REDIS_PREFIX + response_id).encode())
        if data is None:
            return None
        record: dict[str, Any] = orjson.loads(data)
        return record

    async def delete(self, response_id: str) -> bool:
        return bool(await self._command(b"DEL", (REDIS_PREFIX + response_id).encode()))

    async def close(self) -> None:
        self._drop()

    # --- RESP ---------------------------------------------------------------------------------
    async def _command(self, *args: bytes) -> Any:
        async with self._lock:
            for attempt in (0, 1):
                try:
                    return await asyncio.wait_for(self._send(args), self.timeout)
                except (OSError, EOFError, asyncio.IncompleteReadError, TimeoutError) as exc:
                    self._drop()
                    if attempt:
                        raise StoreUnavailable(f"the responses store (Redis at {self.host}:{self.port}) did not "
                                               f"answer: {type(exc).__name__}") from None
        raise AssertionError("unreachable")

    async def _send(self, args: tuple[bytes, ...]) -> Any:
        if self._writer is None:
            self._reader, self._writer = await asyncio.open_connection(self.host, self.port)
            if self.password:
                await self._roundtrip((b"AUTH", self.password.encode()))
            if self.db:
                await self._roundtrip((b"SELECT", str(self.db).encode()))
        return await self._roundtrip(args)

    async def _roundtrip(self, args: tuple[bytes, ...]) -> Any:
        assert self._writer is not None
        self._writer.write(b"*%d\r\n" % len(args) + b"".join(b"$%d\r\n%s\r\n" % (len(a), a) for a in args))
        await self._writer.drain()
        return await self._reply()

    async def _reply(self) -> Any:
        assert self._reader is not None
        line = await self._reader.readline()
        if not line.endswith(b"\r\n"):
            raise EOFError("the connection closed")
        kind, rest = line[:1], line[1:-2]
        if kind == b"+":
            return rest.decode()
        if kind == b"-":
            raise StoreUnavailable(f"the responses store (Redis) refused a command: {rest.decode()[:200]}")
        if kind == b":":
            return int(rest)
        if kind == b"$":
            size = int(rest)
            if size < 0:
                return None
            data = await self._reader.readexactly(size + 2)
            return data[:-2]
        if kind == b"*":
            return [await self._reply() for _ in range(max(0, int(rest)))]
        raise EOFError(f"an unexpected Redis reply {line[:20]!r}")

    def _drop(self) -> None:
        if self._writer is not None:
            self._writer.close()
        self._reader = self._writer = None


def store_from(url: str | None) -> ResponseStore:
    """The store a setting names: none (the embedded store) or ``redis://…``."""
    if not url:
        return MemoryStore()
    return RedisStore(url)
