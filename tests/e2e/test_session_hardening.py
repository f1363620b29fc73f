"""Issue 19's WebSocket session findings that need a real server process and socket:

- a resumable stream whose session reaches its lifetime resumes through ``client_sdk`` (which reads
  ``session_closed`` as the connection going away) with the output of an uninterrupted run;
- ``session.update`` settings are bounded: 4 MB updates are refused (the session lives on), the
  echo stays small, and the server's memory returns to its level once such sessions close.

The burst past ``max_in_flight``, the closing session's final frames and a resumed stream resumed
again: tests/app/test_session_hardening.py (in process).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest

import client_sdk
from tests.e2e.client_support import serve_args
from tests.support.server_proc import ServerProcess
from tests.support.ws_fuzz import open_session

pytestmark = pytest.mark.slow

USER = [{"role": "user", "content": "Count to ten."}]


def test_a_resumable_stream_outlives_its_sessions_lifetime_through_the_sdk(asset: Callable[[str], Path]) -> None:
    # A replayed resume spends one decode step per token already streamed before its first new
    # token (docs/engine.md): past ~200 tokens that is longer than this 2 s lifetime, so every new
    # session would end before any progress. fp32 resumes are exact with one re-prefill.
    body: dict[str, Any] = {"messages": USER, "max_tokens": 400, "temperature": 0, "ignore_eos": True,
                            "vllm_xargs": {"resume_replay": False}}
    with ServerProcess(serve_args(asset("tiny-qwen3"), "--ws-max-lifetime", "2")) as srv:
        want = httpx.post(srv.url + "/v1/chat/completions", json=body, timeout=120).json()
        want_text = want["choices"][0]["message"]["content"]

        async def main() -> tuple[str, int]:
            async with client_sdk.connect(srv.url, resumable=True, timeout=60) as client:
                stream = await client.chat.completions.create(**body, stream=True)
                parts = [c.choices[0].delta.content or "" async for c in stream if c.choices]
                assert stream.status == "completed"
                return "".join(parts), stream.resumes

        text, resumes = asyncio.run(main())
    assert resumes >= 1  # the session's lifetime ended mid-stream at least once
    assert text == want_text


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError("no VmRSS in /proc status")


def test_session_settings_are_bounded_and_memory_returns_after_such_sessions_close(
        asset: Callable[[str], Path]) -> None:
    # Ten 4 MB chat_template_kwargs updates per session used to be merged and echoed whole (a
    # 41.7 MB session.updated, past the server's own 16 MiB frame limit), and six such sessions kept
    # ~450 MB of RSS after they closed.
    def sessions_with_huge_updates(srv: ServerProcess) -> list[int]:
        socks = [open_session(srv.ws_url) for _ in range(6)]
        replies = []
        for k in range(10):
            for ws in socks:
                ws.send(orjson.dumps({"type": "session.update", "event_id": f"u{k}", "session": {
                    "chat_template_kwargs": {f"k{k}": "x" * 4_000_000}}}).decode())
                text = ws.recv(timeout=60)
                reply = orjson.loads(text)
                assert (reply["type"], reply["error"]["code"], reply["error"]["param"]) == (
                    "error", "invalid_frame", "session.chat_template_kwargs"), reply
                replies.append(len(text))
        for ws in socks:  # each session lives on, with the settings it had
            ws.send(orjson.dumps({"type": "session.update", "session": {
                "chat_template_kwargs": {"enable_thinking": False}}}).decode())
            updated = orjson.loads(ws.recv(timeout=60))
            assert updated["session"]["chat_template_kwargs"] == {"enable_thinking": False}
            ws.close()
        return replies

    with ServerProcess(["launch", "render", str(asset("qwen3"))]) as srv:
        assert srv.proc is not None
        sessions_with_huge_updates(srv)  # warm-up: the allocator's working set for 4 MB messages
        time.sleep(1)
        baseline = rss_mib(srv.proc.pid)
        for _ in range(2):
            replies = sessions_with_huge_updates(srv)
            assert max(replies) < 1024
        time.sleep(1)
        after = rss_mib(srv.proc.pid)
    assert after - baseline < 24, (baseline, after)
