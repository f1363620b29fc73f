"""The narrow engine seam: token ids and sampling params in, token-id deltas out.

An :class:`Engine` has a few async methods. ``generate`` returns an :class:`EngineStream`: an
async iterator of :class:`EngineOutput` — one per engine step that produced tokens for this
request — whose last item has ``finished=True`` and the usage, or, the other way in, a source that
hands each output to a callback as it arrives (:meth:`EngineStream.listen`: every stream can be
listened to; one fed by the engine's delivery on the event loop wakes no task per output). A
:class:`StreamMeter` set with :meth:`EngineStream.measure` sees every output either way (the
server's per-token metrics). Closing the stream before that
(``aclose()``, ``async with``) aborts the request at the engine and frees its memory, with the one
close behaviour every engine shares (:meth:`EngineStream.aclose`, docs/engine.md "Closing a
stream"); ``abort`` does the same by id from elsewhere (e.g. ``POST /abort_requests``).

Implementations: ``engine.local.LocalEngine`` (torch + transformers, continuous batching),
``engine.remote.RemoteEngine`` (HTTP to any vLLM-compatible tokens-only engine), and test doubles.
"""

from __future__ import annotations

import abc
import logging
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any, Protocol

import anyio

from engine.protocol import GenerateRequest, TokenLogprob, UsageInfo

log = logging.getLogger("tokenwire.engine")

ABORT_GRACE_S = 5.0  # how long closing a stream (the abort at the engine) may take


@dataclass(slots=True)
class ChoiceDelta:
    """New tokens of one choice (``index`` < n) in one engine step."""

    index: int
    token_ids: list[int]
    logprobs: list[TokenLogprob] | None = None
    finish_reason: str | None = None
    stop_reason: int | str | None = None


@dataclass(slots=True)
class EngineOutput:
    """One step's output for one request. ``finished`` marks the last one; it carries ``usage``."""

    request_id: str
    choices: list[ChoiceDelta]
    finished: bool = False
    usage: UsageInfo | None = None


@dataclass(slots=True)
class EngineHealth:
    ok: bool
    detail: str = ""
    stats: dict[str, Any] = field(default_factory=dict)


class StreamMeter(Protocol):
    """What measures one engine stream (``server.metrics``): every output as the engine delivers
    it, and the close."""

    def output(self, out: EngineOutput) -> None: ...

    def closed(self) -> None: ...


class EngineStream(abc.ABC):
    """One engine request's outputs (what :meth:`Engine.generate` returns): iterate it, or
    :meth:`listen` to it, once; close it once done or left, in a ``finally`` or with ``async with``.

    :meth:`aclose` is the one way an engine stream closes: an unfinished request is aborted at the
    engine (:meth:`_close`, per engine), shielded from the closing task's cancellation (a client that
    disconnects cancels the task that must abort its request) and bounded by :data:`ABORT_GRACE_S`;
    a failure or an expired grace is logged, never raised (closing runs in ``finally`` blocks, where
    it must not replace the error being handled); a second call does nothing. Iterating a closed
    stream ends it."""

    __slots__ = ("_closed", "_meter")

    def __init__(self) -> None:
        self._closed = False
        self._meter: StreamMeter | None = None

    def __aiter__(self) -> EngineStream:
        return self

    @abc.abstractmethod
    async def __anext__(self) -> EngineOutput:
        """The next output (each one shown to the meter)."""

    async def listen(self, on_output: Callable[[EngineOutput], bool]) -> None:
        """Hand each output to ``on_output`` as it arrives, until the last one or until
        ``on_output`` returns True (it needs no more: a stop string); return then. The stream's
        error, or ``on_output``'s, is raised here. The caller still closes the stream (which
        aborts what the engine has not finished). This default reads :meth:`__anext__`; a stream
        fed on the event loop overrides it to call ``on_output`` from that delivery
        (``engine.outbox.OutboxStream``)."""
        async for out in self:
            if on_output(out) or out.finished:
                return

    def measure(self, meter: StreamMeter) -> None:
        """Show every output to ``meter`` as it arrives, and the close; before the first read."""
        self._meter = meter

    @abc.abstractmethod
    async def _close(self) -> None:
        """Abort the request at the engine unless it finished, and release what the stream holds."""

    @property
    def closed(self) -> bool:
        return self._closed

    async def aclose(self) -> None:
        if self._closed:
            return
        self._closed = True
        if self._meter is not None:
            self._meter.closed()
        with anyio.move_on_after(ABORT_GRACE_S, shield=True) as scope:
            try:
                await self._close()
            except Exception as exc:  # the request is gone either way; the caller's own error wins
                log.warning("closing an engine stream failed: %s: %s", type(exc).__name__, exc)
        if scope.cancelled_caught:
            log.warning("closing an engine stream took more than %g s; the engine may still run it",
                        ABORT_GRACE_S)

    async def __aenter__(self) -> EngineStream:
        return self

    async def __aexit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                        tb: TracebackType | None) -> None:
        await self.aclose()


class IteratorStream(EngineStream):
    """An :class:`EngineStream` over an async iterator of outputs (an async generator whose
    ``finally`` aborts what has not finished, as :class:`engine.remote.RemoteEngine`'s does, or a
    test double's)."""

    __slots__ = ("_outputs",)

    def __init__(self, outputs: AsyncIterator[EngineOutput]) -> None:
        super().__init__()
        self._outputs = outputs

    async def __anext__(self) -> EngineOutput:
        if self._closed:
            raise StopAsyncIteration
        out = await self._outputs.__anext__()
        if self._meter is not None:
            self._meter.output(out)
        return out

    async def _close(self) -> None:
        aclose = getattr(self._outputs, "aclose", None)
        if aclose is not None:
            await aclose()


class Engine(abc.ABC):
    """Token-in / token-out generation. Never sees text, templates or tools."""

    model_name: str
    max_model_len: int

    @abc.abstractmethod
    def generate(self, request: GenerateRequest) -> EngineStream:
        """Start ``request``; the stream yields its outputs as they are produced. The caller
        closes it (:meth:`EngineStream.aclose`), which aborts the request if it has not finished.

        Raises :class:`engine.errors.EngineError` subclasses (at the first item for admission and
        validation errors).
        """

    @abc.abstractmethod
    async def abort(self, request_ids: Sequence[str]) -> None:
        """Abort requests by id; unknown ids are ignored."""

    @abc.abstractmethod
    async def health(self) -> EngineHealth: ...

    async def start(self) -> None:  # noqa: B027 - optional hook
        """Load weights / open connections. Called once before serving."""

    async def close(self) -> None:  # noqa: B027 - optional hook
        """Abort everything and release resources."""

    def live_sequences(self) -> int:
        """Number of sequences holding engine memory right now (0 when idle)."""
        return 0
