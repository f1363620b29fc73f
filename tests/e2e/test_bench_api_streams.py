"""Issue 18's target 6 harness (``bench.streams_targets``): the CPU per streamed token of an
OpenAI-compatible API server process, measured here on tokenwire's own front end (a real
``launch render`` over the session link, and over the ``http://`` link, to a real ``serve
--tokens-only`` engine), since vLLM is
not installed on this machine; and how its figures become the target's verdict when vLLM's are
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


@pytest.mark.parametrize("link", ["ws", "http"])
def test_the_harness_counts_every_streamed_token_and_the_front_ends_own_cpu(asset: Callable[[str], Path],
                                                                             link: str) -> None:
    model = asset("tiny-qwen3")
    with ServerProcess(["serve", str(model), "--tokens-only", "--dtype", "float32", "--served-model-name", "bench"]) \
            as engine, \
            ServerProcess(["launch", "render", str(model), "--engine-url", link + engine.url[len("http"):],
                           "--served-model-name", "bench"], preamble=NO_TORCH) as front:
        assert front.proc is not None
        got = asyncio.run(_api_streams(front.url, front.proc.pid, 4, 8))
    assert (got["streams"], got["complete_streams"], got["tokens"]) == (4, 4, 32)
    assert got["api_cpu_us_per_token"] > 0 and got["tok_per_s"] > 0


def test_target_6_pairs_each_stream_count_and_says_not_run_without_vllm() -> None:
    side = {"what": "…", "16": {"api_cpu_us_per_token": 50.0}, "64": {"api_cpu_us_per_token": 40.0}}
    vllm = {"what": "…", "16": {"api_cpu_us_per_token": 100.0}, "64": {"api_cpu_us_per_token": 160.0}}
    assert target6({"tokenwire": side, "vllm": vllm}) == {
        "cpu_us_per_token_16": {"tokenwire_front_end": 50.0, "vllm_api_server": 100.0, "ratio": 0.5},
        "cpu_us_per_token_64": {"tokenwire_front_end": 40.0, "vllm_api_server": 160.0, "ratio": 0.25}}
    http = {"what": "…", "16": {"api_cpu_us_per_token": 80.0}, "64": {"api_cpu_us_per_token": 100.0}}
    with_http = target6({"tokenwire": side, "tokenwire_http": http, "vllm": vllm})
    assert with_http["cpu_us_per_token_16"]["tokenwire_http_front_end"] == 80.0
    assert with_http["cpu_us_per_token_16"]["http_ratio"] == {"value": 0.8, "target": 0.7, "met": False,
                                                              "ratio_to_target": 1.14}
    assert with_http["cpu_us_per_token_64"]["http_ratio"]["met"] is True  # 100 / 160 = 0.625
    assert target6({"tokenwire": side, "vllm": None})["value"] is None
    assert "not run" in target6(None)["note"]


def test_bench_run_gives_streams_targets_the_vllm_python_and_time_for_it() -> None:
    section = next(s for s in SECTIONS if s.name == "streams_targets")
    with_vllm = _with_vllm(section, "/opt/vllm/bin/python")
    assert with_vllm.quick[-2:] == with_vllm.full[-2:] == ("--vllm-python", "/opt/vllm/bin/python")
    assert with_vllm.limit_quick_s > section.limit_quick_s and with_vllm.limit_full_s > section.limit_full_s
