"""The client-carried derender state: a signed, versioned, size-capped token.

``tw1.<key id>.<payload>.<mac>``: an HMAC-SHA256-signed orjson payload bound to one request, choice
and request context, checked cheapest and safest first (size, version, key id, constant-time MAC,
then the binding); every failure is a :class:`~session.errors.StateError`. The format, the secret
rules and rotation, the order of the checks and the guarantees: docs/derender.md, "The state".
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import functools
import hashlib
import hmac
import logging
import secrets
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import orjson

from session.errors import StateError
from session.state_ledger import StateTag

__all__ = [
    "DEFAULT_MAX_STATE_BYTES",
    "MIN_SECRET_BYTES",
    "VERSION",
    "DecodedState",
    "StateBinding",
    "StateCodec",
    "check_secret",
    "context_digest",
    "derive_key",
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
# Plain `serve` (no derender routes: its states leave it only as resume checkpoints) says it at INFO:
# a single server resumes its own streams with the random secret; only replicas need a shared one.
RANDOM_SECRET_NOTE = (
    "No --state-secret (TOKENWIRE_STATE_SECRET) configured: resume checkpoints are signed with a "
    "random per-process secret, so streams resume on this server until it restarts. Set the same "
    "secret on every replica if several serve the same clients."
)


MIN_SECRET_BYTES = 32
MIN_SECRET_DISTINCT = 8  # distinct bytes: "a" * 32 is 32 bytes of nothing
MAX_SECRETS = 2  # the current secret and the previous one (rotation)
STICKY_STREAMS = 4096  # streams remembered as signed with the previous key (rotation)
MAX_STATE_INT = 2**53  # |integer| bound inside a verified payload (sequence numbers, counts, offsets, times)
_SCRYPT = {"n": 2**14, "r": 8, "p": 1}  # ~16 MiB and ~70 ms, once per secret per process
SECRET_HINT = "generate one with: python -c 'import secrets; print(secrets.token_urlsafe(32))'"


def check_secret(secret: bytes, what: str = "--state-secret") -> None:
    """Refuse a secret too short or too uniform to sign states (``ValueError`` saying what to do)."""
    if len(secret) < MIN_SECRET_BYTES:
        raise ValueError(f"{what} is {len(secret)} bytes; it must be at least {MIN_SECRET_BYTES} bytes of random "
                         f"text (anyone holding a derender state can test guesses offline); {SECRET_HINT}")
    if len(set(secret)) < MIN_SECRET_DISTINCT:
        raise ValueError(f"{what} has fewer than {MIN_SECRET_DISTINCT} distinct characters; use random text, "
                         f"{SECRET_HINT}")


@functools.lru_cache(maxsize=16)
def derive_key(secret: bytes) -> tuple[bytes, str]:
    """The MAC key and the key id of ``secret``: scrypt, then the id as an HMAC of a label under the
    derived key (so a key id costs as much to test a guess against as the MAC does)."""
    key = hashlib.scrypt(secret, salt=b"tokenwire-state-key/v1", dklen=32, **_SCRYPT)
    return key, hmac.digest(key, b"tokenwire-state-key-id", "sha256").hex()[:8]


def key_id_of(secret: bytes) -> str:
    return derive_key(secret)[1]


def _bounded(node: Any) -> bool:
    """True when every integer in ``node`` (a parsed JSON value) is within :data:`MAX_STATE_INT`."""
    stack = [node]
    while stack:
        item = stack.pop()
        if isinstance(item, int):
            if not -MAX_STATE_INT <= item <= MAX_STATE_INT:
                return False
        elif isinstance(item, dict):
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
    return True


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

    __slots__ = ("_keys", "_sign_key", "_sticky", "key_id", "max_bytes", "random_secret")

    def __init__(self, secrets_: Sequence[bytes], *, max_bytes: int = DEFAULT_MAX_STATE_BYTES,
                 random_secret: bool = False) -> None:
        """``secrets_``: the current secret (it signs), then the previous one (it only verifies)."""
        if not secrets_ or len(secrets_) > MAX_SECRETS:
            raise ValueError(f"give one --state-secret, or two while rotating (the new one first, then the "
                             f"previous one); got {len(secrets_)}")
        for k, secret in enumerate(secrets_):
            check_secret(secret, "--state-secret" if k == 0 else "the previous --state-secret")
        derived = [derive_key(s) for s in secrets_]
        self._keys = {kid: key for key, kid in reversed(derived)}
        if len(self._keys) != len(secrets_):
            raise ValueError("the two --state-secret values are the same (or share a key id); give the new "
                             "secret first and the previous one second")
        self._sign_key, self.key_id = derived[0]
        self.max_bytes = max_bytes
        self.random_secret = random_secret
        # streams last continued from a state signed with the previous key → that key's id
        self._sticky: OrderedDict[StateBinding, str] = OrderedDict()

    @property
    def key_ids(self) -> tuple[str, ...]:
        """The ids of the keys that verify, the signing key's first."""
        return (self.key_id, *(k for k in self._keys if k != self.key_id))

    @classmethod
    def from_secret(cls, secret: bytes | str | None, *, previous: bytes | str | None = None,
                    max_bytes: int = DEFAULT_MAX_STATE_BYTES, warn: bool = True) -> StateCodec:
        """The codec for a configured secret (and, while rotating, the previous one, which still
        verifies); without one, a random per-process secret (and a WARNING that replicas will not
        accept each other's states)."""
        if isinstance(secret, str):
            secret = secret.encode()
        if isinstance(previous, str):
            previous = previous.encode()
        if secret:
            return cls([secret, previous] if previous else [secret], max_bytes=max_bytes)
        if previous:
            raise ValueError("a previous --state-secret needs a current one first")
        if warn:
            log.warning(RANDOM_SECRET_WARNING)
        return cls([secrets.token_bytes(32)], max_bytes=max_bytes, random_secret=True)

    # --- encode --------------------------------------------------------------------------------
    def encode(self, binding: StateBinding, seq: int, body: dict[str, Any]) -> str:
        try:
            payload = orjson.dumps({"r": binding.request_id, "i": binding.choice_index, "c": binding.context,
                                    "s": seq, "b": body})
        except TypeError:  # e.g. an integer past 64 bits, from a restored body no server of ours wrote
            raise StateError("stream_state cannot be continued (it holds values this server never writes); "
                             "restart the stream.", reason="malformed") from None
        kid = self.key_id
        if self._sticky:  # (each OrderedDict operation is atomic: derender steps run on worker threads)
            if seq > 1:
                kid = self._sticky.get(binding, kid)
            else:  # a stream's first state starts it afresh: the current key
                self._sticky.pop(binding, None)
        head = f"{VERSION}.{kid}.{_b64e(payload)}"
        mac = hmac.digest(self._keys[kid], head.encode(), "sha256")
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
        kid, rid, index, ctx, seq, body = self._verify(token)
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
        if kid != self.key_id:
            self._sticky[binding] = kid
            with contextlib.suppress(KeyError):  # another thread's step changed it meanwhile
                self._sticky.move_to_end(binding)
                while len(self._sticky) > STICKY_STREAMS:
                    self._sticky.popitem(last=False)
        elif self._sticky:
            self._sticky.pop(binding, None)
        return DecodedState(seq=seq, body=body)

    def tag(self, token: Any) -> StateTag | None:
        """The stream and sequence number of a state that verifies (``None`` otherwise): the
        :data:`~session.state_ledger.StateTagger` a session's ledger uses to refuse replayed or
        reordered states. A state that does not verify is refused by :meth:`decode` later, with
        its own reason."""
        try:
            _, rid, index, ctx, seq, _ = self._verify(token)
        except StateError:
            return None
        return StateTag((rid, index, ctx), seq)

    def _verify(self, token: Any) -> tuple[str, str, int, str, int, dict[str, Any]]:
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
                             "must share the same --state-secret (while rotating, each replica gives the new "
                             "secret first and the previous one second).", reason="unknown_key")
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
        if not (isinstance(rid, str) and isinstance(ctx, str) and type(index) is int and type(seq) is int
                and 0 <= seq < MAX_STATE_INT and isinstance(body, dict) and _bounded(body)):
            raise StateError("stream_state payload is malformed.", reason="malformed")
        return kid, rid, index, ctx, seq, body


def _short(value: Any) -> str:
    text = str(value)
    return text if len(text) <= 64 else text[:61] + "..."
