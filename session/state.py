"""The client-carried derender state: a signed, versioned, size-capped token.

A streaming derender step returns its whole continuation state to the client, which sends it back
with the next chunk, so any replica sharing the secret can continue the stream. The token is::

    tw1.<key id>.<payload>.<mac>

- ``tw1`` — the format version; anything else is refused (``unknown_version``).
- ``<key id>`` — 8 hex digits naming the secret that signed it (``sha256("tokenwire-state-key|" +
  secret)``); an unknown id means the state comes from a server with another secret
  (``unknown_key``). Several secrets may verify (rotation); the first one signs.
- ``<payload>`` — base64url (no padding) of an orjson object: ``{"r": request id, "i": choice
  index, "c": request-context digest, "s": sequence number, "b": body}``, where ``body`` is the
  derenderer's own snapshot.
- ``<mac>`` — base64url HMAC-SHA256 over ``tw1.<key id>.<payload>`` (32 bytes).

Checks run cheapest and safest first: the type and the size cap (default 64 KiB) before anything
is decoded, the version and key id, then the signature (constant-time) before the payload is
parsed, then the binding to this request (request id, choice index, context digest). Every failure
is a :class:`~session.errors.StateError` with a ``reason`` and a message for the client; nothing of
an unverified state is ever used.

The sequence number grows by one per step. A server that remembers the last number it saw for a
stream (a WebSocket session's :class:`~session.state_ledger.StateLedger`, fed by
:meth:`StateCodec.tag`) refuses replayed or reordered states; a stateless HTTP route cannot, so
over HTTP a client may replay an old state (it gets the same continuation again, never another
request's).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import logging
import secrets
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import orjson

from session.errors import StateError
from session.state_ledger import StateTag

__all__ = [
    "DEFAULT_MAX_STATE_BYTES",
    "VERSION",
    "DecodedState",
    "StateBinding",
    "StateCodec",
    "context_digest",
    "key_id_of",
]

log = logging.getLogger("tokenwire.state")

VERSION = "tw1"
DEFAULT_MAX_STATE_BYTES = 64 * 1024
_MAC_LEN = 43  # base64url of 32 bytes, no padding
RANDOM_SECRET_WARNING = (
    "No --state-secret (TOKENWIRE_STATE_SECRET) configured: derender states are signed with a "
    "random per-process secret, so other replicas (and this server after a restart) will refuse "
    "them. Set the same secret on every replica behind a load balancer."
)


def key_id_of(secret: bytes) -> str:
    return hashlib.sha256(b"tokenwire-state-key|" + secret).hexdigest()[:8]


def context_digest(*parts: Any) -> str:
    """A short digest of the request context a state is bound to (the canonical JSON of the
    parts: e.g. the chat request as sent, the prompt ids, the parser configuration)."""
    data = orjson.dumps(parts, option=orjson.OPT_SORT_KEYS | orjson.OPT_NON_STR_KEYS)
    return base64.urlsafe_b64encode(hashlib.sha256(data).digest()[:18]).decode()


@dataclass(frozen=True, slots=True)
class StateBinding:
    """What a state is bound to: the request, the choice and the request context's digest."""

    request_id: str
    choice_index: int
    context: str


@dataclass(frozen=True, slots=True)
class DecodedState:
    seq: int
    body: dict[str, Any]


