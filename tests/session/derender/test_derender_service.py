"""The derender service (what the HTTP routes and WebSocket frames call): vLLM's bounds checked
before anything is decoded, completions (echo, re-indexing, logprobs), and refused states."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from session.derender import ChoiceStream, DerenderService, resolve_parsers
from session.derender.bounds import MAX_LOGPROBS, MAX_RESPONSES
from session.errors import DerenderError, ModelNotFound, StateError
from session.protocol.openai_responses import (
    CompletionResponse,
    CompletionStreamResponse,
    DerenderChatRequest,
    DerenderChatStreamRequest,
    DerenderCompletionRequest,
    DerenderCompletionStreamRequest,
)
from session.state import StateCodec

SAMPLES = json.loads((Path(__file__).parents[2] / "data" / "vllm" / "derender_samples.json").read_text())
MAX_LEN = 64
SECRET = b"service-secret-0123456789-abcdefghijklmnopqrstuvwxyz"


@pytest.fixture(scope="module")
def tok(tokenizer: Callable[[str], Any]) -> Any:
    return tokenizer("qwen3")


def _service(tok: Any, *, parsers: bool = False, secret: bytes = SECRET) -> DerenderService:
    config = resolve_parsers("hermes" if parsers else None, "qwen3" if parsers else None, enable_auto_tool_choice=True)
    return DerenderService(tok, model_name="tiny-model", max_model_len=MAX_LEN, parsers=config,
                           codec=StateCodec([secret]))


def _ids(tok: Any, text: str) -> list[int]:
    return list(tok._tokenizer.encode(text, add_special_tokens=False).ids)


@pytest.fixture
def nothing_decoded(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Fail the test if anything reaches the per-choice pipeline."""
    def refuse(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("decoded before the request was refused")

    monkeypatch.setattr(ChoiceStream, "push", refuse)
    yield


def _chat(tok: Any, choices: list[dict[str, Any]], **extra: Any) -> DerenderChatRequest:
    return DerenderChatRequest.model_validate(
        {"generate_response": {"request_id": "chatcmpl-b", "choices": choices}, **extra})


# --- bounds ----------------------------------------------------------------------------------------------


@pytest.mark.usefixtures("nothing_decoded")
@pytest.mark.parametrize(("choices", "extra", "message"), [
    ([{"index": 0, "token_ids": []}], {}, "choice 0 has empty or null token_ids"),
    ([{"index": 0, "token_ids": None}], {}, "choice 0 has empty or null token_ids"),
    ([{"index": 0, "token_ids": [1] * (MAX_LEN + 1)}], {}, f"more than max_model_len ({MAX_LEN})"),
    ([{"index": 0, "token_ids": [10**7]}], {}, "outside this model's vocabulary"),
    ([{"index": 0, "token_ids": [1], "logprobs": {"content": [
        {"token_id": 1, "logprob": -1, "top_logprobs": [{"token_id": 1, "logprob": -1}] * (MAX_LOGPROBS + 1)}]}}],
     {}, f"more than the maximum of {MAX_LOGPROBS}"),
    ([{"index": 0, "token_ids": [1], "logprobs": {"content": [{"token_id": 1, "logprob": -1}] * 2}}], {},
     "more logprobs.content entries"),
    ([{"index": 0, "token_ids": [1]}, {"index": 0, "token_ids": [2]}], {}, "two choices with index 0"),
    ([{"index": 0, "token_ids": [1]}], {"prompt_token_ids": [1] * (MAX_LEN + 1)}, "prompt_token_ids has"),
    ([{"index": 0, "token_ids": [1]}], {"chat_request": {"messages": [], "logprobs": True, "top_logprobs": 21}},
     "chat_request.top_logprobs is 21, more than the maximum of 20"),
])
def test_chat_bounds_are_refused_before_any_decoding(tok: Any, choices: list[dict[str, Any]], extra: dict[str, Any],
                                                     message: str) -> None:
    with pytest.raises(DerenderError) as info:
        _service(tok).chat(_chat(tok, choices, **extra))
    assert message in info.value.message
    assert info.value.status == 400


@pytest.mark.usefixtures("nothing_decoded")
def test_completion_bounds_name_the_limit(tok: Any) -> None:
    svc = _service(tok)
    one = {"request_id": "cmpl-x", "choices": [{"index": 0, "token_ids": [1]}]}
    cases = [
        ({"generate_responses": []}, "generate_responses must not be empty"),
        ({"generate_responses": [one, one], "prompt_tokens": [3]},
         "prompt_tokens length (1) must equal generate_responses length (2)"),
        ({"generate_responses": [one] * (MAX_RESPONSES + 1)}, f"more than the maximum of {MAX_RESPONSES}"),
    ]
    for body, message in cases:
        with pytest.raises(DerenderError) as info:
            svc.completion(DerenderCompletionRequest.model_validate(body))
        assert message in info.value.message


def test_an_unknown_model_is_a_404(tok: Any) -> None:
    with pytest.raises(ModelNotFound) as info:
        _service(tok).chat(_chat(tok, [{"index": 0, "token_ids": [1]}], model="other"))
    assert info.value.status == 404


def test_streaming_needs_one_choice_per_chunk_and_prompt_ids_with_parsers(tok: Any) -> None:
    svc = _service(tok, parsers=True)
    two = {"request_id": "c", "choices": [{"index": 0, "token_ids": [1]}, {"index": 1, "token_ids": [1]}]}
    with pytest.raises(DerenderError, match="one choice per call"):
        svc.chat_stream(DerenderChatStreamRequest.model_validate({"stream": True, "generate_chunk": two}), None, now=1)
    one = {"request_id": "c", "choices": [{"index": 0, "token_ids": [1]}]}
    with pytest.raises(DerenderError, match="chat_request is required"):
        svc.chat_stream(DerenderChatStreamRequest.model_validate({"stream": True, "generate_chunk": one}), None, now=1)
    body = {"stream": True, "generate_chunk": one, "chat_request": {"messages": []}}
    with pytest.raises(DerenderError, match="prompt_token_ids is required"):
        svc.chat_stream(DerenderChatStreamRequest.model_validate(body), body["chat_request"], now=1)


# --- states ----------------------------------------------------------------------------------------------


def _stream_body(tok: Any, state: str | None, *, rid: str = "chatcmpl-s", index: int = 0,
                 chat_request: dict[str, Any] | None = None) -> dict[str, Any]:
    return {"stream": True, "stream_state": state, "prompt_token_ids": _ids(tok, "assistant\n"),
            "chat_request": chat_request or {"messages": [{"role": "user", "content": "hi"}]},
            "generate_chunk": {"request_id": rid, "choices": [{"index": index, "token_ids": _ids(tok, " more")}]}}


def _first_state(tok: Any) -> str:
    body = _stream_body(tok, None)
    out = _service(tok).chat_stream(DerenderChatStreamRequest.model_validate(body), body["chat_request"], now=1)
    assert out["chunk"]["choices"][0]["delta"]["content"] == " more"
    return str(out["stream_state"])


@pytest.mark.parametrize(("mutate", "reason"), [
    (lambda s, tok: (_stream_body(tok, s[:20] + ("B" if s[20] == "A" else "A") + s[21:]), SECRET), "bad_signature"),
    (lambda s, tok: (_stream_body(tok, s[: len(s) // 2]), SECRET), "bad_signature"),
    (lambda s, tok: (_stream_body(tok, s, rid="chatcmpl-other"), SECRET), "wrong_request"),
    (lambda s, tok: (_stream_body(tok, s, index=1), SECRET), "wrong_choice"),
    (lambda s, tok: (_stream_body(tok, s, chat_request={"messages": [], "stop": ["x"]}), SECRET), "wrong_request"),
    (lambda s, tok: (_stream_body(tok, "tw1." + "A" * 70000), SECRET), "too_large"),
    (lambda s, tok: (_stream_body(tok, s), b"another-secret-0123456789-abcdefghijklmnopqrstuvwxyz"), "unknown_key"),
    (lambda s, tok: (_stream_body(tok, "tw2" + s[3:]), SECRET), "unknown_version"),
])
def test_a_refused_state_names_its_problem_and_nothing_is_decoded(
        tok: Any, monkeypatch: pytest.MonkeyPatch, mutate: Callable[[str, Any], tuple[dict[str, Any], bytes]],
        reason: str) -> None:
    body, secret = mutate(_first_state(tok), tok)
    svc = _service(tok, secret=secret)
    monkeypatch.setattr(ChoiceStream, "push", lambda *a, **k: pytest.fail("decoded a refused state"))
    with pytest.raises(StateError) as info:
        svc.chat_stream(DerenderChatStreamRequest.model_validate(body), body["chat_request"], now=1)
    assert info.value.reason in (reason, "malformed")
    assert info.value.status == 400


def test_a_state_continues_on_another_service_with_the_same_secret(tok: Any) -> None:
    state = _first_state(tok)
    body = _stream_body(tok, state)
    body["generate_chunk"]["choices"][0]["finish_reason"] = "length"
    out = _service(tok).chat_stream(DerenderChatStreamRequest.model_validate(body), body["chat_request"], now=99)
    assert out["chunk"]["choices"][0]["delta"] == {"role": None, "content": " more", "reasoning": None}
    assert out["chunk"]["created"] == 1  # the stream's first call set it
    finished = _stream_body(tok, out["stream_state"])
    with pytest.raises(DerenderError, match="already finished"):
        _service(tok).chat_stream(DerenderChatStreamRequest.model_validate(finished), finished["chat_request"], now=1)


def test_a_usage_only_chunk_echoes_the_engine_usage_and_passes_the_state_through(tok: Any) -> None:
    state = _first_state(tok)
    body = {"stream": True, "stream_state": state, "generate_chunk": {
        "request_id": "chatcmpl-s", "choices": [], "usage": {"prompt_tokens": 5, "completion_tokens": 3, "total_tokens": 8}}}
    out = _service(tok).chat_stream(DerenderChatStreamRequest.model_validate(body), None, now=1)
    assert out["stream_state"] == state
    assert out["chunk"]["choices"] == []
    assert out["chunk"]["usage"]["total_tokens"] == 8


# --- completions -----------------------------------------------------------------------------------------


def test_completion_response_matches_vllms_shape_and_reindexes_choices_across_prompts(tok: Any) -> None:
    ids_a, ids_b = _ids(tok, "The answer is 4."), _ids(tok, " Paris")
    body = {"prompt_tokens": [5, 7], "generate_responses": [
        {"request_id": "cmpl-ab-0", "choices": [{"index": 0, "finish_reason": "length", "token_ids": ids_a},
                                                {"index": 1, "finish_reason": "length", "token_ids": ids_b}]},
        {"request_id": "cmpl-ab-1", "choices": [{"index": 0, "finish_reason": "length", "token_ids": ids_b},
                                                {"index": 1, "finish_reason": "length", "token_ids": ids_a}]}],
            "completion_request": {"prompt": ["p0", "p1"], "n": 2, "echo": True}}
    out = _service(tok).completion(DerenderCompletionRequest.model_validate(body))
    assert [(c["index"], c["text"]) for c in out["choices"]] == [
        (0, "p0The answer is 4."), (1, "p0 Paris"), (2, "p1 Paris"), (3, "p1The answer is 4.")]
    assert out["id"] == "cmpl-ab"
    assert out["usage"]["prompt_tokens"] == 12
    assert out["usage"]["completion_tokens"] == 2 * (len(ids_a) + len(ids_b))
    vllm = SAMPLES["completion_derender"]["response"]
    assert list(out) == list(vllm)
    assert list(out["choices"][0]) == list(vllm["choices"][0])
    CompletionResponse.model_validate(out)


def test_completion_logprobs_have_the_completion_shape_with_text_offsets(tok: Any) -> None:
    ids = _ids(tok, "a bc")
    body = {"completion_request": {"prompt": "x", "logprobs": 1}, "generate_responses": [
        {"request_id": "cmpl-l", "choices": [{"index": 0, "finish_reason": "length", "token_ids": ids, "logprobs": {
            "content": [{"token_id": i, "logprob": -1.0, "top_logprobs": [{"token_id": i, "logprob": -1.0}]}
                        for i in ids]}}]}]}
    out = _service(tok).completion(DerenderCompletionRequest.model_validate(body))
    lp = out["choices"][0]["logprobs"]
    assert lp["tokens"] == ["a", " bc"]
    assert lp["text_offset"] == [0, 1]
    assert lp["token_logprobs"] == [-1.0] * 2
    assert lp["top_logprobs"] == [{"a": -1.0}, {" bc": -1.0}]


def test_streaming_completion_echoes_first_then_continues_from_the_state(tok: Any) -> None:
    svc = _service(tok)
    creq = {"prompt": "The capital", "echo": True, "stop": ["!"]}
    state, texts = None, []
    pieces = [(_ids(tok, " of"), None), (_ids(tok, " France! no"), None), ([], "length")]
    for ids, finish in pieces:
        body = {"stream": True, "stream_state": state, "completion_request": creq,
                "generate_chunk": {"request_id": "cmpl-x", "choices": [{"index": 0, "token_ids": ids,
                                                                         "finish_reason": finish}]}}
        out = svc.completion_stream(DerenderCompletionStreamRequest.model_validate(body), creq, now=1)
        CompletionStreamResponse.model_validate(out["chunk"])
        texts.append(out["chunk"]["choices"][0]["text"])
        state = out["stream_state"]
        if out["chunk"]["choices"][0]["finish_reason"]:
            break
    assert texts == ["The capital of", " France"]
    assert list(out["chunk"]) == list(SAMPLES["completion_derender_stream_chunk"])
