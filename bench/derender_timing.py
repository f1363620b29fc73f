"""Timing helpers the derender benchmark's sections share: the window of chunks a position is read
over, medians in µs, the best CPU time of repeated runs, and a ratio against its target."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from typing import Any

WINDOW = 24  # chunks measured around each position


def median_us(samples: list[float]) -> float:
    return round(statistics.median(samples) * 1e6, 2)


def best_cpu(f: Callable[[], None], repeats: int) -> float:
    """The lowest process CPU seconds of ``repeats`` calls (other load on the machine only adds time)."""
    best = 1e9
    for _ in range(repeats):
        c0 = time.process_time()
        f()
        best = min(best, time.process_time() - c0)
    return best


def verdict(value: float, target: float) -> dict[str, Any]:
    """``value`` next to the most it may be, and whether it holds."""
    return {"value": round(value, 2), "target_at_most": target, "holds": value <= target}
