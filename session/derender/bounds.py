"""vLLM's derender bounds, checked before anything is decoded. Each failure is a
:class:`~session.errors.DerenderError` (400) whose message names the limit."""

from __future__ import annotations

from collections.abc import Sequence

from engine.protocol import GenerateChoice
from session.errors import DerenderError

__all__ = ["MAX_CHOICES", "MAX_LOGPROBS", "MAX_RESPONSES", "check_choices", "check_prompt_ids", "check_top_logprobs"]

MAX_RESPONSES = 256  # generate_responses per completion derender (one per prompt)
MAX_CHOICES = 128  # choices per engine response (n)
MAX_LOGPROBS = 20  # top_logprobs per token (vLLM's default max_logprobs)


def check_count(what: str, count: int, limit: int, *, param: str) -> None:
    if count > limit:
        raise DerenderError(f"{what} has {count} entries, more than the maximum of {limit}.", param=param)


def check_top_logprobs(value: int | None, *, param: str) -> None:
    if value is not None and value > MAX_LOGPROBS:
        raise DerenderError(f"{param} is {value}, more than the maximum of {MAX_LOGPROBS}.", param=param)


def check_prompt_ids(ids: Sequence[int] | None, *, max_model_len: int, vocab_size: int, param: str) -> None:
    if not ids:
        return
    if len(ids) > max_model_len:
        raise DerenderError(f"{param} has {len(ids)} ids, more than max_model_len ({max_model_len}).", param=param)
    top = max(ids)
    if top >= vocab_size:
        raise DerenderError(f"{param} holds token id {top}, outside this model's vocabulary (0..{vocab_size - 1}).",
                            param=param)


def check_choices(choices: Sequence[GenerateChoice], *, max_model_len: int, vocab_size: int, param: str,
                  require_tokens: bool) -> None:
    """Counts, lengths, ids and logprob widths of engine choices (non-streaming: every choice
    needs token ids; streaming: a chunk may carry none, e.g. the finish-only chunk)."""
    check_count(param, len(choices), MAX_CHOICES, param=param)
    seen: set[int] = set()
    for c in choices:
        i = c.index
        if i < 0 or i >= MAX_CHOICES:
            raise DerenderError(f"choice index {i} is out of range (0..{MAX_CHOICES - 1}).", param=param)
        if i in seen:
            raise DerenderError(f"{param} has two choices with index {i}.", param=param)
        seen.add(i)
        ids = c.token_ids
        if require_tokens and not ids:
            raise DerenderError(f"choice {i} has empty or null token_ids", param=param)
        if ids:
            if len(ids) > max_model_len:
                raise DerenderError(f"choice {i} has {len(ids)} token_ids, more than max_model_len "
                                    f"({max_model_len}).", param=param)
            top = max(ids)
            if top >= vocab_size:
                raise DerenderError(f"choice {i} holds token id {top}, outside this model's vocabulary "
                                    f"(0..{vocab_size - 1}).", param=param)
        if c.logprobs is not None:
            entries = c.logprobs.content
            if len(entries) > max_model_len:
                raise DerenderError(f"choice {i} has {len(entries)} logprobs.content entries, more than "
                                    f"max_model_len ({max_model_len}).", param=param)
            if ids is not None and len(entries) > len(ids):
                raise DerenderError(f"choice {i} has more logprobs.content entries ({len(entries)}) than "
                                    f"token_ids ({len(ids)}).", param=param)
            for e in entries:
                if len(e.top_logprobs) > MAX_LOGPROBS:
                    raise DerenderError(f"choice {i} has a token with {len(e.top_logprobs)} top_logprobs, more "
                                        f"than the maximum of {MAX_LOGPROBS}.", param=param)
                if not 0 <= e.token_id < vocab_size or any(not 0 <= t.token_id < vocab_size for t in e.top_logprobs):
                    raise DerenderError(f"choice {i} has a logprob for a token id outside this model's "
                                        f"vocabulary (0..{vocab_size - 1}).", param=param)
        prompt_lp = (c.model_extra or {}).get("prompt_logprobs")
        if isinstance(prompt_lp, list) and len(prompt_lp) > max_model_len:
            raise DerenderError(f"choice {i} has {len(prompt_lp)} prompt_logprobs, more than max_model_len "
                                f"({max_model_len}).", param=param)
