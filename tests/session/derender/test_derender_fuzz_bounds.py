"""Derender bounds the HTTP fuzzing found missing (docs/reliability.md):

- a pipeline request with ``"n": 2**63`` built one derender stream per choice before the engine
  could refuse it, and the server grew to 20 GB and was killed: the derenderer factories now refuse
  an ``n`` they cannot hold, before allocating;
- a derender request with ``"prompt_tokens": 2**64 - 1`` made the usage's total unencodable (a 500):
  a prompt count past the context is refused."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from session.derender import DerenderService, chat_derenderer, completion_derenderer, resolve_parsers
from session.derender.bounds import MAX_CHOICES
from session.errors import DerenderError
from session.protocol.openai import ChatCompletionRequest, CompletionRequest
from session.protocol.openai_responses import DerenderChatRequest, DerenderCompletionRequest
from session.state import StateCodec


@pytest.mark.parametrize("n", [MAX_CHOICES + 1, 2**63, 10**30])
def test_an_n_past_the_choice_limit_is_refused_before_any_stream_is_built(n: int,
                                                                          tokenizer: Callable[[str], Any]) -> None:
    chat = ChatCompletionRequest.model_validate({"messages": [{"role": "user", "content": "hi"}], "n": n})
    with pytest.raises(DerenderError) as info:
        chat_derenderer(chat, [1, 2], request_id="r", created=0, model="m", tokenizer=tokenizer("qwen3"))
    assert info.value.param == "n" and info.value.status == 400
    comp = CompletionRequest.model_validate({"prompt": "hi", "n": n})
    with pytest.raises(DerenderError):
        completion_derenderer(comp, [1, 2], request_id="r", created=0, model="m", tokenizer=tokenizer("qwen3"))


def test_n_up_to_the_limit_still_derenders(tokenizer: Callable[[str], Any]) -> None:
    chat = ChatCompletionRequest.model_validate({"messages": [{"role": "user", "content": "hi"}], "n": MAX_CHOICES})
    d = chat_derenderer(chat, [1, 2], request_id="r", created=0, model="m", tokenizer=tokenizer("qwen3"))
    assert len(d.streams) == MAX_CHOICES


@pytest.mark.parametrize("count", [4097, 2**63, 2**64 - 1])
def test_a_prompt_token_count_past_the_context_is_refused(count: int, tokenizer: Callable[[str], Any]) -> None:
    service = DerenderService(tokenizer("qwen3"), model_name="m", max_model_len=4096, parsers=resolve_parsers(None, None),
                              codec=StateCodec.from_secret(b"fuzz-bounds-secret-0123456789-abcdefghijklmnopqrstuvwxyz"))
    response = {"request_id": "x", "choices": [{"index": 0, "token_ids": [9707], "finish_reason": "length"}]}
    with pytest.raises(DerenderError) as info:
        service.chat(DerenderChatRequest.model_validate({"generate_response": response, "prompt_tokens": count}))
    assert info.value.param == "prompt_tokens"
    with pytest.raises(DerenderError):
        service.completion(DerenderCompletionRequest.model_validate(
            {"generate_responses": [response], "prompt_tokens": [count]}))
    ok = service.chat(DerenderChatRequest.model_validate({"generate_response": response, "prompt_tokens": 4096}))
    assert ok["usage"]["total_tokens"] == 4097
