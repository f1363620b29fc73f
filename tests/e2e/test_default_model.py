"""The README's serve command ends in this: the embedded default model answers chat sensibly."""

from __future__ import annotations

from collections.abc import Iterator

import openai
import pytest

from tests.support.server_proc import ServerProcess

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def default_server() -> Iterator[ServerProcess]:
    # No MODEL argument: the embedded default model (built into the cache on first use).
    with ServerProcess(["serve"], startup_timeout=600) as srv:
        yield srv


def test_default_model_knows_the_capital_of_france(default_server: ServerProcess) -> None:
    client = openai.OpenAI(base_url=default_server.url + "/v1", api_key="none", max_retries=0)
    models = client.models.list()
    assert [m.id for m in models.data] == ["smollm2-135m-instruct"]
    r = client.chat.completions.create(
        model="smollm2-135m-instruct",
        messages=[{"role": "user", "content": "What is the capital of France?"}],
        max_tokens=32, temperature=0,
    )
    answer = r.choices[0].message.content or ""
    assert "Paris" in answer
    assert r.choices[0].finish_reason == "stop"  # ends on <|im_end|>, not the token budget


def test_default_model_streams_the_same_answer(default_server: ServerProcess) -> None:
    client = openai.OpenAI(base_url=default_server.url + "/v1", api_key="none", max_retries=0)
    kwargs = {"model": "smollm2-135m-instruct", "max_tokens": 32, "temperature": 0,
              "messages": [{"role": "user", "content": "What is the capital of France?"}]}
    full = client.chat.completions.create(**kwargs)  # type: ignore[call-overload]
    streamed = "".join(c.choices[0].delta.content or "" for c in client.chat.completions.create(
        **kwargs, stream=True) if c.choices)  # type: ignore[call-overload]
    assert streamed == full.choices[0].message.content
