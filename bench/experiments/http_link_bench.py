"""The front end's CPU per streamed token over the ``http://`` engine link (vLLM's wire): this tree's
HTTP engine client (engine/remote.py) against a baseline's, in one run, in alternating rounds.

One engine, ``tokenwire serve --tokens-only`` (SmolLM2-135M generating, eos ignored; ``--engine
serve``) or the paced engine (bench/paced_engine.py: no model, one token per stream per ``--step-ms``;
``--engine paced``, for a machine whose cores cannot also run the model), and two
``launch render --engine-url http://…`` front ends in front of it: ``new`` runs this tree, ``old``
runs this tree with the engine client (engine/remote.py, engine/remote_wire.py) of ``--baseline`` (a
git revision) put in its place before the server imports it, so the two differ by that client alone.
Per round and stream count, each front end streams ``--tokens`` tokens on each of ``c`` SSE chats
(``bench.experiments.streams_targets``'s ``api_streams``: the front end's process CPU around them, less its idle
rate, per streamed token); the order of the two alternates by round. Reports each round, the medians and ``new / old`` per
round with its median, and the load average before and after (the machine may be shared).

``--profile DIR`` runs one more round per front end under cProfile (the event loop's thread) and
writes the stats (``old-C.prof``, ``new-C.prof``) and a text summary of the top functions by own time,
in µs per streamed token, of the measured streams only (SIGUSR1 switches the profiler on and off);
cProfile slows what it measures, so those figures are for where the time goes, not for the totals.

    .venv/bin/python -m bench.experiments.http_link_bench [--baseline REV] [--concurrency 16 64] [--rounds 3]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import pstats
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from contextlib import ExitStack
from pathlib import Path
from typing import Any

from bench.experiments.streams_targets import api_streams
from bench.loopback import PacedEngineProcess, emit, raise_fd_limit
from bench.machine import load_average
from server.assets import ensure
from tests.support.server_proc import ServerProcess

ROOT = Path(__file__).resolve().parents[2]


def _swap_preamble(old_files: dict[str, Path]) -> str:
    """Python run before the server's CLI: the engine client's modules (``engine.remote`` and, where
    the baseline has it, ``engine.remote_wire``) are the baseline's files, the wire first."""
    text = "import sys, importlib.util\nsys.modules['torch'] = None\n"
    for name in sorted(old_files, key=lambda n: n != "engine.remote_wire"):
        text += (f"_spec = importlib.util.spec_from_file_location({name!r}, {str(old_files[name])!r})\n"
                 f"_mod = importlib.util.module_from_spec(_spec)\nsys.modules[{name!r}] = _mod\n"
                 "_spec.loader.exec_module(_mod)\n")
    return text


def _baseline_files(baseline: str, tmp: Path) -> dict[str, Path]:
    """The baseline's engine client modules, written under ``tmp``: module name -> file."""
    files = {}
    for name in ("engine.remote", "engine.remote_wire"):
        rel = name.replace(".", "/") + ".py"
        shown = subprocess.run(["git", "show", f"{baseline}:{rel}"], cwd=ROOT, capture_output=True, text=True)
        if shown.returncode != 0:
            if name == "engine.remote":
                raise SystemExit(f"http_link: {baseline} has no {rel}: {shown.stderr.strip()}")
            continue  # a baseline from before the wire had its own module
        path = tmp / (name.rpartition(".")[2] + "_baseline.py")
        path.write_text(shown.stdout)
        files[name] = path
    return files


def _profile_preamble(path: Path) -> str:
    """cProfile on the server's main thread (its event loop), switched on by one SIGUSR1 and off (the
    stats written to ``path``) by the next: only the measured streams are profiled."""
    return ("import cProfile, signal\n_prof = cProfile.Profile()\n_on = [False]\n"
            "def _toggle(*_):\n    if _on[0]:\n        _prof.disable()\n"
            f"        _prof.dump_stats({str(path)!r})\n"
            "    else:\n        _prof.enable()\n    _on[0] = not _on[0]\n"
            "signal.signal(signal.SIGUSR1, _toggle)\n")


def front_end(model: Path, engine_url: str, preamble: str) -> ServerProcess:
    args = ["launch", "render", str(model), "--engine-url", engine_url, "--served-model-name", "bench",
            "--log-level", "warning", "--ws-idle-timeout", "3600"]
    return ServerProcess(args, preamble="import sys\nsys.modules['torch'] = None\n" + preamble, startup_timeout=120)


def measure(front: ServerProcess, streams: int, tokens: int) -> dict[str, Any]:
    assert front.proc is not None
    return asyncio.run(api_streams(front.url, front.proc.pid, streams, tokens))


