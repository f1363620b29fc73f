"""The server process's garbage-collector settings for serving: the heap built at start-up is frozen,
and the youngest generation is collected every 10,000 allocations instead of 700.

A streamed token's objects are short-lived and freed by reference counting; at the default
threshold the collector ran every few dozen tokens, promoted objects about to die and triggered
full collections over every session's objects (pauses up to 0.6 s with 1,024 streams). Why and what
it measured: docs/serve.md, "How a request flows".
"""

from __future__ import annotations

import gc

YOUNG_THRESHOLD = 10_000  # allocations between collections of the youngest generation (Python: 700)


def settle_heap_for_serving() -> None:
    """Collect what start-up left behind, freeze the rest, and collect the youngest generation less
    often (``serve`` / ``launch`` call it once the app and its engine are up, before the first
    request)."""
    gc.collect()
    gc.freeze()
    _, older, oldest = gc.get_threshold()
    gc.set_threshold(YOUNG_THRESHOLD, older, oldest)
