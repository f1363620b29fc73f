"""The events of one streaming pipeline (:class:`PipelineStream`), opened by ``chain.Pipeline``.

What each engine output becomes is decided in one place, :meth:`PipelineStream.feed` (with
``start`` / ``finish`` for the events around the outputs). A stream is consumed two ways over it:
iterated (``stream_events``: SSE), or pushed (:meth:`PipelineStream.listen`, the WebSocket session:
``feed`` runs inside the engine's own delivery on the event loop, so no task is woken per request
per engine step). Resumable streams sign a checkpoint per event (``checkpoint.Checkpoints``).
docs/serve.md, "How a request flows".
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncGenerator, AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any

import anyio
from anyio.abc import TaskGroup
from anyio.streams.memory import MemoryObjectSendStream

from engine.interface import Engine, EngineOutput, EngineStream
from server import metrics
from server.pipeline.checkpoint import Checkpoints, OutputDigest, Resumed
from server.pipeline.prepare import Prepared
from session.derender import ChatDerenderer, CompletionDerenderer
from session.derender.anthropic_out import MessageStream
from session.derender.chat import usage_dict


@dataclass(slots=True)
class StreamEvent:
    """One thing to send: an OpenAI chunk dict, or an Anthropic event dict for ``messages`` (the
    same object on SSE and in a WebSocket session's delta frames)."""

    payload: dict[str, Any]
    index: int = 0  # choice index the output ids belong to
    output_token_ids: list[int] = field(default_factory=list)  # engine ids this event covers
    checkpoint: str | None = None  # signed derender state after this event (checkpoints=True)
    done: bool = False
    stream_id: str | None = None  # the id a resume names (the stream's request id)


class PipelineStream:
    """The events of one streaming pipeline. Iterate :meth:`stream_events` (or :meth:`events` for
    bare payloads) exactly once, inside ``async with stream.running()``; closing the iterator aborts
    the engine work. ``checkpoints`` signs one per event (None: a stream without checkpoints);
    ``resumed``: where a resumed stream starts."""

    def __init__(self, engine: Engine, prep: Prepared, *, model_name: str, checkpoints: Checkpoints | None,
                 resumed: Resumed | None = None) -> None:
        self.engine = engine
        self.prep = prep
        self.model_name = model_name
        self.checkpoints = checkpoints
        self.offset = resumed.offset if resumed is not None else 0  # output ids so far (first request)
        # a resumed messages stream's Anthropic event state (``start`` continues it)
        self._resume_events = resumed.events if resumed is not None else None
        self._runs: list[_EngineRun] = []
        self._tasks: TaskGroup | None = None  # where several runs' pumps run (:meth:`running`)
        self._anthropic: MessageStream | None = None
        self._pending: dict[tuple[int, int], list[int]] = {}  # engine ids not yet covered by an event
        self._done_runs: set[int] = set()  # runs whose output is complete (finished, or a stop string)
        self._finish: tuple[str | None, Any] = (None, None)  # an Anthropic stream's finish reason
        self._digest = resumed.digest if resumed is not None else OutputDigest()  # of the output ids so far
        self._stream_id = prep.requests[0].request_id or ""
        self._n = [r.sampling_params.n for r in prep.requests]
        self._bases = [getattr(d, "index_base", 0) for d in prep.derenderers]  # choice index offsets

    @property
    def request_id(self) -> str:
        return self._stream_id

    async def admit(self) -> None:
        """Start every engine request and wait for its first output, so admission errors raise
        here (before the caller commits to a stream)."""
        engine = self.engine
        try:
            for req in self.prep.requests:
                run = _EngineRun(metrics.generate(engine, req))
                self._runs.append(run)
                await run.prime()
        except BaseException:
            await self.aclose()
            raise

    async def aclose(self) -> None:
        for run in self._runs:
            await run.aclose()

    @contextlib.asynccontextmanager
    async def running(self) -> AsyncIterator[None]:
        """The task group that reads several engine requests at once (a completion over several
        prompts), owned by the task that reads this stream: iterate :meth:`stream_events` inside
        it. Leaving it stops every read; one engine request needs no task at all."""
        if len(self._runs) < 2:
            yield
            return
        async with anyio.create_task_group() as tasks:
            self._tasks = tasks
            try:
                yield
            finally:
                self._tasks = None
                tasks.cancel_scope.cancel()

    async def events(self) -> AsyncIterator[dict[str, Any]]:
        agen = self.stream_events()
        try:
            async for ev in agen:
                yield ev.payload
        finally:
            await agen.aclose()

    async def stream_events(self) -> AsyncGenerator[StreamEvent]:
        try:
            for ev in self.start():
                yield ev
            async for k, out in _merge(self._runs, self._tasks):
                for ev in self.feed(k, out):
                    yield ev
                for run in self._finished_runs():
                    await run.aclose()
            for ev in self.finish():
                yield ev
        finally:
            await self.aclose()

    # --- the stream as steps: one place for what each engine output becomes --------------------
    def start(self) -> list[StreamEvent]:
        """The events before any output (an Anthropic stream's ``message_start``)."""
        prep = self.prep
        if prep.kind != "messages":
            return []
        assert prep.messages is not None
        shape = {"model": self.model_name, "input_tokens": len(prep.requests[0].token_ids) - self.offset,
                 "stop_sequences": list(prep.messages.stop_sequences or [])}
        if self._resume_events is not None:  # continue the interrupted event sequence
            self._anthropic = MessageStream.restore(self._resume_events, **shape)  # type: ignore[arg-type]
            return []
        self._anthropic = MessageStream(**shape)  # type: ignore[arg-type]
        return [StreamEvent(ev, stream_id=self._stream_id) for ev in self._anthropic.start()]

    def feed(self, k: int, out: EngineOutput) -> list[StreamEvent]:
        """The events one engine output of run ``k`` gives. A run whose output is complete (its
        choices finished, or a stop string seen) is listed by :meth:`_finished_runs` afterwards.
        This runs once per token of every stream: it does no more than the step needs."""
        if self.prep.kind == "messages":
            return self._feed_messages(out)
        events: list[StreamEvent] = []
        d = self.prep.derenderers[k]
        pending = self._pending
        for c in out.choices:
            step = d.push(c.index, c.token_ids, c.logprobs, c.finish_reason, c.stop_reason)
            key = (k, c.index)
            held = pending.pop(key, None)  # ids of earlier outputs that gave no chunk
            ids = list(c.token_ids) if held is None else held + c.token_ids
            if step.stop_engine and self._n[k] == 1:
                self._done_runs.add(k)
            if step.finished and _finished(d):  # the last choice of this run finished
                self._done_runs.add(k)
            if step.chunk is None:
                pending[key] = ids
                continue
            checkpoint = self._checkpoint(k, c.index, ids) if self.checkpoints is not None else None
            events.append(StreamEvent(step.chunk, c.index + self._bases[k], ids, checkpoint,
                                      stream_id=self._stream_id))
        return events

    def _feed_messages(self, out: EngineOutput) -> list[StreamEvent]:
        d, ms = self.prep.derenderers[0], self._anthropic
        assert ms is not None
        events: list[StreamEvent] = []
        pending = self._pending.setdefault((0, 0), [])
        for c in out.choices:
            step = d.push(c.index, c.token_ids, c.logprobs, c.finish_reason, c.stop_reason)
            pending.extend(c.token_ids)
            if step.stop_engine:
                self._done_runs.add(0)
            if step.chunk is None:
                continue
            choice = step.chunk["choices"][0]
            if choice.get("finish_reason") is not None:
                self._finish = (choice["finish_reason"], choice.get("stop_reason"))
            evs = ms.push(step.chunk)
            if not evs:
                continue  # nothing to send yet: these ids ride with the next event
            ids, pending = pending, []
            self._pending[(0, 0)] = pending
            # The ids and the checkpoint ride on the chunk's last event: a client holding a
            # checkpoint has received every event it covers.
            checkpoint = self._checkpoint(0, c.index, ids, events=ms.snapshot())
            events += [StreamEvent(ev, stream_id=self._stream_id) for ev in evs[:-1]]
            events.append(StreamEvent(evs[-1], output_token_ids=ids, checkpoint=checkpoint, stream_id=self._stream_id))
        if _finished(d):
            self._done_runs.add(0)
        return events

    def finish(self) -> list[StreamEvent]:
        """The events after the last output (usage chunk, Anthropic ``message_delta`` / ``message_stop``)."""
        if self.prep.kind == "messages":
            assert self._anthropic is not None
            reason, stop_reason = self._finish
            d = self.prep.derenderers[0]
            return [StreamEvent(ev, done=ev["type"] == "message_stop", stream_id=self._stream_id)
                    for ev in self._anthropic.finish(finish_reason=reason, stop_reason=stop_reason,
                                                     output_tokens=d.completion_tokens)]
        return [StreamEvent(self._usage_chunk(), stream_id=self._stream_id)] if self.prep.include_usage else []

    def _finished_runs(self) -> list[_EngineRun]:
        return [self._runs[k] for k in self._done_runs if not self._runs[k].closed]

    # --- the push path: outputs handed over on the event loop, no task woken per output -------
    async def listen(self, on_events: Callable[[list[StreamEvent]], None]) -> None:
        """Report every event to ``on_events`` as the engine delivers the outputs (the start
        events first); return once the stream ended, raising its error (or ``on_events``'s). One
        engine request is listened to (:meth:`engine.interface.EngineStream.listen`: derender
        runs inside the engine's own delivery); several are read inside :meth:`running`. The
        caller still closes the stream (:meth:`aclose`), which aborts unfinished engine work."""
        if len(self._runs) != 1:
            async with self.running():
                async for ev in self.stream_events():
                    on_events([ev])
            return
        feed, run, done_runs = self.feed, self._runs[0], self._done_runs
        ended: list[bool] = []

        def output(out: EngineOutput) -> bool:  # once per engine output (per token)
            events = feed(0, out)
            done = out.finished or bool(done_runs)
            if done:
                ended.append(True)
                events += self.finish()
            if events:
                on_events(events)
            return done

        head = self.start()
        if head:
            on_events(head)
        first, run.first = run.first, None
        if first is not None and output(first):
            return
        await run.agen.listen(output)
        if not ended:  # the engine stream ended without a finished output
            tail = self.finish()
            if tail:
                on_events(tail)

    def _usage_chunk(self) -> dict[str, Any]:
        ds = self.prep.derenderers
        if len(ds) == 1:
            return ds[0].usage_chunk()
        prompt = sum(d.prompt_tokens for d in ds)
        completion = sum(d.completion_tokens for d in ds)
        return ds[0].usage_chunk(usage_dict(prompt, completion))

    def _checkpoint(self, k: int, index: int, ids: list[int], *, events: dict[str, Any] | None = None) -> str | None:
        if self.checkpoints is None or k != 0 or self.prep.requests[0].sampling_params.n != 1:
            return None
        self.offset += len(ids)
        self._digest.update(ids)
        return self.checkpoints.sign(self.prep, index, self.offset, self._digest, events=events)


def _finished(d: ChatDerenderer | CompletionDerenderer) -> bool:
    return all(s.finished for s in d.streams.values())


class _EngineRun:
    """One engine request's output stream, primed with its first output."""

    def __init__(self, agen: EngineStream) -> None:
        self.agen = agen
        self.first: EngineOutput | None = None
        self.closed = False

    async def prime(self) -> None:
        try:
            self.first = await self.agen.__anext__()
        except StopAsyncIteration:
            self.first = None
            await self.aclose()

    async def outputs(self) -> AsyncIterator[EngineOutput]:
        if self.first is not None:
            first, self.first = self.first, None
            yield first
        while not self.closed:
            try:
                out = await self.agen.__anext__()
            except StopAsyncIteration:
                return
            yield out

    async def aclose(self) -> None:
        if not self.closed:
            self.closed = True
            await self.agen.aclose()  # shielded, bounded, never raising: as every engine stream closes


async def _merge(runs: list[_EngineRun], tasks: TaskGroup | None) -> AsyncIterator[tuple[int, EngineOutput]]:
    """Interleave the runs' outputs as they arrive. One run is read directly. Several are read
    by one pump each, started in ``tasks`` (:meth:`PipelineStream.running`: the reader's own task
    group, so the pumps never outlive it). A pump stops when its run is closed (finished, or a
    stop string seen), and every pump stops when the reader leaves."""
    if len(runs) == 1:
        async for out in runs[0].outputs():
            yield 0, out
        return
    if tasks is None:
        raise RuntimeError("a stream over several engine requests is read inside `async with stream.running()`")
    send, receive = anyio.create_memory_object_stream[tuple[int, EngineOutput | Exception]](len(runs))
    scopes = [anyio.CancelScope() for _ in runs]
    for k in range(len(runs)):
        tasks.start_soon(_pump, runs[k], k, scopes[k], send.clone())
    send.close()
    try:
        async with receive:
            async for k, item in receive:
                if runs[k].closed:
                    continue  # arrived while the reader closed its run (its abort may end it in an error)
                if isinstance(item, Exception):
                    raise item
                yield k, item
                for run, scope in zip(runs, scopes, strict=True):
                    if run.closed:
                        scope.cancel()  # the reader closed it on this output: its pump is done
                if all(run.closed for run in runs):
                    return
    finally:
        for scope in scopes:
            scope.cancel()


async def _pump(run: _EngineRun, k: int, scope: anyio.CancelScope,
                send: MemoryObjectSendStream[tuple[int, EngineOutput | Exception]]) -> None:
    """Forward one run's outputs (or the error that ends it) to the merge. Never raises: a pump's
    error would cancel its reader's task group, so it travels as an item instead."""
    with scope, send:
        try:
            async for out in run.outputs():
                await send.send((k, out))
        except anyio.BrokenResourceError:
            pass  # the reader left
        except Exception as exc:
            with contextlib.suppress(anyio.BrokenResourceError):
                await send.send((k, exc))
