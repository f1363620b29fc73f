"""Issue 18's target 6 harness (``bench.streams_targets``): the CPU per streamed token of an
OpenAI-compatible API server process, measured here on tokenwire's own front end (a real
``launch render`` over the session link, and over the ``http://`` link, to a real ``serve
--tokens-only`` engine, over SSE and over ``/v1/session``), since vLLM is not installed for the
tests; and how its figures become the target's verdict when vLLM's are
beside them, and say "not run" when they are not."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path

import pytest

from bench.run import SECTIONS, _with_vllm
from bench.streams_targets import _api_streams, target6
from tests.support.server_proc import ServerProcess

NO_TORCH = "import sys\nsys.modules['torch'] = None\n"


@pytest.mark.parametrize(("link", "transport"), [("ws", "sse"), ("http", "sse"), ("http", "ws")])
def test_the_harness_counts_every_streamed_token_and_the_front_ends_own_cpu(asset: Callable[[str], Path],
                                                                             link: str, transport: str) -> None:
    model = asset("tiny-qwen3")
    with ServerProcess(["serve", str(model), "--tokens-only", "--dtype", "float32", "--served-model-name", "bench"]) \
            as engine, \
            ServerProcess(["launch", "render", str(model), "--engine-url", link + engine.url[len("http"):],
                           "--served-model-name", "bench"], preamble=NO_TORCH) as front:
        assert front.proc is not None
        got = asyncio.run(_api_streams(front.url, front.proc.pid, 4, 8, transport))
    assert (got["streams"], got["complete_streams"], got["tokens"]) == (4, 4, 32)
    assert got["api_cpu_us_per_token"] > 0 and got["tok_per_s"] > 0


def test_target_6_pairs_each_side_with_vllm_round_by_round_and_says_not_run_without_vllm() -> None:
    def side(r16: list[float], r64: list[float]) -> dict[str, object]:
        return {"what": "…", "16": {"api_cpu_us_per_token": sorted(r16)[1], "rounds_us_per_token": r16},
                "64": {"api_cpu_us_per_token": sorted(r64)[1], "rounds_us_per_token": r64}}

    vllm = side([100.0, 120.0, 80.0], [160.0, 160.0, 200.0])
    link = side([50.0, 60.0, 40.0], [40.0, 40.0, 40.0])
    http_sse = side([80.0, 60.0, 60.0], [100.0, 120.0, 100.0])
    http_ws = side([50.0, 60.0, 48.0], [90.0, 90.0, 120.0])
    got = target6({"tokenwire": link, "tokenwire_http": http_sse, "tokenwire_http_ws": http_ws, "vllm": vllm})
    row16, row64 = got["cpu_us_per_token_16"], got["cpu_us_per_token_64"]
    assert (row16["vllm_api_server"], row16["vllm_rounds"]) == (100.0, [100.0, 120.0, 80.0])
    assert row16["tokenwire"] == {"us_per_token": 50.0, "rounds": [50.0, 60.0, 40.0], "ratios": [0.5, 0.5, 0.5],
                                  "ratio": 0.5}  # the session link: no target of its own
    # each round against vLLM's in the same round, the median of those ratios judged
    assert row16["tokenwire_http"]["ratios"] == [0.8, 0.5, 0.75]
    assert row16["tokenwire_http"]["ratio"] == {"value": 0.75, "target": 0.7, "met": False, "ratio_to_target": 1.07}
    assert row16["tokenwire_http_ws"]["ratio"] == {"value": 0.5, "target": 0.5, "met": True, "ratio_to_target": 1.0}
    assert row64["tokenwire_http"]["ratio"]["met"] is True  # 100 / 160, 120 / 160, 100 / 200: median 0.625
    assert row64["tokenwire_http_ws"]["ratio"]["met"] is False  # 90 / 160, 90 / 160, 120 / 200: median 0.5625
    assert "tokenwire_http_vllm" not in row16  # a side that did not run is not reported
    assert target6({"tokenwire": link, "vllm": None})["value"] is None
    assert "not run" in target6(None)["note"]


def test_bench_run_gives_streams_targets_the_vllm_python_and_time_for_it() -> None:
    section = next(s for s in SECTIONS if s.name == "streams_targets")
    with_vllm = _with_vllm(section, "/opt/vllm/bin/python")
    assert with_vllm.quick[-2:] == with_vllm.full[-2:] == ("--vllm-python", "/opt/vllm/bin/python")
    assert with_vllm.limit_quick_s > section.limit_quick_s and with_vllm.limit_full_s > section.limit_full_s
