"""The benchmark suite's smoke test: every section's module imports, one real section runs through
``python -m bench.run`` into results.json with its figures, and bench.run's handling of one
benchmark process (its JSON read from --out or stdout, a failure recorded with the end of its
stderr, a benchmark past its time limit stopped together with the processes it started)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from bench.run import ROOT, SECTIONS, Section, run_section

SLEEPER = '''
import subprocess, sys, time
child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
open(sys.argv[sys.argv.index("--pidfile") + 1], "w").write(str(child.pid))
time.sleep(600)
'''


@pytest.fixture
def modules(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    (tmp_path / "bench_prints.py").write_text('import json\nprint("warming up")\nprint(json.dumps({"x": 1}))\n')
    (tmp_path / "bench_writes.py").write_text(
        'import json, sys\nopen(sys.argv[sys.argv.index("--out") + 1], "w").write(json.dumps({"y": 2}))\n')
    (tmp_path / "bench_fails.py").write_text('import sys\nprint("bad thing happened", file=sys.stderr)\nsys.exit(3)\n')
    (tmp_path / "bench_sleeps.py").write_text(SLEEPER)
    monkeypatch.setenv("PYTHONPATH", str(tmp_path))
    return tmp_path


def test_every_section_of_the_suite_imports() -> None:
    modules = sorted({s.module for s in SECTIONS} | {"bench.vllm_compare", "bench.report"})
    code = f"import importlib\nfor m in {modules!r}:\n    importlib.import_module(m)\nprint('ok')"
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip() == "ok"


def test_a_run_of_one_section_writes_its_result_and_figures(tmp_path: Path) -> None:
    # the fanout section: in one process, no sockets, a few seconds
    out = subprocess.run([sys.executable, "-m", "bench.run", "--only", "fanout", "--out", str(tmp_path)], cwd=ROOT,
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    (results,) = tmp_path.glob("*-quick/results.json")
    report = json.loads(results.read_text())
    section = report["sections"]["fanout"]
    assert section["status"] == "ok", section
    assert section["result"]["streams"] == 64 and section["result"]["evict_mb"] == 64
    figures = {f["id"]: f for f in report["figures"]}
    assert figures["fanout.steady_us_per_token"]["value"] > 0
    assert figures["fanout.writes_per_token"]["value"] >= 1  # one frame per token at least
    assert report["problems"] == [] and list(report["sections"]) == ["fanout"]


def _section(module: str, args: tuple[str, ...] = (), writes_out: bool = True) -> Section:
    return Section(module, module, "a test benchmark", args, args, 60, 60, writes_out=writes_out)


def test_a_benchmark_that_prints_its_json_is_read_from_stdout(modules: Path, tmp_path: Path) -> None:
    record = run_section(_section("bench_prints", writes_out=False), "quick", 60, tmp_path)
    assert record["status"] == "ok" and record["result"] == {"x": 1}
    assert record["command"] == "python -m bench_prints"
    assert len(record["load_average_before"]) == 3 and len(record["load_average_after"]) == 3


def test_a_benchmark_that_writes_out_is_read_from_its_file(modules: Path, tmp_path: Path) -> None:
    record = run_section(_section("bench_writes"), "quick", 60, tmp_path)
    assert record["status"] == "ok" and record["result"] == {"y": 2}


def test_a_failing_benchmark_is_recorded_with_its_exit_status_and_stderr(modules: Path, tmp_path: Path) -> None:
    record = run_section(_section("bench_fails"), "quick", 60, tmp_path)
    assert record["status"] == "failed" and record["error"] == "exit status 3"
    assert "bad thing happened" in record["stderr_tail"]


@pytest.mark.slow
def test_a_benchmark_past_its_limit_is_stopped_with_the_processes_it_started(modules: Path, tmp_path: Path) -> None:
    pidfile = tmp_path / "child.pid"
    record = run_section(_section("bench_sleeps", ("--pidfile", str(pidfile))), "quick", 3, tmp_path)
    assert record["status"] == "timeout" and "3 s" in record["error"]
    child = int(pidfile.read_text())
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and _alive(child):
        time.sleep(0.1)
    assert not _alive(child)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    status = Path(f"/proc/{pid}/status")
    return status.exists() and "\nState:\tZ" not in status.read_text()
