"""Engine benchmark: aggregate output tokens/s of ``LocalEngine`` against transformers baselines.

Measured in one process, one phase at a time, on the same weights and dtype:

- ``sequential``: ``model.generate`` on one prompt at a time (batch 1);
- ``static_batch_<b>``: one left-padded ``model.generate`` batch of ``b`` prompts;
- ``engine_c<c>``: ``c`` concurrent streaming requests through ``LocalEngine.generate``, each
  consuming its tokens as they arrive.

Every request generates exactly ``--new-tokens`` tokens (eos ignored). Each round measures
every phase once, each engine phase right after the baseline it is compared with; figures are
medians over rounds. Two measures per phase: wall-clock tokens/s (what a client sees) and
tokens per CPU-second of the whole process (all threads, the engine's event loop included).
On a machine shared with other work the wall-clock figures swing with the neighbours' load,
while the CPU-time figures barely move, so the ratios are reported for both. Prints (and with
``--out``, writes) one JSON document.

    .venv/bin/python -m bench.engine_bench [--model DIR] [--rounds 3] [--out bench/results/engine.json]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import statistics
import sys
import time
from pathlib import Path
from typing import Any

PROMPTS = [
    "What is the capital of France?",
    "Write a haiku about the sea.",
    "Explain what a hash table is in two sentences.",
    "List three uses of copper.",
    "Why is the sky blue? Answer briefly.",
    "Translate 'good morning' into Spanish and German.",
    "Give me a short tip for learning to cook rice.",
    "What does HTTP stand for, and what is it used for?",
    "Name a famous painting and its painter.",
    "How many legs does a spider have?",
    "Summarize the plot of Romeo and Juliet in one line.",
    "Suggest a name for a friendly robot.",
    "What is 17 times 23? Show the steps.",
    "Describe the smell of rain.",
    "What is the boiling point of water at sea level?",
    "Recommend a board game for four players.",
]


def chat_prompts(model_dir: Path, count: int) -> list[list[int]]:
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(model_dir), local_files_only=True)
    out = []
    for i in range(count):
        text = PROMPTS[i % len(PROMPTS)]
        ids = tok.apply_chat_template([{"role": "user", "content": text}], add_generation_prompt=True,
                                      tokenize=True, return_dict=False)
        out.append(list(ids))
    return out


Rate = tuple[float, float]  # (tokens per wall-clock second, tokens per CPU-second)


class _Clock:
    def __enter__(self) -> _Clock:
        self.wall, self.cpu = time.perf_counter(), time.process_time()
        return self

    def __exit__(self, *exc: object) -> None:
        self.wall = time.perf_counter() - self.wall
        self.cpu = time.process_time() - self.cpu

    def rate(self, tokens: int) -> Rate:
        return tokens / self.wall, tokens / max(self.cpu, 1e-9)


def run_sequential(model: Any, prompts: list[list[int]], new: int) -> Rate:
    import torch

    with _Clock() as clock:
        for p in prompts:
            ids = torch.tensor([p])
            model.generate(ids, attention_mask=torch.ones_like(ids), do_sample=False, max_new_tokens=new,
                           min_new_tokens=new, pad_token_id=0)
    return clock.rate(len(prompts) * new)


def run_static(model: Any, prompts: list[list[int]], new: int) -> Rate:
    import torch

    width = max(map(len, prompts))
    ids = torch.tensor([[0] * (width - len(p)) + p for p in prompts])
    mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in prompts])
    with _Clock() as clock:
        out = model.generate(ids, attention_mask=mask, do_sample=False, max_new_tokens=new, min_new_tokens=new,
                             pad_token_id=0)
    assert out.shape[1] == width + new
    return clock.rate(len(prompts) * new)


async def run_engine(engine: Any, prompts: list[list[int]], new: int) -> Rate:
    from engine.protocol import GenerateRequest, SamplingParams

    async def one(p: list[int]) -> int:
        req = GenerateRequest(token_ids=p, sampling_params=SamplingParams(
            temperature=0.0, max_tokens=new, ignore_eos=True))
        n = 0
        async for out in engine.generate(req):  # streamed: one output per engine step
            n += sum(len(c.token_ids) for c in out.choices)
        return n

    with _Clock() as clock:
        counts = await asyncio.gather(*(one(p) for p in prompts))
    assert all(c == new for c in counts), counts
    return clock.rate(sum(counts))


async def main_async(args: argparse.Namespace) -> dict[str, Any]:
    import torch
    from transformers import AutoModelForCausalLM

    from engine.local import LocalEngine
    from engine.local.device import resolve_threads

    model_dir = Path(args.model) if args.model else _default_model()
    threads = resolve_threads(args.threads)
    torch.set_num_threads(threads)
    engine = LocalEngine(model_dir, model_name=model_dir.name, max_model_len=2048, dtype=args.dtype,
                         max_num_seqs=max(args.concurrency), num_threads=threads)
    await engine.start()
    model: Any = AutoModelForCausalLM.from_pretrained(str(model_dir), dtype=engine.dtype, attn_implementation="sdpa",
                                                 local_files_only=True)
    model.eval()
    prompts = chat_prompts(model_dir, max(max(args.concurrency), max(args.static)))
    new = args.new_tokens
    wall: dict[str, list[float]] = {}
    cpu: dict[str, list[float]] = {}

    def record(name: str, rate: Rate) -> None:
        wall.setdefault(name, []).append(rate[0])
        cpu.setdefault(name, []).append(rate[1])
        print(f"  {name:>16}: {rate[0]:7.1f} tok/s  {rate[1]:7.1f} tok/CPU-s", file=sys.stderr, flush=True)

    # warm up every shape once (oneDNN builds kernels per shape on first use)
    with torch.inference_mode():
        run_sequential(model, prompts[:1], 4)
        for b in args.static:
            run_static(model, prompts[:b], 4)
    for c in args.concurrency:
        await run_engine(engine, prompts[:c], 4)

    for r in range(args.rounds):
        print(f"round {r + 1}/{args.rounds}", file=sys.stderr, flush=True)
        with torch.inference_mode():
            record("sequential", run_sequential(model, prompts[:args.sequential_prompts], new))
        for c in args.concurrency:
            if c in args.static:  # the baseline right before the engine phase it is compared with
                with torch.inference_mode():
                    record(f"static_batch_{c}", run_static(model, prompts[:c], new))
            record(f"engine_c{c}", await run_engine(engine, prompts[:c], new))
        for b in args.static:
            if b not in args.concurrency:
                with torch.inference_mode():
                    record(f"static_batch_{b}", run_static(model, prompts[:b], new))
    await engine.close()

    def summary(samples: dict[str, list[float]]) -> dict[str, Any]:
        med = {k: statistics.median(v) for k, v in samples.items()}
        ratios: dict[str, float] = {}
        for c in args.concurrency:
            ratios[f"engine_c{c}_vs_sequential"] = round(med[f"engine_c{c}"] / med["sequential"], 2)
            if f"static_batch_{c}" in med:
                ratios[f"engine_c{c}_vs_static_batch_{c}"] = round(med[f"engine_c{c}"] / med[f"static_batch_{c}"], 2)
        targets = {}
        if "engine_c8" in med and "static_batch_8" in med:
            targets = {"c8_at_least_5x_sequential": ratios["engine_c8_vs_sequential"] >= 5.0,
                       "c8_at_least_0.8x_static_batch_8": ratios["engine_c8_vs_static_batch_8"] >= 0.8}
        return {"median": {k: round(v, 1) for k, v in med.items()},
                "samples": {k: [round(x, 1) for x in v] for k, v in samples.items()},
                "ratios": ratios, "targets_met": targets}

    return {
        "model": model_dir.name,
        "dtype": str(engine.dtype).removeprefix("torch."),
        "dtype_reason": engine.dtype_reason,
        "threads": threads,
        "cpus": os.cpu_count(),
        "machine": platform.machine(),
        "load_average": os.getloadavg(),
        "new_tokens": new,
        "rounds": args.rounds,
        "wall_tok_per_s": summary(wall),
        "cpu_tok_per_cpu_s": summary(cpu),
        "note": args.note,
    }


def _default_model() -> Path:
    from server.assets import ensure

    return ensure("smollm2-135m-instruct")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default=None, help="model directory (default: the embedded SmolLM2-135M)")
    p.add_argument("--dtype", default="auto", help="auto (bf16 when the CPU has it), bfloat16, float32")
    p.add_argument("--threads", type=int, default=None, help="torch threads (default: all CPUs)")
    p.add_argument("--new-tokens", type=int, default=64)
    p.add_argument("--concurrency", type=int, nargs="+", default=[1, 4, 8, 16])
    p.add_argument("--static", type=int, nargs="+", default=[8, 16], help="static batch sizes to measure")
    p.add_argument("--sequential-prompts", type=int, default=2, help="prompts per sequential measurement")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--note", default="", help="free text stored in the result (e.g. machine load)")
    p.add_argument("--out", default=None, help="also write the JSON here")
    args = p.parse_args(argv)
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    result = asyncio.run(main_async(args))
    text = json.dumps(result, indent=2)
    print(text)
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
