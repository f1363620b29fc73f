"""bench.decode_attention_bench: its arguments, and one tiny run of both kernels, alone and in the
default model's decode steps (no timing asserted)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest

from bench.decode_attention_bench import main, parse_case


def test_a_case_is_rows_by_positions() -> None:
    assert parse_case("16x130") == (16, 130)
    for bad in ("16", "0x5", "ax5", "16x"):
        with pytest.raises(argparse.ArgumentTypeError, match="ROWSxPOSITIONS"):
            parse_case(bad)


def test_a_tiny_run_reports_both_kernels_per_case(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TOKENWIRE_CACHE_DIR", str(tmp_path / "cache"))
    out = tmp_path / "out.json"
    assert main(["--cases", "2x20", "1x5", "--layers", "2", "--rounds", "1", "--steps", "--out", str(out)]) == 0
    doc = json.loads(out.read_text())
    assert doc["benchmark"] == "decode_attention" and doc["kernel"].startswith("built by ")
    assert set(doc["results_us_per_layer"]) == {"2x20", "1x5"}
    for case in doc["results_us_per_layer"].values():
        assert set(case) == {"native", "grouped", "native_vs_grouped"}
        assert all(case[k]["cold"] > 0 and case[k]["hot"] > 0 for k in ("native", "grouped"))
    assert set(doc["steps_ms"]) == {"2x20", "1x5"}  # whole decode steps of the default model
    assert all(case["native"] > 0 and case["grouped"] > 0 for case in doc["steps_ms"].values())
