"""Streaming == non-streaming, for any split, with the state carried by the client.

Outputs are built from real text (think blocks, hermes tool calls, stop strings, emoji, CJK) and
tokenized with every real tokenizer; the token ids are split at random (empty chunks and a
separate finish-only chunk included) and derendered through the streaming service one chunk per
call, the signed state going through its encoded form between every call and alternating between
two service instances that share only the secret (two replicas). The concatenated deltas must equal
the one-shot derender: content, reasoning, each tool call's id, name and arguments, finish and stop
reasons, usage and logprobs.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from engine.protocol import GenerateChoice, GenerateResponse
from session.derender import (
    DerenderService,
    assemble_message,
    chat_derenderer,
    chat_response,
    resolve_parsers,
)
from session.protocol.openai import ChatCompletionRequest
from session.protocol.openai_responses import DerenderChatRequest, DerenderChatStreamRequest
from session.state import StateCodec
from tests.conftest import TOKENIZERS

PLAIN = ["Hello there.", " The weather in 巴黎 is nice 🌤️.", " 天气很好！", " naïve café — ok", " 👍🏽🦩🤔",
         "\n\n", " Ωμέγα", " tabs\tand  spaces", " STOP here", " x", " ###", " end🛑"]
THINK = ["Let me think 🤔 about it.", "用户想知道天气。", "Step 1: check.\nStep 2: answer 🛑 now."]
CALLS = [{"name": "get_weather", "arguments": {"city": "Paris"}},
         {"name": "get_time", "arguments": {"tz": "Asia/東京", "emoji": "🕐", "n": [1, 2.5, None]}},
         # a long string argument: streamed through the plain-characters fast path, with escapes between
         {"name": "plan_day", "arguments": {"notes": "Monday: museums if it rains, a \"river walk\" otherwise;\n"
                                                     "Tuesday: 雨なら美術館 ☔ — back\\slash, tab\t and 🦩 at the end."}}]
STOPS = ["STOP", "###", "🛑", "\n\n"]
TOOLS = [{"type": "function", "function": {"name": c["name"], "parameters": {"type": "object"}}} for c in CALLS]
SECRET = b"property-secret-0123456789-abcdefghijklmnopqrstuvwxyz"


@st.composite
def outputs(draw: st.DrawFn) -> str:
    parts = []
    if draw(st.booleans()):
        parts.append("<think>\n" + draw(st.sampled_from(THINK)) + "\n</think>\n\n")
    parts += draw(st.lists(st.sampled_from(PLAIN), max_size=4))
    for call in draw(st.lists(st.sampled_from(CALLS), max_size=2)):
        parts.append("<tool_call>\n" + json.dumps(call, ensure_ascii=False) + "\n</tool_call>")
    if draw(st.booleans()):
        parts += draw(st.lists(st.sampled_from(PLAIN), max_size=2))
    return "".join(parts)


@st.composite
def requests(draw: st.DrawFn) -> dict[str, Any]:
    req: dict[str, Any] = {"messages": [{"role": "user", "content": "weather?"}], "tools": TOOLS,
                           "logprobs": True, "top_logprobs": 1,
                           "stream": True, "stream_options": {"include_usage": True, "continuous_usage_stats": True}}
    stops = draw(st.lists(st.sampled_from(STOPS), max_size=2, unique=True))
    if stops:
        req["stop"] = stops
        req["include_stop_str_in_output"] = draw(st.booleans())
    req["include_reasoning"] = draw(st.booleans())
    req["parallel_tool_calls"] = draw(st.booleans())
    req["skip_special_tokens"] = draw(st.booleans())
    return req


def _services(tok: Any) -> tuple[DerenderService, DerenderService]:
    parsers = resolve_parsers("hermes", "qwen3", enable_auto_tool_choice=True)
    return tuple(DerenderService(tok, model_name="m", max_model_len=32768, parsers=parsers,  # type: ignore[return-value]
                                 codec=StateCodec([SECRET])) for _ in range(2))


def _logprobs(ids: list[int]) -> dict[str, Any]:
    return {"content": [{"token_id": i, "logprob": -0.25 * (i % 7), "top_logprobs": [{"token_id": i, "logprob": -0.1}]}
                        for i in ids]}


def _message_view(message: dict[str, Any]) -> dict[str, Any]:
    return {"content": message["content"] or "", "reasoning": message["reasoning"] or "",
            "tool_calls": [(c["id"], c["function"]["name"], c["function"]["arguments"])
                           for c in message.get("tool_calls", [])]}


@pytest.mark.parametrize("name", TOKENIZERS)
def test_streamed_deltas_with_client_carried_state_equal_the_one_shot_derender(
        name: str, tokenizer: Callable[[str], Any]) -> None:
    tok = tokenizer(name)
    one, two = _services(tok)
    prompt = tok._tokenizer.encode("<|im_start|>user\nweather?<|im_end|>\n<|im_start|>assistant\n",
                                   add_special_tokens=False).ids

    @settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(text=outputs(), chat_request=requests(), sizes=st.lists(st.integers(0, 9), max_size=40),
           finish=st.sampled_from(["stop", "length"]), finish_alone=st.booleans(), end_token=st.booleans())
    def check(text: str, chat_request: dict[str, Any], sizes: list[int], finish: str, finish_alone: bool,
              end_token: bool) -> None:
        ids = tok._tokenizer.encode(text, add_special_tokens=False).ids
        if finish == "stop" and end_token:  # (an engine may end a "stop" stream without its end token)
            ids.append(tok.eos_token_id)
        if not ids:
            return
        whole = one.chat(DerenderChatRequest.model_validate({
            "generate_response": {"request_id": "chatcmpl-p", "choices": [
                {"index": 0, "finish_reason": finish, "token_ids": ids, "logprobs": _logprobs(ids)}]},
            "prompt_tokens": len(prompt), "prompt_token_ids": prompt, "chat_request": chat_request}))
        expected = whole["choices"][0]

        cuts, k = [], 0
        for n in sizes:
            if k >= len(ids):
                break
            cuts.append(ids[k:k + n])
            k += n
        if k < len(ids):
            cuts.append(ids[k:])
        if finish_alone:
            cuts.append([])
        chunks, state, largest = [], None, 0
        for c, piece in enumerate(cuts):
            last = c == len(cuts) - 1
            body = {"stream": True, "stream_state": state, "prompt_tokens": len(prompt), "prompt_token_ids": prompt,
                    "chat_request": chat_request,
                    "generate_chunk": {"request_id": "chatcmpl-p", "choices": [
                        {"index": 0, "token_ids": piece, "finish_reason": finish if last else None,
                         "logprobs": _logprobs(piece)}]}}
            body = orjson.loads(orjson.dumps(body))  # everything crosses the wire as JSON
            service = (one, two)[c % 2]  # alternate replicas
            out = service.chat_stream(DerenderChatStreamRequest.model_validate(body), body["chat_request"], now=1)
            out = orjson.loads(orjson.dumps(out))
            chunks.append(out["chunk"])
            state = out["stream_state"]
            largest = max(largest, len(state))
            if out["chunk"]["choices"][0]["finish_reason"] is not None:
                break  # a stop string ended the stream early, as it ends the engine

        got = assemble_message(chunks)
        want = _message_view(expected["message"])
        assert got["content"] == want["content"]
        assert got["reasoning"] == want["reasoning"]
        assert [(c["id"], c["name"], c["arguments"]) for c in got["tool_calls"]] == want["tool_calls"]
        assert (got["finish_reason"], got["stop_reason"]) == (expected["finish_reason"], expected["stop_reason"])
        assert chunks[0]["choices"][0]["delta"]["role"] == "assistant"
        assert all(ch["choices"][0]["delta"]["role"] is None for ch in chunks[1:])
        assert chunks[-1]["usage"] == whole["usage"]
        streamed_lp = [e for ch in chunks if ch["choices"][0]["logprobs"] for e in ch["choices"][0]["logprobs"]["content"]]
        assert streamed_lp == expected["logprobs"]["content"]
        ids_seen = {tc["id"] for ch in chunks for tc in ch["choices"][0]["delta"].get("tool_calls", []) if tc["id"]}
        assert len(ids_seen) == len(got["tool_calls"])  # one pinned id per call across all calls
        assert largest < 1024  # counters, a few held characters, an unfinished tool call at most

    check()


@pytest.mark.parametrize("name", TOKENIZERS)
def test_long_string_arguments_streamed_token_by_token_equal_the_canonical_one_shot(
        name: str, tokenizer: Callable[[str], Any]) -> None:
    """Inside a tool call's string argument most steps take the plain-characters fast path; any
    text (escapes, control characters, non-ASCII written raw or as \\u escapes), cut into 1–3 token
    chunks, must still stream exactly the one-shot derender's canonical arguments."""
    tok = tokenizer(name)
    prompt = tok._tokenizer.encode("<|im_start|>user\nplan?<|im_end|>\n<|im_start|>assistant\n",
                                   add_special_tokens=False).ids
    request = ChatCompletionRequest.model_validate({"messages": [{"role": "user", "content": "plan?"}],
                                                    "tools": TOOLS, "stream": True})

    def derenderer() -> Any:
        return chat_derenderer(request, prompt, request_id="chatcmpl-a", created=0, model="m", tokenizer=tok,
                               tool_parser="hermes", reasoning_parser="qwen3", enable_auto_tool_choice=True)

    @settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(notes=st.text(max_size=80), ascii_only=st.booleans(), sizes=st.lists(st.integers(1, 3), min_size=1))
    def check(notes: str, ascii_only: bool, sizes: list[int]) -> None:
        args = {"notes": notes, "n": 1}
        text = ("<think>\nok\n</think>\n\n<tool_call>\n"
                + json.dumps({"name": "plan_day", "arguments": args}, ensure_ascii=ascii_only) + "\n</tool_call>")
        ids = [*tok._tokenizer.encode(text, add_special_tokens=False).ids, tok.eos_token_id]
        whole = chat_response(derenderer(), GenerateResponse(request_id="chatcmpl-a", choices=[
            GenerateChoice(index=0, finish_reason="stop", token_ids=ids)]))
        call = whole["choices"][0]["message"]["tool_calls"][0]["function"]
        decoded = tok._tokenizer.decode(ids[:-1])  # (a tokenizer's normalizer may change raw text)
        block = decoded[decoded.index("<tool_call>\n") + 12:decoded.rindex("\n</tool_call>")]
        assert call["arguments"] == json.dumps(json.loads(block)["arguments"], ensure_ascii=False)
        d, k, pushes = derenderer(), 0, 0
        chunks: list[dict[str, Any]] = []
        while k < len(ids):
            n = sizes[pushes % len(sizes)]
            last = k + n >= len(ids)
            step = d.push(0, ids[k:k + n], finish_reason="stop" if last else None)
            if step.chunk is not None:
                chunks.append(step.chunk)
            k, pushes = k + n, pushes + 1
        got = assemble_message(chunks)
        assert [(c["name"], c["arguments"]) for c in got["tool_calls"]] == [(call["name"], call["arguments"])]

    check()
