"""What a remote engine sends, checked where it enters the front end (``engine/link.py`` for
``ws://`` engines, ``engine/remote.py`` for ``http://`` ones), once, before derender, the
detokenizer or a client's API reads any of it.

A bug in the engine, or a process that took its port, must be a 502 ``engine_error`` that names the
engine (:class:`~engine.errors.EngineProtocolError`), never a 500 in the detokenizer and never a
400 that blames the client. :class:`Expect` knows what one request may legitimately receive (its
choices, token ids, budget, finish and stop reasons, logprobs, usage) and how many bytes one
message may carry for it. :class:`Malformed` names a place in the protocol ("choices[0].token_ids[3]
is not a token id"), never a value the engine sent; the caller logs it with the engine's address.
The rules and the bound: docs/engine.md, "What the engine sends" and "The engine link".
"""

from __future__ import annotations

import re
from typing import Any

from pydantic import TypeAdapter, ValidationError

from engine.errors import EngineProtocolError
from engine.interface import ChoiceDelta
from engine.protocol import GenerateRequest, TokenLogprob, UsageInfo

# Without the model's vocab_size: the detokenizer's bound on any id (session/detokenizer.py).
MAX_TOKEN_ID = 2**31
_MAX_COUNT = 2**53  # usage counts: an exact JSON number
_WORD = re.compile(r"[a-z_]{1,32}")
_LOGPROBS = TypeAdapter(list[TokenLogprob])

# The bytes one link message may carry for one request (docs/engine.md, "The engine link"): a
# ``generate.delta`` / ``generate.done`` frame's keys, ids, finish and stop reasons and usage fit in
# FRAME_BYTES (about 300 in practice); a token id is at most 10 digits and a comma (TOKEN_BYTES);
# one logprob entry ({"token_id", "logprob", "rank"} with a 17-digit float) is about 70 bytes
# (LOGPROB_BYTES), and a token carries one plus one per alternative asked for.
FRAME_BYTES = 1024
TOKEN_BYTES = 12
LOGPROB_BYTES = 96


class Malformed(Exception):
    """What the engine got wrong, by place; :func:`protocol_error` makes it the client's 502."""


def protocol_error(what: str) -> EngineProtocolError:
    return EngineProtocolError(f"The remote engine sent an invalid answer: {what}.")


def _is_id(value: Any, limit: int) -> bool:
    return type(value) is int and 0 <= value < limit


