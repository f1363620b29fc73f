"""tokenwire's engine beside vLLM's CPU engine in one run (issue 22, target 1): the same model
(SmolLM2-135M-Instruct, bf16 where the CPU has it), the same thread count, the same HTTP API
(``/inference/v1/generate`` of ``serve --tokens-only`` on both), alternating which side goes first
in each round; medians of the rounds.

For each thread count ``N`` (``--threads``; default 1 and every CPU this process may use) both
servers run at once, and only the side being measured gets requests: tokenwire with
``TOKENWIRE_NUM_THREADS=N``; vLLM with its OpenMP threads bound to cores ``0..N-1``
(``VLLM_CPU_OMP_THREADS_BIND``), compiled as it ships, or eager with
``--vllm-eager`` (tokenwire runs eager); ``--tokenwire-env NAME=VALUE`` sets more of tokenwire's
environment (e.g. ``GOMP_SPINCOUNT``). Per concurrency ``c``: ``c`` streams of ``--new-tokens``
tokens, greedy, eos ignored, after one warm-up of the same shape: aggregate tokens/s and the median
time to first token. Prints one JSON document (also written to ``--out``).

    .venv/bin/python -m bench.experiments.engine_vllm --vllm-python PATH [--threads 1 ALL] [--concurrency 1 8 16] [--rounds 3]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

from bench.engine_bench import chat_prompts
from bench.loopback import emit
from bench.machine import load_average
from bench.vllm_compare import (
    engine_dtype,
    generate_stream,
    server,
    tokenwire_cmd,
    vllm_cmd,
    vllm_env,
    vllm_version,
)


async def _level(url: str, prompts: list[list[int]], new_tokens: int) -> dict[str, Any]:
    await asyncio.gather(*(generate_stream(url, p, new_tokens) for p in prompts))  # warm-up of this batch shape
    t0 = time.perf_counter()
    got = await asyncio.gather(*(generate_stream(url, p, new_tokens) for p in prompts))
    wall = time.perf_counter() - t0
    tokens = sum(n for n, _ in got)
    if tokens != len(prompts) * new_tokens:
        raise RuntimeError(f"{url}: {tokens} tokens streamed, {len(prompts) * new_tokens} asked for")
    firsts = [f for _, f in got if f is not None]
    return {"tok_s": round(tokens / wall, 1), "ttft_ms": round(statistics.median(firsts) * 1e3, 1)}


def run(python: str, model: Path, threads: list[int], levels: list[int], new_tokens: int, rounds: int,
        eager: bool, tokenwire_env: dict[str, str] | None = None) -> dict[str, Any]:
    dtype = engine_dtype()
    prompts = chat_prompts(model, max(levels))
    common = [str(model), "--tokens-only", "--served-model-name", "bench", "--dtype", dtype,
              "--max-model-len", "2048", "--max-num-seqs", str(max(levels))]
    out: dict[str, Any] = {
        "benchmark": "engine_vllm", "model": model.name, "dtype": dtype, "new_tokens": new_tokens, "rounds": rounds,
        "vllm_version": vllm_version(python), "load_average_before": load_average(),
        "settings": {"tokenwire": "eager (no compilation), TOKENWIRE_NUM_THREADS=N, threads not bound, "
                                  "each forward at the thread count its plan chooses (TOKENWIRE_THREAD_PLAN)",
                     "tokenwire_env": tokenwire_env or {},
                     "vllm": ("eager (--enforce-eager)" if eager else "compiled as shipped (torch.compile)")
                     + ", VLLM_CPU_OMP_THREADS_BIND=0..N-1"},
        "threads": {}}
    for n in threads:
        print(f"engine_vllm: {n} thread(s): starting both servers", file=sys.stderr, flush=True)
        env = vllm_env(VLLM_CPU_OMP_THREADS_BIND="0" if n == 1 else f"0-{n - 1}")
        with contextlib.ExitStack() as stack:
            urls = {
                "tokenwire": stack.enter_context(server(tokenwire_cmd("serve", *common, "--log-level", "warning"),
                                                        env={**(tokenwire_env or {}), "TOKENWIRE_NUM_THREADS": str(n)})),
                "vllm": stack.enter_context(server(vllm_cmd(python, "serve", *common,
                                                            *(["--enforce-eager"] if eager else [])), env=env)),
            }
            out.setdefault("tokenwire_kernels", _kernels(urls["tokenwire"]))
            samples: dict[str, dict[int, list[dict[str, Any]]]] = {s: {c: [] for c in levels} for s in urls}
            for r in range(rounds):
                order = ("tokenwire", "vllm") if r % 2 == 0 else ("vllm", "tokenwire")
                for side in order:
                    for c in levels:
                        print(f"engine_vllm: {n} thread(s), round {r + 1}/{rounds}, {side}, {c} stream(s)",
                              file=sys.stderr, flush=True)
                        samples[side][c].append(asyncio.run(_level(urls[side], prompts[:c], new_tokens)))
            plan = _kernels(urls["tokenwire"], ("thread_plan", "forwards_by_threads"))
        out["threads"][str(n)] = _summary(samples, levels)
        out.setdefault("tokenwire_thread_plan", {})[str(n)] = plan
    out["load_average_after"] = load_average()
    return out


_KERNEL_KEYS = ("linear_kernel", "attention_kernel", "omp_wait_policy", "dtype")


def _kernels(url: str, keys: tuple[str, ...] = _KERNEL_KEYS) -> dict[str, Any]:
    """What tokenwire's engine runs (its ``/engine/stats``): by default the linear and attention
    kernels and the OpenMP wait policy, so the output states the settings it measured."""
    import httpx

    stats = httpx.get(f"{url}/engine/stats", timeout=30).json().get("stats") or {}
    return {k: stats.get(k) for k in keys}


def _summary(samples: dict[str, dict[int, list[dict[str, Any]]]], levels: list[int]) -> dict[str, Any]:
    """Per concurrency: each side's median tok/s and TTFT, every round's figures, and the ratios
    (tokenwire ÷ vLLM: above 1 is faster for tok/s, below 1 is sooner for TTFT)."""
    out: dict[str, Any] = {}
    for c in levels:
        row: dict[str, Any] = {}
        for side, by_c in samples.items():
            runs = by_c[c]
            row[side] = {"tok_s": statistics.median(x["tok_s"] for x in runs),
                         "ttft_ms": statistics.median(x["ttft_ms"] for x in runs),
                         "rounds": runs}
        row["tok_s_ratio"] = round(row["tokenwire"]["tok_s"] / row["vllm"]["tok_s"], 2)
        row["ttft_ratio"] = round(row["tokenwire"]["ttft_ms"] / row["vllm"]["ttft_ms"], 2)
        out[str(c)] = row
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--vllm-python", required=True, help="a Python interpreter that can import vllm")
    p.add_argument("--model", default=None, help="model directory (default: the embedded SmolLM2-135M-Instruct)")
    p.add_argument("--threads", type=int, nargs="+", default=None,
                   help="thread counts to compare (default: 1 and every CPU this process may use)")
    p.add_argument("--concurrency", type=int, nargs="+", default=[1, 8, 16])
    p.add_argument("--new-tokens", type=int, default=64)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--vllm-eager", action="store_true", help="vLLM without compilation, as tokenwire runs")
    p.add_argument("--tokenwire-env", nargs="*", default=[], metavar="NAME=VALUE",
                   help="environment for tokenwire's server only (e.g. GOMP_SPINCOUNT=20000); stated in the output")
    p.add_argument("--out", default=None)
    a = p.parse_args(argv)
    bad = [kv for kv in a.tokenwire_env if "=" not in kv or kv.startswith("=")]
    if bad:
        p.error(f"--tokenwire-env takes NAME=VALUE, not {bad[0]!r}")
    tokenwire_env = dict(kv.split("=", 1) for kv in a.tokenwire_env)
    from server.assets import ensure

    model = Path(a.model) if a.model else ensure("smollm2-135m-instruct")
    threads = a.threads or sorted({1, len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1})
    emit(run(a.vllm_python, model, threads, a.concurrency, a.new_tokens, a.rounds, a.vllm_eager, tokenwire_env), a.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
