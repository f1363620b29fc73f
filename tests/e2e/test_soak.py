"""The short CI form of the load and soak bench (``bench/soak.py``; the full form runs 200 sessions for
minutes): a handful of WebSocket sessions making mixed requests against one real server lose and
duplicate no token (every chat stream equals its non-streaming derender), break no ``seq``, get no
error, and leave the server with the file descriptors, event-loop tasks, sessions and generations
it had before."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path

import pytest

from bench.soak import server_args, soak
from tests.support.server_proc import ServerProcess

pytestmark = pytest.mark.slow


def test_a_short_soak_loses_nothing_and_leaks_nothing(asset: Callable[[str], Path]) -> None:
    with ServerProcess(server_args(asset("tiny-qwen3")), startup_timeout=180) as srv:
        result = asyncio.run(soak(srv.url, sessions=12, duration=60, requests=8, warmup=0, new_tokens=8,
                                  log=lambda line: None))
        assert "Traceback" not in srv.output(), srv.output()[-4000:]
    assert result["requests"] == 12 * 8, result
    assert (result["lost_or_duplicated_streams"], result["verify_failures"], result["seq_breaks"]) == (0, 0, 0), result
    assert (result["error_frames"], result["sessions_broken"]) == ({}, {}), result
    assert result["chats_verified"] > 0 and result["generates_verified"] > 0, result
    assert result["active_sessions_after"] == 0 and result["inflight_generations_after"] == 0, result
    assert result["event_loop_tasks"]["after"] <= result["event_loop_tasks"]["before"], result
    assert result["open_fds"]["after"] <= result["open_fds"]["before"], result
