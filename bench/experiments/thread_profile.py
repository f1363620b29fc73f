"""Where a ``serve --tokens-only`` server's CPU goes, per thread, at each thread count (issue 43).

One tokenwire server per setting (``--servers``: ``N`` for ``TOKENWIRE_NUM_THREADS=N``, then
``,NAME=VALUE`` for more of its environment, e.g. ``2,TOKENWIRE_THREAD_PLAN=fixed``) runs at once;
they take turns (the order reverses every round) and only the one being measured gets requests.
Per concurrency ``c``: ``c`` streams of ``--new-tokens`` tokens, greedy, eos ignored, after one
warm-up of the same shape; aggregate tokens/s, the median time to first token, and for each of the
server's threads the CPU seconds it used and the times it was preempted (``/proc/PID/task/TID``:
``utime + stime``, ``nonvoluntary_ctxt_switches``) during the measured streams. Threads are named
by role: ``loop`` (the main thread: event loop, front end), ``engine`` (the thread ``py-spy dump``
names ``tokenwire-engine``: scheduler, Python of the forward, the calling share of every kernel),
and ``helper-K`` for the rest (torch's OpenMP threads and the native kernels' pool threads, in
start order), so a second thread's CPU and wait show beside the first's. With ``--perf`` one more
pass per server runs ``perf record`` over the measured streams at the largest concurrency and
reports each thread's share by shared object (libgomp, the kernels' library, torch, Python).
Prints (and with ``--out``, writes) one JSON document, with the load average before and after.

    .venv/bin/python -m bench.experiments.thread_profile [--servers 1 2 2,TOKENWIRE_THREAD_PLAN=fixed] [--concurrency 1 8 16]
        [--rounds 3] [--perf]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.engine_bench import chat_prompts
from bench.loopback import emit
from bench.machine import load_average
from bench.vllm_compare import engine_dtype, generate_stream, server, tokenwire_cmd

TICK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def _server_pid(url: str) -> int:
    """The process listening on ``url``'s port (the server; not its launcher)."""
    port = url.rsplit(":", 1)[1]
    out = subprocess.run(["ss", "-Htlnp", f"sport = :{port}"], capture_output=True, text=True).stdout
    found = re.search(r"pid=(\d+)", out)
    if not found:
        raise RuntimeError(f"no process listens on port {port}")
    return int(found.group(1))


def thread_times(pid: int) -> dict[int, tuple[float, int]]:
    """Each thread of ``pid``: (CPU seconds, nonvoluntary context switches) so far."""
    out: dict[int, tuple[float, int]] = {}
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            stat = (task / "stat").read_text()
            status = (task / "status").read_text()
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2:].split()
        cpu = (int(fields[11]) + int(fields[12])) / TICK  # utime, stime
        preempted = int(re.search(r"nonvoluntary_ctxt_switches:\s+(\d+)", status).group(1))  # type: ignore[union-attr]
        out[int(task.name)] = (cpu, preempted)
    return out


def _py_spy() -> str | None:
    spy = shutil.which("py-spy") or str(Path(sys.executable).with_name("py-spy"))
    return spy if Path(spy).exists() else None


def roles(pid: int) -> dict[int, str]:
    """Thread id → ``loop`` / ``engine`` / ``helper-K`` (``engine`` needs py-spy, which prints
    each Python thread's OS id and name)."""
    out = {pid: "loop"}
    spy = _py_spy()
    if spy:
        dump = subprocess.run([spy, "dump", "--pid", str(pid)], capture_output=True, text=True, timeout=60).stdout
        for m in re.finditer(r'^Thread (\d+) \(\w+\): "tokenwire-engine"', dump, re.M):
            out[int(m.group(1))] = "engine"
    helpers = sorted(t for t in thread_times(pid) if t not in out)
    for k, tid in enumerate(helpers):
        out[tid] = f"helper-{k}"
    return out


async def _streams(url: str, prompts: list[list[int]], new_tokens: int) -> list[tuple[int, float | None]]:
    return await asyncio.gather(*(generate_stream(url, p, new_tokens) for p in prompts))


def measure(url: str, pid: int, prompts: list[list[int]], new_tokens: int, names: dict[int, str]) -> dict[str, Any]:
    asyncio.run(_streams(url, prompts, new_tokens))  # warm-up of this batch shape
    before = thread_times(pid)
    t0 = time.perf_counter()
    got = asyncio.run(_streams(url, prompts, new_tokens))
    wall = time.perf_counter() - t0
    after = thread_times(pid)
    tokens = sum(n for n, _ in got)
    firsts = [f for _, f in got if f is not None]
    cpu: dict[str, float] = {}
    preempted: dict[str, int] = {}
    for tid, (c1, p1) in after.items():
        c0, p0 = before.get(tid, (0.0, 0))
        role = names.get(tid, "new")
        cpu[role] = round(cpu.get(role, 0.0) + c1 - c0, 3)
        preempted[role] = preempted.get(role, 0) + p1 - p0
    return {"tok_s": round(tokens / wall, 1), "ttft_ms": round(statistics.median(firsts) * 1e3, 1),
            "wall_s": round(wall, 3), "cpu_s": {k: v for k, v in cpu.items() if v > 0},
            "cpu_per_token_ms": round(sum(cpu.values()) / tokens * 1e3, 3),
            "preempted": {k: v for k, v in preempted.items() if v > 0}}


