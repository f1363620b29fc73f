"""``streams_bench --profile`` without py-spy stops at once with a usage error that says how to get it,
not with a traceback once the servers are up."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from bench import streams_bench


def test_profile_without_py_spy_is_a_usage_error_naming_the_fix(monkeypatch: pytest.MonkeyPatch,
                                                                 tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr("shutil.which", lambda name: None)
    monkeypatch.setattr(sys, "executable", str(tmp_path / "python"))  # no py-spy beside it
    assert streams_bench.py_spy() is None
    with pytest.raises(SystemExit) as exit_info:
        streams_bench.main(["--profile", str(tmp_path / "prof"), "--concurrency", "1"])
    assert exit_info.value.code == 2
    assert "pip install py-spy" in capsys.readouterr().err
    assert not (tmp_path / "prof").exists()


def test_py_spy_beside_the_interpreter_is_found(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr("shutil.which", lambda name: None)
    monkeypatch.setattr(sys, "executable", str(tmp_path / "python"))
    (tmp_path / "py-spy").write_text("#!/bin/sh\n")
    assert streams_bench.py_spy() == str(tmp_path / "py-spy")
