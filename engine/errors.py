"""Errors of the generate stage.

::

    EngineError                      base; carries ``status`` (an HTTP status hint) and ``code``
    ├── InvalidGenerateRequest       400 — bad sampling params, prompt too long, ids out of vocab
    │                                    (also a ValueError)
    ├── EngineOverloaded             503 — admission queue full
    ├── EngineUnavailable            502 — remote engine down / unreachable, local engine stopped
    │   └── EngineShutDown           503 — the server is shutting down (graceful shutdown's deadline)
    ├── EngineProtocolError          502 — a bad engine answer (engine/inbound.py): ``engine_error``
    ├── EngineTimeout                504 — remote engine did not answer in time
    └── EngineInternalError          500 — a step failed; message is safe to show, details are logged

Messages are written for the client: they never contain exception text from inside the engine.
"""

from __future__ import annotations


class EngineError(Exception):
    status: int = 500
    code: str = "engine_error"

    def __init__(self, message: str, *, param: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.param = param


class InvalidGenerateRequest(EngineError, ValueError):
    status = 400
    code = "invalid_request"


class EngineOverloaded(EngineError):
    status = 503
    code = "overloaded"


class EngineUnavailable(EngineError):
    status = 502
    code = "engine_unavailable"


class EngineShutDown(EngineUnavailable):
    status = 503
    code = "shutting_down"


class EngineProtocolError(EngineError):
    """A bad engine, not a bad request: what it sent is malformed, oversized or more than the request
    allows (engine/inbound.py). The message names the engine and what was wrong, never a value the
    engine sent; the details go to the log."""

    status = 502
    code = "engine_error"


class EngineTimeout(EngineError):
    status = 504
    code = "engine_timeout"


class EngineInternalError(EngineError):
    status = 500
    code = "engine_internal_error"
