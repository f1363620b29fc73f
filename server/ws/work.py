"""Carry out one ``Start*`` action of the session against the pipeline's stages, reporting as it goes
(``Reporter``) with the shapes the HTTP endpoints give for the same inputs; streams are always
closed on the way out, which aborts their engine work. What each action reports: docs/serve.md,
"How a request flows".
"""

from __future__ import annotations

import secrets
from collections.abc import AsyncIterator, Callable
from typing import Any, Protocol, TypeVar

import anyio

from engine.interface import EngineOutput
from engine.protocol import GenerateRequest, generate_response_id
from server.generate_output import GenerateOutputs
from server.pipeline.stream import StreamEvent  # one event type for SSE and the session
from session.actions import Start, StartDerender, StartGenerate, StartPipeline, StartRender
from session.client_frames import Kind

T_co = TypeVar("T_co", covariant=True)


class Closing(Protocol[T_co]):
    """A stream its reader closes on the way out, in a ``finally`` (an engine stream, or a pipeline
    stream over one: closing it aborts the engine work that has not finished)."""

    def __aiter__(self) -> Closing[T_co]: ...

    async def __anext__(self) -> T_co: ...

    async def aclose(self) -> None: ...


class Stages(Protocol):
    """What a session drives (``server.ws.stages.PipelineStages`` over ``server.pipeline``)."""

    async def render(self, kind: Kind, body: dict[str, Any]) -> list[GenerateRequest]: ...

    def generate(self, request: GenerateRequest) -> Closing[EngineOutput]: ...

    async def derender_step(self, kind: Kind, body: dict[str, Any]) -> dict[str, Any]: ...

    def stream(self, kind: Kind, body: dict[str, Any], *, resume: dict[str, Any] | None = None,
               checkpoints: bool = False) -> Pushed: ...

    async def open_response(self, body: dict[str, Any]) -> Events:
        """A Responses request validated, rendered and admitted (errors raise here, before any
        event): its Responses stream events, each a dict, as SSE sends them."""
        ...


class Events(Protocol):
    """The Responses events of one opened response (``server.responses.ResponseStream``)."""

    def events(self) -> AsyncIterator[dict[str, Any]]: ...


class Pushed(Protocol):
    """A whole pipeline's events, pushed (``server.ws.stages.SessionStream``): :meth:`listen`
    opens it (admission errors raise there), reports its events as they are made and returns
    once it ended; :meth:`aclose`, in a ``finally``, aborts the engine work not finished."""

    async def listen(self, on_events: Callable[[list[StreamEvent]], None]) -> None: ...

    async def aclose(self) -> None: ...


class Reporter(Protocol):
    """The session's work inputs, bound to the clock (see ``session.machine.Session``)."""

    def generate_delta(self, request_id: str, chunk: dict[str, Any]) -> None: ...

    def pipeline_events(self, request_id: str, *, resumable: bool) -> Callable[[list[StreamEvent]], None]:
        """The function that sends a pipeline request's events as its delta frames (once per token);
        ``resumable``: with their checkpoints, output ids and stream id."""
        ...

    def done(self, request_id: str, *, result: Any = None, usage: dict[str, Any] | None = None) -> None: ...


async def run(start: Start, pipeline: Stages, report: Reporter) -> None:
    """Run ``start`` to completion, reporting deltas and the final result. Exceptions propagate
    (the caller translates them once); cancellation aborts the work."""
    if isinstance(start, StartRender):
        requests = await pipeline.render(start.kind, start.body)
        wire = [r.to_wire() for r in requests]
        report.done(start.id, result=wire if start.kind == "completion" else wire[0])
    elif isinstance(start, StartDerender):
        report.done(start.id, result=await pipeline.derender_step(start.kind, start.body))
    elif isinstance(start, StartGenerate):
        await _generate(start, pipeline, report)
    elif start.kind == "response":
        await _response(start, pipeline, report)
    else:
        await _pipeline(start, pipeline, report)


async def _generate(start: StartGenerate, pipeline: Stages, report: Reporter) -> None:
    request = GenerateRequest.model_validate(start.body)
    if request.request_id is None:  # as /inference/v1/generate does
        request = request.model_copy(update={"request_id": secrets.token_hex(8)})
    outputs = GenerateOutputs(request, generate_response_id(request.request_id or ""))
    stream = pipeline.generate(request)
    try:
        async for output in stream:
            chunk = outputs.chunk(output)
            if chunk is not None:
                report.generate_delta(start.id, chunk)
            if output.finished:
                break
    finally:
        await stream.aclose()
    report.done(start.id, usage=outputs.usage.model_dump(mode="json", exclude_none=True))


async def _pipeline(start: StartPipeline, pipeline: Stages, report: Reporter) -> None:
    kind = start.kind
    assert kind != "response", "a response frame runs _response"
    stream = pipeline.stream(kind, start.body, resume=start.resume, checkpoints=start.checkpoints)
    try:
        await stream.listen(report.pipeline_events(start.id, resumable=start.checkpoints))
    finally:
        await stream.aclose()  # aborts what the engine has not finished (a stop string, a cancel)
    report.done(start.id)


async def _response(start: StartPipeline, pipeline: Stages, report: Reporter) -> None:
    """A ``response`` frame: the Responses service's own events (the generator SSE and the Responses
    WebSocket mode read), one per delta; closing them aborts the engine work."""
    opened = await pipeline.open_response(start.body)
    events = opened.events()
    send = report.pipeline_events(start.id, resumable=False)
    try:
        async for event in events:
            send([StreamEvent(event)])
    finally:
        with anyio.CancelScope(shield=True):  # a cancel: still abort the engine work and settle the store
            await events.aclose()  # type: ignore[attr-defined]
    report.done(start.id)
