"""Issue 20 item 2: token ids between the tokenizer's size and the model's ``vocab_size`` are valid.

Real models pad their vocabulary: tiny-qwen3's config says 151,680 ids, its tokenizer has 151,669.
Such an id decodes to nothing, identically in the one-shot and the streaming derender (signed
state), the completion derender and the in-process derenderer the pipelines use; the bound the
derender checks is the model's ``vocab_size``.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson
import pytest

from engine.protocol import GenerateChoice, GenerateResponse
from server.context import model_vocab_size
from session.derender import (
    DerenderService,
    assemble_message,
    chat_derenderer,
    chat_response,
    resolve_parsers,
)
from session.errors import DerenderError
from session.protocol.openai_responses import (
    DerenderChatRequest,
    DerenderChatStreamRequest,
    DerenderCompletionRequest,
)
from session.state import StateCodec

MODEL_VOCAB = 151_680
IDS = [102116, 151669, 60193]  # "设立", an id past the tokenizer (151,669 ids), "/fw"


@pytest.fixture(scope="module")
def tok(tokenizer: Callable[[str], Any]) -> Any:
    return tokenizer("tiny-qwen3")


def _service(tok: Any, vocab_size: int | None = MODEL_VOCAB, *, parsers: bool = False) -> DerenderService:
    config = resolve_parsers("hermes" if parsers else None, "qwen3" if parsers else None,
                             enable_auto_tool_choice=True)
    return DerenderService(tok, model_name="tiny-qwen3", max_model_len=4096, parsers=config,
                           codec=StateCodec([b"pad-secret-0123456789-abcdefghijklmnopqrstuvwxyz"]), vocab_size=vocab_size)


def _logprobs(ids: list[int]) -> dict[str, Any]:
    return {"content": [{"token_id": i, "logprob": -1.0, "top_logprobs": [{"token_id": MODEL_VOCAB - 1,
                                                                           "logprob": -2.0}]} for i in ids]}


def test_the_model_vocab_size_comes_from_its_config(asset: Callable[[str], Path], tmp_path: Path) -> None:
    assert model_vocab_size(asset("tiny-qwen3")) == MODEL_VOCAB
    assert model_vocab_size(asset("tiny-qwen2-vl")) == 151_680  # a vision-language model's text_config
    assert model_vocab_size(asset("qwen3")) is None  # a tokenizer-only asset: the tokenizer's size
    (tmp_path / "config.json").write_text("[1, 2]")
    assert model_vocab_size(tmp_path) is None
    (tmp_path / "config.json").write_text(json.dumps({"vocab_size": True}))
    assert model_vocab_size(tmp_path) is None


def test_a_padded_id_decodes_to_nothing_in_the_one_shot_chat_derender(tok: Any) -> None:
    assert len(tok) < IDS[1] + 1 <= MODEL_VOCAB
    out = _service(tok).chat(DerenderChatRequest.model_validate({"generate_response": {
        "request_id": "chatcmpl-p", "choices": [{"index": 0, "finish_reason": "length", "token_ids": IDS,
                                                 "logprobs": _logprobs(IDS)}]},
        "prompt_token_ids": [MODEL_VOCAB - 1, 151644], "prompt_tokens": 2}))
    choice = out["choices"][0]
    assert choice["message"]["content"] == tok.decode(IDS) == "设立/fw"
    assert out["usage"]["completion_tokens"] == 3
    padded = choice["logprobs"]["content"][1]
    assert (padded["token"], padded["bytes"]) == ("", [])
    assert choice["logprobs"]["content"][0]["top_logprobs"][0]["token"] == ""


def test_streaming_chunk_by_chunk_gives_the_same_text_across_replicas(tok: Any) -> None:
    one, two = _service(tok, parsers=True), _service(tok, parsers=True)
    chat_request = {"messages": [{"role": "user", "content": "x"}]}
    state, chunks = None, []
    for k, tid in enumerate(IDS):
        body = orjson.loads(orjson.dumps({
            "stream": True, "stream_state": state, "prompt_token_ids": [151644, 77091, 198],
            "chat_request": chat_request, "generate_chunk": {"request_id": "chatcmpl-s", "choices": [
                {"index": 0, "token_ids": [tid], "finish_reason": "length" if k == len(IDS) - 1 else None}]}}))
        out = (one, two)[k % 2].chat_stream(DerenderChatStreamRequest.model_validate(body), chat_request, now=1)
        chunks.append(out["chunk"])
        state = out["stream_state"]
    whole = one.chat(DerenderChatRequest.model_validate({
        "prompt_token_ids": [151644, 77091, 198], "chat_request": chat_request,
        "generate_response": {"request_id": "chatcmpl-s", "choices": [
            {"index": 0, "finish_reason": "length", "token_ids": IDS}]}}))
    got = assemble_message(chunks)
    assert got["reasoning"] == (whole["choices"][0]["message"]["reasoning"] or "") == "设立/fw"


def test_the_completion_derender_and_the_pipelines_derenderer_agree(tok: Any) -> None:
    out = _service(tok).completion(DerenderCompletionRequest.model_validate({"generate_responses": [
        {"request_id": "cmpl-p", "choices": [{"index": 0, "finish_reason": "length", "token_ids": IDS}]}]}))
    assert out["choices"][0]["text"] == "设立/fw"
    d = chat_derenderer(None, [1, 2], request_id="chatcmpl-i", created=0, model="m", tokenizer=tok)
    pieces = [d.push(0, [tid], finish_reason="length" if k == 2 else None).chunk for k, tid in enumerate(IDS)]
    assert assemble_message([c for c in pieces if c])["content"] == "设立/fw"
    whole = chat_response(chat_derenderer(None, [1, 2], request_id="chatcmpl-i", created=0, model="m",
                                          tokenizer=tok),
                          GenerateResponse(request_id="chatcmpl-i", choices=[
                              GenerateChoice(index=0, finish_reason="length", token_ids=IDS)]))
    assert whole["choices"][0]["message"]["content"] == "设立/fw"


def test_the_bound_is_the_model_vocab_size(tok: Any) -> None:
    service = _service(tok)
    for ids, param in (([1, MODEL_VOCAB], "generate_response"), ([1], "prompt_token_ids")):
        with pytest.raises(DerenderError) as info:
            service.chat(DerenderChatRequest.model_validate({
                "prompt_token_ids": [MODEL_VOCAB] if param == "prompt_token_ids" else None,
                "generate_response": {"request_id": "c", "choices": [{"index": 0, "token_ids": ids}]}}))
        assert f"token id {MODEL_VOCAB}, outside this model's vocabulary (0..{MODEL_VOCAB - 1})" in info.value.message
        assert info.value.param == param
    # a model without a config.json vocab_size: the tokenizer's ids are the bound
    with pytest.raises(DerenderError, match=r"\(0\.\.151668\)"):
        _service(tok, None).chat(DerenderChatRequest.model_validate({
            "generate_response": {"request_id": "c", "choices": [{"index": 0, "token_ids": IDS}]}}))
