"""bench.linear_bench: its arguments, and tiny runs of both linear kernels, alone and in the
default model's decode steps (no timing asserted)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from bench.linear_bench import main
from engine.local import native


@pytest.fixture(autouse=True)
def _vector() -> None:
    library = native.shared().library
    if library is None or not library.linear.vector:
        pytest.skip("no native linear kernel with AVX512-BF16 on this machine: the bench says so and exits 1")


def _run(tmp_path: Path, *extra: str) -> dict[str, Any]:
    out = tmp_path / "out.json"
    assert main(["--rows", "1", "3", "--layers", "2", "--rounds", "1", *extra, "--out", str(out)]) == 0
    doc: dict[str, Any] = json.loads(out.read_text())
    assert doc["benchmark"] == "linear" and doc["kernel"].startswith("built by ")
    assert set(doc["results_us_per_layer"]) == {"1", "3"}
    for case in doc["results_us_per_layer"].values():
        assert set(case) == {"native", "onednn", "native_vs_onednn"}
        assert case["native"] > 0 and case["onednn"] > 0
    return doc


def test_a_tiny_run_reports_both_kernels_per_row_count(tmp_path: Path) -> None:
    assert "steps_ms" not in _run(tmp_path)


def test_a_row_count_below_one_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["--rows", "0"])
    assert "--rows: each count must be at least 1" in capsys.readouterr().err


@pytest.mark.slow  # loads the default model twice
def test_with_steps_it_also_times_the_default_models_decode_steps(tmp_path: Path) -> None:
    doc = _run(tmp_path, "--steps", "--cases", "2x20", "1x5")
    assert set(doc["steps_ms"]) == {"2x20", "1x5"}
    assert all(case["native"] > 0 and case["onednn"] > 0 for case in doc["steps_ms"].values())
