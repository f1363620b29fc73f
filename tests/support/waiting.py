"""Waiting in tests: poll for the condition a test needs, and fail saying what did not happen.

A wait that gives up silently lets a test go on regardless and fail later with a message about
something else (issue 21: a four-stream wait that timed out under load showed up as an
uncoalesced-frame count). Every wait in tests/ goes through :func:`wait_until` or raises likewise."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


class WaitTimeout(AssertionError):
    """A condition a test waited for did not come in time (an assertion failure, with the reason)."""


def wait_until(check: Callable[[], T | None], what: str, *, timeout: float, interval: float = 0.05,
               detail: Callable[[], object] | None = None) -> T:
    """Poll ``check`` until it returns something truthy and return that; past ``timeout`` seconds
    raise :class:`WaitTimeout` naming ``what`` (and ``detail()``, the state at the end, when given)."""
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() >= deadline:
            end = f" ({detail()})" if detail is not None else ""
            raise WaitTimeout(f"waited {timeout:g} s for {what}{end}")
        time.sleep(interval)
