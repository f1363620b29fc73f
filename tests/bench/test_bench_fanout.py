"""bench.fanout_bench: a tiny run, paced and with its caches swept between steps (no timing asserted)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench.fanout_bench import Evictor, main


def test_a_tiny_run_with_swept_caches_reports_every_stream_and_its_setting(tmp_path: Path) -> None:
    out = tmp_path / "out.json"
    assert main(["--streams", "3", "--tokens", "4", "--rounds", "1", "--step-ms", "1", "--evict-mb", "1",
                 "--out", str(out)]) == 0
    doc = json.loads(out.read_text())
    assert (doc["streams"], doc["tokens_per_stream"], doc["step_ms"], doc["evict_mb"]) == (3, 4, 1.0, 1)
    best = doc["best"]
    assert best["steady_us_per_token"] > 0 and best["bytes_per_token"] > 0
    assert best["writes_per_token"] >= 1  # one frame per token at least (the done frames besides)


def test_the_sweep_writes_a_byte_of_every_cache_line() -> None:
    evictor = Evictor(1)
    evictor.memory[:] = b"\x01" * len(evictor.memory)
    evictor.sweep()
    assert evictor.memory[::64] == bytes(len(evictor.memory) // 64)
    assert evictor.memory[1::64] == b"\x01" * (len(evictor.memory) // 64)


def test_a_negative_sweep_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["--evict-mb", "-1"])
    assert exited.value.code == 2
    assert "--evict-mb: 0 or more" in capsys.readouterr().err
