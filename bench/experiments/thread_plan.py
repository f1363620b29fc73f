"""Each forward's thread count (engine/local/threads.py), measured: several ``LocalEngine``s in one
process, each with its own thread count and plan (``--engines 2:adaptive 2:fixed 1:fixed``), taking
turns (the order reverses every round). Per concurrency ``c`` (``--concurrency``): ``c`` streams
of ``--new-tokens`` tokens, greedy, eos ignored, after one warm-up of the same shape; aggregate
tokens/s and the median time to first token, medians of the rounds, and how many forwards each
engine ran at each thread count. ``2:adaptive:forward`` runs each forward's output projection at
that forward's count, as before the projection had a plan of its own (the A/B of that change);
``1:fixed:grouped`` decodes with the grouped matmuls instead of the native attention kernel (the
A/B of that one), and ``1:fixed:onednn`` runs the linears with oneDNN's kernel instead of the
native one (engine/local/packed.py).

The OpenMP wait policy is the process's (passive unless ``OMP_WAIT_POLICY`` or ``GOMP_SPINCOUNT``
is set, as under ``tokenwire serve``); libgomp reads it once, so compare policies across runs.
``--random-weights`` builds the default model's architecture with random bf16 weights from its
``config.json`` (the same shapes and work per token: for a machine that has no model files, such
as an accelerator machine lent for a few minutes), and random prompts of 40-90 tokens. Prints
(and with ``--out``, writes) one JSON document.

    .venv/bin/python -m bench.experiments.thread_plan --engines 2:adaptive 2:fixed 1:fixed --rounds 3
    python3 -m bench.experiments.thread_plan --random-weights --engines 15:adaptive 15:fixed 1:fixed --rounds 2
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import statistics
import sys
from pathlib import Path
from typing import Any

from bench.loopback import emit
from engine.local.omp import prefer_passive_wait

LOGITS = ("own", "forward")  # the output projection's thread count: its own plan's, or its forward's
ATTENTION = ("native", "grouped")  # the bf16 decode attention (engine/local/attention.py)
LINEAR = ("onednn",)  # the bf16 linears' kernel when not the default native one (engine/local/packed.py)
USAGE = "THREADS:PLAN[:LOGITS][:ATTENTION][:onednn]"


def parse_engine(text: str) -> tuple[int, str, str, str, str]:
    """``N:plan[:logits][:attention][:onednn]`` (``plan``: adaptive or fixed; ``logits``: ``own``,
    the default, or ``forward``, the output projection at its forward's count as before it had a
    plan of its own; ``attention``: ``native``, the default, or ``grouped``; ``onednn``: oneDNN's
    linears) → (N, plan, logits, attention, linear kernel)."""
    from engine.local.threads import resolve_plan

    n, _, rest = text.partition(":")
    plan, *options = rest.split(":")
    if not n.isdigit() or int(n) < 1:
        raise argparse.ArgumentTypeError(f"{text!r}: use {USAGE}, e.g. 2:adaptive")
    unknown = [o for o in options if o not in LOGITS + ATTENTION + LINEAR]
    if unknown:
        raise argparse.ArgumentTypeError(f"{text!r}: LOGITS is one of {', '.join(LOGITS)}, "
                                         f"ATTENTION one of {', '.join(ATTENTION)}; or onednn")
    logits = next((o for o in options if o in LOGITS), "own")
    attention = next((o for o in options if o in ATTENTION), "native")
    linear = "onednn" if "onednn" in options else "native"
    try:
        return int(n), resolve_plan(plan), logits, attention, linear
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"{text!r}: {exc}") from None


def random_weights(config_dir: Path, dst: Path) -> Path:
    """The architecture of ``config_dir`` with random bf16 weights, saved in ``dst`` (once)."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    if not (dst / "model.safetensors").exists():
        torch.manual_seed(0)
        auto: Any = AutoModelForCausalLM
        model = auto.from_config(AutoConfig.from_pretrained(str(config_dir)), dtype=torch.bfloat16)
        model.save_pretrained(str(dst))
        generation = config_dir / "generation_config.json"
        if generation.exists():
            (dst / generation.name).write_text(generation.read_text())
    return dst


