"""The decode attention alone (engine/local/attention.py): the native kernel against the grouped
fp32 matmuls, per layer, on SmolLM2-135M's head shapes (9 query heads, 3 key-value heads, head_dim
64), bf16, ragged rows as a step gives them.

Each case runs a model's worth of layers (30 by default), each with its own K and V views into a
larger buffer as the KV store hands them out, so K and V come from memory as in a step (``cold``;
64 MB of other memory is written between passes), and again on the same layer (``hot``: what a
microbenchmark sees). The two kernels alternate, and each figure is the median of the rounds, µs
per layer. ``--steps`` also times whole lean decode steps of the default model (SmolLM2-135M,
bf16, its KV rows filled with random values) at the same cases, the kernels alternating, ms per
step. Prints (and with ``--out``, writes) one JSON document.

    .venv/bin/python -m bench.experiments.decode_attention_bench [--cases 1x130 16x130 16x1000] [--threads 1] [--steps]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from collections.abc import Callable
from typing import Any

from bench.loopback import emit

HQ, HKV, D = 9, 3, 64


def parse_case(text: str) -> tuple[int, int]:
    """``ROWSxPOSITIONS`` → (rows, positions)."""
    rows, _, positions = text.partition("x")
    if not (rows.isdigit() and positions.isdigit()) or int(rows) < 1 or int(positions) < 1:
        raise argparse.ArgumentTypeError(f"{text!r}: use ROWSxPOSITIONS, e.g. 16x130")
    return int(rows), int(positions)


def lengths(rows: int, positions: int) -> list[int]:
    """Each row's length, ragged as a step's rows are: the longest is ``positions``."""
    return [positions - (i * 7) % max(1, positions // 4) for i in range(rows)]


def measure(kernels: dict[str, Callable[..., Any]], rows: int, positions: int, layers: int, rounds: int
            ) -> dict[str, dict[str, float]]:
    import torch

    gen = torch.Generator().manual_seed(rows * 100_003 + positions)
    qs = [(torch.randn(rows, HQ, 1, D, generator=gen) * 2).to(torch.bfloat16) for _ in range(layers)]
    ks = [torch.randn(rows, HKV, positions + 64, D, generator=gen).to(torch.bfloat16)[:, :, :positions]
          for _ in range(layers)]
    vs = [torch.randn(rows, HKV, positions + 64, D, generator=gen).to(torch.bfloat16)[:, :, :positions]
          for _ in range(layers)]
    mask = (torch.arange(positions)[None, :] < torch.tensor(lengths(rows, positions))[:, None])[:, None, None, :]
    flush = torch.zeros(16 * 1024 * 1024)  # 64 MB
    scale = D ** -0.5
    times: dict[str, dict[str, list[float]]] = {k: {"cold": [], "hot": []} for k in kernels}
    for r in range(rounds + 1):  # the first round warms up
        for name in list(kernels) if r % 2 == 0 else list(kernels)[::-1]:
            fn = kernels[name]
            flush.add_(1.0)
            start = time.perf_counter()
            for i in range(layers):
                fn(qs[i], ks[i], vs[i], mask, scale)
            cold = (time.perf_counter() - start) / layers
            start = time.perf_counter()
            for _ in range(layers):
                fn(qs[0], ks[0], vs[0], mask, scale)
            hot = (time.perf_counter() - start) / layers
            if r:
                times[name]["cold"].append(cold * 1e6)
                times[name]["hot"].append(hot * 1e6)
    return {name: {k: round(statistics.median(v), 1) for k, v in t.items()} for name, t in times.items()}


def measure_steps(cases: list[tuple[int, int]], rounds: int) -> dict[str, dict[str, float]]:
    """Lean decode steps of the default model per case, native against grouped (ms per step)."""
    import torch

    from engine.local import attention
    from engine.local.runner import ModelRunner
    from server.assets import ensure

    runner = ModelRunner(ensure("smollm2-135m-instruct"), dtype=torch.bfloat16,
                         max_rows=max(r for r, _ in cases), max_model_len=4096)
    runner.load()
    if runner.lean is None or runner.kv is None or attention._native is None:
        raise SystemExit(f"decode_attention_bench: no lean decode with the native kernel ({runner.attention_kernel})")
    lean, kv, kernel = runner.lean, runner.kv, attention._native
    out = {}
    try:
        for rows, positions in cases:
            pos, mask, plan = runner._decode_inputs(lengths(rows, positions))
            ids = torch.randint(0, 1000, (rows, 1))
            with torch.inference_mode():
                lean(ids, pos[:, None], mask, plan, kv)  # allocates the layers' KV buffers
                for buf in (*kv.keys, *kv.values):
                    if buf is not None:
                        buf.normal_()
                times: dict[str, list[float]] = {"native": [], "grouped": []}
                for r in range(rounds + 1):
                    for name in ("native", "grouped") if r % 2 == 0 else ("grouped", "native"):
                        attention._native = kernel if name == "native" else None
                        start = time.perf_counter()
                        for _ in range(5):
                            lean(ids, pos[:, None], mask, plan, kv)
                        if r:
                            times[name].append((time.perf_counter() - start) / 5 * 1e3)
            got = {k: round(statistics.median(v), 2) for k, v in times.items()}
            out[f"{rows}x{positions}"] = {**got, "native_vs_grouped": round(got["native"] / got["grouped"], 3)}
            print(f"decode_attention_bench: steps, {rows} rows x {positions}: {got} ms", file=sys.stderr, flush=True)
    finally:
        attention._native = kernel
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--cases", type=parse_case, nargs="+",
                   default=[(1, 130), (8, 130), (16, 130), (16, 300), (16, 1000)], metavar="ROWSxPOSITIONS")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--layers", type=int, default=30)
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--steps", action="store_true", help="also whole decode steps of the default model")
    p.add_argument("--out", default=None)
    args = p.parse_args(argv)

    import torch

    from engine.local import native
    from engine.local.attention import decode_attention

    torch.set_num_threads(args.threads)
    loaded = native.load()
    if loaded.library is None:
        print(f"decode_attention_bench: no native kernel ({loaded.detail})", file=sys.stderr)
        return 1
    kernel = loaded.library.attention
    kernels: dict[str, Callable[..., Any]] = {"native": kernel, "grouped": decode_attention}
    results = {}
    for rows, positions in args.cases:
        got = measure(kernels, rows, positions, args.layers, args.rounds)
        ratio = {k: round(got["native"][k] / got["grouped"][k], 2) for k in ("cold", "hot")}
        results[f"{rows}x{positions}"] = {**got, "native_vs_grouped": ratio}
        print(f"decode_attention_bench: {rows} rows x {positions}: native {got['native']}, "
              f"grouped {got['grouped']} µs per layer", file=sys.stderr, flush=True)
    return report("decode_attention", loaded.detail, args, results, measure_steps)


def report(benchmark: str, kernel: str, args: argparse.Namespace, results: dict[str, Any],
           steps: Callable[[list[tuple[int, int]], int], dict[str, Any]]) -> int:
    """Print (and with ``--out``, write) a kernel benchmark's document: its per-layer ``results``,
    and with ``--steps`` the default model's decode steps timed by ``steps``. Returns 0."""
    doc: dict[str, Any] = {"benchmark": benchmark, "kernel": kernel, "threads": args.threads,
                           "layers": args.layers, "rounds": args.rounds, "results_us_per_layer": results}
    if args.steps:
        doc["steps_ms"] = steps(args.cases, args.rounds)
    doc["load_average"] = round(os.getloadavg()[0], 2)
    emit(doc, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
