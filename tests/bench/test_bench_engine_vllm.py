"""bench.engine_vllm's summary of alternating rounds: each side's medians per concurrency and the
ratios the docs quote (tokenwire ÷ vLLM), on hand-made rounds."""

from __future__ import annotations

from bench.engine_vllm import _summary


def test_medians_of_the_rounds_and_the_ratios_per_concurrency() -> None:
    samples = {
        "tokenwire": {1: [{"tok_s": 50.0, "ttft_ms": 30.0}, {"tok_s": 40.0, "ttft_ms": 20.0},
                          {"tok_s": 60.0, "ttft_ms": 25.0}],
                      8: [{"tok_s": 300.0, "ttft_ms": 90.0}]},
        "vllm": {1: [{"tok_s": 100.0, "ttft_ms": 50.0}, {"tok_s": 90.0, "ttft_ms": 40.0},
                     {"tok_s": 80.0, "ttft_ms": 60.0}],
                 8: [{"tok_s": 400.0, "ttft_ms": 180.0}]},
    }
    out = _summary(samples, [1, 8])
    assert (out["1"]["tokenwire"]["tok_s"], out["1"]["tokenwire"]["ttft_ms"]) == (50.0, 25.0)
    assert (out["1"]["vllm"]["tok_s"], out["1"]["vllm"]["ttft_ms"]) == (90.0, 50.0)
    assert (out["1"]["tok_s_ratio"], out["1"]["ttft_ratio"]) == (0.56, 0.5)
    assert (out["8"]["tok_s_ratio"], out["8"]["ttft_ratio"]) == (0.75, 0.5)
    assert len(out["1"]["tokenwire"]["rounds"]) == 3  # every round's figures are kept beside the median
