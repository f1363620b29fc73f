"""A second SIGINT or SIGTERM during the graceful drain quits at once (issue 19 item 10), as
uvicorn's Ctrl+C twice does: the stream in flight ends with the 503 ``shutting_down`` error event
and ``[DONE]``, the process exits 0 long before ``--shutdown-timeout``, and nothing logs a
``CancelledError`` or a traceback."""

from __future__ import annotations

import signal
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.e2e.test_shutdown import SseReader, server

pytestmark = pytest.mark.slow


@pytest.mark.parametrize("second", [signal.SIGINT, signal.SIGTERM])
def test_a_second_signal_during_the_drain_quits_at_once_without_a_traceback(
        asset: Callable[[str], Path], second: int) -> None:
    srv = server(asset, 120).start()
    try:
        sse = SseReader(srv, 3500)
        sse.start()
        assert sse.first.wait(60)
        assert srv.proc is not None
        srv.proc.send_signal(signal.SIGINT)
        time.sleep(1.0)
        assert srv.proc.poll() is None  # draining: the stream goes on
        sent = time.monotonic()
        srv.proc.send_signal(second)
        code = srv.proc.wait(30)
        quit_in = time.monotonic() - sent
        sse.join(30)
    finally:
        srv.stop()
    log = srv.output()
    assert code == 0, log
    assert quit_in < 15, log  # not the 120 s drain
    assert "CancelledError" not in log and "Traceback" not in log, log
    assert sse.events[-1] == "[DONE]" and sse.events[-2]["error"]["code"] == 503, sse.events[-3:]
