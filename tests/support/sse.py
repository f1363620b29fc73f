"""The ``data:`` payloads of an SSE body: each JSON payload decoded, ``[DONE]`` kept as the string."""

from __future__ import annotations

from typing import Any

import orjson


def sse_payloads(text: str) -> list[Any]:
    return [orjson.loads(line[6:]) if line[6:] != "[DONE]" else "[DONE]"
            for line in text.split("\n") if line.startswith("data: ")]
