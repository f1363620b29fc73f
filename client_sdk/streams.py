"""Requests as the user holds them: one :class:`RequestStream` per request (its frames from start to
final frame, with errors raised, timeouts, cancellation and resumption), and the typed async
iterators built on it. How cancellation propagates and when a stream resumes: docs/client.md,
"Streams".
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
from collections import deque
from collections.abc import Callable, Generator
from typing import Any, Generic, Self, TypeVar

from client_sdk import errors
from client_sdk.response_types import ResponseStreamEvent, parse_response_event
from client_sdk.resume import ResumeTracker
from client_sdk.transport import FINAL_TYPES, Handle, Interrupted, Transport
from client_sdk.types import (
    ChatCompletionStreamResponse,
    CompletionStreamResponse,
    GenerateStreamResponse,
    MessageStreamEvent,
    UsageInfo,
    parse_message_event,
)
from session.client_frames import PipelineFrame, RequestFrame
from session.server_frames import (
    AnyServerFrame,
    ChatDelta,
    CompletionDelta,
    ErrorFrame,
    GenerateDelta,
    GenerateDone,
    MessagesDelta,
    ResponseDelta,
)

T = TypeVar("T")
PipelineDeltaFrame = ChatDelta | CompletionDelta | MessagesDelta
RESUME_ON_ERRORS = frozenset({"engine_unavailable", "shutting_down"})  # docs/protocol.md §7, §8
RESUMES_AFTER_ERROR = 3  # consecutive, without a new checkpoint between them


class RequestStream:
    """One request's frames, in order, ending with its final frame."""

    def __init__(self, transport: Transport, frame: RequestFrame, *, timeout: float | None,
                 resumable: bool = False) -> None:
        self._transport = transport
        self._frame = frame
        self._timeout = timeout
        self.tracker = ResumeTracker() if resumable else None
        self._handle: Handle | None = None
        self._out: deque[AnyServerFrame] = deque()
        self._held: list[dict[str, Any]] = []
        self._held_frame: PipelineDeltaFrame | None = None
        self._ended = False
        self._cancel_requested = False
        self._error_resumes = 0  # resumes after an error frame since the last new checkpoint
        self.status: str | None = None  # "completed" / "cancelled" once the final frame was read
        self.final: AnyServerFrame | None = None

    @property
    def id(self) -> str:
        """The id of the request on the wire now (a resumed stream continues under a new id)."""
        return self._handle.id if self._handle is not None else self._frame.id

    @property
    def ended(self) -> bool:
        return self._ended and not self._out

    async def start(self) -> None:
        """Send the request and wait for its first frame, so a refused request raises here."""
        self._handle = await self._transport.start(self._frame)
        first = await self.next()
        if first is not None:
            self._out.appendleft(first)

    async def next(self) -> AnyServerFrame | None:
        """The next frame (deltas, then the final frame); None after the final frame."""
        while not self._out:
            if self._ended:
                return None
            self._process(await self._receive())
        return self._out.popleft()

    def cancel(self) -> None:
        """Ask the server to stop; the stream then ends (``status == "cancelled"``) after any deltas
        the server had already sent."""
        self._cancel_requested = True
        if self._handle is not None and not self._ended:
            self._handle.cancel()

    def abandon(self) -> None:
        """Stop reading: cancel at the server if still running, and keep nothing more."""
        if self._handle is not None and not self._ended:
            self._handle.cancel()
            self._handle.release()
        self._ended = True
        self._out.clear()

    def __del__(self) -> None:
        # Dropped before its end (e.g. ``break`` out of ``async for``): stop it at the server.
        if not self._ended and self._handle is not None:
            with contextlib.suppress(Exception):
                self._handle.cancel()

    # -- internals ---------------------------------------------------------------------------------
    async def _receive(self) -> AnyServerFrame:
        while True:
            assert self._handle is not None
            try:
                frame = await self._handle.next(self._timeout)
            except asyncio.CancelledError:
                self.abandon()
                raise
            except TimeoutError:
                self.abandon()
                raise errors.RequestTimeout(f"No answer to request {self.id} within {self._timeout} s; "
                                            "it was cancelled.") from None
            except Interrupted as lost:
                if self.tracker is None or self._cancel_requested:
                    self._ended = True
                    if self._cancel_requested:
                        self.status = "cancelled"
                        return _synthetic_done(self._frame, self.id, "cancelled")
                    raise errors.ConnectionLostError(str(lost), code=lost.code, reason=lost.reason) from None
                if self.tracker.finished:  # everything but the usage chunk / done frame arrived
                    return _synthetic_done(self._frame, self.id, "completed")
                self.tracker.interrupted()
                self._held.clear()
                self._held_frame = None
                await self._resume()
                continue
            if isinstance(frame, ErrorFrame):
                if self._resumes_after(frame):
                    self._error_resumes += 1
                    self.tracker.interrupted()  # type: ignore[union-attr]
                    self._held.clear()
                    self._held_frame = None
                    await self._resume()
                    continue
                self._ended = True
                raise errors.from_error_body(frame.error)
            return frame

    def _resumes_after(self, frame: ErrorFrame) -> bool:
        return (self.tracker is not None and not self._cancel_requested and not self.tracker.finished
                and frame.error.get("code") in RESUME_ON_ERRORS and self._error_resumes < RESUMES_AFTER_ERROR)

    def _process(self, frame: AnyServerFrame) -> None:
        if frame.type in FINAL_TYPES:
            if self._held and self._held_frame is not None:
                self._out.append(_with_payloads(self._held_frame, self._held))
                self._held = []
            self._ended = True
            self.status = getattr(frame, "status", "completed")
            self.final = frame
            self._out.append(frame)
            return
        if self.tracker is not None and isinstance(frame, ChatDelta | CompletionDelta | MessagesDelta):
            payloads = _payloads(frame)
            covered = self.tracker.observe(stream_id=frame.stream_id, checkpoint=frame.checkpoint,
                                           output_token_ids=frame.output_token_ids, finishes=_finishes(payloads))
            if frame.checkpoint:
                self._error_resumes = 0
            if not covered:
                self._held.extend(payloads)
                self._held_frame = frame
                return
            if self._held:
                frame = _with_payloads(frame, [*self._held, *payloads])
                self._held = []
        self._out.append(frame)

    async def _resume(self) -> None:
        assert self.tracker is not None
        self.tracker.resumes += 1
        await self._transport.ready()
        frame = self._frame
        assert isinstance(frame, PipelineFrame)
        resume = self.tracker.resume_field()
        update: dict[str, Any] = {"id": self._transport.new_id(frame.type), "resumable": True}
        if resume is not None:
            update["resume"] = resume
        self._handle = await self._transport.start(type(frame).model_validate({**frame.model_dump(), **update}))


