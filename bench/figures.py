"""Every figure of a run, next to its baseline, as one flat list.

Each benchmark prints its own JSON shape; the functions here read those shapes (one per section)
and give :class:`Figure` records: the value with its unit, the baseline it is read against (measured
in the same run, or a published figure, which ``baseline_source`` says), their ratio, which way is
better, and whether tokenwire is on the worse side of that baseline.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass
from typing import Any, Literal

# vLLM 0.32 on this machine class (2 cores), as docs/vllm-baseline.md records them: not measured in this run.
VLLM_RENDER_RPS = {1: 190.0, 8: 440.0}
VLLM_RENDER_P50_MS = 4.8
VLLM_ENGINE_TOK_S = {1: 40.0, 8: 218.0, 16: 400.0}
TRANSFORMERS_BATCH1_TOK_S = 23.0  # the batch-1 model.generate of the same published session
VLLM_RENDER_STARTUP_S = 15.0
PUBLISHED = "published (docs/vllm-baseline.md: vLLM 0.32 on this machine class, not this run)"
SAME_RUN = "same run"


@dataclass(frozen=True)
class Figure:
    id: str
    label: str
    value: float
    unit: str
    better: Literal["higher", "lower"]
    baseline: str | None = None
    baseline_value: float | None = None
    baseline_source: str | None = None
    note: str | None = None

    @property
    def ratio(self) -> float | None:
        if not self.baseline_value:
            return None
        return self.value / self.baseline_value

    @property
    def worse_than_baseline(self) -> bool | None:
        if self.baseline_value is None:
            return None
        return self.value < self.baseline_value if self.better == "higher" else self.value > self.baseline_value

    def to_json(self) -> dict[str, Any]:
        out = asdict(self)
        out["value"] = _round(self.value)
        out["baseline_value"] = _round(self.baseline_value)
        ratio = self.ratio
        out["ratio"] = None if ratio is None else _round(ratio)
        out["worse_than_baseline"] = self.worse_than_baseline
        return out


def _round(x: float | None) -> float | None:
    if x is None:
        return None
    return round(x, 3) if abs(x) < 100 else round(x, 1)


def _f(id: str, label: str, value: float, unit: str, better: Literal["higher", "lower"],
       baseline: str | None = None, baseline_value: float | None = None, source: str | None = SAME_RUN,
       note: str | None = None) -> Figure:
    return Figure(id, label, float(value), unit, better, baseline,
                  None if baseline_value is None else float(baseline_value),
                  source if baseline is not None else None, note)


# --- one reader per section ------------------------------------------------------------------------

def render_figures(r: dict[str, Any]) -> Iterator[Figure]:
    direct = r["direct_apply_chat_template"]
    for workload, runs in r["server"].items():
        base = direct[workload]
        for run in runs:
            c = run["concurrency"]
            yield _f(f"render.{workload}.c{c}.rps", f"render {workload}, concurrency {c}, over HTTP", run["rps"],
                     "req/s", "higher", "direct apply_chat_template(tokenize=True) in one process",
                     base["calls_per_s"])
            if workload == "short_chat" and c in VLLM_RENDER_RPS:
                yield _f(f"render.{workload}.c{c}.rps_vs_vllm", f"render {workload}, concurrency {c}",
                         run["rps"], "req/s", "higher", "vLLM 0.32 render server", VLLM_RENDER_RPS[c], PUBLISHED)
        first = runs[0]
        yield _f(f"render.{workload}.c{first['concurrency']}.p50_ms",
                 f"render {workload}, p50 latency over HTTP", first["p50_ms"], "ms", "lower",
                 "direct apply_chat_template call, p50", base["p50_ms"])
        if workload == "short_chat":
            yield _f(f"render.{workload}.c1.p50_ms_vs_vllm", f"render {workload}, p50 latency", first["p50_ms"],
                     "ms", "lower", "vLLM 0.32 render server, p50", VLLM_RENDER_P50_MS, PUBLISHED)


def engine_figures(r: dict[str, Any]) -> Iterator[Figure]:
    wall, cpu = r["wall_tok_per_s"]["median"], r["cpu_tok_per_cpu_s"]["median"]
    seq, seq_cpu = wall["sequential"], cpu["sequential"]
    for name, value in wall.items():
        if not name.startswith("engine_c"):
            continue
        c = int(name.removeprefix("engine_c"))
        yield _f(f"engine.c{c}.tok_s", f"LocalEngine, {c} concurrent streams", value, "tok/s", "higher",
                 "sequential model.generate (batch 1)", seq)
        yield _f(f"engine.c{c}.tok_per_cpu_s", f"LocalEngine, {c} concurrent streams, per CPU-second", cpu[name],
                 "tok/CPU-s", "higher", "sequential model.generate, per CPU-second", seq_cpu)
        if f"static_batch_{c}" in wall:
            yield _f(f"engine.c{c}.tok_s_vs_static", f"LocalEngine, {c} concurrent streams", value, "tok/s",
                     "higher", f"static left-padded model.generate batch of {c}", wall[f"static_batch_{c}"])
            yield _f(f"engine.c{c}.tok_per_cpu_s_vs_static", f"LocalEngine, {c} streams, per CPU-second",
                     cpu[name], "tok/CPU-s", "higher", f"static model.generate batch of {c}, per CPU-second",
                     cpu[f"static_batch_{c}"])
        if c in VLLM_ENGINE_TOK_S:
            yield _f(f"engine.c{c}.speedup_vs_vllm", f"LocalEngine at {c} streams over batch-1 generate",
                     value / seq, "x batch-1", "higher", "vLLM 0.32 CPU engine at the same concurrency over "
                     "batch-1 generate", VLLM_ENGINE_TOK_S[c] / TRANSFORMERS_BATCH1_TOK_S, PUBLISHED,
                     note="each engine against the batch-1 transformers baseline of its own session, so the "
                          "machine's load cancels out")
            yield _f(f"engine.c{c}.tok_s_vs_vllm", f"LocalEngine, {c} concurrent streams", value, "tok/s", "higher",
                     "vLLM 0.32 CPU engine", VLLM_ENGINE_TOK_S[c], PUBLISHED,
                     note="absolute figures from different sessions: the machine's load differs")


def derender_figures(r: dict[str, Any]) -> Iterator[Figure]:
    tokens = r["stream"]["tokens"]
    floor = r["decode_stream_floor"]["per_token_us"]
    for size in ("1_token_chunks", "8_token_chunks"):
        n = size.split("_")[0]
        per_token = r["in_memory"][size]["stream_cpu_ms"] / tokens * 1e3
        yield _f(f"derender.in_memory.{n}tok.per_token_us", f"incremental derender, {n}-token chunks, per token",
                 per_token, "us/token", "lower", "tokenizers DecodeStream step alone, per token", floor,
                 note="hermes + qwen3 parsers, state in memory (a WebSocket / SSE pipeline)")
        enc = r["encoded_state"][size]["stream_cpu_ms"] / tokens * 1e3
        yield _f(f"derender.encoded_state.{n}tok.per_token_us",
                 f"derender with signed state round trip, {n}-token chunks, per token", enc, "us/token", "lower",
                 "tokenizers DecodeStream step alone, per token", floor)
        lat = r["in_memory"][size]["latency_us"]
        yield _f(f"derender.in_memory.{n}tok.chunk_us_at_4000", f"per-chunk latency at output position 4,000, "
                 f"{n}-token chunks", lat["4000"], "us", "lower", "the same at position 100", lat["100"],
                 note="position 4,000 is inside a tool call's arguments, 100 in reasoning")
    control = r["control_reasoning_only"]["in_memory"]["latency_us"]
    yield _f("derender.control.chunk_us_at_4000", "per-chunk latency at position 4,000, all-reasoning stream",
             control["4000"], "us", "lower", "the same at position 100", control["100"])
    yield _f("derender.in_memory.1tok.stream_cpu_ms", "whole streamed derender, 1-token chunks",
             r["in_memory"]["1_token_chunks"]["stream_cpu_ms"], "ms CPU", "lower",
             "one non-streaming derender of the same tokens (service)", r["non_streaming"]["service_ms"])
    for size, row in r.get("in_memory_by_chunk_size", {}).items():
        yield _f(f"derender.in_memory.{size}tok.stream_cpu_ms_vs_one_shot",
                 f"whole streamed derender, {size}-token chunks", row["stream_cpu_ms"], "ms CPU", "lower",
                 "one non-streaming derender of the same tokens (function)", r["non_streaming"]["function_ms"],
                 note="issue 5's target: at most 2x")
    sizes = r["encoded_state"]["1_token_chunks"]["state_bytes"]
    yield _f("derender.state_bytes_max", "largest signed derender state in the stream", sizes["max"], "bytes",
             "lower")
    http = r.get("http_one_token_per_call")
    if http:
        vllm = r["vllm_0_32"]
        scale = http["tokens"] / vllm["tokens"]
        yield _f("derender.http.total_s", f"HTTP streaming derender, one token per call, {http['tokens']} tokens",
                 http["total_s"], "s", "lower", "vLLM 0.32 render server, same stream shape (parsers on)",
                 vllm["parser_stream_s"] * scale, PUBLISHED)
        yield _f("derender.http.total_s_vs_plain", "HTTP streaming derender, one token per call", http["total_s"],
                 "s", "lower", "vLLM 0.32 plain detokenization (no parsers), same length",
                 vllm["plain_stream_s"] * scale, PUBLISHED)
        yield _f("derender.http.call_ms_last_100", "HTTP derender call at the end of the stream (last 100)",
                 http["call_ms_last_100"], "ms", "lower", "vLLM 0.32 call at the end of the stream",
                 vllm["parser_call_ms_end"], PUBLISHED)
        yield _f("derender.http.call_ms_last_vs_first", "HTTP derender call, last 100 calls",
                 http["call_ms_last_100"], "ms", "lower", "first 100 calls of the same stream",
                 http["call_ms_first_100"])


def serve_figures(r: dict[str, Any]) -> Iterator[Figure]:
    for row in r["results"]:
        c = row["concurrency"]
        tp = row["throughput_tok_s"]
        yield _f(f"serve.c{c}.tok_s", f"serve SSE chat pipeline, {c} streams (real model)", tp["pipeline"], "tok/s",
                 "higher", "the same generation through /inference/v1/generate (engine only)", tp["engine_only"])
        yield _f(f"serve.c{c}.itl_p50_ms", f"serve SSE chat, inter-token latency p50, {c} streams",
                 row["itl_ms"]["p50"], "ms", "lower", "engine-only stream, p50", row["engine_only_itl_ms"]["p50"])
        yield _f(f"serve.c{c}.itl_p99_ms", f"serve SSE chat, inter-token latency p99, {c} streams",
                 row["itl_ms"]["p99"], "ms", "lower", "engine-only stream, p99", row["engine_only_itl_ms"]["p99"])
        yield _f(f"serve.c{c}.overhead_ms_per_token", f"server time per token over engine-only, {c} streams",
                 row["server_overhead_per_token_ms"], "ms/token", "lower")


def startup_figures(r: dict[str, Any]) -> Iterator[Figure]:
    start = r["startup_s"]["median"]
    yield _f("startup.launch_render_s", "launch render: spawn to /health 200", start, "s", "lower",
             "bare interpreter importing transformers and loading the tokenizer",
             r["baseline_import_and_load_tokenizer_s"]["median"])
    yield _f("startup.launch_render_s_vs_vllm", "launch render: spawn to /health 200", start, "s", "lower",
             "vLLM 0.32 render server start", VLLM_RENDER_STARTUP_S, PUBLISHED)


def sessions_figures(r: dict[str, Any]) -> Iterator[Figure]:
    yield _f("sessions.kib_per_idle_session", f"server memory per idle WebSocket session (fit to "
             f"{r['sessions_max']:,} sessions)", r["kib_per_session_fit"], "KiB", "lower")
    last = r["points"][-1]
    yield _f("sessions.rss_mib_at_max", f"server RSS with {last['sessions']:,} idle sessions", last["rss_mib"],
             "MiB", "lower", note=f"{r['rss_base_mib']:.0f} MiB with none")
    yield _f("sessions.alive_at_end", "sessions answering a ping after the ramp", r["alive_at_end"], "sessions",
             "higher", "sessions opened", r["sessions_max"])


def streams_figures(r: dict[str, Any]) -> Iterator[Figure]:
    for row in r["results"]:
        c = row["concurrency"]
        direct = row["direct"]
        for mode in ("sse", "ws"):
            m = row[mode]
            name = "WebSocket" if mode == "ws" else "SSE"
            for q in ("p50", "p99"):
                yield _f(f"streams.c{c}.{mode}.delivery_{q}_ms", f"{name} through the server, engine→client latency "
                         f"per token {q}, {c} streams", m["delivery_ms"][q], "ms", "lower",
                         "straight from the engine (no server)", direct["delivery_ms"][q])
                yield _f(f"streams.c{c}.{mode}.itl_{q}_ms", f"{name} through the server, inter-token latency {q}, "
                         f"{c} streams", m["itl_ms"][q], "ms", "lower", "straight from the engine (no server)",
                         direct["itl_ms"][q])
        ws, sse = row["ws"], row["sse"]
        yield _f(f"streams.c{c}.ws_vs_sse.server_cpu_us_per_token", f"server CPU per token, WebSocket, {c} streams",
                 ws["server_cpu_us_per_token"], "us/token", "lower", "the same generation over SSE",
                 sse["server_cpu_us_per_token"])
        yield _f(f"streams.c{c}.ws_vs_sse.delivery_p50_ms", f"engine→client latency p50, WebSocket, {c} streams",
                 ws["delivery_ms"]["p50"], "ms", "lower", "the same generation over SSE", sse["delivery_ms"]["p50"])
        yield _f(f"streams.c{c}.ws_vs_sse.delivery_p99_ms", f"engine→client latency p99, WebSocket, {c} streams",
                 ws["delivery_ms"]["p99"], "ms", "lower", "the same generation over SSE", sse["delivery_ms"]["p99"])
        yield _f(f"streams.c{c}.ws_vs_sse.to_engine_p50_ms", f"request to engine p50, WebSocket, {c} streams",
                 ws["to_engine_ms"]["p50"], "ms", "lower", "the same request over SSE", sse["to_engine_ms"]["p50"])


def structured_figures(r: dict[str, Any]) -> Iterator[Figure]:
    """bench/structured_bench.py: a batch with constrained rows against the same batch unconstrained."""
    half = r["batch"]["constrained"]
    yield _f("structured.mixed_step_ms", f"engine step with {half} constrained + {half} plain rows",
             r["mixed_step_ms"], "ms", "lower", f"the same step with {2 * half} plain rows", r["plain_step_ms"])
    yield _f("structured.mixed_cpu_ms_per_step", "engine CPU per step with constrained rows",
             r["mixed_cpu_ms_per_step"], "ms CPU", "lower", "the same with plain rows only",
             r["plain_cpu_ms_per_step"])
    yield _f("structured.grammar_us_per_constrained_token", "grammar work per constrained token (bitmask, matcher)",
             r["grammar_us_per_constrained_token"], "us/token", "lower")


def soak_figures(r: dict[str, Any]) -> Iterator[Figure]:
    """bench/soak.py: counts that must stay at zero, leaks against the start, frame latency."""
    yield _f("soak.requests", f"requests over {r['sessions']} sessions in {r['duration_s']} s", r["requests"],
             "requests", "higher")
    yield _f("soak.lost_or_duplicated_streams", "streams that lost or repeated a token", r["lost_or_duplicated_streams"],
             "streams", "lower", "expected", 0)
    yield _f("soak.seq_breaks", "sessions whose seq skipped or repeated", r["seq_breaks"], "breaks", "lower",
             "expected", 0)
    yield _f("soak.rss_slope_mb_per_min", "server RSS growth after warm-up", r["rss_mb"]["slope_after_warmup_mb_per_min"],
             "MB/min", "lower")
    yield _f("soak.open_fds_after", "server open file descriptors after every session closed", r["open_fds"]["after"],
             "fds", "lower", "before the sessions opened", r["open_fds"]["before"])
    yield _f("soak.event_loop_tasks_after", "server event-loop tasks after every session closed",
             r["event_loop_tasks"]["after"], "tasks", "lower", "before the sessions opened",
             r["event_loop_tasks"]["before"])
    for q in ("p50", "p99"):
        yield _f(f"soak.between_frames_{q}_ms", f"time between frames at the client, {q} (real tiny model)",
                 r["between_frames_ms"][q], "ms", "lower")


def fanout_figures(r: dict[str, Any]) -> Iterator[Figure]:
    """bench/fanout_bench.py: the server's own Python per WebSocket token, the best round (no baseline:
    compare two versions with it, alternating)."""
    best, setting = r["best"], f"{r['streams']} streams, {r['step_ms']:g} ms steps, {r['evict_mb']} MiB swept"
    yield _f("fanout.steady_us_per_token", f"server Python per token mid-stream ({setting})",
             best["steady_us_per_token"], "us CPU/token", "lower")
    yield _f("fanout.whole_us_per_token", f"server Python per token, requests' start and end included ({setting})",
             best["whole_us_per_token"], "us CPU/token", "lower")
    yield _f("fanout.writes_per_token", "transport writes per token", best["writes_per_token"], "writes", "lower")


def vllm_figures(r: dict[str, Any]) -> Iterator[Figure]:
    """bench/vllm_compare.py already pairs each tokenwire figure with vLLM's in the same run."""
    for pair in r.get("pairs", []):
        yield _f(pair["id"], pair["label"], pair["tokenwire"], pair["unit"], pair["better"],
                 f"vLLM {r.get('vllm_version', '?')} ({pair['vllm_what']})", pair["vllm"], SAME_RUN)


