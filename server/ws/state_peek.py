"""Read the stream and sequence number of a derender state token without verifying it.

The session uses this only to refuse a state it has already seen used (replayed) or an older one
(reordered); the derender step itself verifies every state (size, version, key, signature,
binding) and refuses bad ones with the codec's own reason. A tag read from a forged token can
therefore only cost the forging client its own step, and a step that fails gives its sequence
number back (``StateLedger.undo``). The token layout is the one ``session.state`` documents:
``tw1.<key id>.<base64url payload>.<mac>`` with ``{"r", "i", "c", "s", ...}`` in the payload.
"""

from __future__ import annotations

import base64
import binascii

import orjson

from session.state_ledger import StateTag

MAX_PEEK_CHARS = 64 * 1024


def peek_state(token: str) -> StateTag | None:
    if len(token) > MAX_PEEK_CHARS:
        return None
    parts = token.split(".")
    if len(parts) != 4 or parts[0] != "tw1":
        return None
    payload = parts[2]
    try:
        data = orjson.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
        # the key id is part of the stream: a state signed with another secret is never "reordered"
        # against this server's own, it reaches the codec and is refused as unknown_key
        stream, seq = (parts[1], data["r"], data["i"], data["c"]), data["s"]
        hash(stream)
    except (binascii.Error, ValueError, KeyError, TypeError):
        return None
    if not isinstance(seq, int) or isinstance(seq, bool):
        return None
    return StateTag(stream, seq)
