"""bench.run's reading of benchmark JSON into figures (value, unit, baseline, ratio, which side is
worse) and its plots, on small hand-made results in each benchmark's shape."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from bench.figures import PUBLISHED, SAME_RUN, Figure, figures_of
from bench.plots import plot_run


def render_result() -> dict[str, Any]:
    def run(c: int, rps: float) -> dict[str, Any]:
        return {"concurrency": c, "requests": 100, "seconds": 1.0, "rps": rps, "p50_ms": 1.0, "p99_ms": 2.0,
                "prompt_tokens": 20}

    return {"server": {"short_chat": [run(1, 900.0), run(8, 1200.0)], "chat_2k_tools": [run(1, 300.0), run(8, 400.0)]},
            "direct_apply_chat_template": {"short_chat": {"calls_per_s": 3000.0, "p50_ms": 0.3, "prompt_tokens": 20},
                                           "chat_2k_tools": {"calls_per_s": 500.0, "p50_ms": 2.0,
                                                             "prompt_tokens": 2000}}}


def engine_result() -> dict[str, Any]:
    med = {"sequential": 10.0, "engine_c1": 9.0, "engine_c8": 60.0, "static_batch_8": 50.0, "engine_c16": 90.0,
           "static_batch_16": 100.0}
    samples = {k: [v * 0.9, v, v * 1.1] for k, v in med.items()}
    block = {"median": med, "samples": samples}
    return {"model": "m", "dtype": "bfloat16", "threads": 2, "new_tokens": 32, "wall_tok_per_s": block,
            "cpu_tok_per_cpu_s": block}


def sessions_result() -> dict[str, Any]:
    return {"points": [{"sessions": 0, "rss_mib": 100.0}, {"sessions": 1000, "rss_mib": 135.0},
                       {"sessions": 2000, "rss_mib": 170.0}],
            "kib_per_session_fit": 35.84, "sessions_max": 2000, "alive_at_end": 2000, "rss_base_mib": 100.0}


def streams_result() -> dict[str, Any]:
    def mode(delivery: float, cpu: float | None) -> dict[str, Any]:
        q = {"p50": delivery, "p99": delivery * 4}
        out: dict[str, Any] = {"delivery_ms": q, "itl_ms": {"p50": 100.0, "p99": 100.0 + delivery}, "to_engine_ms": q, "ttft_ms": q}
        if cpu is not None:
            out["server_cpu_us_per_token"] = cpu
        return out

    rows = [{"concurrency": c, "direct": mode(0.3, None), "sse": mode(2.0 * c, 300.0), "ws": mode(1.5 * c, 250.0)}
            for c in (1, 16, 256)]
    return {"engine_step_ms": 100.0, "results": rows}


def derender_result() -> dict[str, Any]:
    lat = {"100": 2.5, "1000": 2.5, "4000": 7.5}
    chunks = {"latency_us": lat, "stream_cpu_ms": 15.0}
    enc = {"latency_us": {k: v * 20 for k, v in lat.items()}, "stream_cpu_ms": 200.0,
           "state_bytes": {"100": 365, "1000": 368, "4000": 509, "max": 583}}
    return {"stream": {"tokens": 4000}, "decode_stream_floor": {"per_token_us": 0.6, "stream_cpu_ms": 2.4},
            "non_streaming": {"function_ms": 0.5, "service_ms": 0.9},
            "in_memory": {"1_token_chunks": chunks, "8_token_chunks": chunks},
            "encoded_state": {"1_token_chunks": enc, "8_token_chunks": enc},
            "control_reasoning_only": {"in_memory": {"latency_us": {"100": 2.5, "1000": 2.5, "4000": 2.6}}},
            "http_one_token_per_call": {"tokens": 2960, "total_s": 1.5, "call_ms_first_100": 0.5,
                                        "call_ms_last_100": 0.5},
            "vllm_0_32": {"tokens": 2960, "parser_stream_s": 160.0, "plain_stream_s": 5.3,
                          "parser_call_ms_start": 6.0, "parser_call_ms_end": 109.0}}


def test_derender_per_token_cost_is_read_against_the_decodestream_floor() -> None:
    figures, problem = figures_of("derender", derender_result())
    assert problem is None
    by_id = {f.id: f for f in figures}
    per_token = by_id["derender.in_memory.1tok.per_token_us"]
    assert per_token.value == pytest.approx(3.75) and per_token.ratio == pytest.approx(6.25)
    assert by_id["derender.http.total_s"].worse_than_baseline is False  # 1.5 s against vLLM's 160 s


def test_a_render_figure_carries_its_baseline_and_the_ratio() -> None:
    figures, problem = figures_of("render", render_result())
    assert problem is None
    by_id = {f.id: f for f in figures}
    f = by_id["render.short_chat.c1.rps"]
    assert (f.value, f.unit, f.baseline_value, f.baseline_source) == (900.0, "req/s", 3000.0, SAME_RUN)
    assert f.ratio == pytest.approx(0.3)
    assert f.worse_than_baseline is True  # fewer requests per second than the in-process call
    vllm = by_id["render.short_chat.c8.rps_vs_vllm"]
    assert vllm.baseline_source == PUBLISHED and vllm.worse_than_baseline is False


def test_lower_is_better_figures_are_worse_when_above_their_baseline() -> None:
    slower = Figure("x", "x", 2.0, "ms", "lower", "b", 1.0, SAME_RUN)
    faster = Figure("y", "y", 0.5, "ms", "lower", "b", 1.0, SAME_RUN)
    alone = Figure("z", "z", 3.0, "KiB", "lower")
    assert slower.worse_than_baseline is True and faster.worse_than_baseline is False
    assert alone.worse_than_baseline is None and alone.ratio is None
    assert slower.to_json()["ratio"] == 2.0 and alone.to_json()["baseline_value"] is None


def test_engine_figures_compare_with_sequential_static_batch_and_vllm_normalized() -> None:
    figures, _ = figures_of("engine", engine_result())
    by_id = {f.id: f for f in figures}
    assert by_id["engine.c8.tok_s"].ratio == pytest.approx(6.0)
    assert by_id["engine.c16.tok_s_vs_static"].worse_than_baseline is True
    speedup = by_id["engine.c8.speedup_vs_vllm"]
    assert speedup.value == pytest.approx(6.0) and speedup.unit == "x batch-1"
    assert speedup.baseline_value == pytest.approx(218.0 / 23.0)


def test_streams_figures_pair_websocket_with_sse_and_with_the_engine_alone() -> None:
    figures, _ = figures_of("streams", streams_result())
    by_id = {f.id: f for f in figures}
    cpu = by_id["streams.c256.ws_vs_sse.server_cpu_us_per_token"]
    assert (cpu.value, cpu.baseline_value, cpu.worse_than_baseline) == (250.0, 300.0, False)
    added = by_id["streams.c16.sse.delivery_p99_ms"]
    assert added.baseline_value == pytest.approx(1.2) and added.worse_than_baseline is True


def test_a_result_in_an_unknown_shape_is_a_problem_message_not_a_crash() -> None:
    figures, problem = figures_of("render", {"server": {}})
    assert figures == [] and problem is not None and "render" in problem


def test_a_benchmark_listing_its_own_figures_is_read_generically() -> None:
    result = {"figures": [{"id": "later.rss_growth", "value": 1.5, "unit": "MiB", "better": "lower",
                           "baseline": "start", "baseline_value": 1.0}, {"not": "a figure"}]}
    figures, problem = figures_of("later", result)
    assert problem is None and [f.id for f in figures] == ["later.rss_growth"]
    assert figures[0].worse_than_baseline is True


def test_soak_counts_are_read_against_zero_and_leaks_against_the_start() -> None:
    result = {"sessions": 50, "duration_s": 48.7, "requests": 674, "lost_or_duplicated_streams": 1, "seq_breaks": 0,
              "between_frames_ms": {"p50": 170.0, "p99": 300.0}, "rss_mb": {"slope_after_warmup_mb_per_min": 1.9},
              "open_fds": {"before": 16.0, "after": 17.0}, "event_loop_tasks": {"before": 3.0, "after": 3.0}}
    figures, problem = figures_of("soak", result)
    by_id = {f.id: f for f in figures}
    assert problem is None
    assert by_id["soak.lost_or_duplicated_streams"].worse_than_baseline is True
    assert by_id["soak.seq_breaks"].worse_than_baseline is False
    assert by_id["soak.open_fds_after"].worse_than_baseline is True


@pytest.mark.slow
def test_every_curve_with_a_result_is_drawn_as_a_png(tmp_path: Path) -> None:
    sections: dict[str, dict[str, Any]] = {
        "engine": {"status": "ok", "result": engine_result()},
        "sessions": {"status": "ok", "result": sessions_result()},
        "streams": {"status": "ok", "result": streams_result()},
        "derender": {"status": "ok", "result": derender_result()},
        "render": {"status": "failed"}}
    written, problems = plot_run(sections, tmp_path)
    assert problems == []
    assert sorted(Path(p).name for p in written) == ["derender_latency.png", "engine_throughput.png",
                                                     "idle_sessions.png", "streaming_sessions.png"]
    for p in written:
        assert Path(p).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
