"""Prompt length rules (vLLM 0.32's tokenize params + ``get_max_tokens``), pure functions.

``max_tokens`` is an upper bound on the output, not a reservation of context: vLLM 0.32 accepts
``max_tokens: 4090`` with a 10-token prompt on a 4,096-token context and generates at most the
4,086 tokens that are left. In order:

- a requested output longer than the whole context is refused (no prompt could leave that room);
- ``truncate_prompt_tokens`` larger than the context is refused; ``-1`` keeps as much of the
  prompt as leaves the requested output its whole budget (``max_model_len - max_tokens``); the
  prompt is cut from the left (the assistant mask and the token offsets are cut alike);
- a prompt longer than the context is refused with the lengths; an empty prompt is refused;
- ``max_tokens`` becomes ``min(requested, max_model_len - prompt_len)`` (when absent: the model's
  default output limit, else all the room; and never past the model's cap: vLLM's
  ``get_max_tokens`` with the defaults of session/protocol/generation_defaults.py), and a prompt
  that fills the context, leaving no room at all, is refused with the lengths.
"""

from __future__ import annotations

from dataclasses import dataclass

from session.errors import RenderError
from session.protocol.generation_defaults import NO_DEFAULTS, GenerationDefaults


@dataclass(frozen=True, slots=True)
class FittedPrompt:
    token_ids: list[int]
    max_tokens: int
    assistant_mask: list[int] | None = None
    offsets: list[tuple[int, int]] | None = None


def fit_prompt(token_ids: list[int], *, max_model_len: int, requested_max_tokens: int | None,
               truncate_prompt_tokens: int | None, assistant_mask: list[int] | None = None,
               offsets: list[tuple[int, int]] | None = None, param: str = "messages",
               max_tokens_param: str = "max_tokens", defaults: GenerationDefaults = NO_DEFAULTS) -> FittedPrompt:
    """``max_tokens_param`` is the request's own name for the output budget (``max_tokens``,
    ``max_completion_tokens``), used in the messages that concern it; ``defaults`` gives the
    output limit of a request that sets none, and the cap."""
    max_output = requested_max_tokens or 0
    if max_output > max_model_len:
        raise RenderError(
            f"`{max_tokens_param}` ({max_output}) is greater than the model's maximum context length "
            f"({max_model_len} tokens). Please request fewer output tokens.", param=max_tokens_param)
    if truncate_prompt_tokens is not None:
        if truncate_prompt_tokens > max_model_len:
            raise RenderError(
                f"truncate_prompt_tokens={truncate_prompt_tokens} cannot be greater than the model's maximum "
                f"context length ({max_model_len} tokens). Please request a smaller truncation size.",
                param="truncate_prompt_tokens")
        limit = max_model_len - max_output if truncate_prompt_tokens < 0 else truncate_prompt_tokens
        if limit < len(token_ids):
            cut = len(token_ids) - limit  # keep the last `limit` tokens (left truncation, as vLLM)
            token_ids = token_ids[cut:]
            assistant_mask = assistant_mask[cut:] if assistant_mask is not None else None
            offsets = offsets[cut:] if offsets is not None else None
    n = len(token_ids)
    if n > max_model_len:
        raise RenderError(
            f"You passed {n} input tokens and requested {max_output} output tokens. However, the model's "
            f"context length is only {max_model_len} tokens, resulting in a maximum input length of "
            f"{max_model_len} tokens. Please reduce the length of the input prompt.", param=param)
    if n == 0:
        raise RenderError("No token_ids rendered", param=param)
    room = max_model_len - n
    max_tokens = defaults.max_tokens(requested_max_tokens, room)
    if max_tokens < 1:
        raise RenderError(
            f"This model's maximum context length is {max_model_len} tokens and your prompt has {n} tokens, "
            "which leaves no room for output tokens. Please reduce the length of the input prompt "
            "(or set truncate_prompt_tokens).", param=param)
    return FittedPrompt(token_ids, max_tokens, assistant_mask, offsets)


def check_text_length(chars: int, *, max_model_len: int, requested_max_tokens: int | None,
                      truncate_prompt_tokens: int | None, max_chars_per_token: int, param: str) -> None:
    """vLLM's fast refusal before tokenizing: text that cannot fit in the context even if every
    token were the vocabulary's longest is refused without spending the tokenizer's time on it.
    (Skipped with ``truncate_prompt_tokens``: long input is then expected.) The requested output
    does not shrink the limit: ``max_tokens`` is clamped to the room the prompt leaves."""
    if truncate_prompt_tokens is not None or max_chars_per_token <= 0:
        return
    limit = max_model_len * max_chars_per_token
    if chars > limit:
        raise RenderError(
            f"You passed {chars} input characters and requested {requested_max_tokens or 0} output tokens. "
            f"However, the model's context length is only {max_model_len} tokens, resulting in a maximum input "
            f"length of {max_model_len} tokens (at most {limit} characters). Please reduce the length of the "
            "input prompt.", param=param)


def fit_mask(mask: list[int], length: int) -> list[int]:
    """vLLM's rule: right-pad with 0 when shorter than the tokens, truncate when longer."""
    if len(mask) < length:
        return mask + [0] * (length - len(mask))
    return mask[:length]
