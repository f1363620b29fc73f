"""Engine benchmark: aggregate output tokens/s of ``LocalEngine`` against transformers baselines.

Measured in one process, one phase at a time, on the same weights and dtype:

- ``sequential``: ``model.generate`` on one prompt at a time (batch 1);
- ``static_batch_<b>``: one left-padded ``model.generate`` batch of ``b`` prompts;
- ``engine_c<c>``: ``c`` concurrent streaming requests through ``LocalEngine.generate``, each
  consuming its tokens as they arrive.

Every request generates exactly ``--new-tokens`` tokens (eos ignored). Each round measures
every phase once, each engine phase right after the baseline it is compared with; figures are
medians over rounds. With several ``--threads`` the engine phases run at each thread count in
turn within every round (``engine_t<t>_c<c>``; the engine changes its torch threads between
phases), and with ``--burner`` each of them again while a CPU burner runs (``..._burner``: one
child process spinning a Python loop, unpinned, the "other core busy" of issue 22). Each engine
phase also records its median time to first token. ``--prefix-tokens N`` adds the prefix-cache
phase: a request with a fresh random N-token prefix (cold), then one sharing that prefix with
another suffix (warm), one new token each; their times to first token and the ratio. The vLLM
figures of issue 22 are printed beside ours, marked published (not measured in this run).
``--linear native onednn aten`` loads one engine per linear kernel (engine/local/packed.py: the
native kernel's and oneDNN's prepacked bf16 weights, and ``F.linear``) and runs every engine
phase on each in turn, alternating which goes first, for an A/B in the same run
(``engine_native_...`` / ``engine_onednn_...`` / ``engine_aten_...`` and the ``_vs_aten`` ratios). The OpenMP wait policy is passive unless
``OMP_WAIT_POLICY`` or ``GOMP_SPINCOUNT`` is set, as under ``tokenwire serve``
(engine/local/omp.py; libgomp reads it when torch loads, so compare policies across runs), and
is stated in the output. Two measures per phase: wall-clock tokens/s (what a client sees) and
tokens per CPU-second of the whole process (all threads, the engine's event loop included).
On a machine shared with other work the wall-clock figures swing with the neighbours' load,
while the CPU-time figures barely move, so the ratios are reported for both. Prints (and with
``--out``, writes) one JSON document.

    .venv/bin/python -m bench.engine_bench [--model DIR] [--rounds 3] [--out bench/results/engine.json]
    .venv/bin/python -m bench.engine_bench --threads 1 2 --concurrency 1 8 16 --burner --prefix-tokens 1000
    .venv/bin/python -m bench.engine_bench --linear native onednn --threads 1 --concurrency 1 8 16 --static \
        --sequential-prompts 0 --burner
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import platform
import random
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from engine.local.omp import prefer_passive_wait

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


# vLLM 0.32's CPU engine on this machine class, SmolLM2-135M-Instruct bf16, 64 new tokens, greedy,
# through its HTTP API, as issue 22 reports them (published, not measured by this benchmark).
VLLM_PUBLISHED: dict[str, Any] = {
    "threads_2": {"tok_s": {1: 27.3, 8: 183.0, 16: 277.0}, "ttft_ms": {1: 71.0, 8: 329.0}},
    "threads_1": {"tok_s": {1: 22.0, 8: 130.0, 16: 206.0}},
    "threads_1_loaded": {"tok_s": {1: 22.1, 8: 91.0, 16: 196.0}},
    "settings": "vLLM 0.32 CPU build, torch.compile on, one bound thread per worker (issue 22)",
}

# --linear: the engine's packed_linear argument and TOKENWIRE_LINEAR_KERNEL (engine/local/packed.py)
_PACKED: dict[str, tuple[bool | None, str | None]] = {
    "native": (True, "native"), "onednn": (True, "onednn"), "aten": (False, None), "default": (None, None)}

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


async def run_engine(engine: Any, prompts: list[list[int]], new: int,
                     ttft: list[float] | None = None) -> Rate:
    """``ttft``: gets each request's time to its first token, in seconds."""
    from engine.protocol import GenerateRequest, SamplingParams

    async def one(p: list[int], t0: float) -> int:
        req = GenerateRequest(token_ids=p, sampling_params=SamplingParams(
            temperature=0.0, max_tokens=new, ignore_eos=True))
        n = 0
        async for out in engine.generate(req):  # streamed: one output per engine step
            if n == 0 and ttft is not None:
                ttft.append(time.perf_counter() - t0)
            n += sum(len(c.token_ids) for c in out.choices)
        return n

    with _Clock() as clock:
        counts = await asyncio.gather(*(one(p, clock.wall) for p in prompts))
    assert all(c == new for c in counts), counts
    return clock.rate(sum(counts))


