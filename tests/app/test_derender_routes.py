"""The derender routes in-process: vLLM's request shapes in, vLLM's answers and error envelopes out,
streaming with the signed state, and the startup checks."""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from starlette.testclient import TestClient

from server.app import create_app
from server.context import ServerContext
from server.gating import decide
from server.settings import Mode, Settings
from session.state import RANDOM_SECRET_WARNING

CHAT, COMPLETION = "/v1/chat/completions/derender", "/v1/completions/derender"
WEATHER = {"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}}
CHAT_REQUEST = {"model": "tiny-model", "messages": [{"role": "user", "content": "Weather in Paris?"}],
                "tools": [WEATHER], "stream": True}
OUTPUT = ('<think>\nThe user wants 天气 🌤️.\n</think>\n\nSure.<tool_call>\n'
          '{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>')


def _ctx(asset: Callable[[str], Path], tokenizer: Callable[[str], Any], **overrides: Any) -> ServerContext:
    settings = Settings(mode=Mode.RENDER, model_dir=asset("qwen3"), served_model_name="tiny-model", environ={},
                        **{"state_secret": b"app-secret-0123456789-abcdefghijklmnopqrstuvwxyz", "tool_call_parser": "hermes", "reasoning_parser": "qwen3",
                           "enable_auto_tool_choice": True, **overrides})
    return ServerContext(settings=settings, gating=decide(Mode.RENDER, {}), tokenizer=tokenizer("qwen3"),
                         max_model_len=4096)


@pytest.fixture
def client(asset: Callable[[str], Path], tokenizer: Callable[[str], Any]) -> Iterator[TestClient]:
    with TestClient(create_app(_ctx(asset, tokenizer))) as c:
        yield c


@pytest.fixture(scope="module")
def ids(tokenizer: Callable[[str], Any]) -> dict[str, list[int]]:
    tok = tokenizer("qwen3")
    enc = tok._tokenizer.encode
    return {"output": [*enc(OUTPUT, add_special_tokens=False).ids, tok.eos_token_id],
            "prompt": enc("<|im_start|>assistant\n", add_special_tokens=False).ids}


def _error(r: Any, status: int = 400) -> dict[str, Any]:
    assert r.status_code == status, r.text
    err: dict[str, Any] = r.json()["error"]
    assert err["code"] == status
    return err


def _stream(client: TestClient, ids: dict[str, list[int]], size: int) -> list[dict[str, Any]]:
    out, state, tokens = [], None, ids["output"]
    for k in range(0, len(tokens), size):
        finish = "stop" if k + size >= len(tokens) else None
        r = client.post(CHAT, json={"stream": True, "model": "tiny-model", "stream_state": state,
                                    "prompt_token_ids": ids["prompt"], "prompt_tokens": 30, "chat_request": CHAT_REQUEST,
                                    "generate_chunk": {"request_id": "chatcmpl-st", "output_mode": "tokens", "choices": [
                                        {"index": 0, "token_ids": tokens[k:k + size], "finish_reason": finish}]}})
        assert r.status_code == 200, r.text
        body = r.json()
        assert set(body) == {"chunk", "stream_state"}
        out.append(body["chunk"])
        state = body["stream_state"]
    return out


def test_non_streaming_chat_derender_splits_reasoning_content_and_tool_calls(
        client: TestClient, ids: dict[str, list[int]]) -> None:
    r = client.post(CHAT, json={"model": "tiny-model", "prompt_tokens": 30, "prompt_token_ids": ids["prompt"],
                                "chat_request": {**CHAT_REQUEST, "stream": False},
                                "generate_response": {"request_id": "chatcmpl-nd", "output_mode": "tokens", "choices": [
                                    {"index": 0, "finish_reason": "stop", "token_ids": ids["output"]}]}})
    assert r.status_code == 200, r.text
    body = r.json()
    assert (body["id"], body["object"], body["model"]) == ("chatcmpl-nd", "chat.completion", "tiny-model")
    message = body["choices"][0]["message"]
    assert message["reasoning"] == "\nThe user wants 天气 🌤️.\n"
    assert message["content"] == "\n\nSure."
    assert message["tool_calls"][0]["function"] == {"name": "get_weather", "arguments": '{"city": "Paris"}'}
    assert body["choices"][0]["finish_reason"] == "tool_calls"
    assert body["usage"]["completion_tokens"] == len(ids["output"])


@pytest.mark.parametrize("size", [1, 5])
def test_streaming_chat_derender_carries_its_state_and_matches_the_one_shot_split(
        client: TestClient, ids: dict[str, list[int]], size: int) -> None:
    chunks = _stream(client, ids, size)
    assert chunks[0]["choices"][0]["delta"]["role"] == "assistant"
    deltas = [c["choices"][0]["delta"] for c in chunks]
    assert "".join(d["reasoning"] or "" for d in deltas) == "\nThe user wants 天气 🌤️.\n"
    assert "".join(d["content"] or "" for d in deltas) == "\n\nSure."
    calls = [tc for d in deltas for tc in d.get("tool_calls", [])]
    assert calls[0]["id"].startswith("chatcmpl-tool-") and calls[0]["function"]["name"] == "get_weather"
    assert "".join(tc["function"]["arguments"] for tc in calls) == '{"city": "Paris"}'
    assert chunks[-1]["choices"][0]["finish_reason"] == "tool_calls"
    assert {c["created"] for c in chunks} == {chunks[0]["created"]}


@pytest.mark.parametrize(("change", "reason_words"), [
    (lambda s: s[:30] + ("B" if s[30] == "A" else "A") + s[31:], "signature"),
    (lambda s: s[:-5], "malformed"),
    (lambda s: "tw7" + s[3:], "version"),
    (lambda s: "tw1." + "A" * 70_000, "limit"),
])
def test_a_tampered_state_is_a_400_that_names_the_problem(client: TestClient, ids: dict[str, list[int]],
                                                          change: Callable[[str], str], reason_words: str) -> None:
    first = client.post(CHAT, json={"stream": True, "stream_state": None, "prompt_token_ids": ids["prompt"],
                                    "chat_request": CHAT_REQUEST, "generate_chunk": {
                                        "request_id": "chatcmpl-t", "choices": [{"index": 0, "token_ids": ids["output"][:3]}]}})
    state = first.json()["stream_state"]
    r = client.post(CHAT, json={"stream": True, "stream_state": change(state), "prompt_token_ids": ids["prompt"],
                                "chat_request": CHAT_REQUEST, "generate_chunk": {
                                    "request_id": "chatcmpl-t", "choices": [{"index": 0, "token_ids": ids["output"][3:6]}]}})
    err = _error(r)
    assert err["param"] == "stream_state"
    assert reason_words in err["message"]


def test_a_state_from_another_request_is_refused(client: TestClient, ids: dict[str, list[int]]) -> None:
    body: dict[str, Any] = {"stream": True, "prompt_token_ids": ids["prompt"], "chat_request": CHAT_REQUEST,
            "generate_chunk": {"request_id": "chatcmpl-a", "choices": [{"index": 0, "token_ids": ids["output"][:3]}]}}
    state = client.post(CHAT, json=body).json()["stream_state"]
    body["generate_chunk"]["request_id"] = "chatcmpl-b"
    err = _error(client.post(CHAT, json={**body, "stream_state": state}))
    assert "another request" in err["message"]


def test_a_parser_server_needs_chat_request_as_vllm_says(client: TestClient, ids: dict[str, list[int]]) -> None:
    samples = json.loads((Path(__file__).parents[1] / "data" / "vllm" / "derender_samples.json").read_text())
    probe = samples["chat_derender_stream_requires_chat_request"]
    err = _error(client.post(CHAT, json=probe["request"]))
    assert err["message"] == probe["response"]["error"]["message"]


def test_a_malformed_body_is_a_400_naming_the_field(client: TestClient) -> None:
    err = _error(client.post(CHAT, json={"model": "tiny-model", "prompt_tokens": 3}))
    assert "generate_response" in err["message"]
    err = _error(client.post(CHAT, json={"stream": True, "generate_chunk": {"request_id": "x", "choices": [
        {"index": 0, "token_ids": [-1]}]}}))
    assert "token_ids" in err["message"]


def test_completion_derender_streams_and_answers_in_one_shot(client: TestClient,
                                                             tokenizer: Callable[[str], Any]) -> None:
    tok = tokenizer("qwen3")
    toks = tok._tokenizer.encode(" of France is Paris.", add_special_tokens=False).ids
    r = client.post(COMPLETION, json={"prompt_tokens": [3], "completion_request": {"prompt": "The capital", "echo": True},
                                      "generate_responses": [{"request_id": "cmpl-1", "choices": [
                                          {"index": 0, "finish_reason": "length", "token_ids": toks}]}]})
    assert r.status_code == 200, r.text
    assert r.json()["choices"][0]["text"] == "The capital of France is Paris."
    state, text = None, ""
    for k in range(0, len(toks), 2):
        r = client.post(COMPLETION, json={"stream": True, "stream_state": state, "generate_chunk": {
            "request_id": "cmpl-s", "choices": [{"index": 0, "token_ids": toks[k:k + 2],
                                                  "finish_reason": "length" if k + 2 >= len(toks) else None}]}})
        assert r.status_code == 200, r.text
        text += r.json()["chunk"]["choices"][0]["text"]
        state = r.json()["stream_state"]
    assert text == " of France is Paris."


def test_openapi_lists_the_derender_routes(client: TestClient) -> None:
    paths = client.get("/openapi.json").json()["paths"]
    assert {CHAT, COMPLETION} <= set(paths)


def test_without_a_secret_the_app_warns_at_creation(asset: Callable[[str], Path], tokenizer: Callable[[str], Any],
                                                   caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="tokenwire.state"):
        create_app(_ctx(asset, tokenizer, state_secret=None))
    assert RANDOM_SECRET_WARNING in caplog.text


def test_an_unknown_parser_name_refuses_to_start(asset: Callable[[str], Path], tokenizer: Callable[[str], Any]) -> None:
    with pytest.raises(ValueError, match="unknown tool call parser 'nope'"):
        create_app(_ctx(asset, tokenizer, tool_call_parser="nope"))
