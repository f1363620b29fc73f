"""The API surface: OpenAI / Anthropic shaped calls and the three primitive stages.

``client.chat.completions.create``, ``client.completions.create``, ``client.messages.create`` and
``client.responses.create`` take the same arguments as the OpenAI / Anthropic SDKs (the request body's fields as keyword
arguments) and answer with the same shapes: a typed stream with ``stream=True``, else the whole
response. A session only streams, so a non-streaming call collects its stream
(:mod:`client_sdk.accumulate`), which gives what the HTTP endpoint answers without ``stream``.
"""

from __future__ import annotations

from collections.abc import AsyncIterable, AsyncIterator, Iterable
from typing import Any, Literal, overload

from client_sdk import accumulate, errors
from client_sdk.options import Options
from client_sdk.response_types import FINAL_EVENTS, Response, ResponseLifecycleEvent
from client_sdk.streams import (
    ChatCompletionStream,
    CompletionStream,
    GenerateStream,
    MessageStream,
    RequestStream,
    ResponseEventStream,
)
from client_sdk.transport import Transport
from client_sdk.types import (
    ChatCompletionResponse,
    ChatCompletionStreamResponse,
    CompletionResponse,
    CompletionStreamResponse,
    DerenderChatStreamResponse,
    DerenderCompletionStreamResponse,
    GenerateRequest,
    GenerateStreamResponse,
    Message,
)
from session.client_frames import Chat as ChatFrame
from session.client_frames import Completion as CompletionFrame
from session.client_frames import Derender as DerenderFrame
from session.client_frames import Generate as GenerateFrame
from session.client_frames import Kind
from session.client_frames import Messages as MessagesFrame
from session.client_frames import Render as RenderFrame
from session.client_frames import Response as ResponseFrame
from session.server_frames import DerenderDelta, RenderDone


class _NotGiven:
    def __repr__(self) -> str:
        return "NOT_GIVEN"


NOT_GIVEN: Any = _NotGiven()
_PIPELINE_FRAMES = {"chat": ChatFrame, "completion": CompletionFrame, "messages": MessagesFrame}