def _payloads(frame: PipelineDeltaFrame) -> list[dict[str, Any]]:
    return frame.events if isinstance(frame, MessagesDelta) else frame.chunks


def _with_payloads(frame: PipelineDeltaFrame, payloads: list[dict[str, Any]]) -> PipelineDeltaFrame:
    field = "events" if isinstance(frame, MessagesDelta) else "chunks"
    return dataclasses.replace(frame, **{field: payloads})  # type: ignore[arg-type]


def _finishes(payloads: list[dict[str, Any]]) -> bool:
    return any(choice.get("finish_reason") is not None for p in payloads for choice in p.get("choices") or ())


def _synthetic_done(frame: RequestFrame, request_id: str, status: str) -> AnyServerFrame:
    from session.server_frames import DONE_FRAME_OF

    return DONE_FRAME_OF[frame.type](id=request_id, status=status)  # type: ignore[arg-type]


class Cancelled:
    """What :meth:`ItemStream.cancel` returns: the cancel was already sent when it was made, so
    ``stream.cancel()`` and ``await stream.cancel()`` do the same."""

    __slots__ = ()

    def __await__(self) -> Generator[Any, None, None]:
        return
        yield  # a generator that finishes at once: awaiting it never suspends


class ItemStream(Generic[T]):
    """An async iterator of typed items (chunks, events) over one request. Close it (``aclose``,
    ``async with``) to stop early: the request is cancelled at the server."""

    def __init__(self, request: RequestStream, parse: Callable[[AnyServerFrame], list[T]]) -> None:
        self._request = request
        self._parse = parse
        self._items: deque[T] = deque()

    @property
    def id(self) -> str:
        """The request id on the wire (what :meth:`AsyncClient.cancel` takes)."""
        return self._request.id

    @property
    def status(self) -> str | None:
        """``"completed"`` or ``"cancelled"`` once the stream ended, else None."""
        return self._request.status

    @property
    def resumes(self) -> int:
        """How many times this stream resumed after a lost connection."""
        return self._request.tracker.resumes if self._request.tracker is not None else 0

    def __aiter__(self) -> Self:
        return self

    async def __anext__(self) -> T:
        while not self._items:
            frame = await self._request.next()
            if frame is None:
                raise StopAsyncIteration
            self._items.extend(self._parse(frame))
        return self._items.popleft()

    def cancel(self) -> Cancelled:
        """Stop the generation at the server; iteration ends after what was already sent. The
        cancel frame is queued when this returns; awaiting the result (``await stream.cancel()``,
        the shape of :meth:`AsyncClient.cancel`) is optional and returns at once."""
        self._request.cancel()
        return Cancelled()

    async def aclose(self) -> None:
        self._request.abandon()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()


