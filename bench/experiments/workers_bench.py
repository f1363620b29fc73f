"""``--workers``: streamed tokens/s at saturation through ``launch render --engine-url ws://…`` with
1 and with 2 worker processes, in front of one engine, in the same run.

One engine (``--engine tokens-only``: a real ``serve --tokens-only`` of ``--model``; ``--engine
paced``: bench/paced_engine.py, no model, so that the front end is what saturates), two front ends
on their own ports (``--workers 1`` and ``--workers 2``; the idle one costs next to nothing), and
rounds that alternate which goes first (1, 2 / 2, 1 / …) so that a machine shared with other work
loads both alike. Each phase sends ``--concurrency`` chat streams (SSE, one connection each,
``ignore_eos``, ``--tokens`` each) at once and waits for all: tokens/s is the streams' completion
tokens over the phase's wall time. Also per streamed token: the front end's CPU (the supervisor and
every worker, from ``/proc``), the engine's, and the benchmark client's own (this process: it shares
the cores). Prints one JSON document (also written to ``--out``) with each phase and the 2 ÷ 1
ratio of each round.

    .venv/bin/python -m bench.experiments.workers_bench [--model DIR] [--engine tokens-only|paced] [--concurrency 64]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import statistics
import time
from pathlib import Path
from typing import Any

import orjson

from bench.loopback import PacedEngineProcess, SseStream, cpu_seconds, emit, model_or_default, render_server
from tests.support.server_proc import ServerProcess


def tree(pid: int) -> list[int]:
    """``pid`` and its descendants (a supervisor's workers)."""
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        for task in Path(f"/proc/{p}/task").glob("*"):
            with contextlib.suppress(OSError):
                todo.extend(int(c) for c in (task / "children").read_text().split())
    return out


def pid_of(srv: ServerProcess) -> int:
    assert srv.proc is not None
    return srv.proc.pid


def cpu_of(pid: int) -> float:
    return sum(cpu_seconds(p) for p in tree(pid) if Path(f"/proc/{p}").exists())


async def _one(url: str, body: bytes) -> int:
    stream = await SseStream.connect(url)
    try:
        stream.send("/v1/chat/completions", body)
        tokens = 0
        async for data in stream.events():
            if data != b"[DONE]":
                usage = orjson.loads(data).get("usage")
                if usage:
                    tokens = usage["completion_tokens"]
        return tokens
    finally:
        stream.close()


def phase(url: str, fe_pid: int, engine_pid: int, concurrency: int, tokens: int) -> dict[str, Any]:
    body = orjson.dumps({"model": "bench", "messages": [{"role": "user", "content": "Tell me about rivers."}],
                         "max_tokens": tokens, "ignore_eos": True, "temperature": 0, "stream": True,
                         "stream_options": {"include_usage": True}})
    fe0, en0, cl0, t0 = cpu_of(fe_pid), cpu_seconds(engine_pid), time.process_time(), time.perf_counter()

    async def run() -> list[int]:
        return await asyncio.gather(*(_one(url, body) for _ in range(concurrency)))

    counts = asyncio.run(run())
    wall = time.perf_counter() - t0
    fe, en, cl = cpu_of(fe_pid) - fe0, cpu_seconds(engine_pid) - en0, time.process_time() - cl0
    total = sum(counts)
    assert total == concurrency * tokens, (total, concurrency * tokens)
    return {"tokens": total, "wall_s": round(wall, 3), "tokens_per_s": round(total / wall, 1),
            "front_end_cpu_us_per_token": round(fe / total * 1e6, 1), "front_end_cores": round(fe / wall, 2),
            "engine_cpu_us_per_token": round(en / total * 1e6, 1),
            "client_cpu_us_per_token": round(cl / total * 1e6, 1), "client_cores": round(cl / wall, 2)}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default=None, help="model directory; default: the embedded SmolLM2")
    p.add_argument("--engine", choices=("tokens-only", "paced"), default="tokens-only")
    p.add_argument("--step-ms", type=float, default=20.0, help="the paced engine's step")
    p.add_argument("--concurrency", type=int, default=64)
    p.add_argument("--tokens", type=int, default=64)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--out", default=None)
    args = p.parse_args(argv)
    model = model_or_default(args.model)
    if args.engine == "paced":
        engine: Any = PacedEngineProcess(model, step_ms=args.step_ms)
    else:
        engine = ServerProcess(["serve", str(model), "--tokens-only", "--dtype", "float32", "--log-level", "warning",
                                "--max-num-seqs", str(args.concurrency)], startup_timeout=300)
    with engine:
        engine_url = engine.url.replace("http://", "ws://")
        engine_pid = engine.pid if isinstance(engine, PacedEngineProcess) else pid_of(engine)
        fronts = {w: render_server(model, engine_url, extra=["--workers", str(w)]) for w in (1, 2)}
        try:
            for f in fronts.values():
                f.start()
            phase(fronts[1].url, pid_of(fronts[1]), engine_pid, 4, 8)  # warm both (first-use tables)
            phase(fronts[2].url, pid_of(fronts[2]), engine_pid, 8, 8)
            rounds = []
            for r in range(args.rounds):
                order = (1, 2) if r % 2 == 0 else (2, 1)
                got = {w: phase(fronts[w].url, pid_of(fronts[w]), engine_pid, args.concurrency, args.tokens)
                       for w in order}
                rounds.append({"order": list(order), "workers_1": got[1], "workers_2": got[2],
                               "ratio_tokens_per_s": round(got[2]["tokens_per_s"] / got[1]["tokens_per_s"], 2)})
        finally:
            for f in fronts.values():
                f.stop()
    ratios = [r["ratio_tokens_per_s"] for r in rounds]
    emit({"engine": args.engine, "model": model.name, "concurrency": args.concurrency, "tokens": args.tokens,
          "cpus": len(os.sched_getaffinity(0)), "load_avg": os.getloadavg(), "rounds": rounds,
          "median_ratio": statistics.median(ratios)}, args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