async def first_token(engine: Any, prompt: list[int]) -> float:
    """Seconds until a one-token request's token arrives."""
    t0 = time.perf_counter()
    await run_engine(engine, [prompt], 1)
    return time.perf_counter() - t0


class Burner:
    """One child process spinning a Python loop (a CPU-bound neighbour on the other core)."""

    CODE = "while True: pass"

    def __enter__(self) -> Burner:
        self.proc = subprocess.Popen([sys.executable, "-c", self.CODE])
        time.sleep(0.2)
        return self

    def __exit__(self, *exc: object) -> None:
        self.proc.kill()
        self.proc.wait()


async def main_async(args: argparse.Namespace) -> dict[str, Any]:
    import torch
    from transformers import AutoModelForCausalLM

    from engine.local import LocalEngine
    from engine.local.device import resolve_threads

    model_dir = Path(args.model) if args.model else _default_model()
    thread_list = args.threads or [resolve_threads(None)]
    torch.set_num_threads(thread_list[0])
    kernels = args.linear or ["default"]
    engines: dict[str, Any] = {}
    chosen = os.environ.get("TOKENWIRE_LINEAR_KERNEL")
    for kernel in kernels:  # one engine per linear kernel (each loads its own weights)
        packed, setting = _PACKED[kernel]
        if setting:
            os.environ["TOKENWIRE_LINEAR_KERNEL"] = setting  # read when the engine packs its model
        engines[kernel] = LocalEngine(model_dir, model_name=model_dir.name, max_model_len=2048, dtype=args.dtype,
                                      max_num_seqs=max(args.concurrency), num_threads=thread_list[0],
                                      packed_linear=packed)
        await engines[kernel].start()
        os.environ.pop("TOKENWIRE_LINEAR_KERNEL", None)
        if chosen is not None:
            os.environ["TOKENWIRE_LINEAR_KERNEL"] = chosen
    engine = engines[kernels[0]]
    baselines = args.sequential_prompts > 0 or bool(args.static)
    model: Any = None
    if baselines:
        model = AutoModelForCausalLM.from_pretrained(str(model_dir), dtype=engine.dtype, attn_implementation="sdpa",
                                                     local_files_only=True)
        model.eval()
    prompts = chat_prompts(model_dir, max([*args.concurrency, *args.static]))
    new = args.new_tokens
    wall: dict[str, list[float]] = {}
    cpu: dict[str, list[float]] = {}
    ttfts: dict[str, list[float]] = {}
    loads: list[float] = [os.getloadavg()[0]]

    def record(name: str, rate: Rate, firsts: list[float] | None = None) -> None:
        wall.setdefault(name, []).append(rate[0])
        cpu.setdefault(name, []).append(rate[1])
        extra = ""
        if firsts:
            ttfts.setdefault(name, []).append(statistics.median(firsts) * 1e3)
            extra = f"  ttft {ttfts[name][-1]:6.0f} ms"
        print(f"  {name:>24}: {rate[0]:7.1f} tok/s  {rate[1]:7.1f} tok/CPU-s{extra}", file=sys.stderr, flush=True)

    async def threads(n: int) -> None:
        for e in engines.values():
            e.set_threads(n)
            await run_engine(e, prompts[:1], 1)  # the engine thread applies it before this step

    async def engine_phase(t: int, c: int, suffix: str = "", kernel: str = kernels[0]) -> None:
        firsts: list[float] = []
        rate = await run_engine(engines[kernel], prompts[:c], new, firsts)
        label = f"{kernel}_" if len(kernels) > 1 else ""
        record(f"engine_{label}t{t}_c{c}{suffix}" if len(thread_list) > 1 or args.burner or label
               else f"engine_c{c}", rate, firsts)

    # warm up every shape once (oneDNN builds kernels per shape on first use)
    if baselines:
        with torch.inference_mode():
            run_sequential(model, prompts[:1], 4)
            for b in args.static:
                run_static(model, prompts[:b], 4)
    for t in thread_list:
        await threads(t)
        for c in args.concurrency:
            for e in engines.values():
                await run_engine(e, prompts[:c], 4)

    rng = random.Random(22)
    prefix_ms: dict[str, list[float]] = {"cold": [], "warm": []}
    for r in range(args.rounds):
        print(f"round {r + 1}/{args.rounds} (load {os.getloadavg()[0]:.2f})", file=sys.stderr, flush=True)
        loads.append(os.getloadavg()[0])
        if args.sequential_prompts > 0:
            torch.set_num_threads(thread_list[0])
            with torch.inference_mode():
                record("sequential", run_sequential(model, prompts[:args.sequential_prompts], new))
        order = thread_list if r % 2 == 0 else thread_list[::-1]  # alternate which goes first
        for t in order:
            await threads(t)
            for c in args.concurrency:
                if c in args.static and t == thread_list[0]:  # the baseline right before its engine phase
                    torch.set_num_threads(t)
                    with torch.inference_mode():
                        record(f"static_batch_{c}", run_static(model, prompts[:c], new))
                quiet_first = r % 2 == 0 or not args.burner
                for kernel in (kernels if r % 2 == 0 else kernels[::-1]):  # alternate which goes first
                    if quiet_first:
                        await engine_phase(t, c, kernel=kernel)
                    if args.burner:
                        with Burner():
                            await engine_phase(t, c, "_burner", kernel)
                    if not quiet_first:
                        await engine_phase(t, c, kernel=kernel)
        for b in args.static:
            if b not in args.concurrency:
                torch.set_num_threads(thread_list[0])
                with torch.inference_mode():
                    record(f"static_batch_{b}", run_static(model, prompts[:b], new))
        if args.prefix_tokens:
            await threads(thread_list[0])
            prefix = [rng.randrange(1000, 40000) for _ in range(args.prefix_tokens)]  # new each round: cold
            cold = await first_token(engine, prefix + prompts[0])
            warm = await first_token(engine, prefix + prompts[1])
            prefix_ms["cold"].append(cold * 1e3)
            prefix_ms["warm"].append(warm * 1e3)
            print(f"  prefix {args.prefix_tokens}: first token cold {cold * 1e3:.0f} ms, warm {warm * 1e3:.0f} ms "
                  f"({cold / warm:.1f}x)", file=sys.stderr, flush=True)
    loads.append(os.getloadavg()[0])
    stats = engine.stats()
    kernel_of = {k: e.stats()["linear_kernel"] for k, e in engines.items()}
    for e in engines.values():
        await e.close()

    def summary(samples: dict[str, list[float]]) -> dict[str, Any]:
        med = {k: statistics.median(v) for k, v in samples.items()}
        ratios: dict[str, float] = {}
        for name in med:
            if not name.startswith("engine_"):
                continue
            c = int(name.split("_c")[1].split("_")[0])
            if "sequential" in med:
                ratios[f"{name}_vs_sequential"] = round(med[name] / med["sequential"], 2)
            if f"static_batch_{c}" in med:
                ratios[f"{name}_vs_static_batch_{c}"] = round(med[name] / med[f"static_batch_{c}"], 2)
            if name.endswith("_burner") and name.removesuffix("_burner") in med:
                ratios[f"{name}_vs_quiet"] = round(med[name] / med[name.removesuffix("_burner")], 2)
            for kernel in ("native", "onednn"):
                aten = name.replace(f"_{kernel}_", "_aten_", 1)
                if name.startswith(f"engine_{kernel}_") and aten in med:
                    ratios[f"{name}_vs_aten"] = round(med[name] / med[aten], 2)
        return {"median": {k: round(v, 1) for k, v in med.items()},
                "samples": {k: [round(x, 1) for x in v] for k, v in samples.items()},
                "ratios": ratios}

    wall_summary = summary(wall)
    vs_vllm: dict[str, float] = {}
    for name, value in wall_summary["median"].items():
        if not name.startswith("engine_") or name.endswith("_burner"):
            continue
        t = int(name.split("_t")[1].split("_")[0]) if "_t" in name else thread_list[0]
        c = int(name.split("_c")[1].split("_")[0])
        ref = VLLM_PUBLISHED.get(f"threads_{t}", {}).get("tok_s", {})
        if isinstance(ref, dict) and c in ref:
            vs_vllm[f"{name}_vs_vllm_published"] = round(value / ref[c], 2)
    return {
        "model": model_dir.name,
        "dtype": str(engine.dtype).removeprefix("torch."),
        "dtype_reason": engine.dtype_reason,
        "threads": thread_list,
        "settings": "tokenwire LocalEngine: eager (no torch.compile), torch threads as listed, no pinning, "
                    "prefix cache on (the chat prompts share their system prompt's first 16-token blocks, as vLLM 0.32 shares them with its default prefix caching)",
        "linear_kernels": kernel_of,
        "attention_kernel": stats["attention_kernel"],
        "omp_wait_policy": stats["omp_wait_policy"],
        "thread_plan": stats["thread_plan"],  # of the last thread count; engine/local/threads.py
        "cpus": os.cpu_count(),
        "machine": platform.machine(),
        "load_average": [round(x, 2) for x in loads],
        "new_tokens": new,
        "rounds": args.rounds,
        "wall_tok_per_s": wall_summary,
        "cpu_tok_per_cpu_s": summary(cpu),
        "ttft_ms": {"median": {k: round(statistics.median(v), 1) for k, v in ttfts.items()},
                    "samples": {k: [round(x, 1) for x in v] for k, v in ttfts.items()}},
        "prefix_cache": ({"prefix_tokens": args.prefix_tokens,
                          "cold_ms": [round(x, 1) for x in prefix_ms["cold"]],
                          "warm_ms": [round(x, 1) for x in prefix_ms["warm"]],
                          "speedup_median": round(statistics.median(
                              c / w for c, w in zip(prefix_ms["cold"], prefix_ms["warm"], strict=True)), 2),
                          "engine_stats": {k: v for k, v in stats.items() if k.startswith("prefix_cache")}}
                         if args.prefix_tokens else None),
        "vllm_published": VLLM_PUBLISHED,
        "vs_vllm_published_wall": vs_vllm,
        "note": args.note,
    }


