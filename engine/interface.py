"""The narrow engine seam: token ids and sampling params in, token-id deltas out.

An :class:`Engine` has a few async methods. ``generate`` is an async iterator of
:class:`EngineOutput` — one per engine step that produced tokens for this request — whose last
item has ``finished=True`` and the usage. Leaving the iteration early (``break``, cancellation,
``aclose()``) aborts the request at the engine and frees its memory; ``abort`` does the same by id
from elsewhere (e.g. ``POST /abort_requests``).

Implementations: ``engine.local.LocalEngine`` (torch + transformers, continuous batching),
``engine.remote.RemoteEngine`` (HTTP to any vLLM-compatible tokens-only engine), and test doubles.
"""

from __future__ import annotations

import abc
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from engine.protocol import GenerateRequest, TokenLogprob, UsageInfo


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


class Engine(abc.ABC):
    """Token-in / token-out generation. Never sees text, templates or tools."""

    model_name: str
    max_model_len: int

    @abc.abstractmethod
    def generate(self, request: GenerateRequest) -> AsyncIterator[EngineOutput]:
        """Start ``request`` and yield its outputs as they are produced.

        Raises :class:`engine.errors.EngineError` subclasses (before the first item for
        admission and validation errors).
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
