"""The same token ids give the same answer on every derender path of the app ``launch render``
builds (in process, tests/support/cli_app.py): the one-shot HTTP derender, the streaming HTTP
derender (signed state) and WebSocket ``derender`` frames.

- Issue 24: a "stop" stream without an end token keeps its last real token (Llama 3.1 with no
  parser: ``"Sure: [get"``; with ``--tool-call-parser pythonic``: the call).
- Issue 20 item 2: ids between the tokenizer's size and the model's ``vocab_size`` (tiny-qwen3:
  151,669 vs 151,680) are valid and decode to nothing; the bound is the model's ``vocab_size``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest
from starlette.testclient import TestClient

from session.derender import assemble_message
from tests.conftest import asset_path
from tests.support.cli_app import cli_client
from tests.support.session_frames import open_session

CHAT = "/v1/chat/completions/derender"
WEATHER = {"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}}
SURE_GET = [40914, 25, 510, 456]  # "Sure", ":", " [", "get" (Llama 3.1)
PADDED = [102116, 151669, 60193]  # "设立", an id past tiny-qwen3's tokenizer, "/fw"


@pytest.fixture(scope="module")
def llama() -> Iterator[TestClient]:
    args = ["launch", "render", str(asset_path("llama3.1")), "--served-model-name", "m", "--state-secret", "e2e-secret-0123456789-abcdefghijklmnopqrstuvwxyz",
            "--tool-call-parser", "pythonic", "--enable-auto-tool-choice"]
    with cli_client(args) as srv:
        yield srv


@pytest.fixture(scope="module")
def tiny_qwen3() -> Iterator[TestClient]:
    with cli_client(["launch", "render", str(asset_path("tiny-qwen3")), "--served-model-name", "m",
                     "--state-secret", "e2e-secret-0123456789-abcdefghijklmnopqrstuvwxyz"]) as srv:
        yield srv


def every_path(srv: TestClient, chat_request: dict[str, Any], ids: list[int], finish: str,
               prompt: list[int]) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
    """(one-shot message and finish, HTTP-streamed message, WebSocket-streamed message), one id
    per streamed chunk and the finish alone in the last."""
    one = srv.post(CHAT, json={"chat_request": chat_request, "prompt_token_ids": prompt,
                               "generate_response": {"request_id": "chatcmpl-e", "choices": [
                                   {"index": 0, "finish_reason": finish, "token_ids": ids}]}})
    assert one.status_code == 200, one.text
    cuts = [[i] for i in ids] + [[]]

    def body(k: int, state: str | None) -> dict[str, Any]:
        return {"stream_state": state, "prompt_token_ids": prompt, "chat_request": chat_request,
                "generate_chunk": {"request_id": "chatcmpl-e", "choices": [
                    {"index": 0, "token_ids": cuts[k], "finish_reason": finish if k == len(cuts) - 1 else None}]}}

    http_chunks, state = [], None
    for k in range(len(cuts)):
        r = srv.post(CHAT, json={"stream": True, **body(k, state)})
        assert r.status_code == 200, r.text
        http_chunks.append(r.json()["chunk"])
        state = r.json()["stream_state"]

    ws_chunks, state = [], None
    with open_session(srv) as client:
        for k in range(len(cuts)):
            client.send(type="derender", id=f"d{k}", kind="chat", body=body(k, state))
            (frame,) = client.until(f"d{k}", "derender.delta")
            assert frame["type"] == "derender.delta", frame
            ws_chunks.append(frame["result"]["chunk"])
            state = frame["result"]["stream_state"]
    choice = one.json()["choices"][0]
    return choice, assemble_message(http_chunks), assemble_message(ws_chunks)


def _same(choice: dict[str, Any], streamed: dict[str, Any]) -> None:
    message = choice["message"]
    assert streamed["content"] == (message["content"] or "")
    assert streamed["reasoning"] == (message["reasoning"] or "")
    assert [(c["id"], c["name"], c["arguments"]) for c in streamed["tool_calls"]] == \
        [(c["id"], c["function"]["name"], c["function"]["arguments"]) for c in message.get("tool_calls", [])]
    assert streamed["finish_reason"] == choice["finish_reason"]


@pytest.mark.parametrize("finish", ["stop", "length"])
def test_a_stop_stream_without_an_end_token_keeps_its_last_token_on_every_path(llama: TestClient,
                                                                             finish: str) -> None:
    chat_request = {"messages": [{"role": "user", "content": "x"}]}
    choice, http, ws = every_path(llama, chat_request, SURE_GET, finish, [128000, 128006])
    assert choice["message"]["content"] == "Sure: [get"
    _same(choice, http)
    _same(choice, ws)


@pytest.mark.parametrize("eot", [False, True])
def test_a_pythonic_call_ending_in_stop_is_a_call_on_every_path(llama: TestClient, tokenizer: Callable[[str], Any],
                                                                eot: bool) -> None:
    tok = tokenizer("llama3.1")
    ids = tok.encode('[get_weather(city="Paris")]', add_special_tokens=False) + ([tok.eos_token_id] if eot else [])
    chat_request = {"messages": [{"role": "user", "content": "Weather in Paris?"}], "tools": [WEATHER]}
    choice, http, ws = every_path(llama, chat_request, ids, "stop", [128000, 128006])
    assert choice["message"]["content"] is None
    assert [(c["function"]["name"], c["function"]["arguments"]) for c in choice["message"]["tool_calls"]] == \
        [("get_weather", '{"city": "Paris"}')]
    assert choice["finish_reason"] == "tool_calls"
    _same(choice, http)
    _same(choice, ws)


def test_ids_past_the_tokenizer_within_the_model_vocab_decode_to_nothing_on_every_path(
        tiny_qwen3: TestClient) -> None:
    chat_request = {"messages": [{"role": "user", "content": "x"}]}
    choice, http, ws = every_path(tiny_qwen3, chat_request, PADDED, "length", [151644, 151679])
    assert choice["message"]["content"] == "设立/fw"
    _same(choice, http)
    _same(choice, ws)
    r = tiny_qwen3.post(CHAT, json={"generate_response": {"request_id": "c", "choices": [
        {"index": 0, "finish_reason": "length", "token_ids": [1, 151680]}]}})
    assert r.status_code == 400, r.text
    assert "token id 151680, outside this model's vocabulary (0..151679)" in r.json()["error"]["message"]
