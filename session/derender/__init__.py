"""Derender: engine token ids → OpenAI-compatible responses, incrementally.

Entry points:

- :func:`chat_derenderer` / :func:`completion_derenderer` build the incremental object a pipeline
  keeps per request (``push`` per engine step, ``usage_chunk`` at the end, ``snapshot`` /
  ``restore`` per choice for client-carried state);
- :class:`DerenderService` serves vLLM's ``/v1/*/derender`` requests (non-streaming and the
  signed-state streaming form);
- :func:`resolve_parsers` turns ``--tool-call-parser`` / ``--reasoning-parser`` names into classes.

Modules: ``choice`` (the per-choice pipeline: detokenize → stop strings → parsers), ``chat`` and
``completion`` (OpenAI shapes), ``logprobs``, ``spec`` (request → configuration), ``tool_choice``
(named / required tool choice), ``bounds`` (vLLM's limits), ``service``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from session.derender.bounds import MAX_CHOICES
from session.derender.chat import ChatDerenderer, ChatStep, assemble_message, chat_response
from session.derender.choice import ChoiceStream, Piece, StreamSpec
from session.derender.completion import CompletionDerenderer, CompletionStep, completion_response
from session.derender.service import INLINE_BODY_BYTES, DerenderService
from session.derender.spec import ParserConfig, chat_spec, completion_spec, resolve_parsers
from session.detokenizer import token_table
from session.errors import DerenderError
from session.parsers.base import ReasoningParser, ToolParser
from session.protocol.openai import ChatCompletionRequest, CompletionRequest

__all__ = [
    "INLINE_BODY_BYTES",
    "ChatDerenderer",
    "ChatStep",
    "ChoiceStream",
    "CompletionDerenderer",
    "CompletionStep",
    "DerenderService",
    "ParserConfig",
    "Piece",
    "StreamSpec",
    "assemble_message",
    "chat_derenderer",
    "chat_response",
    "chat_spec",
    "completion_derenderer",
    "completion_response",
    "completion_spec",
    "resolve_parsers",
]


def chat_derenderer(request: ChatCompletionRequest | None, prompt_token_ids: Sequence[int], *, request_id: str,
                    created: int, model: str, tokenizer: Any,
                    tool_parser: str | type[ToolParser] | None = None,
                    reasoning_parser: str | type[ReasoningParser] | None = None,
                    enable_auto_tool_choice: bool = False, n: int | None = None,
                    prompt_tokens: int | None = None) -> ChatDerenderer:
    """The incremental chat derenderer of one request, for a pipeline that keeps it in memory.

    ``prompt_token_ids`` is the whole rendered prompt (its tail seeds detokenization and tells the
    reasoning parser whether the template opened or closed ``<think>``; its length is the usage's
    ``prompt_tokens`` unless given). Parser names are the CLI's (``hermes``, ``qwen3``…)."""
    count = _choice_count(n if n is not None else (request.n if request is not None else 1))
    config = resolve_parsers(tool_parser, reasoning_parser, enable_auto_tool_choice=enable_auto_tool_choice)
    spec = chat_spec(token_table(tokenizer), config, request, prompt_token_ids)
    so = request.stream_options if request is not None else None
    return ChatDerenderer(
        spec, request_id=request_id, created=created, model=model, n=count,
        prompt_tokens=len(prompt_token_ids) if prompt_tokens is None else prompt_tokens,
        want_logprobs=bool(request.logprobs) if request is not None else True,
        top_logprobs=request.top_logprobs if request is not None and request.logprobs else None,
        continuous_usage=bool(so and so.continuous_usage_stats),
        return_token_ids=bool(request is not None and request.return_token_ids),
    )


def completion_derenderer(request: CompletionRequest | None, prompt_token_ids: Sequence[int], *, request_id: str,
                          created: int, model: str, tokenizer: Any, n: int | None = None,
                          prompt_index: int = 0, prompt_tokens: int | None = None,
                          echo_text: str | None = None) -> CompletionDerenderer:
    """The incremental completion derenderer of one prompt's engine request. Choices are numbered
    ``prompt_index * n + index``; with ``request.echo`` the prompt text (``echo_text``, else the
    decoded prompt ids) leads each choice."""
    table = token_table(tokenizer)
    spec = completion_spec(table, request, prompt_token_ids)
    count = _choice_count(n if n is not None else (request.n if request is not None else 1))
    if request is not None and request.echo and echo_text is None:
        echo_text = table.decode(list(prompt_token_ids), request.skip_special_tokens)
    return CompletionDerenderer(
        spec, request_id=request_id, created=created, model=model, n=count,
        prompt_tokens=len(prompt_token_ids) if prompt_tokens is None else prompt_tokens,
        index_base=prompt_index * count, echo_text=echo_text if request is not None and request.echo else None,
        want_logprobs=request.logprobs is not None if request is not None else True,
        top_logprobs=request.logprobs if request is not None else None,
        return_token_ids=bool(request is not None and request.return_token_ids),
    )


def _choice_count(n: int) -> int:
    """A derenderer holds a stream per choice: refuse an ``n`` it cannot hold before allocating any
    (an ``n`` of 2**63 exhausted the server's memory)."""
    if not 1 <= n <= MAX_CHOICES:
        raise DerenderError(f"n is {n}; it must be between 1 and {MAX_CHOICES}.", param="n")
    return n