def _rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def _children_rss_mib(pid: int) -> float:
    total = 0.0
    for child in Path(f"/proc/{pid}/task/{pid}/children").read_text().split():
        with contextlib.suppress(OSError):
            total += _rss_mib(int(child))
    return total


def serve_rss(prefix_tokens: int) -> dict[str, Any]:
    """Idle RSS of a real ``tokenwire serve --enable-scale-out`` (for its tokens-in route) on the
    default model (1 thread: the test harness sets OMP_NUM_THREADS=1, also the default on 2 CPUs; the
    default prefix cache): after start, and again after
    three requests with distinct ``prefix_tokens``-token prompts have filled its prefix cache."""
    import httpx

    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from tests.support.server_proc import ServerProcess

    rng = random.Random(7)
    with ServerProcess(["serve", "--enable-scale-out"]) as srv:  # scale-out: /inference/v1/generate
        assert srv.proc is not None
        pid = srv.proc.pid
        time.sleep(3.0)
        idle = _rss_mib(pid)
        children = _children_rss_mib(pid)
        for _ in range(3):
            body = {"token_ids": [rng.randrange(1000, 40000) for _ in range(max(prefix_tokens, 16))],
                    "sampling_params": {"max_tokens": 4, "temperature": 0.0}}
            httpx.post(srv.url + "/inference/v1/generate", json=body, timeout=120.0).raise_for_status()
        time.sleep(3.0)
        after = _rss_mib(pid)
        stats = httpx.get(srv.url + "/engine/stats", timeout=10.0).json().get("stats", {})
    return {"idle_mib": round(idle, 1), "children_mib": round(children, 1),
            "after_prefix_traffic_mib": round(after, 1),
            "prefix_cache_bytes": stats.get("prefix_cache_bytes"), "threads": stats.get("threads"),
            "target_mib": 800}


