"""The synchronous client: the async client run on a private event loop thread.

Nothing here knows the protocol: every call hands the async client's coroutine to the loop thread
and waits for it; streams become plain iterators whose ``next`` runs one ``__anext__`` there. One
session serves every thread that uses the client. An interrupt (Ctrl-C) while waiting cancels
the request at the server, as cancelling the async task would.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Coroutine, Iterable, Iterator, Sequence
from typing import Any, Generic, Literal, Self, TypeVar

from client_sdk.aio import AsyncClient
from client_sdk.options import TransportChoice
from client_sdk.resources import NOT_GIVEN, Derenderer
from client_sdk.streams import ItemStream
from client_sdk.types import GenerateRequest, SessionInfo, UsageInfo

T = TypeVar("T")


class _LoopThread:
    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._main, name="tokenwire-client", daemon=True)
        self._thread.start()

    def _main(self) -> None:
        asyncio.set_event_loop(self.loop)
        self.loop.run_forever()

    def run(self, coro: Coroutine[Any, Any, T]) -> T:
        future = asyncio.run_coroutine_threadsafe(coro, self.loop)
        try:
            return future.result()
        except (KeyboardInterrupt, SystemExit):
            future.cancel()  # cancels the task on the loop: the request is cancelled at the server
            raise

    def call(self, fn: Any) -> None:
        self.loop.call_soon_threadsafe(fn)

    def stop(self) -> None:
        if self.loop.is_closed():
            return
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(5)
        if not self._thread.is_alive():
            self.loop.close()


class SyncStream(Generic[T]):
    """An iterator over a streaming response; ``close()`` (or leaving ``with``) stops it early and
    cancels the request at the server."""

    def __init__(self, runner: _LoopThread, stream: ItemStream[T]) -> None:
        self._runner = runner
        self._stream = stream

    @property
    def id(self) -> str:
        return self._stream.id

    @property
    def status(self) -> str | None:
        return self._stream.status

    @property
    def resumes(self) -> int:
        return self._stream.resumes

    @property
    def usage(self) -> UsageInfo | None:
        """A generate stream's usage, once it ended."""
        return getattr(self._stream, "usage", None)

    def __iter__(self) -> Iterator[T]:
        return self

    def __next__(self) -> T:
        try:
            return self._runner.run(self._stream.__anext__())
        except StopAsyncIteration:
            raise StopIteration from None

    def cancel(self) -> None:
        self._runner.call(self._stream.cancel)

    def close(self) -> None:
        self._runner.run(self._stream.aclose())

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class SyncDerenderer:
    def __init__(self, runner: _LoopThread, derenderer: Derenderer) -> None:
        self._runner = runner
        self._derenderer = derenderer

    @property
    def states(self) -> dict[int, str | None]:
        return self._derenderer.states

    def push(self, chunk: Any) -> list[Any]:
        return self._runner.run(self._derenderer.push(chunk))

    def feed(self, chunks: Iterable[Any]) -> Iterator[Any]:
        for chunk in chunks:
            yield from self.push(chunk)


class _Create:
    """A resource's ``create``, run on the loop thread."""

    def __init__(self, runner: _LoopThread, resource: Any) -> None:
        self._runner = runner
        self._resource = resource

    def create(self, **kwargs: Any) -> Any:
        return _wrap(self._runner, self._runner.run(self._resource.create(**kwargs)))


class _Chat:
    def __init__(self, runner: _LoopThread, chat: Any) -> None:
        self.completions = _Create(runner, chat.completions)


def _wrap(runner: _LoopThread, value: Any) -> Any:
    if isinstance(value, ItemStream):
        return SyncStream(runner, value)
    if isinstance(value, Derenderer):
        return SyncDerenderer(runner, value)
    return value


class Client:
    """The sync client: ``with client_sdk.Client(url, api_key=…) as client: …`` (same API as
    :class:`~client_sdk.aio.AsyncClient`, without ``await``)."""

    def __init__(self, url: str | Sequence[str], *, api_key: str | None = None, transport: TransportChoice = "auto",
                 **options: Any) -> None:
        self._runner = _LoopThread()
        self._async = AsyncClient(url, api_key=api_key, transport=transport, **options)
        try:
            self._runner.run(self._async.connect())
        except BaseException:
            self._runner.stop()
            raise
        self.chat = _Chat(self._runner, self._async.chat)
        self.completions = _Create(self._runner, self._async.completions)
        self.messages = _Create(self._runner, self._async.messages)
        self.responses = _Create(self._runner, self._async.responses)

    @property
    def transport(self) -> Literal["websocket", "http"]:
        return self._async.transport

    @property
    def info(self) -> SessionInfo:
        return self._async.info

    def update_session(self, **settings: Any) -> dict[str, Any]:
        return self._runner.run(self._async.update_session(**settings))

    def render(self, kind: Literal["chat", "completion", "messages"], body: dict[str, Any] | None = None, *,
               timeout: Any = NOT_GIVEN, **fields: Any) -> Any:
        return self._runner.run(self._async.render(kind, body, timeout=timeout, **fields))

    def generate(self, request: GenerateRequest | dict[str, Any] | None = None, *, timeout: Any = NOT_GIVEN,
                 **fields: Any) -> SyncStream[Any]:
        return SyncStream(self._runner, self._runner.run(self._async.generate(request, timeout=timeout, **fields)))

    def derender(self, kind: Literal["chat", "completion"], body: dict[str, Any], *, timeout: Any = NOT_GIVEN) -> Any:
        return self._runner.run(self._async.derender(kind, body, timeout=timeout))

    def derenderer(self, kind: Literal["chat", "completion"], **kwargs: Any) -> SyncDerenderer:
        return SyncDerenderer(self._runner, self._async.derenderer(kind, **kwargs))

    def cancel(self, request_id: str) -> None:
        self._runner.run(self._async.cancel(request_id))

    def close(self) -> None:
        if self._runner.loop.is_closed():
            return
        with contextlib.suppress(Exception):
            self._runner.run(self._async.aclose())
        self._runner.stop()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def connect(url: str | Sequence[str], *, api_key: str | None = None, transport: TransportChoice = "auto",
            **options: Any) -> Client:
    """Open a session and return a sync :class:`Client`."""
    return Client(url, api_key=api_key, transport=transport, **options)
