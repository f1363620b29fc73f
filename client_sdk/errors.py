"""The client's one exception tree (:class:`TokenwireError` and its subclasses, one per wire error
code's HTTP status), and the one place where wire errors become exceptions: :func:`from_error_body`,
:func:`from_http`, :func:`from_close` and :func:`transport_errors`. The tree and the mapping:
docs/client.md, "Errors".
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import orjson

from session.error_codes import code_for_status


class TokenwireError(Exception):
    """Base class of the client's errors."""


class ConnectError(TokenwireError, ConnectionError):
    """No session could be opened (server unreachable, handshake failed, reconnects exhausted)."""


class UpgradeRefused(ConnectError):
    """The WebSocket upgrade got an HTTP answer that is not tokenwire's own refusal (a proxy or a
    server without WebSockets). ``status`` is that answer's HTTP status (0 when there was none)."""

    def __init__(self, message: str, *, status: int = 0) -> None:
        super().__init__(message)
        self.status = status


class ConnectionLostError(TokenwireError, ConnectionError):
    """The connection dropped while a request that cannot be resumed was in flight."""

    def __init__(self, message: str, *, code: int | None = None, reason: str = "") -> None:
        super().__init__(message)
        self.code = code
        self.reason = reason


class ProtocolError(TokenwireError):
    """The server sent something docs/protocol.md does not allow."""


class RequestTimeout(TokenwireError, TimeoutError):
    """No frame of the request arrived within the timeout; the request was cancelled."""


class RequestCancelled(TokenwireError):
    """The request was cancelled before it produced the awaited result."""


class UnsupportedError(TokenwireError, NotImplementedError):
    """The transport in use (or the server) cannot do what was asked."""


class APIError(TokenwireError):
    """The server refused or failed a request."""

    status: int = 400

    def __init__(self, message: str, *, code: str, status: int | None = None, param: str | None = None,
                 reason: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.code = code
        if status is not None:
            self.status = status
        self.param = param
        self.reason = reason

    def __repr__(self) -> str:
        return f"{type(self).__name__}(code={self.code!r}, status={self.status}, message={self.message!r})"


class BadRequestError(APIError):
    status = 400


class BadStateError(BadRequestError):
    pass


class AuthenticationError(APIError):
    status = 401


class PermissionDeniedError(APIError):
    status = 403


class NotFoundError(APIError):
    status = 404


class NotEnabledError(NotFoundError):
    pass


class ConflictError(APIError):
    status = 409


class RequestTooLargeError(APIError):
    status = 413


class RateLimitError(APIError):
    status = 429


class InternalServerError(APIError):
    status = 500


class EngineUnavailableError(APIError):
    status = 502


class OverloadedError(APIError):
    status = 503


class EngineTimeoutError(APIError):
    status = 504


_BY_CODE: dict[str, type[APIError]] = {
    "bad_state": BadStateError,
    "not_enabled": NotEnabledError,
}
_BY_STATUS: dict[int, type[APIError]] = {
    400: BadRequestError, 401: AuthenticationError, 403: PermissionDeniedError, 404: NotFoundError,
    409: ConflictError, 413: RequestTooLargeError, 422: BadRequestError, 429: RateLimitError,
    500: InternalServerError, 502: EngineUnavailableError, 503: OverloadedError, 504: EngineTimeoutError,
}


def from_error_body(error: dict[str, Any]) -> APIError | RequestCancelled:
    """An ``error`` frame's ``error`` object (``code``, ``message``, ``status``, ``param``,
    ``reason``) as an exception. ``cancelled`` (a render / derender cancelled by the client) is
    :class:`RequestCancelled`."""
    code = str(error.get("code") or "internal_error")
    message = str(error.get("message") or code)
    if code == "cancelled":
        return RequestCancelled(message)
    raw_status = error.get("status")
    status = raw_status if isinstance(raw_status, int) else 500
    cls = _BY_CODE.get(code) or _BY_STATUS.get(status) or (InternalServerError if status >= 500 else APIError)
    param = error.get("param")
    reason = error.get("reason")
    return cls(message, code=code, status=status, param=param if isinstance(param, str) else None,
               reason=reason if isinstance(reason, str) else None)


def http_error_body(status: int, body: bytes | dict[str, Any] | None) -> dict[str, Any]:
    """An HTTP error answer (OpenAI or Anthropic envelope, or anything else) as the ``error``
    object of an ``error`` frame, so both transports raise through :func:`from_error_body`."""
    data: Any = body
    if isinstance(body, bytes | bytearray):
        try:
            data = orjson.loads(body)
        except orjson.JSONDecodeError:
            data = None
    inner = data.get("error") if isinstance(data, dict) else None
    message = f"HTTP {status}"
    param = None
    if isinstance(inner, dict):
        message = str(inner.get("message") or message)
        param = inner.get("param") if isinstance(inner.get("param"), str) else None
    # the protocol's code for the status (docs/protocol.md §7), from the table the server uses too
    return {"code": code_for_status(status), "message": message, "status": status, "param": param}


def from_http(status: int, body: bytes | dict[str, Any] | None) -> APIError | RequestCancelled:
    return from_error_body(http_error_body(status, body))


def is_tokenwire_refusal(body: bytes) -> bool:
    """Whether an HTTP answer to the upgrade is tokenwire's own (an OpenAI-style JSON error)."""
    try:
        data = orjson.loads(body)
    except orjson.JSONDecodeError:
        return False
    return isinstance(data, dict) and isinstance(data.get("error"), dict) and "message" in data["error"]


def from_close(code: int | None, reason: str) -> ConnectionLostError:
    if code is None:
        return ConnectionLostError("The connection to the server was lost.")
    text = f" ({reason})" if reason else ""
    return ConnectionLostError(f"The server closed the session with code {code}{text}.", code=code, reason=reason)


@contextlib.contextmanager
def transport_errors(what: str) -> Iterator[None]:
    """Map the socket libraries' exceptions (``websockets``, ``httpx``, ``OSError``) raised while
    doing ``what`` to :class:`ConnectError` / :class:`ConnectionLostError` / :class:`RequestTimeout`."""
    import httpx
    from websockets.exceptions import ConnectionClosed, InvalidHandshake, InvalidURI

    try:
        yield
    except TokenwireError:
        raise
    except ConnectionClosed as exc:
        rcvd = exc.rcvd
        raise from_close(rcvd.code if rcvd else None, rcvd.reason if rcvd else "") from exc
    except InvalidURI as exc:
        raise ConnectError(f"{what}: invalid URL ({exc.uri!r})") from exc
    except InvalidHandshake as exc:
        raise UpgradeRefused(f"{what}: the WebSocket handshake failed ({type(exc).__name__}).") from exc
    except httpx.TimeoutException as exc:
        raise RequestTimeout(f"{what}: timed out.") from exc
    except httpx.ConnectError as exc:
        raise ConnectError(f"{what}: cannot connect ({type(exc).__name__}).") from exc
    except (httpx.TransportError, httpx.StreamError) as exc:
        raise ConnectionLostError(f"{what}: the connection was lost ({type(exc).__name__}).") from exc
    except TimeoutError as exc:
        raise ConnectError(f"{what}: timed out.") from exc
    except OSError as exc:
        raise ConnectError(f"{what}: cannot connect ({exc.strerror or type(exc).__name__}).") from exc
