"""Server-sent events framing: the one place SSE bytes are written.

Every SSE route frames with :func:`sse`: OpenAI and vLLM streams are data-only events
(``data: {json}``), ending with :data:`DONE` (``data: [DONE]``); Anthropic streams name each event
after its ``type`` (``event: message_start`` then ``data: {json}``); an error mid-stream is an event
in the stream's own shape (OpenAI: a data-only error body; Anthropic: ``event: error``).
"""

from __future__ import annotations

from typing import Any

import orjson

DONE = b"data: [DONE]\n\n"


def sse(payload: dict[str, Any], *, named: bool = False) -> bytes:
    """One event carrying ``payload`` as JSON; ``named``: with an ``event:`` line naming it by its
    ``type`` (Anthropic streams)."""
    data = b"data: " + orjson.dumps(payload) + b"\n\n"
    if not named:
        return data
    return b"event: " + str(payload["type"]).encode() + b"\n" + data
