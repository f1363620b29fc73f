"""The one place that chains render → generate → derender.

Every full pipeline (OpenAI ``/v1/chat/completions`` and ``/v1/completions``, Anthropic
``/v1/messages``, JSON and SSE, and the WebSocket ``chat`` / ``completion`` / ``messages`` frames)
runs through :class:`Pipeline`:

1. validate the body and render it (the template and tokenizer run on a worker thread);
2. admit the engine request(s) — admission and validation errors surface here, before any byte of
   a stream is sent, so they are ordinary HTTP errors / error frames;
3. per engine step, push the new token ids through the in-memory incremental derenderer (O(step),
   on the event loop: a step costs microseconds, less than a thread hop) and emit what became
   certain; when derender detects a stop string, the engine request is stopped at once.

What each engine output becomes is decided in one place, :meth:`PipelineStream.feed` (with
``start`` / ``finish`` for the events around the outputs). Streams are consumed two ways over it:
iterated (``stream_events``: SSE, and any engine), or, for a WebSocket session in front of an
engine stream that can hand its outputs over on the event loop (the engine link), *step-wise*:
:meth:`PipelineStream.listen` runs ``feed`` inside the engine's own delivery and reports the
events at once, so no task is woken per request per engine step.

Leaving a stream early (client gone, ``cancel``) closes the engine iterator, which aborts the
request at the engine and frees its memory.

Resumable streams (WebSocket): with ``checkpoints=True`` every event carries a signed checkpoint
of the derender state and the output token ids it covers. The checkpoint holds the count and a
digest of *all* output ids up to it (:class:`OutputDigest`), so a resume must send exactly the ids
the stream produced: any altered, added or missing id is ``bad_state``. A stream resumed with that
checkpoint and the output ids received so far re-renders the prompt, continues generation from
prompt + output with the remaining budget (``extra_args.output_offset`` tells the engine how many
output tokens came before, so seeded sampling continues identically), and derenders from the
checkpoint.
"""

from __future__ import annotations

import array
import asyncio
import base64
import contextlib
import hashlib
import time
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import anyio.to_thread

from engine.errors import EngineUnavailable
from engine.interface import Engine, EngineOutput
from engine.protocol import GenerateRequest, GenerateResponse, UsageInfo
from server import metrics
from server.context import ServerContext
from server.http import validate
from server.routes.derender import state_codec_of
from server.routes.render import renderer_of
from session.anthropic_out import MessageStream, message_from_chat
from session.derender import (
    ChatDerenderer,
    CompletionDerenderer,
    chat_derenderer,
    chat_response,
    completion_derenderer,
    completion_response,
)
from session.derender.chat import usage_dict
from session.derender.choice import ChoiceStream
from session.errors import InvalidRequest, StateError
from session.protocol.anthropic import MessagesRequest
from session.protocol.openai import ChatCompletionRequest, CompletionRequest
from session.render.anthropic import to_openai_chat
from session.state import StateBinding, StateCodec, context_digest

Kind = Literal["chat", "completion", "messages"]
KINDS: tuple[Kind, ...] = ("chat", "completion", "messages")


def pipeline_of(ctx: ServerContext) -> Pipeline:
    """The process's pipeline (a ``ctx.service`` factory)."""
    return Pipeline(ctx)


@dataclass(slots=True)
class StreamEvent:
    """One thing to send: an OpenAI chunk dict, or an Anthropic event dict for ``messages``."""

    payload: dict[str, Any]
    index: int = 0  # choice index the output ids belong to
    output_token_ids: list[int] = field(default_factory=list)  # engine ids this event covers
    checkpoint: str | None = None  # signed derender state after this event (checkpoints=True)
    done: bool = False


@dataclass(slots=True)
class _Prepared:
    kind: Kind
    body: dict[str, Any]
    requests: list[GenerateRequest]
    derenderers: list[ChatDerenderer | CompletionDerenderer]
    chat: ChatCompletionRequest | None = None
    completion: CompletionRequest | None = None
    messages: MessagesRequest | None = None
    include_usage: bool = False
    created: int = 0
    resume_events: dict[str, Any] | None = None  # Anthropic event state of a resumed messages stream
    output_digest: OutputDigest | None = None  # of the output ids a resumed stream was given
    context: str | None = None  # the checkpoints' request-context digest (see Pipeline._binding)


