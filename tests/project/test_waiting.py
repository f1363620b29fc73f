"""tests/support/waiting.py: a wait returns what it waited for, or fails naming it, never goes on."""

from __future__ import annotations

import itertools

import pytest

from tests.support.waiting import WaitTimeout, wait_until


def test_a_wait_returns_the_first_truthy_value() -> None:
    counter = itertools.count()
    assert wait_until(lambda: next(counter) >= 3 and "ready", "the counter to reach 3", timeout=30, interval=0) == "ready"


def test_a_wait_that_times_out_fails_naming_what_it_waited_for() -> None:
    with pytest.raises(WaitTimeout, match=r"waited 0 s for the engine to be idle \(2 live\)$"):
        wait_until(lambda: False, "the engine to be idle", timeout=0, detail=lambda: "2 live")
    assert issubclass(WaitTimeout, AssertionError)  # pytest reports it as a test failure
