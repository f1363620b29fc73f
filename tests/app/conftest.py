"""The in-process ring: every test here runs under blockbuster, which makes a blocking call (a file
read, ``os.stat``, ``time.sleep``, a socket read without ``await``) made on a running event loop
raise ``BlockingError``. The app turns an exception in a route into a 500 and logs it, so the
fixture also fails the test when any such error was logged, whatever the test asserts. A test here
that runs past ``RING_TIMEOUT_S`` fails (no process to wait for: the slowest take about 12 s),
unless it sets its own ``pytest.mark.timeout``; the suite's default elsewhere is pyproject's."""

from __future__ import annotations

import logging
from collections.abc import Iterator

import pytest
from blockbuster import BlockingError, blockbuster_ctx

RING_TIMEOUT_S = 60

_HERE = __file__.rsplit("/", 1)[0]


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if str(item.path).startswith(_HERE) and item.get_closest_marker("timeout") is None:
            item.add_marker(pytest.mark.timeout(RING_TIMEOUT_S))


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
        with blockbuster_ctx() as bb:
            # /metrics' process collector reads /proc on the loop, as it must to count the loop's
            # own tasks beside it: procfs reads never wait on a disk
            for name in ("io.BufferedReader.read", "io.TextIOWrapper.read", "os.stat", "os.listdir"):
                if name in bb.functions:
                    bb.functions[name].can_block_in("prometheus_client/process_collector.py", "collect")
            yield
    finally:
        root.removeHandler(blocked)
    assert blocked.seen == [], f"a blocking call on the event loop: {blocked.seen}"