class OutputDigest:
    """A running digest of a stream's output token ids, the same however the ids were split into
    steps: each id as 8 little-endian bytes into SHA-256. A checkpoint carries the first 16 bytes
    (22 base64url characters) under its signature, so the ids a resume sends are bound to it."""

    __slots__ = ("_hash",)

    def __init__(self, ids: Sequence[int] = ()) -> None:
        self._hash = hashlib.sha256(b"tokenwire-output-ids|")
        self.update(ids)

    def update(self, ids: Sequence[int]) -> None:
        if ids:
            self._hash.update(array.array("Q", ids).tobytes())  # OverflowError past 2**64 - 1

    def digest(self) -> str:
        return base64.urlsafe_b64encode(self._hash.copy().digest()[:16]).rstrip(b"=").decode()


class Pipeline:
    def __init__(self, ctx: ServerContext) -> None:
        self.ctx = ctx
        self.renderer = ctx.service(renderer_of)
        s = ctx.settings
        self.parser_names = (s.tool_call_parser, s.reasoning_parser, s.enable_auto_tool_choice)

    @property
    def engine(self) -> Engine:
        if self.ctx.engine is None:
            raise EngineUnavailable("This server has no engine: start it with `tokenwire serve` or "
                                    "`tokenwire launch render --engine-url URL`.")
        return self.ctx.engine

    @property
    def codec(self) -> StateCodec:
        return self.ctx.service(state_codec_of)

    # --- the three stages, separately (WebSocket primitive frames) -----------------------------
    async def render(self, kind: Kind, body: dict[str, Any]) -> list[GenerateRequest]:
        if kind == "chat":
            chat = validate(ChatCompletionRequest, body)
            return [await anyio.to_thread.run_sync(self.renderer.render_chat, chat)]
        if kind == "completion":
            comp = validate(CompletionRequest, body)
            return await anyio.to_thread.run_sync(self.renderer.render_completion, comp)
        msgs = validate(MessagesRequest, body)
        return [await anyio.to_thread.run_sync(self.renderer.render_messages, msgs)]

    def generate(self, request: GenerateRequest) -> AsyncIterator[EngineOutput]:
        return metrics.generate(self.engine, request)

    # --- whole pipelines ----------------------------------------------------------------------
    async def complete(self, kind: Kind, body: dict[str, Any]) -> dict[str, Any]:
        """The non-streaming answer (``chat.completion`` / ``text_completion`` / Anthropic message)."""
        prep = await self._prepare(kind, {**body, "stream": False})
        responses = [await self._collect(req, d) for req, d in zip(prep.requests, prep.derenderers, strict=True)]
        if kind == "completion":
            derenderers = [d for d in prep.derenderers if isinstance(d, CompletionDerenderer)]
            rid = prep.requests[0].request_id or ""
            if len(prep.requests) > 1:
                rid = rid.rsplit("-", 1)[0]
            return completion_response(derenderers, responses, request_id=rid, created=prep.created,
                                       model=self.ctx.model_name)
        d = prep.derenderers[0]
        assert isinstance(d, ChatDerenderer)
        chat = chat_response(d, responses[0])
        if kind == "messages":
            assert prep.messages is not None
            return message_from_chat(chat, model=self.ctx.model_name,
                                     stop_sequences=list(prep.messages.stop_sequences or []))
        return chat

    async def open_stream(self, kind: Kind, body: dict[str, Any], *, resume: dict[str, Any] | None = None,
                          checkpoints: bool = False) -> PipelineStream:
        """Validate, render and admit; the returned stream yields the events."""
        prep = await self._prepare(kind, {**body, "stream": True})
        offsets = [0] * len(prep.requests)
        if resume is not None:
            offsets[0] = self._resume(prep, resume)
        stream = PipelineStream(self, prep, checkpoints=checkpoints, offsets=offsets)
        await stream.admit()
        return stream

    # --- internals ----------------------------------------------------------------------------
    async def _prepare(self, kind: Kind, body: dict[str, Any]) -> _Prepared:
        created = int(time.time())
        tok, model = self.ctx.tokenizer, self.ctx.model_name
        tool_parser, reasoning_parser, auto = self.parser_names
        if kind == "completion":
            comp = validate(CompletionRequest, body)
            reqs = await anyio.to_thread.run_sync(self.renderer.render_completion, comp)
            ds: list[ChatDerenderer | CompletionDerenderer] = [
                completion_derenderer(comp, r.token_ids, request_id=_base_id(reqs), created=created, model=model,
                                      tokenizer=tok, prompt_index=k)
                for k, r in enumerate(reqs)
            ]
            so = comp.stream_options
            return _Prepared(kind, body, reqs, ds, completion=comp, created=created,
                             include_usage=bool(so and so.include_usage))
        msgs = None
        if kind == "messages":
            msgs = validate(MessagesRequest, body)
            chat = to_openai_chat(msgs)
            req = await anyio.to_thread.run_sync(self.renderer.render_messages, msgs)
        else:
            chat = validate(ChatCompletionRequest, body)
            req = await anyio.to_thread.run_sync(self.renderer.render_chat, chat)
        d = chat_derenderer(chat, req.token_ids, request_id=req.request_id or "", created=created, model=model,
                            tokenizer=tok, tool_parser=tool_parser, reasoning_parser=reasoning_parser,
                            enable_auto_tool_choice=auto)
        so = chat.stream_options
        return _Prepared(kind, body, [req], [d], chat=chat, messages=msgs, created=created,
                         include_usage=bool(so and so.include_usage))

    async def _collect(self, req: GenerateRequest, d: ChatDerenderer | CompletionDerenderer) -> GenerateResponse:
        """Run one engine request to the end (stopping early when derender sees a stop string)
        and return its whole response for the non-streaming derender."""
        n = req.sampling_params.n
        ids: dict[int, list[int]] = {i: [] for i in range(n)}
        logprobs: dict[int, list[Any]] = {i: [] for i in range(n)}
        finish: dict[int, tuple[str | None, Any]] = {}
        watch = _StopWatch(d) if req.sampling_params.stop else None
        usage: UsageInfo | None = None
        agen = metrics.generate(self.engine, req)
        try:
            async for out in agen:
                for c in out.choices:
                    ids[c.index].extend(c.token_ids)
                    if c.logprobs:
                        logprobs[c.index].extend(c.logprobs)
                    if c.finish_reason is not None:
                        finish[c.index] = (c.finish_reason, c.stop_reason)
                    if watch is not None and watch.stopped(c.index, c.token_ids):
                        # derender finds the same stop string and reports it; "length" only says
                        # the engine did not end on an eos token (which derender would drop).
                        finish.setdefault(c.index, ("length", None))
                usage = out.usage or usage
                if len(finish) == n:
                    break
        finally:
            await agen.aclose()
        choices = []
        for i in range(n):
            reason, stop_reason = finish.get(i, ("abort", None))
            choices.append({"index": i, "finish_reason": reason, "stop_reason": stop_reason,
                            "token_ids": ids[i],
                            "logprobs": {"content": logprobs[i]} if logprobs[i] else None})
        return GenerateResponse.model_validate({"request_id": req.request_id or "", "model": self.ctx.model_name,
                                                "choices": choices, "usage": usage})

    def _binding(self, prep: _Prepared, index: int) -> StateBinding:
        req = prep.requests[0]
        if prep.context is None:
            # Once, from the rendered prompt: a resumed stream's engine prompt also holds the
            # earlier output, and its checkpoints must bind to the same context as the first
            # stream's, so that it can be resumed again.
            prep.context = context_digest(
                "pipeline", prep.kind, {k: v for k, v in prep.body.items() if k not in ("stream", "request_id")},
                req.token_ids[-64:], len(req.token_ids), self.parser_names, self.ctx.model_name)
        return StateBinding(req.request_id or "", index, prep.context)

    def _resume(self, prep: _Prepared, resume: dict[str, Any]) -> int:
        """Restore the derenderer from a checkpoint and extend the engine prompt with the output
        received so far. Returns the number of output tokens already produced."""
        if len(prep.requests) != 1:
            raise InvalidRequest("resume supports one prompt per request", param="resume")
        req = prep.requests[0]
        if req.sampling_params.n != 1:
            raise InvalidRequest("resume supports n = 1 only", param="resume")
        rid = resume.get("request_id")
        output = resume.get("output_token_ids")
        if not isinstance(rid, str) or not rid:
            raise InvalidRequest("resume.request_id must be the id of the interrupted stream", param="resume.request_id")
        if not isinstance(output, list) or not all(isinstance(t, int) and 0 <= t < 2**64 for t in output):
            raise InvalidRequest("resume.output_token_ids must be a list of token ids", param="resume.output_token_ids")
        req.request_id = rid
        d = prep.derenderers[0]
        d.request_id = rid
        decoded = self.codec.decode(resume.get("checkpoint"), self._binding(prep, 0))
        snap, count = decoded.body.get("st"), decoded.body.get("n")
        if not isinstance(snap, dict) or count != len(output):
            raise StateError(f"resume.output_token_ids has {len(output)} ids but the checkpoint covers "
                             f"{count}; send the ids received up to that checkpoint.", reason="wrong_request",
                             param="resume")
        digest = OutputDigest(output)
        if decoded.body.get("h") != digest.digest():
            raise StateError("resume.output_token_ids are not the ids the interrupted stream produced up to "
                             "this checkpoint; send them exactly as its frames carried them.",
                             reason="wrong_request", param="resume")
        prep.output_digest = digest
        d.restore(0, snap)
        if prep.kind == "messages":
            events = decoded.body.get("a")
            if not isinstance(events, dict):
                raise StateError("the checkpoint does not carry a messages stream's event state.",
                                 reason="wrong_request", param="resume")
            prep.resume_events = events
        created = decoded.body.get("t", prep.created)
        if type(created) is not int:  # a checkpoint this server did not write (a leaked secret): 400, not 500
            raise StateError("the checkpoint is malformed.", reason="malformed", param="resume")
        prep.created = created
        d.created = prep.created
        sp = req.sampling_params
        if sp.max_tokens is not None:
            remaining = sp.max_tokens - len(output)
            if remaining <= 0:
                raise InvalidRequest("the interrupted stream already used its whole max_tokens budget",
                                     param="resume")
            sp.max_tokens = remaining
        sp.min_tokens = max(0, sp.min_tokens - len(output))
        sp.extra_args = {**(sp.extra_args or {}), "output_offset": len(output)}
        req.token_ids = [*req.token_ids, *output]
        return len(output)


