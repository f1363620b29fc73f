"""Structured-output benchmark: what a constrained row costs, next to unconstrained rows in the same batch.

One ``LocalEngine`` in this process; every request is seeded and generates exactly
``--new-tokens`` tokens (the constrained requests write a JSON string that a near-random model
practically never closes, so their grammar does not end before ``max_tokens``; the others ignore
eos). Phases, each run
``--rounds`` times alternately:

- ``plain``: ``2 × --batch`` unconstrained requests;
- ``mixed``: ``--batch`` unconstrained and ``--batch`` constrained requests together.

Reported, medians over rounds:

- wall-clock time per engine step of each phase, and the difference per constrained token
  (``(mixed - plain) / batch``): the whole extra cost of decoding with a grammar;
- the engine's own grammar time (bitmask fill and apply, matcher advance) per constrained token,
  from ``LocalEngine.grammars`` counters;
- that the unconstrained requests' tokens are the same in both phases (seeded sampling: sharing
  a batch with constrained rows changes nothing for them).

Time per step is measured by the client (wall clock over the run divided by the number of
steps), so a busy machine inflates both phases alike; CPU seconds of the process are reported too.

    .venv/bin/python -m bench.structured_bench [--model DIR] [--batch 8] [--new-tokens 64] [--rounds 3]
        [--out bench/results/structured.json]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import statistics
import time
from pathlib import Path
from typing import Any

# A JSON object whose one string field only ends with a quote: from a near-uniform model, that
# takes thousands of tokens, so every constrained row decodes inside JSON for the whole run.
SCHEMA = {"type": "object", "properties": {"text": {"type": "string", "pattern": "^[a-z ]+$"}}, "required": ["text"]}


async def _run(engine: Any, requests: list[Any]) -> tuple[list[list[int]], float, float, int]:
    async def one(req: Any) -> list[int]:
        ids: list[int] = []
        async for out in engine.generate(req):
            for c in out.choices:
                ids.extend(c.token_ids)
        return ids

    steps0 = engine.stats()["steps"]
    wall0, cpu0 = time.perf_counter(), time.process_time()
    outs = await asyncio.gather(*(one(r) for r in requests))
    return list(outs), time.perf_counter() - wall0, time.process_time() - cpu0, engine.stats()["steps"] - steps0


def _requests(prompt: list[int], batch: int, new_tokens: int, constrained: bool, tag: str) -> list[Any]:
    from engine.protocol import GenerateRequest, SamplingParams
    from engine.structured import structured_outputs

    reqs = []
    for i in range(batch):
        extra: dict[str, Any] = ({"structured_outputs": structured_outputs(json=SCHEMA)} if constrained
                                 else {"ignore_eos": True})
        sp = SamplingParams(temperature=1.0, seed=1000 + i + (500 if constrained else 0), max_tokens=new_tokens,
                            **extra)
        reqs.append(GenerateRequest(request_id=f"{tag}-{i}", token_ids=prompt, sampling_params=sp))
    return reqs


async def main_async(args: argparse.Namespace) -> dict[str, Any]:
    from transformers import AutoTokenizer

    from engine.local import LocalEngine

    model_dir = Path(args.model) if args.model else _default_model()
    tok = AutoTokenizer.from_pretrained(str(model_dir), local_files_only=True)
    prompt = list(tok("Reply with a JSON object that has a long text field.")["input_ids"])
    engine = LocalEngine(model_dir, model_name=model_dir.name, max_model_len=args.new_tokens + len(prompt) + 8,
                         dtype=args.dtype, max_num_seqs=2 * args.batch, num_threads=args.threads)
    await engine.start()
    try:
        # warm up: model, tokenizer info, grammar compile (cached from here on)
        await _run(engine, _requests(prompt, 2, 4, True, "warm") + _requests(prompt, 2, 4, False, "warm-u"))
        plain: list[dict[str, float]] = []
        mixed: list[dict[str, float]] = []
        same = True
        for r in range(args.rounds):
            outs, wall, cpu, steps = await _run(engine, _requests(prompt, 2 * args.batch, args.new_tokens, False,
                                                                  f"p{r}"))
            plain.append({"step_ms": 1000 * wall / steps, "cpu_ms_per_step": 1000 * cpu / steps})
            plain_ids = outs[: args.batch]
            g = engine.grammars
            rows0, secs0 = g.rows_masked, g.mask_seconds
            reqs = _requests(prompt, args.batch, args.new_tokens, False, f"mu{r}") + _requests(
                prompt, args.batch, args.new_tokens, True, f"mc{r}")
            outs, wall, cpu, steps = await _run(engine, reqs)
            rows = g.rows_masked - rows0
            mixed.append({"step_ms": 1000 * wall / steps, "cpu_ms_per_step": 1000 * cpu / steps,
                          "grammar_us_per_constrained_token": 1e6 * (g.mask_seconds - secs0) / max(rows, 1)})
            same = same and outs[: args.batch] == plain_ids
            for ids in outs[args.batch:]:
                text = str(tok.decode(ids))
                if not text.startswith("{") or len(ids) != args.new_tokens:
                    raise SystemExit(f"constrained output does not look constrained: {text[:80]!r}")
    finally:
        await engine.close()

    def med(rows: list[dict[str, float]], key: str) -> float:
        return round(statistics.median(r[key] for r in rows), 3)

    plain_ms, mixed_ms = med(plain, "step_ms"), med(mixed, "step_ms")
    return {
        "model": model_dir.name,
        "dtype": str(engine.dtype).removeprefix("torch."),
        "threads": engine.num_threads,
        "batch": {"unconstrained": args.batch, "constrained": args.batch},
        "new_tokens": args.new_tokens,
        "rounds": args.rounds,
        "plain_step_ms": plain_ms,
        "mixed_step_ms": mixed_ms,
        "plain_cpu_ms_per_step": med(plain, "cpu_ms_per_step"),
        "mixed_cpu_ms_per_step": med(mixed, "cpu_ms_per_step"),
        "extra_ms_per_constrained_token": round((mixed_ms - plain_ms) / args.batch, 3),
        "grammar_us_per_constrained_token": med(mixed, "grammar_us_per_constrained_token"),
        "unconstrained_tokens_unchanged_by_constrained_neighbours": same,
        "machine": {"cpus": os.cpu_count(), "load_average": os.getloadavg(), "platform": platform.platform()},
    }


def _default_model() -> Path:
    from server.assets import ensure

    return ensure("tiny-qwen3")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", help="model directory (default: the tiny-qwen3 asset)")
    ap.add_argument("--dtype", default="float32")
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--new-tokens", type=int, default=64)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--out", help="also write the JSON here")
    args = ap.parse_args()
    result = asyncio.run(main_async(args))
    text = json.dumps(result, indent=2)
    print(text)
    if args.out:
        Path(args.out).write_text(text + "\n")


if __name__ == "__main__":
    main()
