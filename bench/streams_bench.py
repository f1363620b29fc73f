"""Concurrent streaming sessions: what the server adds to every token, over WebSocket and over SSE,
as the number of streams grows.

Behind one ``tokenwire launch render --engine-url`` process sits a paced engine (bench/paced_engine.py:
no model, one token per stream per ``--step-ms`` on a shared step clock, each emission time
recorded), so what is measured is the server, not a model. For each concurrency ``c``, in the same
run, with the same engine:

- ``direct``: ``c`` SSE streams straight from the engine's ``/inference/v1/generate`` (the baseline:
  the engine's pacing, the client, and the loopback, with no server between);
- ``sse``: ``c`` ``POST /v1/chat/completions`` streams through the server (render → engine →
  incremental derender → SSE), one HTTP connection each;
- ``ws``: ``c`` WebSocket sessions (``/v1/session``), one ``chat`` frame each (the same render →
  engine → derender, framed as ``chat.delta``);
- ``responses_sse`` / ``responses_ws`` (with ``--modes``): the same stream as an OpenAI Responses
  request, ``POST /v1/responses`` SSE or a ``response.create`` on the Responses WebSocket mode
  (``GET /v1/responses``), one connection each, counted by their ``response.output_text.delta``
  events (no delivery latency: the client does not learn the engine's request id).

Per mode: time to first token (which includes waiting for the engine's next step, up to one
``--step-ms``); latency to the engine (the request's arrival at the engine minus its sending:
connection, render and the call to the engine); inter-token latency (gaps between a stream's content chunks at
the client); one-way delivery latency per token (client receive time minus the engine's emission
time of that token, both ``CLOCK_MONOTONIC``); the server's CPU time per token (from ``/proc``,
the whole run including each request's render and engine call, less the server's idle rate
measured before the first level); the benchmark client's own CPU time per token (it shares the
cores). The client (bench/streams_clients.py) reads SSE and WebSocket frames by hand, equally lean (``bench.loopback``
``SseStream`` / ``WsStream``), so neither mode's latency carries more client work than the other's;
``--ws-client websockets`` uses the ``websockets`` library instead, which costs more per frame. "Added by the server" is a mode's figure minus
``direct``'s. Sessions and connections are opened before the clock starts; the ``c`` requests are
sent spread evenly over ``--ramp-s`` (arrivals, not one burst), and each stream runs ``--tokens``. Prints one JSON document (also written to ``--out``).

    .venv/bin/python -m bench.streams_bench [--concurrency 1 16 64 256] [--tokens 32] [--step-ms 100]
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from pathlib import Path
from typing import Any

from bench import server_profile
from bench.loopback import (
    PacedEngineProcess,
    cpu_seconds,
    emit,
    event_loop_policy,
    kernel_seconds,
    model_or_default,
    pct,
    raise_fd_limit,
    render_server,
)
from bench.streams_clients import Stream, connect, run_mode


def summarize(streams: list[Stream], engine_times: tuple[dict[str, int], dict[str, list[int]]], tokens: int,
              wall_s: float, server_cpu_s: float | None, idle_cpu_per_s: float = 0.0, *,
              client_cpu_s: float | None = None) -> dict[str, Any]:
    arrivals, emissions = engine_times
    ttft, to_engine, itl, delivery = [], [], [], []
    complete = aligned = 0
    for s in streams:
        if s.recv_ns:
            ttft.append((s.recv_ns[0] - s.sent_ns) / 1e6)
        if s.key in arrivals:
            to_engine.append((arrivals[s.key] - s.sent_ns) / 1e6)
        itl += [(b - a) / 1e6 for a, b in zip(s.recv_ns, s.recv_ns[1:], strict=False)]
        complete += len(s.recv_ns) == tokens
        emitted = emissions.get(s.key, [])
        if len(emitted) == len(s.recv_ns) == tokens:
            aligned += 1
            delivery += [(r - e) / 1e6 for r, e in zip(s.recv_ns, emitted, strict=True)]
    n_tokens = sum(len(s.recv_ns) for s in streams)

    def q(values: list[float]) -> dict[str, float]:
        return {"p50": round(pct(values, 0.5), 3), "p99": round(pct(values, 0.99), 3)}

    out: dict[str, Any] = {"streams": len(streams), "complete_streams": complete, "aligned_streams": aligned,
                           "tokens": n_tokens, "wall_s": round(wall_s, 3), "tok_per_s": round(n_tokens / wall_s, 1),
                           "ttft_ms": q(ttft), "to_engine_ms": q(to_engine), "itl_ms": q(itl), "delivery_ms": q(delivery)}
    if server_cpu_s is not None:
        busy = max(server_cpu_s - idle_cpu_per_s * wall_s, 0.0)  # less what the server spends idle
        out["server_cpu_s"] = round(server_cpu_s, 4)
        out["server_cpu_us_per_token"] = round(busy / max(n_tokens, 1) * 1e6, 1)
    if client_cpu_s is not None:  # the benchmark's own client, on the same cores as the server
        out["client_cpu_us_per_token"] = round(client_cpu_s / max(n_tokens, 1) * 1e6, 1)
    return out


async def idle_cpu_rate(pid: int, seconds: float = 3.0) -> float:
    """CPU seconds per second the server spends with nothing to do (timers, keep-alive)."""
    c0, t0 = cpu_seconds(pid), time.perf_counter()
    await asyncio.sleep(seconds)
    return (cpu_seconds(pid) - c0) / (time.perf_counter() - t0)


async def run_level(engine: PacedEngineProcess, server_url: str, server_pid: int, c: int, tokens: int,
                    ramp_s: float, order: tuple[str, ...], tag: str, idle: float,
                    profile: Path | None = None, ws_client: str = "lean") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for mode in order:
        engine.emissions()  # forget earlier runs
        conns = await connect(mode, engine.url if mode == "direct" else server_url, c, ws_client)
        await asyncio.sleep(0.2)
        spy = server_profile.start(server_pid, profile if mode != "direct" else None, f"{mode}-c{c}-{tag}")
        cpu0, t0, client0 = cpu_seconds(server_pid), time.perf_counter(), time.process_time()
        kernel0 = kernel_seconds(server_pid)
        streams = await run_mode(mode, conns, c, tokens, ramp_s, tag)
        wall, client_cpu = time.perf_counter() - t0, time.process_time() - client0
        cpu, kernel = cpu_seconds(server_pid) - cpu0, kernel_seconds(server_pid) - kernel0
        server_profile.stop(spy)
        out[mode] = summarize(streams, engine.emissions(), tokens, wall, None if mode == "direct" else cpu, idle,
                              client_cpu_s=client_cpu)
        if mode != "direct":
            out[mode]["server_kernel_share"] = round(kernel / cpu, 3) if cpu > 0 else None
        await asyncio.sleep(0.3)
    return out


def added(level: dict[str, Any]) -> dict[str, Any]:
    """Each through-server mode's latency minus the direct baseline's, per quantile (ms)."""
    base = level["direct"]
    return {mode: {metric: {q: round(level[mode][metric][q] - base[metric][q], 3) for q in ("p50", "p99")}
                   for metric in ("itl_ms", "delivery_ms", "to_engine_ms")}
            for mode in ("sse", "ws") if mode in level}


async def measure(engine: PacedEngineProcess, server_url: str, server_pid: int, levels: list[int], tokens: int,
                  ramp_s: float, rounds: int, sdk: bool = False, modes: tuple[str, ...] = ("sse", "ws"),
                  profile: Path | None = None, ws_client: str = "lean") -> tuple[float, list[dict[str, Any]]]:
    # warm-up: the first render, the first engine connection
    await run_mode("sse", await connect("sse", server_url, 2), 2, 4, 0, "warm")
    await run_mode("ws", await connect("ws", server_url, 2, ws_client), 2, 4, 0, "warm")
    idle = await idle_cpu_rate(server_pid)
    results = []
    for c in levels:
        per_round = []
        for r in range(rounds):
            order = ("direct", *(modes if r % 2 == 0 else modes[::-1]))
            order += ("sdk",) if sdk else ()
            print(f"  streams c={c} round {r + 1}/{rounds}", file=sys.stderr, flush=True)
            per_round.append(await run_level(engine, server_url, server_pid, c, tokens, ramp_s, order,
                                             f"d{c}r{r}", idle, profile, ws_client))
        level = _median_round(per_round)
        results.append({"concurrency": c, **level, "added_by_server_ms": added(level),
                        "rounds": per_round if rounds > 1 else None})
    return idle, results


def _median_round(rounds: list[dict[str, Any]]) -> dict[str, Any]:
    """The round whose WS delivery p50 is the median (one consistent round, not a mix of figures)."""
    if len(rounds) == 1:
        return rounds[0]
    key = "ws" if "ws" in rounds[0] else "sse"
    ordered = sorted(rounds, key=lambda r: r[key]["delivery_ms"]["p50"])
    return ordered[len(ordered) // 2]


def run(model: Path, levels: list[int], tokens: int, step_ms: float, ramp_s: float, rounds: int,
        link: str = "ws", sdk: bool = False, modes: tuple[str, ...] = ("sse", "ws"),
        profile: Path | None = None, ws_client: str = "lean") -> dict[str, Any]:
    raise_fd_limit(4 * max(levels) + 1024)
    with PacedEngineProcess(model, step_ms=step_ms) as engine, \
            render_server(model, engine_url(engine.url, link)) as srv:
        assert srv.proc is not None
        with event_loop_policy() as loop:
            idle, results = asyncio.run(measure(engine, srv.url, srv.proc.pid, levels, tokens, ramp_s, rounds, sdk,
                                                modes, profile, ws_client))
    return {"benchmark": "streaming_sessions", "model": model.name, "tokens_per_stream": tokens, "engine_link": link,
            "engine_step_ms": step_ms, "ramp_s": ramp_s, "rounds": rounds, "client_loop": loop,
            "ws_client": ws_client,
            "server_idle_cpu_ms_per_s": round(idle * 1e3, 3),
            "server": f"tokenwire launch render --engine-url {engine_url('http://…', link)} (paced engine, no model)",
            "modes": {"direct": "SSE straight from the paced engine (baseline)",
                      "sse": "POST /v1/chat/completions stream through the server",
                      "ws": "chat frames on /v1/session through the server, one session per stream",
                      "responses_sse": "POST /v1/responses stream (SSE) through the server",
                      "responses_ws": "response.create on the Responses WebSocket mode (GET /v1/responses), "
                                      "one connection per stream",
                      **({"sdk": "client_sdk, every stream on one session"} if sdk else {})},
            "results": results}


def engine_url(http_url: str, link: str) -> str:
    """The front end's ``--engine-url``: the multiplexed session link (``ws``) or one HTTP stream
    per request (``http``, vLLM's wire)."""
    return "ws" + http_url[len("http"):] if link == "ws" else http_url


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default=None, help="model directory (tokenizer); default: the embedded SmolLM2")
    p.add_argument("--concurrency", type=int, nargs="+", default=[1, 16, 64, 256])
    p.add_argument("--tokens", type=int, default=32, help="tokens per stream")
    p.add_argument("--step-ms", type=float, default=100.0, help="paced engine step (one token per stream per step)")
    p.add_argument("--ramp-s", type=float, default=1.0, help="spread the requests' sending over this many seconds")
    p.add_argument("--rounds", type=int, default=1)
    p.add_argument("--sdk", action="store_true",
                   help="also stream through client_sdk, every stream on one session (the SDK's CPU per token)")
    p.add_argument("--engine-link", choices=("ws", "http"), default="ws",
                   help="how the front end reaches the engine: the multiplexed session link (ws, default) or "
                        "one SSE stream per request (http, vLLM's wire)")
    p.add_argument("--modes", nargs="+", choices=("sse", "ws", "responses_sse", "responses_ws"),
                   default=["sse", "ws"],
                   help="the through-server modes to run (the direct baseline always runs)")
    p.add_argument("--ws-client", choices=("lean", "websockets"), default="lean",
                   help="the benchmark's WebSocket client: frames by hand, as lean as its SSE reader (default), "
                        "or the websockets library's")
    p.add_argument("--profile", default=None, metavar="DIR",
                   help="record the server with py-spy during each mode into DIR (raw stacks; its CPU "
                        "figures are not comparable: sampling stops the process)")
    p.add_argument("--out", default=None)
    a = p.parse_args(argv)
    if a.profile and server_profile.find_py_spy() is None:
        p.error("--profile needs py-spy, which is not on PATH nor beside this Python: "
                "install it with `.venv/bin/pip install py-spy`")
    model = model_or_default(a.model)
    result = run(model, a.concurrency, a.tokens, a.step_ms, a.ramp_s, a.rounds, a.engine_link, a.sdk,
                 tuple(a.modes), Path(a.profile) if a.profile else None, a.ws_client)
    emit(result, a.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
