"""bench.decode_attention_bench: its arguments, and tiny runs of both kernels, alone and in the
default model's decode steps (no timing asserted)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

import pytest

from bench.decode_attention_bench import main, parse_case


def test_a_case_is_rows_by_positions() -> None:
    assert parse_case("16x130") == (16, 130)
    for bad in ("16", "0x5", "ax5", "16x"):
        with pytest.raises(argparse.ArgumentTypeError, match="ROWSxPOSITIONS"):
            parse_case(bad)


def _run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, *extra: str) -> dict[str, Any]:
    monkeypatch.setenv("TOKENWIRE_CACHE_DIR", str(tmp_path / "cache"))
    out = tmp_path / "out.json"
    assert main(["--cases", "2x20", "1x5", "--layers", "2", "--rounds", "1", *extra, "--out", str(out)]) == 0
    doc: dict[str, Any] = json.loads(out.read_text())
    assert doc["benchmark"] == "decode_attention" and doc["kernel"].startswith("built by ")
    assert set(doc["results_us_per_layer"]) == {"2x20", "1x5"}
    for case in doc["results_us_per_layer"].values():
        assert set(case) == {"native", "grouped", "native_vs_grouped"}
        assert all(case[k]["cold"] > 0 and case[k]["hot"] > 0 for k in ("native", "grouped"))
    return doc


def test_a_tiny_run_reports_both_kernels_per_case(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert "steps_ms" not in _run(tmp_path, monkeypatch)


@pytest.mark.slow  # loads the default model
def test_with_steps_it_also_times_the_default_models_decode_steps(tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    doc = _run(tmp_path, monkeypatch, "--steps")
    assert set(doc["steps_ms"]) == {"2x20", "1x5"}
    assert all(case["native"] > 0 and case["grouped"] > 0 for case in doc["steps_ms"].values())
