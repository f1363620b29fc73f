"""Run tokenwire's benchmark suite, in a bounded time, and write one JSON file and PNG plots.

    .venv/bin/python -m bench.run [--quick | --full] [--out DIR] [--vllm-python PATH] [--only NAME ...]

The suite is :data:`SECTIONS` (docs/benchmarks.md, "Each benchmark"); one-off investigations live
in bench/experiments/ (bench/experiments/README.md) and are not part of it. Each benchmark runs in its own process, one after another, on loopback
only, with a time limit; the run as a whole stays within ``--budget-s`` (quick: under 10 minutes on
a 2-core machine; full: longer, more rounds, more points). The run directory
``DIR/<UTC time>-<mode>/`` receives ``results.json`` (the machine, load average before and after,
versions, the commit, each benchmark's own JSON, and every figure with its unit, its baseline and
the ratio) and the plots. With ``--vllm-python`` (a Python that has vLLM installed), the same
render, derender and generate workloads also run against vLLM's render server and tokens-only
engine (bench/vllm_compare.py), and each figure is paired with vLLM's from the same run.

Exit status: 0 when every benchmark that ran finished, 1 when one failed or ran out of time, 2 for
a usage problem (for example, matplotlib missing: ``bash scripts/install.sh dev``).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections import deque
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench.figures import figures_of  # noqa: E402
from bench.machine import describe_machine, git_state, load_average, versions  # noqa: E402


@dataclass(frozen=True)
class Section:
    name: str
    module: str
    what: str
    quick: tuple[str, ...]
    full: tuple[str, ...]
    limit_quick_s: int
    limit_full_s: int
    writes_out: bool = True  # takes --out FILE (otherwise its stdout is the JSON)


SECTIONS = (
    Section("render", "bench.render_bench", "render req/s and latency vs direct apply_chat_template",
            ("--seconds", "2"), ("--seconds", "5"), 150, 300),
    Section("derender", "bench.derender_bench", "derender per-chunk cost by position vs DecodeStream; HTTP stream",
            ("--quick",), (), 180, 600),
    Section("engine", "bench.engine_bench", "engine tok/s vs concurrency vs sequential and static-batch generate",
            ("--rounds", "2", "--new-tokens", "32", "--concurrency", "1", "4", "8", "16", "--static", "8", "16",
             "--sequential-prompts", "1"),
            ("--rounds", "3", "--new-tokens", "64", "--concurrency", "1", "2", "4", "8", "16", "32",
             "--static", "8", "16", "32"), 300, 1200),
    Section("serve", "bench.serve_bench", "SSE chat TTFT/ITL and server overhead vs engine-only (real model)",
            ("--concurrency", "1", "8", "--new-tokens", "32", "--rounds", "2"),
            ("--concurrency", "1", "8", "32", "--new-tokens", "64", "--rounds", "3"), 240, 900),
    Section("sessions", "bench.sessions_bench", "server memory vs idle WebSocket sessions",
            ("--sessions", "250", "500", "1000", "2000"), ("--sessions", "500", "1000", "2000", "3000", "5000"),
            180, 400),
    Section("streams", "bench.streams_bench", "latency added per token vs concurrent streams, WebSocket vs SSE",
            ("--concurrency", "1", "16", "64", "256", "--tokens", "32"),
            ("--concurrency", "1", "8", "32", "64", "128", "256", "512", "--tokens", "64", "--rounds", "2"),
            240, 900),
    Section("startup", "bench.startup_bench", "launch render start-up vs importing and loading the tokenizer",
            ("--runs", "2"), ("--runs", "5"), 120, 300, writes_out=False),
    Section("structured", "bench.structured_bench", "structured output: a constrained row's cost in a shared batch",
            ("--rounds", "2", "--new-tokens", "32"), (), 240, 1800),
    Section("soak", "bench.soak", "load and soak: many sessions, nothing lost, nothing leaking",
            ("--sessions", "50", "--duration", "45", "--warmup", "15"), (), 240, 1800),
    Section("fanout", "bench.fanout_bench", "the server's Python per WebSocket token, in one process, cold steps",
            ("--streams", "64", "--tokens", "48", "--step-ms", "1", "--evict-mb", "64", "--rounds", "3"),
            ("--streams", "256", "--tokens", "128", "--step-ms", "1", "--evict-mb", "64", "--rounds", "5"), 120, 600),
)
BUDGET_S = {"quick": 570, "full": 3 * 3600}


def _vllm_section(python: str) -> Section:
    return Section("vllm", "bench.vllm_compare", "the same workloads against vLLM's render server and engine",
                   ("--vllm-python", python, "--quick"), ("--vllm-python", python), 900, 3600)


# --- running one benchmark -------------------------------------------------------------------------------

def run_section(section: Section, mode: str, limit_s: float, scratch: Path) -> dict[str, Any]:
    args = list(section.quick if mode == "quick" else section.full)
    out_file = scratch / f"{section.name}.json"
    if section.writes_out:
        args += ["--out", str(out_file)]
    cmd = [sys.executable, "-m", section.module, *args]
    env = {**os.environ, "TOKENIZERS_PARALLELISM": "false", "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1",
           "PYTHONUNBUFFERED": "1"}
    shown = [*(section.quick if mode == "quick" else section.full)]  # the command a reader would type
    record: dict[str, Any] = {"what": section.what, "command": " ".join(["python", "-m", section.module, *shown]),
                              "limit_s": round(limit_s), "load_average_before": load_average()}
    stdout_path = scratch / f"{section.name}.stdout"
    tail: deque[str] = deque(maxlen=40)
    t0 = time.monotonic()
    with stdout_path.open("wb") as stdout:
        # a session of its own, so a time-out stops the benchmark and every server it started
        proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=stdout, stderr=subprocess.PIPE, text=True,
                                start_new_session=True)
        pump = threading.Thread(target=_relay, args=(proc, section.name, tail), daemon=True)
        pump.start()
        try:
            rc = proc.wait(timeout=limit_s)
        except subprocess.TimeoutExpired:
            _stop_group(proc)
            rc = None
        pump.join(5)
    record["seconds"] = round(time.monotonic() - t0, 1)
    record["load_average_after"] = load_average()
    if rc is None:
        record.update(status="timeout", error=f"stopped after its limit of {limit_s:.0f} s", stderr_tail=list(tail))
        return record
    if rc != 0:
        record.update(status="failed", error=f"exit status {rc}", stderr_tail=list(tail))
        return record
    try:
        text = out_file.read_text() if section.writes_out and out_file.exists() else stdout_path.read_text()
        record["result"] = json.loads(text[text.index("{"):])
        record["status"] = "ok"
    except (ValueError, OSError) as exc:
        record.update(status="failed", error=f"no JSON result ({type(exc).__name__})", stderr_tail=list(tail))
    return record


def _relay(proc: subprocess.Popen[str], name: str, tail: deque[str]) -> None:
    assert proc.stderr is not None
    for line in proc.stderr:
        line = line.rstrip("\n")
        tail.append(line)
        print(f"  [{name}] {line}", file=sys.stderr, flush=True)


def _stop_group(proc: subprocess.Popen[str]) -> None:
    for sig, wait in ((signal.SIGTERM, 15), (signal.SIGKILL, 5)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(wait)
            return
        except subprocess.TimeoutExpired:
            continue


# --- the run ---------------------------------------------------------------------------------------------

def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    speed = p.add_mutually_exclusive_group()
    speed.add_argument("--quick", action="store_const", dest="mode", const="quick", help="the default: < 10 min")
    speed.add_argument("--full", action="store_const", dest="mode", const="full",
                       help="more rounds, longer runs, more points on each curve")
    p.add_argument("--out", default=str(ROOT / "bench" / "results"), help="directory for run directories")
    p.add_argument("--vllm-python", default=None, help="a Python interpreter with vLLM installed (optional)")
    p.add_argument("--only", nargs="+", default=None, metavar="NAME", help="run only these benchmarks")
    p.add_argument("--budget-s", type=float, default=None,
                   help="total time limit (quick 570, full 10800; plus the vLLM comparison's limit when asked)")
    a = p.parse_args(argv)
    mode = a.mode or "quick"
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        print("bench.run: matplotlib is needed for the plots; install the dev extras: bash scripts/install.sh dev",
              file=sys.stderr)
        return 2
    sections = [*SECTIONS, *([_vllm_section(a.vllm_python)] if a.vllm_python else [])]
    if a.only:
        unknown = set(a.only) - {s.name for s in sections}
        if unknown:
            print(f"bench.run: unknown benchmark(s) {sorted(unknown)}; choose from {[s.name for s in sections]}",
                  file=sys.stderr)
            return 2
        sections = [s for s in sections if s.name in a.only]

    started = datetime.now(UTC)
    run_dir = Path(a.out) / f"{started:%Y%m%d-%H%M%S}-{mode}"
    run_dir.mkdir(parents=True, exist_ok=True)
    budget = a.budget_s or BUDGET_S[mode]
    if a.vllm_python and not a.budget_s:  # the vLLM comparison comes on top of the usual run
        vllm = _vllm_section(a.vllm_python)
        budget += vllm.limit_quick_s if mode == "quick" else vllm.limit_full_s
    report: dict[str, Any] = {
        "tokenwire_bench": {"format": 1, "mode": mode, "argv": sys.argv[1:] if argv is None else argv,
                            "budget_s": budget},
        "started_at": started.isoformat(timespec="seconds"),
        "machine": {**describe_machine(), "load_average_before": load_average(),
                    "note": "load average is the 1/5/15-minute run-queue length; above the CPU count, other "
                            "work competed with the benchmark"},
        "versions": versions(), "git": git_state(), "sections": {},
    }
    _ensure_assets()
    deadline = time.monotonic() + budget
    with tempfile.TemporaryDirectory(prefix="tokenwire-bench-") as tmp:
        for section in sections:
            left = deadline - time.monotonic()
            limit = section.limit_quick_s if mode == "quick" else section.limit_full_s
            if left < 30:
                report["sections"][section.name] = {"what": section.what, "status": "skipped",
                                                    "error": f"the run's budget of {budget:.0f} s was spent"}
                continue
            print(f"bench.run: {section.name} — {section.what} (limit {min(limit, left):.0f} s)", file=sys.stderr,
                  flush=True)
            report["sections"][section.name] = run_section(section, mode, min(limit, left), Path(tmp))
            print(f"bench.run: {section.name}: {report['sections'][section.name]['status']} in "
                  f"{report['sections'][section.name]['seconds']} s", file=sys.stderr, flush=True)
    return _finish(report, run_dir, started)


def _ensure_assets() -> None:
    """Build the model assets the benchmarks use before any clock starts (first run on a fresh clone)."""
    from server.assets import ensure

    for name in ("smollm2-135m-instruct", "qwen3", "tiny-qwen3"):
        ensure(name)


def _finish(report: dict[str, Any], run_dir: Path, started: datetime) -> int:
    from bench.plots import plot_run

    figures, problems = [], []
    for name, sec in report["sections"].items():
        if sec.get("status") == "ok":
            found, problem = figures_of(name, sec["result"])
            figures += found
            if problem:
                problems.append(problem)
    plots, plot_problems = plot_run(report["sections"], run_dir)
    finished = datetime.now(UTC)
    report["finished_at"] = finished.isoformat(timespec="seconds")
    report["duration_s"] = round((finished - started).total_seconds(), 1)
    report["machine"]["load_average_after"] = load_average()
    report["figures"] = [f.to_json() for f in figures]
    report["worse_than_baseline"] = [f.id for f in figures if f.worse_than_baseline]
    report["plots"] = [Path(x).name for x in plots]
    report["problems"] = problems + plot_problems
    out = run_dir / "results.json"
    out.write_text(json.dumps(report, indent=1, ensure_ascii=False) + "\n")
    _print_summary(report, figures, out)
    bad = [n for n, s in report["sections"].items() if s.get("status") in ("failed", "timeout")]
    return 1 if bad else 0


def _print_summary(report: dict[str, Any], figures: list[Any], out: Path) -> None:
    w = sys.stderr.write
    w(f"\nbench.run: {report['tokenwire_bench']['mode']} run in {report['duration_s']} s, load average "
      f"{report['machine']['load_average_before']} → {report['machine']['load_average_after']}\n")
    for name, sec in report["sections"].items():
        w(f"  {name:<10} {sec.get('status'):<8} {sec.get('seconds', '-')} s  {sec.get('error') or ''}\n")
    w(f"\n  {'figure':<52} {'value':>12} {'baseline':>12} {'ratio':>7}\n")
    for f in figures:
        ratio = f.ratio
        flag = "  worse than baseline" if f.worse_than_baseline else ""
        base = "" if f.baseline_value is None else f"{f.baseline_value:.4g}"
        w(f"  {f.id:<52} {f.value:>10.4g} {f.unit[:10]:<10} {base:>10} "
          f"{'' if ratio is None else f'{ratio:.2f}':>7}{flag}\n")
    for problem in report["problems"]:
        w(f"  problem: {problem}\n")
    w(f"\nbench.run: wrote {out} and {len(report['plots'])} plot(s) beside it\n")


if __name__ == "__main__":
    sys.exit(main())
