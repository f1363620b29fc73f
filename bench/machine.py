"""What a benchmark run ran on: the machine, the software versions and the commit."""

from __future__ import annotations

import os
import platform
import subprocess
from importlib import metadata
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("tokenwire", "torch", "transformers", "tokenizers", "starlette", "uvicorn", "websockets", "httpx",
            "orjson", "pydantic", "matplotlib")


def _cpuinfo_field(name: str) -> str | None:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith(name):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return None


def _mem_total_gib() -> float | None:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                return round(int(line.split()[1]) / 2**20, 2)
    except OSError:
        pass
    return None


def load_average() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


def describe_machine() -> dict[str, Any]:
    flags = (_cpuinfo_field("flags") or "").split()
    return {
        "cpu_model": _cpuinfo_field("model name") or platform.processor() or "unknown",
        "logical_cpus": os.cpu_count(),
        "cpus_usable": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count(),
        "cpu_bf16": any(f in flags for f in ("avx512_bf16", "amx_bf16")),
        "memory_gib": _mem_total_gib(),
        "platform": platform.platform(),
        "machine": platform.machine(),
        "network": "loopback only (every server binds 127.0.0.1)",
    }


def versions() -> dict[str, str | None]:
    out: dict[str, str | None] = {"python": platform.python_version(),
                                  "python_implementation": platform.python_implementation()}
    for name in PACKAGES:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            out[name] = None
    return out


def git_state() -> dict[str, Any]:
    def git(*args: str) -> str | None:
        try:
            return subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True, check=True,
                                  timeout=30).stdout.strip()
        except (OSError, subprocess.SubprocessError):
            return None

    commit = git("rev-parse", "HEAD")
    status = git("status", "--porcelain", "--untracked-files=no")
    return {"commit": commit, "subject": git("log", "-1", "--format=%s") if commit else None,
            "dirty": bool(status) if status is not None else None}
