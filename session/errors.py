"""Errors of the sans-I/O core (render, derender, state codec, session protocol).

::

    SessionError                    base; ``status`` is an HTTP status hint, ``param`` names the
    │                               offending field when there is one
    ├── InvalidRequest              400 — a request the stages cannot serve (also a ValueError)
    │   ├── RenderError             400 — render rules (no tokens, prompt too long, beam search…)
    │   ├── DerenderError           400 — derender bounds and inputs
    │   └── StateError              400 — a client-carried state that is too big, forged,
    │                                     from another request, replayed or of an unknown version
    └── ModelNotFound               404 — the request names a model this server does not serve

The server translates these once, at its boundary, into each API's error envelope (OpenAI,
Anthropic, WebSocket ``error`` frames). Messages are written for the client.
"""

from __future__ import annotations


class SessionError(Exception):
    status: int = 400
    error_type: str = "BadRequestError"

    def __init__(self, message: str, *, param: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.param = param


class InvalidRequest(SessionError, ValueError):
    status = 400


class RenderError(InvalidRequest):
    pass


class DerenderError(InvalidRequest):
    pass


class StateError(InvalidRequest):
    """A derender state the server refuses. ``reason`` is a short machine-readable tag
    (``too_large``, ``bad_signature``, ``malformed``, ``unknown_version``, ``unknown_key``,
    ``wrong_request``, ``wrong_choice``, ``replayed``)."""

    def __init__(self, message: str, *, reason: str, param: str | None = "stream_state") -> None:
        super().__init__(message, param=param)
        self.reason = reason


class ModelNotFound(SessionError):
    status = 404
    error_type = "NotFoundError"

    def __init__(self, model: str, served: str | None = None) -> None:
        super().__init__(not_served_message(model, served), param="model")
        self.model = model


def not_served_message(model: str, served: str | None) -> str:
    """vLLM's sentence for a model it does not serve, then the one this server serves."""
    message = f"The model `{model}` does not exist."
    return message if served is None else f"{message} This server serves `{served}`."