class Requester:
    """Builds request frames and runs them on the transport (shared by every resource)."""

    def __init__(self, transport: Transport, options: Options) -> None:
        self.transport = transport
        self.options = options

    def _timeout(self, timeout: Any) -> float | None:
        return self.options.timeout if timeout is NOT_GIVEN else timeout

    def _resumable(self, kind: Kind, asked: bool | None) -> bool:
        if asked is not None:
            if asked and self.transport.kind == "http":
                raise errors.UnsupportedError("Resumable streams need a WebSocket session; the HTTP endpoints "
                                              "send no checkpoints.")
            return asked
        if self.transport.kind == "http":
            return False
        return self.options.resumable or bool(self.transport.info.settings.get("resumable"))

    async def pipeline(self, kind: Kind, body: dict[str, Any], *, stream: bool, resumable: bool | None,
                       timeout: Any) -> Any:
        resumable = self._resumable(kind, resumable)
        if not stream and kind != "messages" and "stream_options" not in body:
            body = {**body, "stream_options": {"include_usage": True}}  # the answer carries usage
        body.pop("stream", None)
        frame = _PIPELINE_FRAMES[kind](id=self.transport.new_id(kind), body=body,
                                       resumable=resumable if self.transport.kind == "websocket" else None)
        request = RequestStream(self.transport, frame, timeout=self._timeout(timeout), resumable=resumable)
        await request.start()
        typed: ChatCompletionStream | CompletionStream | MessageStream
        if kind == "chat":
            typed = ChatCompletionStream(request)
        elif kind == "completion":
            typed = CompletionStream(request)
        else:
            typed = MessageStream(request)
        if stream:
            return typed
        items = [item async for item in typed]
        if request.status == "cancelled":
            raise errors.RequestCancelled(f"Request {request.id} was cancelled.")
        if kind == "chat":
            return accumulate.chat_response(items)  # type: ignore[arg-type]
        if kind == "completion":
            return accumulate.completion_response(items)  # type: ignore[arg-type]
        return accumulate.message_response(items)  # type: ignore[arg-type]

    async def response(self, body: dict[str, Any], *, stream: bool, timeout: Any) -> Any:
        """A Responses request over the session's ``response`` frame (or ``POST /v1/responses`` on
        the HTTP fallback): never resumable (docs/protocol.md §4.5)."""
        body.pop("stream", None)
        frame = ResponseFrame(id=self.transport.new_id("response"), body=body)
        request = RequestStream(self.transport, frame, timeout=self._timeout(timeout))
        await request.start()
        typed = ResponseEventStream(request)
        if stream:
            return typed
        final: ResponseLifecycleEvent | None = None
        async for event in typed:
            if isinstance(event, ResponseLifecycleEvent) and event.type in FINAL_EVENTS:
                final = event
        if request.status == "cancelled":
            raise errors.RequestCancelled(f"Request {request.id} was cancelled.")
        if final is None:
            raise errors.ProtocolError(f"The stream of request {request.id} ended without a final response event.")
        if final.type == "response.failed":  # over HTTP, the JSON endpoint answers such a failure with an error
            error = final.response.error or {}
            raise errors.from_error_body({"code": "internal_error", "status": 500, "param": None,
                                          "message": str(error.get("message") or "The response failed.")})
        return final.response

    async def render(self, kind: Kind, body: dict[str, Any], *, timeout: Any = NOT_GIVEN) -> Any:
        frame = RenderFrame(id=self.transport.new_id("render"), kind=kind, body=body)
        final = await self._one(frame, timeout)
        assert isinstance(final, RenderDone)
        if kind == "completion":
            return [GenerateRequest.model_validate(r) for r in final.result]
        return GenerateRequest.model_validate(final.result)

    async def generate(self, body: dict[str, Any], *, timeout: Any = NOT_GIVEN) -> GenerateStream:
        frame = GenerateFrame(id=self.transport.new_id("generate"), body=body)
        request = RequestStream(self.transport, frame, timeout=self._timeout(timeout))
        await request.start()
        return GenerateStream(request)

    async def derender(self, kind: Literal["chat", "completion"], body: dict[str, Any], *,
                       timeout: Any = NOT_GIVEN) -> DerenderChatStreamResponse | DerenderCompletionStreamResponse:
        frame = DerenderFrame(id=self.transport.new_id("derender"), kind=kind, body=body)
        final = await self._one(frame, timeout)
        assert isinstance(final, DerenderDelta)
        if kind == "chat":
            return DerenderChatStreamResponse.model_validate(final.result)
        return DerenderCompletionStreamResponse.model_validate(final.result)

    async def _one(self, frame: RenderFrame | DerenderFrame, timeout: Any) -> Any:
        request = RequestStream(self.transport, frame, timeout=self._timeout(timeout))
        await request.start()
        while (item := await request.next()) is not None:
            final = item
        return final


def _body(fields: dict[str, Any], **named: Any) -> dict[str, Any]:
    return {**{k: v for k, v in named.items() if v is not None}, **fields}


class ChatCompletions:
    def __init__(self, requester: Requester) -> None:
        self._requester = requester

    @overload
    async def create(self, *, messages: Iterable[dict[str, Any]], model: str | None = None,
                     stream: Literal[False] = False, resumable: bool | None = None, timeout: Any = NOT_GIVEN,
                     **params: Any) -> ChatCompletionResponse: ...

    @overload
    async def create(self, *, messages: Iterable[dict[str, Any]], model: str | None = None,
                     stream: Literal[True], resumable: bool | None = None, timeout: Any = NOT_GIVEN,
                     **params: Any) -> ChatCompletionStream: ...

    async def create(self, *, messages: Iterable[dict[str, Any]], model: str | None = None, stream: bool = False,
                     resumable: bool | None = None, timeout: Any = NOT_GIVEN,
                     **params: Any) -> ChatCompletionResponse | ChatCompletionStream:
        """An OpenAI chat completion (``stream=True``: a stream of ``chat.completion.chunk``)."""
        body = _body(params, messages=list(messages), model=model)
        return await self._requester.pipeline("chat", body, stream=stream, resumable=resumable,  # type: ignore[no-any-return]
                                              timeout=timeout)


class Chat:
    def __init__(self, requester: Requester) -> None:
        self.completions = ChatCompletions(requester)


class Completions:
    def __init__(self, requester: Requester) -> None:
        self._requester = requester

    @overload
    async def create(self, *, prompt: Any, model: str | None = None, stream: Literal[False] = False,
                     resumable: bool | None = None, timeout: Any = NOT_GIVEN,
                     **params: Any) -> CompletionResponse: ...

    @overload
    async def create(self, *, prompt: Any, model: str | None = None, stream: Literal[True],
                     resumable: bool | None = None, timeout: Any = NOT_GIVEN, **params: Any) -> CompletionStream: ...

    async def create(self, *, prompt: Any, model: str | None = None, stream: bool = False,
                     resumable: bool | None = None, timeout: Any = NOT_GIVEN,
                     **params: Any) -> CompletionResponse | CompletionStream:
        """An OpenAI completion (``stream=True``: a stream of ``text_completion`` chunks)."""
        body = _body(params, prompt=prompt, model=model)
        return await self._requester.pipeline("completion", body, stream=stream, resumable=resumable,  # type: ignore[no-any-return]
                                              timeout=timeout)