def perf_shares(url: str, pid: int, prompts: list[list[int]], new_tokens: int, names: dict[int, str]) -> dict[str, Any]:
    """One ``perf record`` of the streams: per role, its samples' share by shared object."""
    data = tempfile.NamedTemporaryFile(prefix="thread-profile-", suffix=".data", delete=False).name  # noqa: SIM115
    rec = subprocess.Popen(["perf", "record", "-F", "499", "-p", str(pid), "-o", data, "--", "sleep", "600"],
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        time.sleep(1.0)
        asyncio.run(_streams(url, prompts, new_tokens))
    finally:
        subprocess.run(["kill", "-INT", str(rec.pid)], check=False)
        rec.wait(timeout=60)
    # perf's "pid" key is the thread's id when recording one process's threads
    report = subprocess.run(["perf", "report", "-i", data, "--stdio", "--sort", "pid,dso", "--no-children"], capture_output=True, text=True, timeout=300).stdout
    os.unlink(data)
    out: dict[str, dict[str, float]] = {}
    for line in report.splitlines():
        m = re.match(r"\s*([\d.]+)%\s+(\d+):\S*\s+(\S+)", line)
        if m:
            role = names.get(int(m.group(2)), "new")
            dso = "native kernels" if m.group(3).startswith("tokenwire-") else m.group(3)  # engine/local/native.py
            out.setdefault(role, {})[dso] = round(out.get(role, {}).get(dso, 0.0) + float(m.group(1)), 2)
    return {r: dict(sorted(d.items(), key=lambda kv: -kv[1])[:6]) for r, d in sorted(out.items())}


def parse_server(text: str) -> dict[str, str]:
    """``N[,NAME=VALUE...]`` → the server's environment."""
    n, *rest = text.split(",")
    if not n.isdigit() or int(n) < 1 or any("=" not in kv or kv.startswith("=") for kv in rest):
        raise argparse.ArgumentTypeError(f"{text!r}: use N[,NAME=VALUE...], e.g. 2,TOKENWIRE_THREAD_PLAN=fixed")
    return {"TOKENWIRE_NUM_THREADS": n, **dict(kv.split("=", 1) for kv in rest)}


def run(model: Path, threads: list[str], levels: list[int], new_tokens: int, rounds: int, use_perf: bool,
        env: dict[str, str]) -> dict[str, Any]:
    dtype = engine_dtype()
    prompts = chat_prompts(model, max(levels))
    common = [str(model), "--tokens-only", "--served-model-name", "bench", "--dtype", dtype,
              "--max-model-len", "2048", "--max-num-seqs", str(max(levels)), "--log-level", "warning"]
    out: dict[str, Any] = {"benchmark": "thread_profile", "model": model.name, "dtype": dtype,
                           "new_tokens": new_tokens, "rounds": rounds, "env": env,
                           "load_average_before": load_average(), "servers": {}}
    with contextlib.ExitStack() as stack:
        urls = {n: stack.enter_context(server(tokenwire_cmd("serve", *common), env={**env, **parse_server(n)}))
                for n in threads}
        pids = {n: _server_pid(u) for n, u in urls.items()}
        for n in threads:  # start every thread: one pass at the largest concurrency
            asyncio.run(_streams(urls[n], prompts, 8))
        names = {n: roles(pids[n]) for n in threads}
        samples: dict[str, dict[int, list[dict[str, Any]]]] = {n: {c: [] for c in levels} for n in threads}
        for r in range(rounds):
            order = threads if r % 2 == 0 else threads[::-1]
            for n in order:
                for c in levels:
                    print(f"thread_profile: round {r + 1}/{rounds}, server {n}, {c} stream(s)", file=sys.stderr,
                          flush=True)
                    samples[n][c].append(measure(urls[n], pids[n], prompts[:c], new_tokens, names[n]))
        for n in threads:
            row: dict[str, Any] = {}
            for c in levels:
                runs = samples[n][c]
                row[str(c)] = {"tok_s": statistics.median(x["tok_s"] for x in runs),
                               "ttft_ms": statistics.median(x["ttft_ms"] for x in runs),
                               "rounds": runs}
            import httpx

            stats = httpx.get(f"{urls[n]}/engine/stats", timeout=30).json().get("stats") or {}
            row["engine"] = {k: stats.get(k) for k in ("threads", "thread_plan", "forwards_by_threads",
                                                       "omp_wait_policy", "linear_kernel", "attention_kernel")}
            if use_perf:
                row["perf_at_max_streams"] = perf_shares(urls[n], pids[n], prompts, new_tokens, names[n])
            out["servers"][n] = row
        base = threads[0]
        out["tok_s_ratio_vs_first"] = {n: {str(c): round(out["servers"][n][str(c)]["tok_s"]
                                                         / out["servers"][base][str(c)]["tok_s"], 2) for c in levels}
                                       for n in threads}
    out["load_average_after"] = load_average()
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default=None, help="model directory (default: the embedded SmolLM2-135M-Instruct)")
    p.add_argument("--servers", nargs="+", default=["1", "2"], metavar="N[,NAME=VALUE...]")
    p.add_argument("--concurrency", type=int, nargs="+", default=[1, 8, 16])
    p.add_argument("--new-tokens", type=int, default=64)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--perf", action="store_true", help="one perf record pass per server at the largest concurrency")
    p.add_argument("--env", nargs="*", default=[], metavar="NAME=VALUE", help="environment for every server")
    p.add_argument("--out", default=None)
    a = p.parse_args(argv)
    for text in a.servers:
        try:
            parse_server(text)
        except argparse.ArgumentTypeError as e:
            p.error(str(e))
    bad = [kv for kv in a.env if "=" not in kv or kv.startswith("=")]
    if bad:
        p.error(f"--env takes NAME=VALUE, not {bad[0]!r}")
    from server.assets import ensure

    model = Path(a.model) if a.model else ensure("smollm2-135m-instruct")
    emit(run(model, a.servers, a.concurrency, a.new_tokens, a.rounds, a.perf, dict(kv.split("=", 1) for kv in a.env)),
         a.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
