"""Where a render runs: on the event loop when the request is small, else on a worker thread.

Chat templates and tokenization are CPU work, so a large render must not hold the event loop. A
small one costs less than the hop to a worker thread: a short chat renders in well under 0.1 ms
(measured with the embedded SmolLM2: about 40-55 µs for a one-message chat of 30 B to 16 KB of
text), while a hop through ``anyio.to_thread`` added about 0.3 ms of p50 latency and halved
requests/s at concurrency 1, and costs the event loop a thread hand-off and GIL switches per
request (docs/render.md). The HTTP render routes and the pipeline (every chat, completion and
messages request, over HTTP and WebSocket) decide it here, by the size of the request body: the
bytes read where a route has them, else :func:`json_size` of the parsed body.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from typing import Any, TypeVar

import anyio.to_thread

INLINE_MAX_BODY_BYTES = 1024  # a request body up to this size renders on the event loop

Req = TypeVar("Req")
Out = TypeVar("Out")


def json_size(value: Any, limit: int = INLINE_MAX_BODY_BYTES) -> int:
    """The size of ``value`` as compact JSON (exact for ASCII text without escapes), or some size
    past ``limit``: counting stops there, so it is at most that many steps whatever the body, and
    it never serializes: a body nested deeper than a serializer takes is measured too."""
    size, stack = 0, [value]
    while stack and size <= limit:
        node = stack.pop()
        if isinstance(node, dict):
            size += 1 + max(len(node), 1)  # the braces and the commas
            for key, child in itertools.islice(node.items(), limit):
                size += len(key) + 3 if isinstance(key, str) else 8  # quoted, and a colon
                stack.append(child)
        elif isinstance(node, list):
            size += 1 + max(len(node), 1)
            stack.extend(node[:limit])  # each element is at least a byte: no more can count
        elif isinstance(node, str):
            size += len(node) + 2
        elif node is None or node is True:
            size += 4
        elif node is False:
            size += 5
        else:
            size += len(repr(node))
    return size


async def render_work(fn: Callable[[Req], Out], req: Req, body_bytes: int) -> Out:
    """``fn(req)``: inline for a body of at most :data:`INLINE_MAX_BODY_BYTES`, else on a worker thread."""
    if body_bytes <= INLINE_MAX_BODY_BYTES:
        return fn(req)
    return await anyio.to_thread.run_sync(fn, req)