def _base_id(reqs: Sequence[GenerateRequest]) -> str:
    rid = reqs[0].request_id or ""
    return rid.rsplit("-", 1)[0] if len(reqs) > 1 else rid


class _StopWatch:
    """Runs a choice's tokens through a separate derender stream only to notice stop strings, so
    a non-streaming request stops generating as soon as its text is complete."""

    def __init__(self, d: ChatDerenderer | CompletionDerenderer) -> None:
        self.spec = d.spec
        self.streams: dict[int, ChoiceStream] = {}

    def stopped(self, index: int, token_ids: Sequence[int]) -> bool:
        stream = self.streams.get(index)
        if stream is None:
            stream = self.streams[index] = ChoiceStream.new(self.spec, index)
        return bool(stream.push(token_ids).stop_engine)


class PipelineStream:
    """The events of one streaming pipeline. Iterate :meth:`stream_events` (or :meth:`events` for
    bare payloads) exactly once; closing the iterator aborts the engine work."""

    def __init__(self, pipeline: Pipeline, prep: _Prepared, *, checkpoints: bool, offsets: list[int]) -> None:
        self.pipeline = pipeline
        self.prep = prep
        self.checkpoints = checkpoints
        self.offsets = offsets
        self._runs: list[_EngineRun] = []
        self._anthropic: MessageStream | None = None
        self._pending: dict[tuple[int, int], list[int]] = {}  # engine ids not yet covered by an event
        self._done_runs: set[int] = set()  # runs whose output is complete (finished, or a stop string)
        self._finish: tuple[str | None, Any] = (None, None)  # an Anthropic stream's finish reason
        self._digest = prep.output_digest or OutputDigest()  # of the output ids so far (checkpoints)

    @property
    def request_id(self) -> str:
        return self.prep.requests[0].request_id or ""

    async def admit(self) -> None:
        """Start every engine request and wait for its first output, so admission errors raise
        here (before the caller commits to a stream)."""
        engine = self.pipeline.engine
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
            async for k, out in _merge(self._runs):
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
        shape = {"model": self.pipeline.ctx.model_name, "input_tokens": len(prep.requests[0].token_ids) - self.offsets[0],
                 "stop_sequences": list(prep.messages.stop_sequences or [])}
        if prep.resume_events is not None:  # continue the interrupted event sequence
            self._anthropic = MessageStream.restore(prep.resume_events, **shape)  # type: ignore[arg-type]
            return []
        self._anthropic = MessageStream(**shape)  # type: ignore[arg-type]
        return [StreamEvent(ev) for ev in self._anthropic.start()]

    def feed(self, k: int, out: EngineOutput) -> list[StreamEvent]:
        """The events one engine output of run ``k`` gives. A run whose output is complete (its
        choices finished, or a stop string seen) is listed by :meth:`_finished_runs` afterwards."""
        if self.prep.kind == "messages":
            return self._feed_messages(out)
        events: list[StreamEvent] = []
        d = self.prep.derenderers[k]
        n = self.prep.requests[k].sampling_params.n
        for c in out.choices:
            step = d.push(c.index, c.token_ids, c.logprobs, c.finish_reason, c.stop_reason)
            key = (k, c.index)
            ids = self._pending.setdefault(key, [])
            ids.extend(c.token_ids)
            if step.stop_engine and n == 1:
                self._done_runs.add(k)
            if step.chunk is None:
                continue
            del self._pending[key]
            events.append(StreamEvent(step.chunk, index=d_index(d, c.index), output_token_ids=ids,
                                      checkpoint=self._checkpoint(k, c.index, ids)))
        if _finished(d):
            self._done_runs.add(k)
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
            events += [StreamEvent(ev) for ev in evs[:-1]]
            events.append(StreamEvent(evs[-1], output_token_ids=ids, checkpoint=checkpoint))
        if _finished(d):
            self._done_runs.add(0)
        return events

    def finish(self) -> list[StreamEvent]:
        """The events after the last output (usage chunk, Anthropic ``message_delta`` / ``message_stop``)."""
        if self.prep.kind == "messages":
            assert self._anthropic is not None
            reason, stop_reason = self._finish
            d = self.prep.derenderers[0]
            return [StreamEvent(ev, done=ev["type"] == "message_stop")
                    for ev in self._anthropic.finish(finish_reason=reason, stop_reason=stop_reason,
                                                     output_tokens=d.completion_tokens)]
        return [StreamEvent(self._usage_chunk())] if self.prep.include_usage else []

    def _finished_runs(self) -> list[_EngineRun]:
        return [self._runs[k] for k in self._done_runs if not self._runs[k].closed]

    # --- the step-wise path: outputs handed over on the event loop, no task per request --------
    def listen(self, on_events: Callable[[list[StreamEvent]], None],
               on_end: Callable[[BaseException | None], None]) -> bool:
        """Where the engine can hand this stream's outputs over as they arrive (one run, an engine
        stream that supports it), derender and report each one from the engine's own delivery
        (``on_events``, with the start events first) and call ``on_end`` once: with None after the
        last events, or with the error. The caller still owns the stream: it waits for ``on_end``
        and then (or when cancelled) calls :meth:`aclose`, which aborts unfinished engine work.
        False (nothing done): iterate :meth:`stream_events` instead."""
        if len(self._runs) != 1 or not self._runs[0].can_listen():
            return False
        ended = False

        def end(error: BaseException | None) -> None:
            nonlocal ended
            if not ended:
                ended = True
                on_end(error)

        def output(item: EngineOutput | Exception) -> None:
            if ended:
                return
            try:
                if isinstance(item, Exception):
                    raise item
                events = self.feed(0, item)
                if item.finished or self._done_runs:
                    events += self.finish()
                    if events:
                        on_events(events)
                    end(None)
                elif events:
                    on_events(events)
            except Exception as exc:  # derender or the caller's report failed: end the stream with it
                end(exc)

        head = self.start()
        if head:
            on_events(head)
        self._runs[0].listen(output)
        return True

    def _usage_chunk(self) -> dict[str, Any]:
        ds = self.prep.derenderers
        if len(ds) == 1:
            return ds[0].usage_chunk()
        prompt = sum(d.prompt_tokens for d in ds)
        completion = sum(d.completion_tokens for d in ds)
        return ds[0].usage_chunk(usage_dict(prompt, completion))

    def _checkpoint(self, k: int, index: int, ids: list[int], *, events: dict[str, Any] | None = None) -> str | None:
        if not self.checkpoints or k != 0 or self.prep.requests[0].sampling_params.n != 1:
            return None
        d = self.prep.derenderers[0]
        self.offsets[0] += len(ids)
        self._digest.update(ids)
        body: dict[str, Any] = {"t": self.prep.created, "st": d.snapshot(index), "n": self.offsets[0],
                                "h": self._digest.digest()}
        if events is not None:
            body["a"] = events
        return self.pipeline.codec.encode(self.pipeline._binding(self.prep, index), self.offsets[0], body)


