"""The bf16 linears (engine/local/packed.py): the native kernel against oneDNN's packed one, on
SmolLM2-135M's layer shapes (q/k/v fused 960 x 576, o 576 x 576, gate/up fused 3072 x 576,
down 576 x 1536), at each ``--rows`` count. ``--compile`` adds torch.compile's (inductor, with
``freezing``: the weights constant-folded and prepacked as inductor does for inference) over one
module holding every layer's weights, one call a round.

Each round runs a model's worth of layers (30 by default), each with its own weights, so the
weights come from memory as in a step; the kernels alternate and each figure is the median of the
rounds, µs per layer. ``--steps`` also times whole lean decode steps of the default model
(SmolLM2-135M, bf16, its KV rows filled with random values) packed each way, at the
``--cases`` shapes, alternating, ms per step. Prints (and with ``--out``, writes) one JSON document.

    .venv/bin/python -m bench.experiments.linear_bench [--rows 1 2 4 8 16 130 1000] [--threads 1] [--steps] [--compile]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from typing import Any

from bench.experiments.decode_attention_bench import lengths, parse_case, report

SHAPES = ((960, 576), (576, 576), (3072, 576), (576, 1536))  # (outputs, inputs) of one SmolLM2 layer
KERNELS = ("native", "onednn")


def compiled_stack(weights: list[list[Any]], inputs: dict[int, Any]) -> Any:
    """torch.compile of every layer's products as one module (frozen weights), called on ``inputs``."""
    import torch
    import torch._inductor.config as inductor

    inductor.freezing = True

    class Stack(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.linears = torch.nn.ModuleList()
            for w in (w for ws in weights for w in ws):
                linear = torch.nn.Linear(w.shape[1], w.shape[0], bias=False, dtype=torch.bfloat16)
                linear.weight = torch.nn.Parameter(w, requires_grad=False)
                self.linears.append(linear)

        def forward(self, xs: dict[int, Any]) -> list[Any]:
            return [linear(xs[linear.in_features]) for linear in self.linears]

    fn = torch.compile(Stack().eval())
    with torch.no_grad():
        fn(inputs)  # compiles

    def run() -> None:
        with torch.no_grad():
            fn(inputs)

    return run


def measure(rows: int, layers: int, rounds: int, compile_too: bool = False) -> dict[str, float]:
    """µs per layer of each kernel at ``rows`` rows, medians of ``rounds`` alternating rounds (with
    ``compile_too``, torch.compile's as well)."""
    import torch

    from engine.local import native
    from engine.local.packed import NativeProduct, OneDnnProduct

    library = native.shared().library
    assert library is not None
    gen = torch.Generator().manual_seed(rows)
    weights = [[(torch.randn(n, k, generator=gen) * 0.05).to(torch.bfloat16) for n, k in SHAPES]
               for _ in range(layers)]
    products: dict[str, list[list[Any]]] = {"native": [[NativeProduct(library.linear, w, None) for w in ws] for ws in weights],
                "onednn": [[OneDnnProduct(w, None) for w in ws] for ws in weights]}
    inputs = {k: torch.randn(rows, k, generator=gen).to(torch.bfloat16) for k in {k for _, k in SHAPES}}
    kernels = (*KERNELS, "compiled") if compile_too else KERNELS
    compiled = compiled_stack(weights, inputs) if compile_too else None
    times: dict[str, list[float]] = {k: [] for k in kernels}
    for r in range(rounds + 1):  # the first round warms up
        for name in kernels if r % 2 == 0 else kernels[::-1]:
            start = time.perf_counter()
            if name == "compiled" and compiled is not None:
                compiled()
            else:
                for layer in products[name]:
                    for (_, k), product in zip(SHAPES, layer, strict=True):
                        product(inputs[k])
            if r:
                times[name].append((time.perf_counter() - start) / layers * 1e6)
    got = {k: round(statistics.median(v), 1) for k, v in times.items()}
    ratios = {f"native_vs_{k}": round(got["native"] / got[k], 2) for k in kernels if k != "native"}
    return {**got, **ratios}


def measure_steps(cases: list[tuple[int, int]], rounds: int) -> dict[str, dict[str, float]]:
    """Lean decode steps of the default model per case, native linears against oneDNN's (ms per step)."""
    import torch

    from engine.local.runner import ModelRunner
    from server.assets import ensure

    runners = {}
    for name in KERNELS:
        os.environ["TOKENWIRE_LINEAR_KERNEL"] = name  # read when the runner packs its model
        runner = ModelRunner(ensure("smollm2-135m-instruct"), dtype=torch.bfloat16,
                             max_rows=max(r for r, _ in cases), max_model_len=4096)
        runner.load()
        if runner.lean is None or runner.kv is None or not runner.linear_kernel.startswith(
                "native" if name == "native" else "oneDNN"):
            raise SystemExit(f"linear_bench: no lean decode with {name} linears ({runner.linear_kernel})")
        runners[name] = runner
    os.environ.pop("TOKENWIRE_LINEAR_KERNEL")
    out = {}
    for rows, positions in cases:
        ids = torch.randint(0, 1000, (rows, 1))
        steps = {}
        with torch.inference_mode():
            for name, runner in runners.items():
                pos, mask, plan = runner._decode_inputs(lengths(rows, positions))
                assert runner.lean is not None and runner.kv is not None
                runner.lean(ids, pos[:, None], mask, plan, runner.kv)  # allocates the layers' KV buffers
                for buf in (*runner.kv.keys, *runner.kv.values):
                    if buf is not None:
                        buf.normal_()
                steps[name] = (runner.lean, runner.kv, pos[:, None], mask, plan)
            times: dict[str, list[float]] = {k: [] for k in KERNELS}
            for r in range(rounds + 1):
                for name in KERNELS if r % 2 == 0 else KERNELS[::-1]:
                    lean, kv, pos, mask, plan = steps[name]
                    start = time.perf_counter()
                    for _ in range(5):
                        lean(ids, pos, mask, plan, kv)
                    if r:
                        times[name].append((time.perf_counter() - start) / 5 * 1e3)
        got = {k: round(statistics.median(v), 2) for k, v in times.items()}
        out[f"{rows}x{positions}"] = {**got, "native_vs_onednn": round(got["native"] / got["onednn"], 3)}
        print(f"linear_bench: steps, {rows} rows x {positions}: {got} ms", file=sys.stderr, flush=True)
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rows", type=int, nargs="+", default=[1, 2, 4, 8, 16, 130, 1000])
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--layers", type=int, default=30)
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--steps", action="store_true", help="also whole decode steps of the default model")
    p.add_argument("--compile", action="store_true", help="also torch.compile's linears (inductor, frozen weights)")
    p.add_argument("--cases", type=parse_case, nargs="+", default=[(1, 130), (8, 130), (16, 130), (16, 1000)],
                   metavar="ROWSxPOSITIONS", help="the --steps shapes")
    p.add_argument("--out", default=None)
    args = p.parse_args(argv)
    if any(r < 1 for r in args.rows):
        p.error("--rows: each count must be at least 1")

    import torch

    from engine.local import native

    torch.set_num_threads(args.threads)
    loaded = native.shared()
    if loaded.library is None or not loaded.library.linear.vector:
        why = loaded.detail if loaded.library is None else "built without AVX512-BF16"
        print(f"linear_bench: no native linear kernel here ({why})", file=sys.stderr)
        return 1
    results = {}
    for rows in args.rows:
        results[str(rows)] = measure(rows, args.layers, args.rounds, args.compile)
        print(f"linear_bench: {rows} rows: {results[str(rows)]} µs per layer", file=sys.stderr, flush=True)
    return report("linear", loaded.detail, args, results, measure_steps)


if __name__ == "__main__":
    sys.exit(main())
