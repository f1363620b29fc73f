"""The stages a session drives, over the process's pipeline and derender service.

``server.pipeline`` is the one package that chains render → generate → derender; this adapter only
gives the session one object with the five operations its frames need, each the same call the
matching HTTP endpoint makes (so a frame's output equals the endpoint's for the same input):

- ``render`` / ``generate``: the pipeline's separate stages;
- ``derender_step``: the derender service's streaming step (``DerenderService.step``, which the
  HTTP derender routes call with ``"stream": true``; large bodies on a worker thread);
- ``stream``: the whole pipeline, admitted before the first event (so admission errors are error
  frames), closed — and the engine request aborted — when the iterator is closed;
- ``open_response``: the Responses service's stream (``ResponsesService.open_stream``, what
  ``POST /v1/responses`` streams), for ``response`` frames.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import anyio.to_thread

from engine.interface import EngineStream
from engine.protocol import GenerateRequest
from server.pipeline import Pipeline
from server.pipeline.stream import PipelineStream, StreamEvent
from server.render_work import json_size
from server.responses import ResponsesService, ResponseStream
from session.client_frames import Kind
from session.derender import INLINE_BODY_BYTES, DerenderService


class PipelineStages:
    """Built once, at start-up, by ``server/services.py``; ``derender`` is None where the derender
    frames are not served (the session refuses those frames before they get here)."""

    def __init__(self, pipeline: Pipeline, derender: DerenderService | None,
                 responses: ResponsesService | None = None) -> None:
        self.pipeline = pipeline
        self.derender = derender
        self.responses = responses

    async def render(self, kind: Kind, body: dict[str, Any]) -> list[GenerateRequest]:
        return await self.pipeline.render(kind, body)

    def generate(self, request: GenerateRequest) -> EngineStream:
        return self.pipeline.generate(request)

    async def derender_step(self, kind: Kind, body: dict[str, Any]) -> dict[str, Any]:
        service = self.derender
        assert service is not None, "derender frames are gated with the derender routes"
        if json_size(body, INLINE_BODY_BYTES) > INLINE_BODY_BYTES:
            return await anyio.to_thread.run_sync(lambda: service.step(kind, body, now=int(time.time())))
        return service.step(kind, body, now=int(time.time()))

    def stream(self, kind: Kind, body: dict[str, Any], *, resume: dict[str, Any] | None = None,
               checkpoints: bool = False) -> SessionStream:
        return SessionStream(self.pipeline, kind, body, resume=resume, checkpoints=checkpoints)

    async def open_response(self, body: dict[str, Any]) -> ResponseStream:
        """The Responses service's stream, as ``POST /v1/responses`` with ``stream: true`` opens it."""
        assert self.responses is not None, "response frames are gated with the pipeline routes"
        return await self.responses.open_stream(body)


class SessionStream:
    """A whole pipeline as a session runs it: :meth:`listen` renders and admits (so admission
    errors come before any event), then reports the events as the engine delivers the outputs
    (:meth:`PipelineStream.listen`: no task woken per step); ``aclose`` aborts."""

    def __init__(self, pipeline: Pipeline, kind: Kind, body: dict[str, Any], *, resume: dict[str, Any] | None,
                 checkpoints: bool) -> None:
        self._args = (kind, body, resume, checkpoints)
        self._pipeline = pipeline
        self._opened: PipelineStream | None = None

    async def listen(self, on_events: Callable[[list[StreamEvent]], None]) -> None:
        kind, body, resume, checkpoints = self._args
        self._opened = await self._pipeline.open_stream(kind, body, resume=resume, checkpoints=checkpoints)
        await self._opened.listen(on_events)

    async def aclose(self) -> None:
        if self._opened is not None:
            await self._opened.aclose()
