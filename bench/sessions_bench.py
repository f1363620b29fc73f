"""Idle WebSocket sessions: the server's memory as sessions pile up.

One ``tokenwire launch render --engine-url`` process (paced engine behind it, loopback only). After a
warm-up session that streams one chat (so first-use allocations are done), sessions are opened in
steps up to the largest count asked for and held idle; at each step, after a short settle, the
server's RSS is read from ``/proc``. Reported: RSS per step, the KiB per session of each step and
of a least-squares line through all steps, whether every session still answers a ``ping`` at the
end, and the RSS after they all close. Prints one JSON document (also written to ``--out``).

    .venv/bin/python -m bench.sessions_bench [--sessions 250 500 1000 2000] [--out FILE]
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from pathlib import Path
from typing import Any

import orjson

from bench.loopback import (
    PacedEngineProcess,
    emit,
    event_loop_policy,
    model_or_default,
    raise_fd_limit,
    render_server,
    rss_bytes,
)

BATCH = 100  # sessions opened concurrently
SETTLE_S = 1.0


async def _open(ws_url: str) -> Any:
    from websockets.asyncio.client import connect

    ws = await connect(ws_url + "/v1/session", subprotocols=["tokenwire.v1"], max_size=1 << 24,  # type: ignore[list-item]
                       open_timeout=60, ping_interval=None)
    created = orjson.loads(await ws.recv())
    if created.get("type") != "session.created":
        raise RuntimeError(f"unexpected first frame {created}")
    return ws


async def _warm_up(ws_url: str) -> None:
    ws = await _open(ws_url)
    await ws.send(orjson.dumps({"type": "chat", "id": "warm", "body": {
        "messages": [{"role": "user", "content": "warm up"}], "max_tokens": 4}}).decode())
    while True:
        frame = orjson.loads(await ws.recv())
        if frame.get("id") == "warm" and frame["type"] in ("chat.done", "error"):
            break
    await ws.close()


async def measure(ws_url: str, pid: int, steps: list[int]) -> dict[str, Any]:
    await _warm_up(ws_url)
    await asyncio.sleep(SETTLE_S)
    base = rss_bytes(pid)
    points: list[dict[str, Any]] = [{"sessions": 0, "rss_mib": base / 2**20}]
    sockets: list[Any] = []
    open_s = 0.0
    for target in steps:
        t0 = time.perf_counter()
        while len(sockets) < target:
            n = min(BATCH, target - len(sockets))
            sockets += await asyncio.gather(*(_open(ws_url) for _ in range(n)))
        open_s += time.perf_counter() - t0
        await asyncio.sleep(SETTLE_S)
        rss = rss_bytes(pid)
        points.append({"sessions": target, "rss_mib": rss / 2**20,
                       "kib_per_session": (rss - base) / 1024 / target if target else None})
    # every session is still alive: one ping each, one pong each
    for i, ws in enumerate(sockets):
        await ws.send(orjson.dumps({"type": "ping", "event_id": f"p{i}"}).decode())
    pongs = 0
    for ws in sockets:
        frame = orjson.loads(await asyncio.wait_for(ws.recv(), 60))
        pongs += frame.get("type") == "pong"
    await asyncio.gather(*(ws.close() for ws in sockets))
    await asyncio.sleep(SETTLE_S * 2)
    after = rss_bytes(pid)
    xs = [p["sessions"] for p in points]
    ys = [p["rss_mib"] * 1024 for p in points]
    slope = _slope(xs, ys)
    return {"points": points, "kib_per_session_fit": slope, "sessions_max": steps[-1],
            "alive_at_end": pongs, "open_rate_per_s": steps[-1] / open_s if open_s else None,
            "rss_after_close_mib": after / 2**20, "rss_base_mib": base / 2**20}


def _slope(xs: list[float], ys: list[float]) -> float:
    n = len(xs)
    mx, my = sum(xs) / n, sum(ys) / n
    den = sum((x - mx) ** 2 for x in xs)
    return sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / den if den else float("nan")


def run(model: Path, steps: list[int]) -> dict[str, Any]:
    raise_fd_limit(2 * max(steps) + 1024)
    with PacedEngineProcess(model, step_ms=10) as engine, render_server(model, engine.url) as srv:
        assert srv.proc is not None
        with event_loop_policy() as loop:
            result = asyncio.run(measure(srv.ws_url, srv.proc.pid, steps))
    return {"benchmark": "idle_sessions", "server": "tokenwire launch render --engine-url (paced engine)",
            "model": model.name, "client_loop": loop, **result}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default=None, help="model directory (tokenizer); default: the embedded SmolLM2")
    p.add_argument("--sessions", type=int, nargs="+", default=[250, 500, 1000, 2000])
    p.add_argument("--out", default=None)
    a = p.parse_args(argv)
    model = model_or_default(a.model)
    result = run(model, sorted(a.sessions))
    emit(result, a.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
