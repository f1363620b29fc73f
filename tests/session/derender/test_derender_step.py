"""``DerenderService.step``: the one streaming derender step the HTTP derender routes
(``"stream": true``) and the WebSocket ``derender`` frames call, on the request body as sent."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest
from pydantic import ValidationError

from session.derender import DerenderService, resolve_parsers
from session.errors import InvalidRequest
from session.protocol.openai_responses import DerenderChatStreamRequest, DerenderCompletionStreamRequest
from session.state import StateCodec

SECRET = b"step-secret-0123456789-abcdefghijklmnopqrstuvwxyz"
TOOLS = [{"type": "function", "function": {"name": "get_weather", "parameters": {
    "type": "object", "properties": {"city": {"type": "string"}}}}}]
OUTPUT = ('<think>\nThe user wants weather.\n</think>\n\nLet me look.\n<tool_call>\n'
          '{"name": "get_weather", "arguments": {"city": "Paris \\"centre\\""}}\n</tool_call>')


@pytest.fixture(scope="module")
def tok(tokenizer: Callable[[str], Any]) -> Any:
    return tokenizer("qwen3")


def _service(tok: Any) -> DerenderService:
    return DerenderService(tok, model_name="tiny-model", max_model_len=4096, codec=StateCodec([SECRET]),
                           parsers=resolve_parsers("hermes", "qwen3", enable_auto_tool_choice=True))


def _ids(tok: Any, text: str) -> list[int]:
    return list(tok._tokenizer.encode(text, add_special_tokens=False).ids)


def _chunks(ids: list[int], size: int) -> list[tuple[list[int], str | None]]:
    pieces: list[tuple[list[int], str | None]] = [(ids[k:k + size], None) for k in range(0, len(ids), size)]
    return [*pieces, ([], "stop")]


@pytest.mark.parametrize("stream", [True, "absent", False])  # a WebSocket body need not say "stream"
def test_a_chat_step_is_the_chat_stream_call_on_the_validated_body(tok: Any, stream: Any) -> None:
    chat_request = {"messages": [{"role": "user", "content": "Weather in Paris?"}], "tools": TOOLS}
    prompt = _ids(tok, "<|im_start|>assistant\n")
    by_step, by_call = _service(tok), _service(tok)
    state_a = state_b = None
    deltas = []
    for ids, finish in _chunks(_ids(tok, OUTPUT), 3):
        body: dict[str, Any] = {"stream_state": state_a, "prompt_token_ids": prompt, "chat_request": chat_request,
                                "generate_chunk": {"request_id": "chatcmpl-step",
                                                   "choices": [{"index": 0, "token_ids": ids, "finish_reason": finish}]}}
        if stream != "absent":
            body["stream"] = stream
        sent = json.dumps(body)
        out_a = by_step.step("chat", body, now=7)
        assert json.dumps(body) == sent  # the caller's body is left as it was
        raw_b = {**body, "stream": True, "stream_state": state_b}
        out_b = by_call.chat_stream(DerenderChatStreamRequest.model_validate(raw_b), chat_request, now=7)
        assert out_a == out_b
        state_a, state_b = out_a["stream_state"], out_b["stream_state"]
        deltas.append(out_a["chunk"]["choices"][0]["delta"])
    calls = [c for d in deltas for c in d.get("tool_calls") or ()]
    assert "".join(d.get("reasoning") or "" for d in deltas) == "\nThe user wants weather.\n"
    assert "".join(d.get("content") or "" for d in deltas) == "\n\nLet me look.\n"
    assert calls[0]["function"]["name"] == "get_weather"
    assert "".join(c["function"]["arguments"] for c in calls) == '{"city": "Paris \\"centre\\""}'


def test_a_completion_step_is_the_completion_stream_call_on_the_validated_body(tok: Any) -> None:
    creq = {"prompt": "The capital", "echo": True, "stop": ["!"]}
    svc = DerenderService(tok, model_name="tiny-model", max_model_len=4096, codec=StateCodec([SECRET]),
                          parsers=resolve_parsers(None, None, enable_auto_tool_choice=False))
    state_a = state_b = None
    texts = []
    for ids, finish in [(_ids(tok, " of"), None), (_ids(tok, " France! no"), None), ([], "length")]:
        body = {"stream_state": state_a, "completion_request": creq,
                "generate_chunk": {"request_id": "cmpl-x", "choices": [{"index": 0, "token_ids": ids,
                                                                         "finish_reason": finish}]}}
        out_a = svc.step("completion", body, now=1)
        raw_b = {**body, "stream": True, "stream_state": state_b}
        out_b = svc.completion_stream(DerenderCompletionStreamRequest.model_validate(raw_b), creq, now=1)
        assert out_a == out_b
        state_a, state_b = out_a["stream_state"], out_b["stream_state"]
        texts.append(out_a["chunk"]["choices"][0]["text"])
        if out_a["chunk"]["choices"][0]["finish_reason"]:  # the stop string ended it
            break
    assert texts == ["The capital of", " France"]


def test_a_step_of_another_kind_is_refused_naming_the_kind(tok: Any) -> None:
    with pytest.raises(InvalidRequest) as info:
        _service(tok).step("messages", {"generate_chunk": {"request_id": "m", "choices": []}}, now=1)
    assert info.value.param == "kind"
    assert "'chat' or 'completion'" in info.value.message


def test_a_body_that_does_not_validate_names_the_field(tok: Any) -> None:
    # pydantic's error, which the server's boundary (server.errors.to_api_error) answers as a 400
    with pytest.raises(ValidationError) as info:
        _service(tok).step("chat", {"generate_chunk": {"request_id": "c", "choices": [{"token_ids": "x"}]}}, now=1)
    assert info.value.errors()[0]["loc"][:3] == ("generate_chunk", "choices", 0)