class Expect:
    """What one request may receive from the engine, and what it has received so far."""

    __slots__ = ("budget", "counts", "finished", "id_limit", "logprobs", "n", "stop")

    def __init__(self, request: GenerateRequest, *, max_model_len: int, vocab_size: int | None = None) -> None:
        sp = request.sampling_params
        self.n = max(sp.n, 1)
        self.budget = min(sp.max_tokens, max_model_len) if sp.max_tokens is not None else max_model_len
        self.id_limit = vocab_size if vocab_size else MAX_TOKEN_ID
        self.logprobs = sp.logprobs  # top alternatives asked for (None: no logprobs; -1: all, as vLLM)
        self.stop = frozenset(sp.stop)
        self.counts = [0] * self.n
        self.finished: set[int] = set()

    def message_bytes(self) -> int:
        """The most one message may carry for this request: its whole token budget for every
        choice (an engine's deltas that a slow front end has not read merge into one), at the
        bytes of a token with the logprobs it asked for."""
        per_token = TOKEN_BYTES
        if self.logprobs is not None:
            alternatives = self.logprobs if 0 <= self.logprobs <= 20 else 20
            per_token += LOGPROB_BYTES * (2 + alternatives)
        stop = sum(6 * len(s) for s in self.stop)  # a stop_reason string, \\u-escaped at worst
        return FRAME_BYTES + stop + self.n * self.budget * per_token

    def choices(self, raw: Any) -> list[ChoiceDelta]:
        """``raw`` (a chunk's ``choices``) as checked deltas; :class:`Malformed` if anything is off.
        Once per request per engine step: the checks are plain comparisons, and a place is named
        only when one fails."""
        if raw is None:
            return []
        if type(raw) is not list:
            raise Malformed("choices is not a list")
        if len(raw) == 1:  # the common case: one choice per step
            return [self._choice(0, raw[0])]
        return [self._choice(at, c) for at, c in enumerate(raw)]

    def _choice(self, at: int, c: Any) -> ChoiceDelta:
        if type(c) is not dict:
            raise Malformed(f"choices[{at}] is not an object")
        index = c.get("index", 0)
        if type(index) is not int or not 0 <= index < self.n:
            raise Malformed(f"choices[{at}].index is not a choice index of this request (0..{self.n - 1})")
        ids = c.get("token_ids")
        if ids is None:
            ids = []
        elif type(ids) is not list:
            raise Malformed(f"choices[{at}].token_ids is not a list")
        elif ids:
            limit = self.id_limit
            for token in ids:
                if type(token) is not int or not 0 <= token < limit:
                    k = next(k for k, t in enumerate(ids) if not _is_id(t, limit))
                    raise Malformed(f"choices[{at}].token_ids[{k}] is not a token id of this model "
                                    f"(an int in 0..{limit - 1})")
            if index in self.finished:
                raise Malformed(f"choices[{at}] has tokens after its choice finished")
            count = self.counts[index] + len(ids)
            if count > self.budget:
                raise Malformed(f"choices[{at}] brings choice {index} past the request's {self.budget} tokens")
            self.counts[index] = count
        reason = c.get("finish_reason")
        if reason is not None:
            if type(reason) is not str or not _WORD.fullmatch(reason):
                raise Malformed(f"choices[{at}].finish_reason is not a finish reason")
            self.finished.add(index)
        stop_reason = c.get("stop_reason")
        if stop_reason is not None and not (_is_id(stop_reason, self.id_limit)
                                            or (type(stop_reason) is str and stop_reason in self.stop)):
            raise Malformed(f"choices[{at}].stop_reason is neither a token id nor one of the request's stop strings")
        lp = c.get("logprobs")
        logprobs = None if lp is None or self.logprobs is None else self._logprobs(f"choices[{at}]", lp, len(ids))
        return ChoiceDelta(index, ids, logprobs, reason, stop_reason)

    def _logprobs(self, where: str, raw: Any, tokens: int) -> list[TokenLogprob]:
        assert self.logprobs is not None  # none asked for: whatever came is not read
        content = raw.get("content") if isinstance(raw, dict) else raw
        try:
            entries = _LOGPROBS.validate_python(content if content is not None else [], strict=True)
        except ValidationError:
            raise Malformed(f"{where}.logprobs is not a list of token logprobs") from None
        if len(entries) > tokens:
            raise Malformed(f"{where}.logprobs has more entries than the choice has tokens")
        wide = self.logprobs + 1 if self.logprobs >= 0 else self.id_limit
        limit = self.id_limit
        for e in entries:
            if not 0 <= e.token_id < limit or len(e.top_logprobs) > wide or any(
                    not 0 <= t.token_id < limit for t in e.top_logprobs):
                raise Malformed(f"{where}.logprobs has a token id outside this model or too many alternatives")
        return entries

    def usage(self, raw: Any) -> UsageInfo | None:
        if raw is None:
            return None
        try:
            usage = UsageInfo.model_validate(raw, strict=True)
        except ValidationError:
            raise Malformed("usage is not a usage object of integer counts") from None
        if not all(0 <= v < _MAX_COUNT for v in (usage.prompt_tokens, usage.completion_tokens, usage.total_tokens)):
            raise Malformed("usage has a count out of range")
        return usage


_PARAM = re.compile(r"[A-Za-z_][A-Za-z0-9_.\[\]]{0,63}")


def safe_param(value: Any) -> str | None:
    """An engine error's ``param`` when it is a field path (``sampling_params.top_p``), else None:
    the only part of an engine's error besides its status that reaches the client."""
    return value if isinstance(value, str) and _PARAM.fullmatch(value) else None