def d_index(d: ChatDerenderer | CompletionDerenderer, index: int) -> int:
    return index + getattr(d, "index_base", 0)


def _finished(d: ChatDerenderer | CompletionDerenderer) -> bool:
    return all(s.finished for s in d.streams.values())


class _EngineRun:
    """One engine request's output iterator, primed with its first output."""

    def __init__(self, agen: AsyncIterator[EngineOutput]) -> None:
        self.agen = agen
        self.first: EngineOutput | None = None
        self.closed = False

    async def prime(self) -> None:
        try:
            self.first = await self.agen.__anext__()
        except StopAsyncIteration:
            self.first = None
            await self.aclose()

    def can_listen(self) -> bool:
        return bool(getattr(self.agen, "can_listen", False))

    def listen(self, callback: Callable[[EngineOutput | Exception], None]) -> None:
        """Hand the primed first output, then every later one, to ``callback`` as it arrives."""
        first, self.first = self.first, None
        if first is not None:
            callback(first)
        self.agen.listen(callback)  # type: ignore[attr-defined]

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
            with contextlib.suppress(Exception):
                await self.agen.aclose()  # type: ignore[attr-defined]


async def _merge(runs: list[_EngineRun]) -> AsyncIterator[tuple[int, EngineOutput]]:
    """Interleave several engine streams as their outputs arrive (one task per pending step,
    cancelled when the consumer leaves)."""
    if len(runs) == 1:
        async for out in runs[0].outputs():
            yield 0, out
        return
    iters = [r.outputs() for r in runs]
    pending: dict[asyncio.Task[EngineOutput], int] = {
        asyncio.ensure_future(it.__anext__()): k for k, it in enumerate(iters)
    }
    try:
        while pending:
            done, _ = await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
            for task in done:
                k = pending.pop(task)
                try:
                    out = task.result()
                except StopAsyncIteration:
                    continue
                yield k, out
                if not runs[k].closed:
                    pending[asyncio.ensure_future(iters[k].__anext__())] = k
    finally:
        for task in pending:
            task.cancel()
        for it in iters:
            with contextlib.suppress(Exception):
                await it.aclose()  # type: ignore[attr-defined]
