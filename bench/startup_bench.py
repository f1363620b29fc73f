"""Start-up time of ``tokenwire launch render`` (cached assets): process spawn → ``/health`` 200.

Also measures, in the same run, the baseline of a bare interpreter importing transformers'
``AutoTokenizer`` and loading the same tokenizer (what any Python render tier pays at least), so
the figure can be read against the machine's current speed.

    .venv/bin/python -m bench.startup_bench [--model DIR] [--runs 5]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.support.server_proc import ServerProcess  # noqa: E402


def _server_start(model: str) -> float:
    t0 = time.perf_counter()
    with ServerProcess(["launch", "render", model]):
        return time.perf_counter() - t0


def _baseline(model: str) -> float:
    code = ("import sys; sys.modules['torch'] = None\n"
            "from transformers import AutoTokenizer\n"
            f"AutoTokenizer.from_pretrained({model!r})\n")
    t0 = time.perf_counter()
    subprocess.run([sys.executable, "-c", code], check=True, capture_output=True)
    return time.perf_counter() - t0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default=None, help="model directory (default: the tiny-qwen3 asset)")
    p.add_argument("--runs", type=int, default=5)
    a = p.parse_args(argv)
    if a.model is None:
        from server.assets import ensure

        a.model = str(ensure("tiny-qwen3"))
    starts, bases = [], []
    for _ in range(a.runs):
        starts.append(_server_start(a.model))
        bases.append(_baseline(a.model))
    start, base = statistics.median(starts), statistics.median(bases)
    print(json.dumps({
        "benchmark": "launch_render_startup",
        "model": a.model,
        "load_average": os.getloadavg(),
        "startup_s": {"median": start, "min": min(starts), "max": max(starts), "unit": "s"},
        "baseline_import_and_load_tokenizer_s": {"median": base, "unit": "s"},
        "ratio_to_baseline": start / base,
        "target_s": 3.0,
    }, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
