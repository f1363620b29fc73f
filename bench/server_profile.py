"""py-spy over a server while a benchmark runs (``streams_bench --profile DIR``): raw stacks, one
file per mode and round, for reading where the time went (bench/experiments/budget.py sorts them
into the stages of a token's path)."""

from __future__ import annotations

import shutil
import signal
import subprocess
import sys
from pathlib import Path


def start(pid: int, out: Path | None, name: str) -> subprocess.Popen[bytes] | None:
    """py-spy sampling the server while one mode runs (``--profile``): only samples where the
    event loop's thread holds the GIL (running Python, or a system call made without releasing it:
    uvloop's writes), so time waiting in ``epoll`` is not counted as work. Its figures come from
    separate runs, since sampling stops the process it reads."""
    if out is None:
        return None
    spy = find_py_spy()
    assert spy is not None, "main() checks for py-spy before --profile runs"
    out.mkdir(parents=True, exist_ok=True)
    return subprocess.Popen([spy, "record", "--pid", str(pid), "--rate", "200", "--gil", "--format", "raw",
                             "--output", str(out / f"{name}.txt")],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def find_py_spy() -> str | None:
    """The py-spy executable: on PATH, or beside this Python (a virtual environment's)."""
    beside = Path(sys.executable).with_name("py-spy")
    return shutil.which("py-spy") or (str(beside) if beside.is_file() else None)


def stop(proc: subprocess.Popen[bytes] | None) -> None:
    if proc is not None:
        proc.send_signal(signal.SIGINT)
        proc.wait(timeout=60)
