"""PNG plots of a run's curves (matplotlib, Agg backend; small files for docs/img).

Each function takes one section's JSON and a path, draws one figure and returns the path; a
section that did not run gives no plot. :func:`plot_run` draws every plot a run has data for.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench.figures import TRANSFORMERS_BATCH1_TOK_S, VLLM_ENGINE_TOK_S

DPI = 80
SIZE = (8.0, 3.6)


def _pyplot() -> Any:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    plt.rcParams.update({"font.size": 8, "axes.titlesize": 9, "legend.fontsize": 7, "axes.grid": True,
                         "grid.alpha": 0.3})
    return plt


def _save(fig: Any, path: Path) -> Path:
    fig.tight_layout()
    fig.savefig(path, dpi=DPI)
    _pyplot().close(fig)
    try:  # a 64-colour palette: a third of the size, no visible difference for line plots
        from PIL import Image

        with Image.open(path) as img:
            small = img.convert("RGB").quantize(colors=64, method=Image.Quantize.MEDIANCUT)
        small.save(path, optimize=True)
    except ImportError:
        pass
    return path


def derender_plot(r: dict[str, Any], path: Path) -> Path:
    plt = _pyplot()
    sweep = r.get("in_memory_by_chunk_size")
    if sweep:
        fig, (ax, ax2, ax3) = plt.subplots(1, 3, figsize=(SIZE[0] * 1.4, SIZE[1] + 0.8),
                                           gridspec_kw={"width_ratios": [2, 1, 1.2]})
    else:
        fig, (ax, ax2) = plt.subplots(1, 2, figsize=(SIZE[0], SIZE[1] + 0.8), gridspec_kw={"width_ratios": [2, 1]})
    positions = sorted(int(p) for p in r["in_memory"]["1_token_chunks"]["latency_us"])
    series = [
        ("in memory, 1-token chunks", r["in_memory"]["1_token_chunks"]["latency_us"], "C0", "-"),
        ("in memory, 8-token chunks", r["in_memory"]["8_token_chunks"]["latency_us"], "C0", "--"),
        ("signed state each chunk, 1-token", r["encoded_state"]["1_token_chunks"]["latency_us"], "C1", "-"),
        ("control: all reasoning, in memory", r["control_reasoning_only"]["in_memory"]["latency_us"], "C2", ":"),
    ]
    for label, lat, color, style in series:
        ax.plot(positions, [lat[str(p)] for p in positions], style, color=color, marker="o", ms=3, label=label)
    floor = r["decode_stream_floor"]["per_token_us"]
    ax.axhline(floor, color="grey", ls="-.", lw=1, label=f"DecodeStream step alone ({floor:.2f} µs)")
    ax.axvspan(0, 2800, color="C4", alpha=0.05)
    ax.axvspan(3500, max(positions) + 100, color="C3", alpha=0.06)
    ax.set_yscale("log")
    ax.set_xlabel("output position (tokens); shaded: reasoning | content | tool-call arguments")
    ax.set_ylabel("per-chunk latency (µs, median)")
    ax.set_title("Derender cost per chunk by output position (hermes + qwen3 parsers)")
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.2), ncol=2)
    http = r.get("http_one_token_per_call")
    vllm = r["vllm_0_32"]
    labels, tw, vl = ["first 100 calls", "last 100 calls"], [], []
    if http:
        tw = [http["call_ms_first_100"], http["call_ms_last_100"]]
    vl = [vllm["parser_call_ms_start"], vllm["parser_call_ms_end"]]
    xs = range(len(labels))
    if tw:
        ax2.bar([x - 0.2 for x in xs], tw, 0.4, color="C0", label="tokenwire (this run)")
    ax2.bar([x + 0.2 for x in xs], vl, 0.4, color="grey", label="vLLM 0.32 (published)")
    ax2.set_xticks(list(xs), labels)
    ax2.set_yscale("log")
    ax2.set_ylabel("ms per HTTP call (1 token/call)")
    ax2.set_title("HTTP derender, 1 token per call")
    ax2.legend(loc="upper center", bbox_to_anchor=(0.5, -0.2))
    if sweep:
        one_shot = r["non_streaming"]["function_ms"]
        sizes = sorted(int(k) for k in sweep)
        ax3.plot(sizes, [sweep[str(k)]["stream_cpu_ms"] / one_shot for k in sizes], "-", color="C0", marker="o",
                 ms=3, label="whole stream, in memory")
        ax3.plot(sizes, [sweep[str(k)]["floor_cpu_ms"] / one_shot for k in sizes], ":", color="grey", marker="o",
                 ms=3, label="floor: text lookup + chunk dict only")
        ax3.axhline(2.0, color="C3", ls="--", lw=1, label="target: 2x")
        ax3.set_xscale("log", base=2)
        ax3.set_yscale("log")
        ax3.set_xlabel("tokens per chunk")
        ax3.set_ylabel("CPU / one non-streaming derender")
        ax3.set_title("Whole stream against one-shot")
        ax3.legend(loc="upper center", bbox_to_anchor=(0.5, -0.2))
    return _save(fig, path)


def engine_plot(r: dict[str, Any], path: Path) -> Path:
    plt = _pyplot()
    fig, axes = plt.subplots(1, 2, figsize=SIZE)
    for ax, key, unit in ((axes[0], "wall_tok_per_s", "tokens/s (wall clock)"),
                          (axes[1], "cpu_tok_per_cpu_s", "tokens per CPU-second")):
        med, samples = r[key]["median"], r[key]["samples"]
        conc = sorted(int(k.removeprefix("engine_c")) for k in med if k.startswith("engine_c"))
        ys = [med[f"engine_c{c}"] for c in conc]
        lo = [y - min(samples[f"engine_c{c}"]) for c, y in zip(conc, ys, strict=True)]
        hi = [max(samples[f"engine_c{c}"]) - y for c, y in zip(conc, ys, strict=True)]
        ax.errorbar(conc, ys, yerr=[lo, hi], marker="o", ms=4, capsize=3, color="C0", label="LocalEngine (streamed)")
        ax.axhline(med["sequential"], color="C3", ls="--", lw=1, label="sequential model.generate")
        static = sorted(int(k.removeprefix("static_batch_")) for k in med if k.startswith("static_batch_"))
        ax.plot(static, [med[f"static_batch_{b}"] for b in static], "s", color="C2", ms=6,
                label="static model.generate batch")
        for b in static:
            ax.axhline(med[f"static_batch_{b}"], color="C2", ls=":", lw=0.8)
        if key == "wall_tok_per_s":
            vc = sorted(VLLM_ENGINE_TOK_S)
            scale = med["sequential"] / TRANSFORMERS_BATCH1_TOK_S
            ax.plot(vc, [VLLM_ENGINE_TOK_S[c] * scale for c in vc], "x--", color="grey", lw=0.8,
                    label="vLLM 0.32 CPU (published, scaled to this run's batch-1)")
        ax.set_xscale("log", base=2)
        ax.set_xticks(conc, [str(c) for c in conc])
        ax.set_xlabel("concurrent requests")
        ax.set_ylabel(unit)
        ax.legend()
    fig.suptitle(f"Engine throughput vs concurrency ({r['model']}, {r['dtype']}, {r['threads']} threads, "
                 f"{r['new_tokens']} new tokens)", fontsize=9)
    return _save(fig, path)


def sessions_plot(r: dict[str, Any], path: Path) -> Path:
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(SIZE[0] * 0.6, SIZE[1]))
    xs = [p["sessions"] for p in r["points"]]
    ys = [p["rss_mib"] for p in r["points"]]
    ax.plot(xs, ys, "o-", color="C0", label="server RSS")
    slope = r["kib_per_session_fit"]
    base = r["rss_base_mib"]
    ax.plot([0, xs[-1]], [base, base + slope * xs[-1] / 1024], "--", color="grey", lw=1,
            label=f"fit: {slope:.1f} KiB per session")
    ax.set_xlabel("idle WebSocket sessions held open")
    ax.set_ylabel("server RSS (MiB)")
    ax.set_title("Idle sessions: server memory")
    ax.legend()
    return _save(fig, path)


def streams_plot(r: dict[str, Any], path: Path) -> Path:
    plt = _pyplot()
    fig, (ax, ax2) = plt.subplots(1, 2, figsize=SIZE)
    rows = r["results"]
    conc = [row["concurrency"] for row in rows]
    styles = {"direct": ("grey", "engine → client (no server)"), "sse": ("C1", "through server, SSE"),
              "ws": ("C0", "through server, WebSocket")}
    for mode, (color, label) in styles.items():
        for q, ls in (("p50", "-"), ("p99", "--")):
            ax.plot(conc, [max(row[mode]["delivery_ms"][q], 1e-3) for row in rows], ls, marker="o", ms=3,
                    color=color, label=f"{label} {q}")
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xticks(conc, [str(c) for c in conc])
    ax.set_xlabel("concurrent streams (one session / connection each)")
    ax.set_ylabel("engine emission → client receipt (ms)")
    ax.set_title(f"Per-token latency, paced engine ({1000 / r['engine_step_ms']:.0f} tok/s per stream)")
    ax.legend(ncol=1)
    width = 0.38
    xs = range(len(conc))
    ax2.bar([x - width / 2 for x in xs], [row["sse"]["server_cpu_us_per_token"] for row in rows], width,
            color="C1", label="SSE")
    ax2.bar([x + width / 2 for x in xs], [row["ws"]["server_cpu_us_per_token"] for row in rows], width,
            color="C0", label="WebSocket")
    ax2.set_xticks(list(xs), [str(c) for c in conc])
    ax2.set_xlabel("concurrent streams")
    ax2.set_ylabel("server CPU per token (µs)")
    ax2.set_title("Server CPU per streamed token")
    ax2.legend()
    return _save(fig, path)


PLOTS: dict[str, tuple[str, Callable[[dict[str, Any], Path], Path]]] = {
    "derender": ("derender_latency.png", derender_plot),
    "engine": ("engine_throughput.png", engine_plot),
    "sessions": ("idle_sessions.png", sessions_plot),
    "streams": ("streaming_sessions.png", streams_plot),
}


def plot_run(sections: dict[str, dict[str, Any]], out_dir: Path) -> tuple[list[str], list[str]]:
    """Draws every plot whose section has a result; returns (files written, problems)."""
    written, problems = [], []
    for name, (filename, draw) in PLOTS.items():
        result = sections.get(name, {}).get("result")
        if not result:
            continue
        try:
            written.append(str(draw(result, out_dir / filename)))
        except (KeyError, TypeError, ValueError, IndexError) as exc:
            problems.append(f"plot {filename}: {type(exc).__name__}: {exc}")
    return written, problems
