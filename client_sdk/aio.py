"""The async client: the one real implementation (the sync client wraps it).

::

    async with client_sdk.connect("http://127.0.0.1:8000", api_key="…") as client:
        stream = await client.chat.completions.create(messages=[…], stream=True)
        async for chunk in stream:
            …

``connect`` opens a WebSocket session (``transport="auto"`` falls back to the HTTP endpoints when
the upgrade is refused by a proxy); every call on the client shares that one session.
"""

from __future__ import annotations

import logging
from collections.abc import Generator, Sequence
from typing import Any, Literal, Self

from client_sdk import errors
from client_sdk.connection import WebSocketTransport
from client_sdk.http_fallback import HttpTransport
from client_sdk.options import Options, TransportChoice, base_urls
from client_sdk.resources import NOT_GIVEN, Chat, Completions, Derenderer, Messages, Requester, Responses
from client_sdk.streams import GenerateStream
from client_sdk.transport import Transport
from client_sdk.types import (
    DerenderChatStreamResponse,
    DerenderCompletionStreamResponse,
    GenerateRequest,
    SessionInfo,
)

log = logging.getLogger("client_sdk")


class AsyncClient:
    """A tokenwire client. Create it with :func:`connect` (or construct it and ``await
    client.connect()``)."""

    def __init__(self, url: str | Sequence[str], *, api_key: str | None = None, transport: TransportChoice = "auto",
                 **options: Any) -> None:
        self.urls = base_urls(url)
        self.options = Options(api_key=api_key, transport=transport, **options)
        self._transport: Transport | None = None
        self._requester: Requester | None = None
        self.chat: Chat
        self.completions: Completions
        self.messages: Messages
        self.responses: Responses

    # -- lifecycle -------------------------------------------------------------------------------
    async def connect(self) -> Self:
        if self._transport is not None:
            return self
        transport: WebSocketTransport | HttpTransport
        if self.options.transport == "http":
            transport = HttpTransport(self.urls, self.options)
            await _open_or_close(transport)
        else:
            transport = WebSocketTransport(self.urls, self.options)
            try:
                await transport.open()
            except errors.UpgradeRefused as refused:
                await transport.aclose()
                if self.options.transport == "websocket":
                    raise
                log.info("WebSocket upgrade refused (%s); using the HTTP endpoints", refused)
                transport = HttpTransport(self.urls, self.options)
                await _open_or_close(transport)
        self._bind(transport)
        return self

    def _bind(self, transport: Transport) -> None:
        self._transport = transport
        self._requester = requester = Requester(transport, self.options)
        self.chat = Chat(requester)
        self.completions = Completions(requester)
        self.messages = Messages(requester)
        self.responses = Responses(requester)

    async def aclose(self) -> None:
        if self._transport is not None:
            await self._transport.aclose()

    async def __aenter__(self) -> Self:
        return await self.connect()

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    # -- what the session is -----------------------------------------------------------------------
    @property
    def transport(self) -> Literal["websocket", "http"]:
        """``"websocket"``, or ``"http"`` when the client uses the HTTP fallback."""
        return self._live.kind

    @property
    def info(self) -> SessionInfo:
        return self._live.info

    @property
    def _live(self) -> Transport:
        if self._transport is None:
            raise errors.ConnectError("not connected; await client.connect() first")
        return self._transport

    @property
    def _req(self) -> Requester:
        self._live  # noqa: B018  (raises when not connected)
        assert self._requester is not None
        return self._requester

    async def update_session(self, **settings: Any) -> dict[str, Any]:
        """``session.update`` (docs/protocol.md §4.1): ``model``, ``sampling``,
        ``chat_template_kwargs``, ``resumable``. Returns the effective settings."""
        return await self._live.update_session(settings)

    # -- primitives --------------------------------------------------------------------------------
    async def render(self, kind: Literal["chat", "completion", "messages"], body: dict[str, Any] | None = None, *,
                     timeout: Any = NOT_GIVEN, **fields: Any) -> Any:
        """Render a request body into engine prompt(s): a :class:`GenerateRequest` (``chat``,
        ``messages``) or a list of them (``completion``)."""
        return await self._req.render(kind, {**(body or {}), **fields}, timeout=timeout)

    async def generate(self, request: GenerateRequest | dict[str, Any] | None = None, *, timeout: Any = NOT_GIVEN,
                       **fields: Any) -> GenerateStream:
        """Token-in / token-out generation: an async iterator of engine steps (``GenerateStreamResponse``).
        Pass a rendered :class:`GenerateRequest`, or ``token_ids=…, sampling_params=…``."""
        if isinstance(request, GenerateRequest):
            body = request.to_wire()
        else:
            body = dict(request or {})
        body.update(fields)
        body.pop("stream", None)
        return await self._req.generate(body, timeout=timeout)

    async def derender(self, kind: Literal["chat", "completion"], body: dict[str, Any], *,
                       timeout: Any = NOT_GIVEN) -> DerenderChatStreamResponse | DerenderCompletionStreamResponse:
        """One raw streaming derender step (you carry ``stream_state``); see :meth:`derenderer`."""
        return await self._req.derender(kind, body, timeout=timeout)

    def derenderer(self, kind: Literal["chat", "completion"], *, request: dict[str, Any] | None = None,
                   prompt_token_ids: list[int] | None = None, model: str | None = None) -> Derenderer:
        """A streaming derender that carries the signed state for you: ``await d.push(chunk)``."""
        return Derenderer(self._req, kind, request=request, prompt_token_ids=prompt_token_ids, model=model)

    async def cancel(self, request_id: str) -> None:
        """Cancel a request by id (``stream.id``); its stream ends with status ``"cancelled"``."""
        await self._live.cancel(request_id)


async def _open_or_close(transport: HttpTransport) -> None:
    try:
        await transport.open()
    except BaseException:
        await transport.aclose()
        raise


class _Connecting:
    """``await connect(...)`` gives a connected client; ``async with connect(...)`` also closes it."""

    def __init__(self, client: AsyncClient) -> None:
        self._client = client

    def __await__(self) -> Generator[Any, None, AsyncClient]:
        return self._client.connect().__await__()

    async def __aenter__(self) -> AsyncClient:
        return await self._client.connect()

    async def __aexit__(self, *exc: object) -> None:
        await self._client.aclose()


def connect(url: str | Sequence[str], *, api_key: str | None = None, transport: TransportChoice = "auto",
            **options: Any) -> _Connecting:
    """Open a session with a tokenwire server (or the first reachable of several replicas that
    share a ``--state-secret``). Options: see :class:`client_sdk.options.Options`."""
    return _Connecting(AsyncClient(url, api_key=api_key, transport=transport, **options))