class Messages:
    def __init__(self, requester: Requester) -> None:
        self._requester = requester

    @overload
    async def create(self, *, messages: Iterable[dict[str, Any]], max_tokens: int, model: str | None = None,
                     stream: Literal[False] = False, resumable: bool | None = None, timeout: Any = NOT_GIVEN,
                     **params: Any) -> Message: ...

    @overload
    async def create(self, *, messages: Iterable[dict[str, Any]], max_tokens: int, model: str | None = None,
                     stream: Literal[True], resumable: bool | None = None, timeout: Any = NOT_GIVEN,
                     **params: Any) -> MessageStream: ...

    async def create(self, *, messages: Iterable[dict[str, Any]], max_tokens: int, model: str | None = None,
                     stream: bool = False, resumable: bool | None = None, timeout: Any = NOT_GIVEN,
                     **params: Any) -> Message | MessageStream:
        """An Anthropic message (``stream=True``: a stream of Anthropic events)."""
        body = _body(params, messages=list(messages), max_tokens=max_tokens, model=model)
        return await self._requester.pipeline("messages", body, stream=stream, resumable=resumable,  # type: ignore[no-any-return]
                                              timeout=timeout)


class Responses:
    def __init__(self, requester: Requester) -> None:
        self._requester = requester

    @overload
    async def create(self, *, input: Any, model: str | None = None, stream: Literal[False] = False,
                     timeout: Any = NOT_GIVEN, **params: Any) -> Response: ...

    @overload
    async def create(self, *, input: Any, model: str | None = None, stream: Literal[True],
                     timeout: Any = NOT_GIVEN, **params: Any) -> ResponseEventStream: ...

    async def create(self, *, input: Any, model: str | None = None, stream: bool = False,
                     timeout: Any = NOT_GIVEN, **params: Any) -> Response | ResponseEventStream:
        """An OpenAI Responses request (``stream=True``: a stream of Responses events, typed as the
        ``openai`` SDK's; else the ``Response``). Other fields (``instructions``, ``tools``,
        ``previous_response_id``, ``store``, ``include``, …) as keyword arguments."""
        body = _body(params, input=input, model=model)
        return await self._requester.response(body, stream=stream, timeout=timeout)  # type: ignore[no-any-return]


class Derenderer:
    """A streaming derender whose signed state the client carries (docs/protocol.md §9): push each
    engine chunk, get the OpenAI chunk(s) back. One state per choice index; send chunks in order."""

    def __init__(self, requester: Requester, kind: Literal["chat", "completion"], *, request: dict[str, Any] | None,
                 prompt_token_ids: list[int] | None, model: str | None = None) -> None:
        self._requester = requester
        self.kind = kind
        self._base: dict[str, Any] = {"prompt_token_ids": prompt_token_ids}
        if request is not None:
            self._base["chat_request" if kind == "chat" else "completion_request"] = request
        if model is not None:
            self._base["model"] = model
        self.states: dict[int, str | None] = {}

    async def push(self, chunk: GenerateStreamResponse | dict[str, Any],
                   ) -> list[ChatCompletionStreamResponse | CompletionStreamResponse]:
        data = chunk.model_dump(mode="json") if isinstance(chunk, GenerateStreamResponse) else dict(chunk)
        out: list[ChatCompletionStreamResponse | CompletionStreamResponse] = []
        for choice in data.get("choices") or ():
            index = int(choice.get("index", 0))
            body = {**self._base, "stream_state": self.states.get(index),
                    "generate_chunk": {"request_id": data.get("request_id", ""), "choices": [choice]}}
            step = await self._requester.derender(self.kind, body)
            self.states[index] = step.stream_state
            out.append(step.chunk)
        return out

    async def feed(self, chunks: AsyncIterable[GenerateStreamResponse | dict[str, Any]],
                   ) -> AsyncIterator[ChatCompletionStreamResponse | CompletionStreamResponse]:
        """Derender a whole generate stream as it arrives."""
        async for chunk in chunks:
            for out in await self.push(chunk):
                yield out
