"""End-to-end streaming benchmark of ``tokenwire serve``: time to first token and inter-token
latency through ``/v1/chat/completions`` (SSE), and the server's own overhead per token.

One real server process (loopback only) on the default model, with the scale-out endpoints on.
For each concurrency ``c`` (1, 8, 32 by default) the same ``c`` chat requests (greedy, eos ignored,
``--new-tokens`` each) run twice, interleaved over ``--rounds`` rounds:

- ``pipeline``: ``/v1/chat/completions`` with ``stream: true`` — render, engine, incremental
  derender and SSE framing;
- ``engine``: the same prompts pre-rendered, through ``/inference/v1/generate`` with
  ``stream: true`` — the engine and minimal framing only.

The server's overhead per token is the difference of the two runs' wall time divided by the
tokens generated, i.e. the time the full pipeline adds on top of generating the same tokens.
Figures are medians over rounds; the machine may be shared, so the ratios are the point.

    .venv/bin/python -m bench.serve_bench [--model DIR] [--concurrency 1 8 32] [--new-tokens 64]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx
import orjson

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.support.server_proc import ServerProcess  # noqa: E402

PROMPTS = [
    "What is the capital of France?", "Write a haiku about the sea.", "Explain a hash table briefly.",
    "List three uses of copper.", "Why is the sky blue?", "Say good morning in Spanish.",
    "How do I cook rice?", "What does HTTP stand for?",
]


def _pct(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    values = sorted(values)
    return values[min(len(values) - 1, int(q * len(values)))]


async def _stream(client: httpx.AsyncClient, path: str, body: dict[str, Any]) -> tuple[float, list[float], int]:
    """(time to first token, inter-token gaps, tokens) for one SSE request."""
    start = time.perf_counter()
    first = None
    last = start
    gaps: list[float] = []
    tokens = 0
    async with client.stream("POST", path, json=body) as r:
        r.raise_for_status()
        async for line in r.aiter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            data = orjson.loads(line[6:])
            if not data.get("choices"):
                continue
            choice = data["choices"][0]
            n = len(choice.get("token_ids") or []) if "delta" not in choice else 1
            if "delta" in choice and not (choice["delta"].get("content") or choice["delta"].get("reasoning")):
                continue
            now = time.perf_counter()
            if first is None:
                first = now - start
            else:
                gaps.append(now - last)
            last = now
            tokens += n
    return first or float("nan"), gaps, tokens


async def _phase(url: str, path: str, bodies: list[dict[str, Any]]) -> dict[str, Any]:
    async with httpx.AsyncClient(base_url=url, timeout=600, limits=httpx.Limits(max_connections=256)) as client:
        t0 = time.perf_counter()
        results = await asyncio.gather(*(_stream(client, path, b) for b in bodies))
        wall = time.perf_counter() - t0
    ttft = [r[0] for r in results]
    gaps = [g for r in results for g in r[1]]
    return {"wall_s": wall, "ttft": ttft, "gaps": gaps}


def _render_prompts(url: str, count: int, new_tokens: int, model: str) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    chat, generate = [], []
    for i in range(count):
        body = {"model": model, "messages": [{"role": "user", "content": PROMPTS[i % len(PROMPTS)]}],
                "max_tokens": new_tokens, "temperature": 0, "ignore_eos": True}
        chat.append({**body, "stream": True})
        req = httpx.post(url + "/v1/chat/completions/render", json=body, timeout=60).json()
        req["stream"] = True
        req["sampling_params"]["output_kind"] = 1
        generate.append(req)
    return chat, generate


def run(model: str | None, concurrency: list[int], new_tokens: int, rounds: int) -> dict[str, Any]:
    args = ["serve", *([model] if model else []), "--enable-scale-out", "--max-num-seqs", str(max(concurrency))]
    out: dict[str, Any] = {"benchmark": "serve_streaming", "new_tokens": new_tokens, "rounds": rounds,
                           "machine": {"cpus": _cpus(), "platform": platform.platform(),
                                       "python": platform.python_version()},
                           "commit": _commit(), "results": []}
    with ServerProcess(args, startup_timeout=600, env={"OMP_NUM_THREADS": None}) as srv:
        name = httpx.get(srv.url + "/v1/models").json()["data"][0]["id"]
        out["model"] = name
        for c in concurrency:
            chat, gen = _render_prompts(srv.url, c, new_tokens, name)
            asyncio.run(_phase(srv.url, "/v1/chat/completions", chat[:1]))  # warm-up
            pipe_runs, eng_runs = [], []
            for _ in range(rounds):
                pipe_runs.append(asyncio.run(_phase(srv.url, "/v1/chat/completions", chat)))
                eng_runs.append(asyncio.run(_phase(srv.url, "/inference/v1/generate", gen)))
            tokens = c * new_tokens
            pipe_wall = statistics.median(r["wall_s"] for r in pipe_runs)
            eng_wall = statistics.median(r["wall_s"] for r in eng_runs)
            ttft = [t for r in pipe_runs for t in r["ttft"]]
            gaps = [g for r in pipe_runs for g in r["gaps"]]
            eng_gaps = [g for r in eng_runs for g in r["gaps"]]
            out["results"].append({
                "concurrency": c,
                "ttft_ms": {"p50": 1e3 * _pct(ttft, 0.5), "p99": 1e3 * _pct(ttft, 0.99)},
                "itl_ms": {"p50": 1e3 * _pct(gaps, 0.5), "p99": 1e3 * _pct(gaps, 0.99)},
                "engine_only_itl_ms": {"p50": 1e3 * _pct(eng_gaps, 0.5), "p99": 1e3 * _pct(eng_gaps, 0.99)},
                "throughput_tok_s": {"pipeline": tokens / pipe_wall, "engine_only": tokens / eng_wall},
                "server_overhead_per_token_ms": 1e3 * (pipe_wall - eng_wall) / tokens,
                "pipeline_vs_engine_wall_ratio": pipe_wall / eng_wall,
            })
    return out


def _cpus() -> int:
    import os

    return len(os.sched_getaffinity(0))


def _commit() -> str:
    try:
        return subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True, cwd=ROOT,
                              check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default=None, help="model directory (default: the embedded default model)")
    p.add_argument("--concurrency", type=int, nargs="+", default=[1, 8, 32])
    p.add_argument("--new-tokens", type=int, default=64)
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--out", default=None, help="also write the JSON here")
    a = p.parse_args(argv)
    result = run(a.model, a.concurrency, a.new_tokens, a.rounds)
    text = json.dumps(result, indent=2)
    print(text)
    if a.out:
        Path(a.out).parent.mkdir(parents=True, exist_ok=True)
        Path(a.out).write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