def _default_model() -> Path:
    from server.assets import ensure

    return ensure("smollm2-135m-instruct")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default=None, help="model directory (default: the embedded SmolLM2-135M)")
    p.add_argument("--dtype", default="auto", help="auto (bf16 when the CPU has it), bfloat16, float32")
    p.add_argument("--threads", type=int, nargs="+", default=None,
                   help="torch thread counts, measured in turn (default: the engine's default)")
    p.add_argument("--burner", action="store_true", help="also run each engine phase beside a CPU burner")
    p.add_argument("--linear", nargs="+", choices=sorted(_PACKED), default=None,
                   help="linear kernels to compare in one run, one engine each, alternating: native and onednn "
                        "(prepacked bf16 weights), aten (F.linear), default (the environment decides)")
    p.add_argument("--prefix-tokens", type=int, default=0, help="measure prefix caching with this prefix length")
    p.add_argument("--new-tokens", type=int, default=64)
    p.add_argument("--concurrency", type=int, nargs="+", default=[1, 4, 8, 16])
    p.add_argument("--static", type=int, nargs="*", default=[8, 16], help="static batch sizes to measure")
    p.add_argument("--sequential-prompts", type=int, default=2,
                   help="prompts per sequential measurement (0: no transformers baselines, with --static)")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--serve-rss", action="store_true",
                   help="also measure a real `tokenwire serve`'s idle RSS (before and after prefix traffic)")
    p.add_argument("--note", default="", help="free text stored in the result (e.g. machine load)")
    p.add_argument("--out", default=None, help="also write the JSON here")
    args = p.parse_args(argv)
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    prefer_passive_wait()  # as `tokenwire serve` does, before torch loads (OMP_WAIT_POLICY=... overrides)
    result = asyncio.run(main_async(args)) if args.rounds > 0 else {}
    if args.serve_rss:
        result["serve_rss"] = serve_rss(args.prefix_tokens or 1000)
    text = json.dumps(result, indent=2)
    print(text)
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
