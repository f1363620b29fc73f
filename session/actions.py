"""What the session machine asks the I/O layer to do (``Session.actions()``), in order.

Every ``Start*`` must be answered, exactly once, by one terminal report for its ``id`` (``done``,
``failed`` or ``aborted``), after any number of deltas (generate and pipeline requests only).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from session.client_frames import Kind, PipelineKind
from session.server_frames import ServerFrame


@dataclass(frozen=True, slots=True)
class Send:
    """Write ``frame`` (stamp it with :meth:`Session.stamp` at write time). Delta frames of one
    request may be merged with ``frame.merge`` while they wait."""

    frame: ServerFrame


@dataclass(frozen=True, slots=True)
class StartRender:
    id: str
    kind: Kind
    body: dict[str, Any]


@dataclass(frozen=True, slots=True)
class StartGenerate:
    id: str
    body: dict[str, Any]


@dataclass(frozen=True, slots=True)
class StartDerender:
    id: str
    kind: Kind
    body: dict[str, Any]


@dataclass(frozen=True, slots=True)
class StartPipeline:
    id: str
    kind: PipelineKind
    body: dict[str, Any]
    resume: dict[str, Any] | None
    checkpoints: bool


@dataclass(frozen=True, slots=True)
class Cancel:
    """Stop the work of request ``id`` now (abort it at the engine); report it as aborted."""

    id: str


@dataclass(frozen=True, slots=True)
class Close:
    """Stop all work and close the socket with ``code``; ``reason`` is fixed text."""

    code: int
    reason: str


Start = StartRender | StartGenerate | StartDerender | StartPipeline
Action = Send | StartRender | StartGenerate | StartDerender | StartPipeline | Cancel | Close
