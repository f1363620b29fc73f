"""Found by the HTTP fuzzing (docs/reliability.md): a pipeline request with ``"n": 2**63`` built one
derender stream per choice before the engine could refuse it, and the server grew to 20 GB and was
killed. The derenderer factories now refuse an ``n`` they cannot hold, before allocating."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from session.derender import chat_derenderer, completion_derenderer
from session.derender.bounds import MAX_CHOICES
from session.errors import DerenderError
from session.protocol.openai import ChatCompletionRequest, CompletionRequest


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
