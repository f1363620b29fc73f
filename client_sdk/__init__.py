"""tokenwire's Python client: one WebSocket session carrying many requests, with an HTTP fallback.

::

    import client_sdk

    async with client_sdk.connect("http://127.0.0.1:8000") as client:          # async (the real one)
        stream = await client.chat.completions.create(messages=[...], stream=True)
        async for chunk in stream: ...

    with client_sdk.Client("http://127.0.0.1:8000") as client:                 # sync (a thin wrapper)
        for chunk in client.chat.completions.create(messages=[...], stream=True): ...

Importing this package loads neither torch nor transformers.
"""

from client_sdk.aio import AsyncClient, connect
from client_sdk.errors import (
    APIError,
    AuthenticationError,
    BadRequestError,
    BadStateError,
    ConflictError,
    ConnectError,
    ConnectionLostError,
    EngineTimeoutError,
    EngineUnavailableError,
    InternalServerError,
    NotEnabledError,
    NotFoundError,
    OverloadedError,
    PermissionDeniedError,
    ProtocolError,
    RateLimitError,
    RequestCancelled,
    RequestTimeout,
    RequestTooLargeError,
    TokenwireError,
    UnsupportedError,
    UpgradeRefused,
)
from client_sdk.options import Options
from client_sdk.sync import Client
from client_sdk.sync import connect as connect_sync

__all__ = [
    "APIError",
    "AsyncClient",
    "AuthenticationError",
    "BadRequestError",
    "BadStateError",
    "Client",
    "ConflictError",
    "ConnectError",
    "ConnectionLostError",
    "EngineTimeoutError",
    "EngineUnavailableError",
    "InternalServerError",
    "NotEnabledError",
    "NotFoundError",
    "Options",
    "OverloadedError",
    "PermissionDeniedError",
    "ProtocolError",
    "RateLimitError",
    "RequestCancelled",
    "RequestTimeout",
    "RequestTooLargeError",
    "TokenwireError",
    "UnsupportedError",
    "UpgradeRefused",
    "connect",
    "connect_sync",
]