def summary(prof: Path, tokens: int, top: int = 25) -> list[dict[str, Any]]:
    """The functions with the most own time, µs per streamed token (and cumulative)."""
    stats = pstats.Stats(str(prof))
    rows = []
    for (file, line, name), (_cc, calls, tt, ct, _callers) in stats.stats.items():  # type: ignore[attr-defined]
        rows.append({"function": f"{Path(file).name}:{line}({name})", "calls_per_token": round(calls / tokens, 2),
                     "own_us_per_token": round(tt / tokens * 1e6, 2), "cum_us_per_token": round(ct / tokens * 1e6, 2)})
    rows.sort(key=lambda r: -r["own_us_per_token"])
    return rows[:top]


def run(baseline: str, levels: list[int], tokens: int, rounds: int, profile: Path | None,
        engine_kind: str = "serve", step_ms: float = 50.0) -> dict[str, Any]:
    model = ensure("smollm2-135m-instruct")
    raise_fd_limit(8192)
    out: dict[str, Any] = {"benchmark": "http_link", "baseline": baseline, "model": model.name,
                           "engine": engine_kind, "engine_step_ms": step_ms if engine_kind == "paced" else None,
                           "tokens_per_stream": tokens, "rounds": rounds, "load_average_before": load_average()}
    with tempfile.TemporaryDirectory() as tmp, ExitStack() as stack:
        old_remote = _baseline_files(baseline, Path(tmp))
        engine: ServerProcess | PacedEngineProcess
        if engine_kind == "paced":
            engine = stack.enter_context(PacedEngineProcess(model, step_ms=step_ms))
        else:
            engine = stack.enter_context(ServerProcess(
                ["serve", str(model), "--tokens-only", "--served-model-name", "bench", "--dtype", "float32",
                 "--max-num-seqs", str(max(levels)), "--log-level", "warning"], startup_timeout=300))
        fronts = {"old": stack.enter_context(front_end(model, engine.url, _swap_preamble(old_remote))),
                  "new": stack.enter_context(front_end(model, engine.url, ""))}
        for front in fronts.values():
            measure(front, 2, 4)  # warm-up: first render, first engine call, first connections
        per: dict[str, dict[str, list[dict[str, Any]]]] = {str(c): {"old": [], "new": []} for c in levels}
        for r in range(rounds):
            for c in levels:
                order = ("old", "new") if r % 2 == 0 else ("new", "old")
                for side in order:
                    print(f"http_link: round {r + 1}/{rounds}, {c} streams, {side}", file=sys.stderr, flush=True)
                    per[str(c)][side].append(measure(fronts[side], c, tokens))
        results = {}
        for level, sides in per.items():
            old = [m["api_cpu_us_per_token"] for m in sides["old"]]
            new = [m["api_cpu_us_per_token"] for m in sides["new"]]
            ratios = [round(n / o, 3) for n, o in zip(new, old, strict=True)]
            results[level] = {"old_us_per_token": old, "new_us_per_token": new, "new_over_old": ratios,
                          "old_median": statistics.median(old), "new_median": statistics.median(new),
                          "ratio_median": statistics.median(ratios),
                          "complete_streams": {s: [m["complete_streams"] for m in v] for s, v in sides.items()},
                          "tok_per_s": {s: [m["tok_per_s"] for m in v] for s, v in sides.items()}}
        out["results"] = results
        if profile is not None:
            profile.mkdir(parents=True, exist_ok=True)
            for front in fronts.values():
                front.stop()
            prof_out: dict[str, Any] = {}
            for side, preamble in (("old", _swap_preamble(old_remote)), ("new", "")):
                for c in levels:
                    path = profile / f"{side}-{c}.prof"
                    with front_end(model, engine.url, preamble + _profile_preamble(path)) as front:
                        assert front.proc is not None
                        measure(front, 2, 4)
                        front.proc.send_signal(signal.SIGUSR1)
                        got = measure(front, c, tokens)
                        front.proc.send_signal(signal.SIGUSR1)
                        for _ in range(100):
                            if path.exists():
                                break
                            time.sleep(0.1)
                    prof_out[f"{side}-{c}"] = {"tokens": got["tokens"],
                                               "cpu_us_per_token_under_cprofile": got["api_cpu_us_per_token"],
                                               "top": summary(path, got["tokens"])}
            out["profile"] = prof_out
    out["load_average_after"] = load_average()
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--baseline", default="HEAD", help="the git revision whose engine/remote.py is the old client")
    p.add_argument("--concurrency", type=int, nargs="+", default=[16, 64])
    p.add_argument("--tokens", type=int, default=128)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--engine", choices=("serve", "paced"), default="serve")
    p.add_argument("--step-ms", type=float, default=50.0, help="the paced engine's step (--engine paced)")
    p.add_argument("--profile", default=None, metavar="DIR")
    p.add_argument("--out", default=None)
    a = p.parse_args(argv)
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    emit(run(a.baseline, a.concurrency, a.tokens, a.rounds, Path(a.profile) if a.profile else None, a.engine,
             a.step_ms), a.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
