"""The server process's garbage-collector setting: the heap built at start-up is frozen once serving
begins.

What start-up builds (the tokenizer and its vocabulary, the chat template, the parsers, the model's
Python objects, every imported module) lives as long as the process, yet each full collection of
the cyclic garbage collector walks it again. Measured with 256 WebSocket streams of 8 tokens each
(``bench/streams_bench.py``, 3 rounds): without freezing, full collections paused the event loop
for up to 244 ms and the collector took 0.89 s of the run; with the start-up heap frozen, 93 ms and
0.41 s, and the server's CPU per streamed token fell from 278-344 to 153-216 µs on that
request-heavy load (docs/benchmarks.md). ``gc.freeze`` moves every object alive now to a permanent
generation that collections skip; objects made later are collected as usual.
"""

from __future__ import annotations

import gc


def freeze_startup_heap() -> None:
    """Collect what start-up left behind, then freeze the rest (``serve`` / ``launch`` call it once the
    app and its engine are up, before the first request)."""
    gc.collect()
    gc.freeze()
