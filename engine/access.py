"""How a front end reaches its engine: the engine key (``--engine-api-key``) sent as a bearer token,
the one error an engine's refusal of it becomes, and the engine request ids clients never see
(``tw-<16 random hex>-<n>``, drawn per engine client, so per front-end process; a client-visible id
never reaches the engine). Why and what each guards: docs/deploy.md, "The engine key".
"""

from __future__ import annotations

import itertools
import secrets

from engine.errors import EngineUnavailable

KEY_FLAG = "--engine-api-key"
KEY_ENV = "TOKENWIRE_ENGINE_API_KEY"


def check_key(key: str) -> str:
    """The key as a header value may carry it: printable ASCII, no spaces (``ValueError`` otherwise)."""
    if not key or not all(33 <= ord(c) < 127 for c in key):
        raise ValueError(f"{KEY_FLAG} (env {KEY_ENV}) must be printable ASCII without spaces")
    return key


def auth_headers(key: str | None) -> dict[str, str]:
    """The headers every request to the engine carries (none without a key)."""
    return {"Authorization": f"Bearer {key}"} if key else {}


def key_refused(status: int, *, key_sent: bool) -> EngineUnavailable:
    """The engine answered 401 / 403: the one-line error the operator and the client read (502)."""
    what = ("the engine requires an API key and this front end sent none" if not key_sent
            else "the engine refused this front end's engine API key")
    return EngineUnavailable(f"The remote engine refused the connection: {what} (HTTP {status}); set "
                             f"{KEY_FLAG} (env {KEY_ENV}) to one of the engine's --api-key values.")


class EngineIds:
    """``tw-<16 random hex>-<n>``: a new engine request id per call, unique in this process."""

    def __init__(self) -> None:
        self.prefix = f"tw-{secrets.token_hex(8)}"
        self._counter = itertools.count(1)

    def new(self) -> str:
        return f"{self.prefix}-{next(self._counter)}"