def _b64e(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _b64d(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


class StateCodec:
    """Signs and verifies derender states. Pure: the secret comes in, no I/O."""

    __slots__ = ("_keys", "_sign_key", "key_id", "max_bytes", "random_secret")

    def __init__(self, secrets_: Sequence[bytes], *, max_bytes: int = DEFAULT_MAX_STATE_BYTES,
                 random_secret: bool = False) -> None:
        if not secrets_ or not all(secrets_):
            raise ValueError("StateCodec needs at least one non-empty secret")
        self._keys = {key_id_of(s): s for s in secrets_}
        self._sign_key = secrets_[0]
        self.key_id = key_id_of(secrets_[0])
        self.max_bytes = max_bytes
        self.random_secret = random_secret

    @classmethod
    def from_secret(cls, secret: bytes | str | None, *, max_bytes: int = DEFAULT_MAX_STATE_BYTES,
                    warn: bool = True) -> StateCodec:
        """The codec for a configured secret; without one, a random per-process secret (and a
        WARNING that replicas will not accept each other's states)."""
        if isinstance(secret, str):
            secret = secret.encode()
        if secret:
            return cls([secret], max_bytes=max_bytes)
        if warn:
            log.warning(RANDOM_SECRET_WARNING)
        return cls([secrets.token_bytes(32)], max_bytes=max_bytes, random_secret=True)

    # --- encode --------------------------------------------------------------------------------
    def encode(self, binding: StateBinding, seq: int, body: dict[str, Any]) -> str:
        payload = orjson.dumps({"r": binding.request_id, "i": binding.choice_index, "c": binding.context,
                                "s": seq, "b": body})
        head = f"{VERSION}.{self.key_id}.{_b64e(payload)}"
        mac = hmac.digest(self._sign_key, head.encode(), "sha256")
        token = f"{head}.{_b64e(mac)}"
        if len(token) > self.max_bytes:
            raise StateError(
                f"The derender state grew to {len(token)} bytes, over the {self.max_bytes}-byte limit "
                "(an unfinished tool call this long cannot be carried); derender this output "
                "without streaming.", reason="too_large")
        return token

    # --- decode --------------------------------------------------------------------------------
    def decode(self, token: Any, binding: StateBinding) -> DecodedState:
        """Verify ``token`` and return its sequence number and body, or raise :class:`StateError`."""
        rid, index, ctx, seq, body = self._verify(token)
        if rid != binding.request_id:
            raise StateError(f"stream_state belongs to another request ({_short(rid)!r}, not "
                             f"{_short(binding.request_id)!r}).", reason="wrong_request")
        if index != binding.choice_index:
            raise StateError(f"stream_state belongs to choice {index}, not choice {binding.choice_index}; "
                             "keep one state per choice index.", reason="wrong_choice")
        if ctx != binding.context:
            raise StateError("stream_state was issued for a different request context (the chat / "
                             "completion request, prompt_token_ids or server parsers differ from the "
                             "first call); send the same request fields on every call.",
                             reason="wrong_request")
        return DecodedState(seq=seq, body=body)

    def tag(self, token: Any) -> StateTag | None:
        """The stream and sequence number of a state that verifies (``None`` otherwise): the
        :data:`~session.state_ledger.StateTagger` a session's ledger uses to refuse replayed or
        reordered states. A state that does not verify is refused by :meth:`decode` later, with
        its own reason."""
        try:
            rid, index, ctx, seq, _ = self._verify(token)
        except StateError:
            return None
        return StateTag((rid, index, ctx), seq)

    def _verify(self, token: Any) -> tuple[Any, Any, Any, int, dict[str, Any]]:
        if not isinstance(token, str):
            raise StateError("stream_state must be the opaque string a previous step returned "
                             "(or null on the first call).", reason="malformed")
        if len(token) > self.max_bytes:
            raise StateError(f"stream_state is {len(token)} bytes, over the {self.max_bytes}-byte limit.",
                             reason="too_large")
        parts = token.split(".")
        if parts[0] != VERSION:
            shown = parts[0][:16] if parts[0].isalnum() else "?"
            raise StateError(f"stream_state has version {shown!r}, which this server does not read "
                             f"(it reads {VERSION!r}); restart the stream.", reason="unknown_version")
        if len(parts) != 4 or len(parts[3]) != _MAC_LEN:
            raise StateError("stream_state is malformed (truncated or not produced by this server); "
                             "send back the state exactly as returned.", reason="malformed")
        _, kid, payload_text, mac_text = parts
        key = self._keys.get(kid)
        if key is None:
            raise StateError("stream_state was signed with a key this server does not have; replicas "
                             "must share the same --state-secret.", reason="unknown_key")
        expected = hmac.digest(key, f"{VERSION}.{kid}.{payload_text}".encode(), "sha256")
        # compare the canonical text: base64's unused low bits must not let two texts verify
        if not hmac.compare_digest(mac_text.encode(), _b64e(expected).encode()):
            raise StateError("stream_state failed signature verification (it was modified or "
                             "truncated); send back the state exactly as returned.", reason="bad_signature")
        try:
            data = orjson.loads(_b64d(payload_text))
            rid, index, ctx, seq, body = data["r"], data["i"], data["c"], data["s"], data["b"]
        except (binascii.Error, ValueError, KeyError, TypeError):
            raise StateError("stream_state payload is malformed.", reason="malformed") from None
        if not (isinstance(seq, int) and isinstance(body, dict)):
            raise StateError("stream_state payload is malformed.", reason="malformed")
        return rid, index, ctx, seq, body


def _short(value: Any) -> str:
    text = str(value)
    return text if len(text) <= 64 else text[:61] + "..."