def summary(samples: dict[str, dict[int, list[tuple[float, float]]]]) -> dict[str, Any]:
    """Per engine and concurrency: median tok/s and TTFT (ms) over the rounds, and every round's."""
    return {name: {str(c): {"tok_s": round(statistics.median(r[0] for r in runs), 1),
                            "ttft_ms": round(statistics.median(r[1] for r in runs), 1),
                            "rounds": [[round(t, 1), round(f, 1)] for t, f in runs]}
                   for c, runs in by_c.items()}
            for name, by_c in samples.items()}


async def main_async(args: argparse.Namespace, model: Path, prompts: list[list[int]]) -> dict[str, Any]:
    from bench.engine_bench import run_engine
    from engine.local.engine import LocalEngine
    from engine.local.threads import ThreadPlan

    engines: dict[str, Any] = {}
    for n, plan, logits, attention, linear in args.engines:
        e = LocalEngine(model, model_name=model.name, max_model_len=2048, max_num_seqs=max(args.concurrency),
                        num_threads=n, thread_plan=plan)
        os.environ["TOKENWIRE_DECODE_ATTENTION"] = attention  # read when the engine loads its model
        os.environ["TOKENWIRE_LINEAR_KERNEL"] = linear
        await e.start()
        if logits == "forward":  # an untimed one-thread plan leaves torch at the forward's count
            e.runner.logits_threads = ThreadPlan(1)
        await run_engine(e, prompts[:4], 8)
        engines[f"{n}:{plan}" + (":forward" if logits == "forward" else "")
                + (":grouped" if attention == "grouped" else "") + (":onednn" if linear == "onednn" else "")] = e
    samples: dict[str, dict[int, list[tuple[float, float]]]] = {k: {c: [] for c in args.concurrency} for k in engines}
    loads = [os.getloadavg()[0]]
    try:
        for r in range(args.rounds):
            for name in list(engines) if r % 2 == 0 else list(engines)[::-1]:
                for c in args.concurrency:
                    await run_engine(engines[name], prompts[:c], args.new_tokens)  # warm-up of this shape
                    firsts: list[float] = []
                    wall, _ = await run_engine(engines[name], prompts[:c], args.new_tokens, firsts)
                    samples[name][c].append((wall, statistics.median(firsts) * 1e3))
                    print(f"thread_plan: round {r + 1}/{args.rounds}, {name}, {c} stream(s): {wall:.1f} tok/s",
                          file=sys.stderr, flush=True)
            loads.append(os.getloadavg()[0])
        stats = {k: {s: e.stats()[s] for s in ("thread_plan", "forwards_by_threads", "logits_by_threads",
                                               "omp_wait_policy", "dtype", "linear_kernel", "attention_kernel",
                                               "decode_forward")}
                 for k, e in engines.items()}
    finally:
        for e in engines.values():
            await e.close()
    return {"benchmark": "thread_plan", "model": model.name, "random_weights": args.random_weights,
            "cpus": os.cpu_count(), "new_tokens": args.new_tokens, "rounds": args.rounds,
            "load_average_per_round": [round(x, 2) for x in loads], "engines": stats, "results": summary(samples)}


def main(argv: list[str] | None = None) -> int:
    prefer_passive_wait()  # before torch loads, as tokenwire serve does (engine/local/omp.py)
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default=None, help="model directory (default: the embedded SmolLM2-135M-Instruct)")
    p.add_argument("--engines", type=parse_engine, nargs="+",
                   default=[(2, "adaptive", "own", "native"), (2, "fixed", "own", "native"),
                            (1, "fixed", "own", "native")],
                   metavar=USAGE)
    p.add_argument("--concurrency", type=int, nargs="+", default=[1, 8, 16])
    p.add_argument("--new-tokens", type=int, default=64)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--random-weights", action="store_true",
                   help="random weights in the model's architecture (needs only its config.json)")
    p.add_argument("--out", default=None)
    args = p.parse_args(argv)
    if args.model:
        model = Path(args.model)
    else:
        from server.assets import ensure

        model = ensure("smollm2-135m-instruct")
    if args.random_weights:
        rng = random.Random(0)
        prompts = [[rng.randrange(100, 40000) for _ in range(rng.randrange(40, 90))] for _ in range(max(args.concurrency))]
        model = random_weights(model, Path(os.environ.get("TMPDIR", "/tmp")) / f"tokenwire-random-{model.name}")
    else:
        from bench.engine_bench import chat_prompts

        prompts = chat_prompts(model, max(args.concurrency))
    emit(asyncio.run(main_async(args, model, prompts)), args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
