"""The in-process ring: every test here runs under blockbuster, which makes a blocking call (a file
read, ``os.stat``, ``time.sleep``, a socket read without ``await``) made on a running event loop
raise ``BlockingError``. The app turns an exception in a route into a 500 and logs it, so the
fixture also fails the test when any such error was logged, whatever the test asserts."""

from __future__ import annotations

import logging
from collections.abc import Iterator

import pytest
from blockbuster import BlockingError, blockbuster_ctx


class _Blocked(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.ERROR)
        self.seen: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        error = record.exc_info[1] if record.exc_info else None
        if isinstance(error, BlockingError):
            self.seen.append(f"{record.name}: {error}")


@pytest.fixture(autouse=True)
def _the_event_loop_never_blocks() -> Iterator[None]:
    blocked = _Blocked()
    root = logging.getLogger()
    root.addHandler(blocked)
    try:
        with blockbuster_ctx():
            yield
    finally:
        root.removeHandler(blocked)
    assert blocked.seen == [], f"a blocking call on the event loop: {blocked.seen}"