def generic_figures(r: dict[str, Any]) -> Iterator[Figure]:
    """A benchmark that lists its own ``figures`` (value, unit, optional baseline) in this module's shape."""
    for f in r.get("figures", []) if isinstance(r, dict) else []:
        if isinstance(f, dict) and {"id", "value", "unit"} <= f.keys():
            yield _f(str(f["id"]), str(f.get("label", f["id"])), float(f["value"]), str(f["unit"]),
                     "higher" if f.get("better") == "higher" else "lower", f.get("baseline"),
                     f.get("baseline_value"), f.get("baseline_source", SAME_RUN))


READERS: dict[str, Callable[[dict[str, Any]], Iterator[Figure]]] = {
    "render": render_figures, "engine": engine_figures, "derender": derender_figures, "serve": serve_figures,
    "startup": startup_figures, "sessions": sessions_figures, "streams": streams_figures, "vllm": vllm_figures,
    "structured": structured_figures, "soak": soak_figures, "fanout": fanout_figures,
}


def figures_of(section: str, result: dict[str, Any]) -> tuple[list[Figure], str | None]:
    """The section's figures, and a message when its JSON could not be read (a changed shape)."""
    reader = READERS.get(section, generic_figures)
    try:
        return list(reader(result)), None
    except (KeyError, TypeError, ValueError, ZeroDivisionError, IndexError) as exc:
        return [], f"figures of {section!r} could not be read: {type(exc).__name__}: {exc}"