def _chat_chunks(frame: AnyServerFrame) -> list[ChatCompletionStreamResponse]:
    if isinstance(frame, ChatDelta):
        return [ChatCompletionStreamResponse.model_validate(c) for c in frame.chunks]
    return []


def _completion_chunks(frame: AnyServerFrame) -> list[CompletionStreamResponse]:
    if isinstance(frame, CompletionDelta):
        return [CompletionStreamResponse.model_validate(c) for c in frame.chunks]
    return []


def _message_events(frame: AnyServerFrame) -> list[MessageStreamEvent]:
    if isinstance(frame, MessagesDelta):
        return [parse_message_event(e) for e in frame.events]
    return []


class ChatCompletionStream(ItemStream[ChatCompletionStreamResponse]):
    def __init__(self, request: RequestStream) -> None:
        super().__init__(request, _chat_chunks)


class CompletionStream(ItemStream[CompletionStreamResponse]):
    def __init__(self, request: RequestStream) -> None:
        super().__init__(request, _completion_chunks)


class MessageStream(ItemStream[MessageStreamEvent]):
    def __init__(self, request: RequestStream) -> None:
        super().__init__(request, _message_events)


def _response_events(frame: AnyServerFrame) -> list[ResponseStreamEvent]:
    if isinstance(frame, ResponseDelta):
        return [parse_response_event(e) for e in frame.events]
    return []


class ResponseEventStream(ItemStream[ResponseStreamEvent]):
    """OpenAI Responses stream events (``client_sdk.response_types``), as ``POST /v1/responses``
    streams them; the last one (``response.completed`` / ``.incomplete`` / ``.failed``) holds the
    whole response."""

    def __init__(self, request: RequestStream) -> None:
        super().__init__(request, _response_events)


class GenerateStream(ItemStream[GenerateStreamResponse]):
    """Engine steps (``/inference/v1/generate`` stream chunks); ``usage`` once the stream ended."""

    def __init__(self, request: RequestStream) -> None:
        super().__init__(request, self._chunks)
        self.usage: UsageInfo | None = None

    def _chunks(self, frame: AnyServerFrame) -> list[GenerateStreamResponse]:
        if isinstance(frame, GenerateDelta):
            return [GenerateStreamResponse.model_validate(frame.chunk)]
        if isinstance(frame, GenerateDone) and frame.usage is not None:
            self.usage = UsageInfo.model_validate(frame.usage)
        return []
