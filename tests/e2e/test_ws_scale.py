"""Many sessions on one server process: 500 open at once, a chat streaming on 100 of them.

Reports the server's memory per idle session (RSS growth / sessions) on stdout and in
tests/artifacts/ws_scale.json (figures depend on the machine and what else runs on it)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.e2e.ws_client import SessionClient, chat_text
from tests.support.server_proc import ServerProcess

pytestmark = pytest.mark.slow  # real servers loading models: the full suite only, not the fast loop

SESSIONS = 500
STREAMING = 100
ARTIFACTS = Path(__file__).resolve().parents[1] / "artifacts"


def rss(pid: int) -> int:
    """Resident set size in bytes (Linux /proc; no extra dependency)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise RuntimeError("no VmRSS in /proc status")


def body(i: int) -> dict[str, Any]:
    return {"model": "tiny-qwen3", "temperature": 1.0, "seed": i % 10, "max_tokens": 16,
            "messages": [{"role": "user", "content": f"Tell me about topic {i % 10}"}]}


def test_500_sessions_with_100_streaming_chats_lose_and_duplicate_nothing(
        asset: Callable[[str], Path], capsys: pytest.CaptureFixture[str]) -> None:
    with ServerProcess(["serve", str(asset("tiny-qwen3")), "--dtype", "float32"]) as srv:
        assert srv.proc is not None
        pid = srv.proc.pid
        reference = {i: httpx.post(srv.url + "/v1/chat/completions", json=body(i), timeout=120).json()
                     for i in range(10)}
        want = {i: r["choices"][0]["message"]["content"] for i, r in reference.items()}

        async def main() -> dict[str, Any]:
            warm = await SessionClient.open(srv.ws_url)  # first-use allocations happen before measuring
            await warm.send(type="chat", id="w", body=body(0))
            await warm.until("w", "chat.done")
            await warm.close()
            await asyncio.sleep(0.5)
            before = rss(pid)
            clients: list[SessionClient] = []
            for start in range(0, SESSIONS, 50):
                clients += await asyncio.gather(*(SessionClient.open(srv.ws_url) for _ in range(start, start + 50)))
            await asyncio.sleep(0.5)
            idle = rss(pid)

            async def stream(i: int) -> tuple[int, list[dict[str, Any]]]:
                client = clients[i * (SESSIONS // STREAMING)]
                await client.send(type="chat", id=f"c{i}", body=body(i), resumable=True)
                return i, await client.until(f"c{i}", "chat.done")

            results = await asyncio.gather(*(stream(i) for i in range(STREAMING)))
            peak = rss(pid)
            for client in clients:  # every session is still alive and in order
                await client.send(type="ping", event_id="alive")
            pongs = [await client.next() for client in clients]
            await asyncio.gather(*(client.close() for client in clients))
            return {"before": before, "idle": idle, "peak": peak, "results": results, "pongs": pongs}

        out = asyncio.run(main())
    for i, frames in out["results"]:
        assert frames[-1]["type"] == "chat.done" and frames[-1]["status"] == "completed", frames[-1]
        assert not [f for f in frames if f["type"] == "error"]
        assert chat_text(frames) == want[i % 10]
        ids = [t for f in frames[:-1] for t in f["output_token_ids"]]
        assert len(ids) == 16  # every generated token delivered exactly once
    assert all(p["type"] == "pong" and p["event_id"] == "alive" for p in out["pongs"])
    per_session = (out["idle"] - out["before"]) / SESSIONS
    figures = {"sessions": SESSIONS, "streaming": STREAMING, "rss_before_mib": out["before"] / 2**20,
               "rss_idle_mib": out["idle"] / 2**20, "rss_peak_mib": out["peak"] / 2**20,
               "kib_per_idle_session": per_session / 1024}
    ARTIFACTS.mkdir(exist_ok=True)
    (ARTIFACTS / "ws_scale.json").write_text(json.dumps(figures, indent=2))
    with capsys.disabled():
        print(f"\nws scale: {SESSIONS} idle sessions cost {per_session / 1024:.1f} KiB each of server RSS "
              f"({out['before'] / 2**20:.0f} → {out['idle'] / 2**20:.0f} MiB; peak while {STREAMING} streamed "
              f"{out['peak'] / 2**20:.0f} MiB)")
