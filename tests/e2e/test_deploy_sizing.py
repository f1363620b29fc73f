"""The figures of docs/deploy.md's sizing model, measured on the reference deployment (deploy/):
front-end memory per idle WebSocket session, front-end and HAProxy CPU per streamed token, engine
tokens/s and engine CPU per token, for streams spread by the balancer over both front ends.

Writes tests/artifacts/deploy_sizing.json and prints a line; asserts only that every stream
completed with its full token count (the figures depend on the machine and its load).
``TOKENWIRE_SIZING_MODEL`` picks another asset for the engines and front ends (docs/deploy.md's
figures: ``smollm2-135m-instruct``, the default model); the suite uses tiny-qwen3.
"""

from __future__ import annotations

import asyncio
import json
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest

import client_sdk
from tests.e2e.deploy_support import Topology, sessions_per_server

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]

ARTIFACTS = Path(__file__).resolve().parents[1] / "artifacts"
SESSIONS = 256  # idle sessions opened for the memory figure
STREAMS = 64  # concurrent streams for the CPU figures (on 32 of those sessions)
TOKENS = 64


def rss(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise RuntimeError("no VmRSS")


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime + stime


def test_sizing_figures_of_the_reference_deployment(asset: Callable[[str], Path],
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    model = os.environ.get("TOKENWIRE_SIZING_MODEL", "tiny-qwen3")
    body: dict[str, Any] = {"messages": [{"role": "user", "content": "Write a story about the sea."}], "max_tokens": TOKENS,
                            "temperature": 0, "ignore_eos": True}
    with Topology(asset(model), wire="ws") as topo:
        assert topo.lb is not None and topo.engine_lb is not None
        fe = [p.proc.pid for p in topo.frontends if p.proc is not None]
        en = [p.proc.pid for p in topo.engines if p.proc is not None]
        lbs = [p.proc.pid for p in (topo.lb, topo.engine_lb) if p.proc is not None]
        for _ in range(2):  # warm both front ends and both engines
            assert httpx.post(topo.url + "/v1/chat/completions", json=body, timeout=300).status_code == 200

        async def main() -> dict[str, Any]:
            before = [rss(p) for p in fe]
            clients = []
            for _ in range(0, SESSIONS, 32):
                clients += await asyncio.gather(*(client_sdk.connect(topo.url).__aenter__() for _ in range(32)))
            await asyncio.sleep(1.0)
            idle = [rss(p) for p in fe]
            spread = sessions_per_server(topo.lb)  # type: ignore[arg-type]
            try:
                cpu0 = {p: cpu_seconds(p) for p in (*fe, *en, *lbs)}
                started = time.monotonic()
                streams = await asyncio.gather(*(
                    clients[k % 32].chat.completions.create(**body, stream=True,
                                                            stream_options={"include_usage": True})
                    for k in range(STREAMS)))

                async def read(stream: Any) -> int:
                    usage = 0
                    async for chunk in stream:
                        if chunk.usage is not None:
                            usage = chunk.usage.completion_tokens
                    return usage

                tokens = await asyncio.gather(*(read(s) for s in streams))
                wall = time.monotonic() - started
                cpu = {p: cpu_seconds(p) - cpu0[p] for p in cpu0}
            finally:
                for c in clients:
                    await c.__aexit__(None, None, None)
            return {"before": before, "idle": idle, "spread": spread, "tokens": tokens, "wall": wall, "cpu": cpu}

        out = asyncio.run(main())
    assert out["tokens"] == [TOKENS] * STREAMS
    total = sum(out["tokens"])
    per_session = [(i - b) / out["spread"][f"fe{k + 1}"] for k, (b, i) in enumerate(zip(out["before"], out["idle"],
                                                                                       strict=True))]
    figures = {
        "model": model, "streams": STREAMS, "tokens_per_stream": TOKENS, "idle_sessions": SESSIONS,
        "sessions_per_frontend": out["spread"], "cpus": os.cpu_count(), "load_average": os.getloadavg(),
        "frontend_rss_mib": [r / 2**20 for r in out["before"]],
        "frontend_kib_per_idle_session": [s / 1024 for s in per_session],
        "frontend_cpu_us_per_token": sum(out["cpu"][p] for p in fe) / total * 1e6,
        "haproxy_cpu_us_per_token": sum(out["cpu"][p] for p in lbs) / total * 1e6,
        "engine_cpu_ms_per_token": sum(out["cpu"][p] for p in en) / total * 1e3,
        "engine_tokens_per_s": total / out["wall"],
        "wall_s": out["wall"],
    }
    ARTIFACTS.mkdir(exist_ok=True)
    (ARTIFACTS / "deploy_sizing.json").write_text(json.dumps(figures, indent=2))
    with capsys.disabled():
        print("\ndeploy sizing: " + json.dumps(figures))
