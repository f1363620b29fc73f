"""The WebSocket session's order check of derender states (issue 19 item 7): a state signed with
another secret is refused by the codec as ``unknown_key``, never by the session's ledger as
``reordered`` or ``replayed``."""

from __future__ import annotations

import pytest

from server.ws.state_peek import peek_state
from session.errors import StateError
from session.state import StateBinding, StateCodec
from session.state_ledger import OutOfOrder, StateLedger

BINDING = StateBinding("req-1", 0, "ctx")
OURS = StateCodec([b"ours-0123456789-abcdefghijklmnopqrstuvwxyz"])
THEIRS = StateCodec([b"theirs-0123456789-abcdefghijklmnopqrstuvwxyz"])


def test_a_state_of_another_secret_is_not_reordered_but_unknown_key() -> None:
    ledger = StateLedger()
    ours = peek_state(OURS.encode(BINDING, 3, {}))
    assert ours is not None
    ledger.consume(ours)
    for seq in (1, 3):  # older than, and equal to, the session's latest for this stream
        token = THEIRS.encode(BINDING, seq, {})
        tag = peek_state(token)
        assert tag is not None
        ledger.undo(ledger.consume(tag))  # the ledger lets it through (the step fails, and gives it back)
        with pytest.raises(StateError) as info:
            OURS.decode(token, BINDING)
        assert info.value.reason == "unknown_key"
    # this server's own states are still ordered
    with pytest.raises(OutOfOrder) as order:
        ledger.consume(peek_state(OURS.encode(BINDING, 2, {})))  # type: ignore[arg-type]
    assert order.value.reason == "reordered"
