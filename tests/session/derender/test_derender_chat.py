"""Chat derender behaviour: vLLM 0.32's shapes, tool calls, reasoning, stop strings, special tokens,
logprobs and usage, through the incremental derenderer the pipelines use."""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pytest

from engine.protocol import GenerateChoice, GenerateResponse, TokenLogprob, TopLogprob
from session.derender import ChatDerenderer, assemble_message, chat_derenderer, chat_response
from session.errors import DerenderError
from session.protocol.openai import ChatCompletionRequest
from session.protocol.openai_responses import ChatCompletionResponse, ChatCompletionStreamResponse

SAMPLES = json.loads((Path(__file__).parents[2] / "data" / "vllm" / "derender_samples.json").read_text())
WEATHER = {"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}}
TIME = {"type": "function", "function": {"name": "get_time", "parameters": {"type": "object"}}}
CALL = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>'
CALL2 = '<tool_call>\n{"name": "get_time", "arguments": {"tz": "UTC"}}\n</tool_call>'
TOOL_ID = re.compile(r"^chatcmpl-tool-[0-9a-f]{16}$")


@pytest.fixture(scope="module")
def tok(tokenizer: Callable[[str], Any]) -> Any:
    return tokenizer("qwen3")


def _req(**fields: Any) -> ChatCompletionRequest:
    return ChatCompletionRequest.model_validate({"messages": [{"role": "user", "content": "hi"}], **fields})


def _prompt(tok: Any) -> list[int]:
    return list(tok._tokenizer.encode("<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n",
                                      add_special_tokens=False).ids)


def _ids(tok: Any, text: str, eos: bool = True) -> list[int]:
    ids = tok._tokenizer.encode(text, add_special_tokens=False).ids
    return [*ids, tok.eos_token_id] if eos else ids


def _derenderer(tok: Any, req: ChatCompletionRequest | None, *, parsers: bool = True, reasoning: bool = False,
                auto: bool = True, **kw: Any) -> ChatDerenderer:
    """hermes (with auto tool choice) unless ``parsers`` is false; qwen3 reasoning with ``reasoning``."""
    return chat_derenderer(req, _prompt(tok), request_id="chatcmpl-t", created=123, model="m", tokenizer=tok,
                           tool_parser="hermes" if parsers else None, reasoning_parser="qwen3" if reasoning else None,
                           enable_auto_tool_choice=auto, **kw)


def _stream(d: ChatDerenderer, ids: Sequence[int], size: int = 1, finish: str = "stop",
            stop_reason: int | str | None = None) -> list[dict[str, Any]]:
    chunks = []
    for k in range(0, len(ids), size):
        last = k + size >= len(ids)
        step = d.push(0, ids[k:k + size], finish_reason=finish if last else None,
                      stop_reason=stop_reason if last else None)
        if step.chunk is not None:
            chunks.append(step.chunk)
        if step.finished:
            break
    return chunks


def _whole(d: ChatDerenderer, ids: list[int], finish: str = "stop", stop_reason: int | str | None = None,
           logprobs: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    choice: dict[str, Any] = {"index": 0, "finish_reason": finish, "stop_reason": stop_reason, "token_ids": ids}
    if logprobs is not None:
        choice["logprobs"] = {"content": logprobs}
    return chat_response(d, GenerateResponse.model_validate({"request_id": "chatcmpl-t", "choices": [choice]}))


def _keys(obj: Any) -> Any:
    """The key layout of a JSON value (dict keys in order, recursively; first list item only)."""
    if isinstance(obj, dict):
        return [(k, _keys(v)) for k, v in obj.items()]
    if isinstance(obj, list):
        return [_keys(obj[0])] if obj else []
    return None


# --- shapes --------------------------------------------------------------------------------------------


def test_a_plain_response_has_vllms_key_layout(tok: Any) -> None:
    out = _whole(_derenderer(tok, None, parsers=False), _ids(tok, "The answer is 4."))
    vllm = SAMPLES["chat_derender"]["response"]
    assert _keys(out) == _keys(vllm)
    assert out["choices"][0]["message"]["content"] == "The answer is 4."
    assert out["usage"] == {"prompt_tokens": len(_prompt(tok)), "total_tokens": len(_prompt(tok)) + 7,
                            "completion_tokens": 7, "prompt_tokens_details": None, "completion_tokens_details": None}
    ChatCompletionResponse.model_validate(out)


def test_tool_call_responses_and_stream_chunks_have_vllms_key_layout(tok: Any) -> None:
    req = _req(tools=[WEATHER])
    out = _whole(_derenderer(tok, req), _ids(tok, CALL))
    vllm = SAMPLES["chat_derender_toolcall"]["response"]
    assert _keys(out) == _keys(vllm)
    chunks = _stream(_derenderer(tok, req), _ids(tok, "Sure." + CALL))
    vllm_chunks = SAMPLES["chat_derender_stream_toolcall_chunks"]
    assert _keys(chunks[0]) == _keys(vllm_chunks[0])  # role + content
    with_call = next(c for c in chunks if c["choices"][0]["delta"].get("tool_calls"))
    assert _keys(with_call) == _keys(vllm_chunks[2])
    for chunk in chunks:
        ChatCompletionStreamResponse.model_validate(chunk)


def test_usage_chunk_has_vllms_key_layout(tok: Any) -> None:
    d = _derenderer(tok, None, parsers=False)
    _stream(d, _ids(tok, "hi there"))
    chunk = d.usage_chunk()
    assert _keys(chunk) == _keys(SAMPLES["chat_derender_stream_usage_chunk"])
    assert chunk["choices"] == []
    assert chunk["usage"]["completion_tokens"] == len(_ids(tok, "hi there"))


# --- tool calls and reasoning --------------------------------------------------------------------------


def test_streamed_tool_call_pins_its_id_and_first_delta_carries_id_type_name_and_arguments(tok: Any) -> None:
    chunks = _stream(_derenderer(tok, _req(tools=[WEATHER])), _ids(tok, "Sure." + CALL))
    deltas = [tc for c in chunks for tc in c["choices"][0]["delta"].get("tool_calls", [])]
    first, rest = deltas[0], deltas[1:]
    assert TOOL_ID.match(first["id"])
    assert (first["type"], first["index"], first["function"]["name"]) == ("function", 0, "get_weather")
    # a string, never null: "" or the argument text that came in the same step
    assert '{"city": "Paris"}'.startswith(first["function"]["arguments"])
    assert all(d["id"] is None and d["function"]["name"] is None for d in rest)
    assert "".join(d["function"]["arguments"] for d in deltas) == '{"city": "Paris"}'
    assert chunks[-1]["choices"][0]["finish_reason"] == "tool_calls"
    assert chunks[0]["choices"][0]["delta"] == {"role": "assistant", "content": "Sure", "reasoning": None}


def test_a_tool_call_response_has_null_content_and_finish_reason_tool_calls(tok: Any) -> None:
    out = _whole(_derenderer(tok, _req(tools=[WEATHER])), _ids(tok, CALL))
    choice = out["choices"][0]
    assert choice["message"]["content"] is None
    assert choice["finish_reason"] == "tool_calls"
    (call,) = choice["message"]["tool_calls"]
    assert TOOL_ID.match(call["id"])
    assert call["function"] == {"name": "get_weather", "arguments": '{"city": "Paris"}'}


def test_reasoning_is_split_from_content_and_include_reasoning_false_drops_it(tok: Any) -> None:
    text = "<think>\nweighing 🤔 options\n</think>\n\nIt is sunny."
    out = _whole(_derenderer(tok, _req(), reasoning=True), _ids(tok, text))
    assert out["choices"][0]["message"]["reasoning"] == "\nweighing 🤔 options\n"
    assert out["choices"][0]["message"]["content"] == "\n\nIt is sunny."
    hidden = _whole(_derenderer(tok, _req(include_reasoning=False), reasoning=True), _ids(tok, text))
    assert hidden["choices"][0]["message"]["reasoning"] is None
    assert hidden["choices"][0]["message"]["content"] == "\n\nIt is sunny."


def test_parallel_tool_calls_false_keeps_only_the_first_call(tok: Any) -> None:
    ids = _ids(tok, CALL + "\n" + CALL2)
    both = _whole(_derenderer(tok, _req(tools=[WEATHER, TIME])), ids)
    assert [c["function"]["name"] for c in both["choices"][0]["message"]["tool_calls"]] == ["get_weather", "get_time"]
    one = _whole(_derenderer(tok, _req(tools=[WEATHER, TIME], parallel_tool_calls=False)), ids)
    assert [c["function"]["name"] for c in one["choices"][0]["message"]["tool_calls"]] == ["get_weather"]
    chunks = _stream(_derenderer(tok, _req(tools=[WEATHER, TIME], parallel_tool_calls=False)), ids)
    assert [c["name"] for c in assemble_message(chunks)["tool_calls"]] == ["get_weather"]


def test_a_named_tool_choice_makes_the_output_its_arguments_and_finishes_with_stop(tok: Any) -> None:
    req = _req(tools=[WEATHER], tool_choice={"type": "function", "function": {"name": "get_weather"}})
    out = _whole(_derenderer(tok, req), _ids(tok, '{"city": "Oslo"}'))
    choice = out["choices"][0]
    assert choice["message"]["tool_calls"][0]["function"] == {"name": "get_weather", "arguments": '{"city": "Oslo"}'}
    assert choice["finish_reason"] == "stop"


def test_required_tool_choice_reads_a_json_list_of_calls(tok: Any) -> None:
    req = _req(tools=[WEATHER, TIME], tool_choice="required")
    text = '[{"name": "get_weather", "parameters": {"city": "Oslo"}}, {"name": "get_time", "parameters": {}}]'
    out = _whole(_derenderer(tok, req), _ids(tok, text))
    calls = out["choices"][0]["message"]["tool_calls"]
    assert [(c["function"]["name"], json.loads(c["function"]["arguments"])) for c in calls] == [
        ("get_weather", {"city": "Oslo"}), ("get_time", {})]
    assert out["choices"][0]["finish_reason"] == "tool_calls"


def test_tool_choice_none_or_no_auto_tool_choice_leaves_tool_markup_in_content(tok: Any) -> None:
    for d in (_derenderer(tok, _req(tools=[WEATHER], tool_choice="none")),
              _derenderer(tok, _req(tools=[WEATHER]), auto=False)):
        out = _whole(d, _ids(tok, CALL))
        assert out["choices"][0]["message"]["content"] == CALL
        assert "tool_calls" not in out["choices"][0]["message"]


def test_a_request_without_chat_request_is_refused_when_parsers_are_configured(tok: Any) -> None:
    with pytest.raises(DerenderError) as info:
        _derenderer(tok, None, reasoning=True)
    assert info.value.message == SAMPLES["chat_derender_stream_requires_chat_request"]["response"]["error"]["message"]


def test_malformed_tool_json_degrades_to_content_without_raising(tok: Any) -> None:
    text = '<tool_call>\n{"name": "get_weather", "arguments": {"city": \n</tool_call>'
    out = _whole(_derenderer(tok, _req(tools=[WEATHER])), _ids(tok, text))
    assert out["choices"][0]["finish_reason"] in ("stop", "tool_calls")
    streamed = assemble_message(_stream(_derenderer(tok, _req(tools=[WEATHER])), _ids(tok, text)))
    assert streamed["content"] == (out["choices"][0]["message"]["content"] or "")


# --- stop strings, special tokens, usage ---------------------------------------------------------------


def test_a_stop_string_ends_the_stream_asks_to_stop_the_engine_and_counts_tokens_up_to_it(tok: Any) -> None:
    d = _derenderer(tok, _req(stop=["STOP"]), parsers=False)
    ids = _ids(tok, "one two STOP three four five", eos=False)
    steps = []
    for i in ids:
        steps.append(d.push(0, [i]))
        if steps[-1].finished:
            break
    last = steps[-1]
    assert last.stop_engine and last.finished
    assert last.chunk is not None
    assert (last.chunk["choices"][0]["finish_reason"], last.chunk["choices"][0]["stop_reason"]) == ("stop", "STOP")
    text = "".join(s.chunk["choices"][0]["delta"]["content"] or "" for s in steps if s.chunk)
    assert text == "one two "
    whole = _whole(_derenderer(tok, _req(stop=["STOP"]), parsers=False), ids, finish="length")
    assert whole["choices"][0]["message"]["content"] == "one two "
    assert whole["usage"]["completion_tokens"] == d.completion_tokens == len(steps) < len(ids)
    with pytest.raises(DerenderError, match="already finished"):
        d.push(0, ids[len(steps):])


def test_include_stop_str_in_output_keeps_the_stop_string(tok: Any) -> None:
    out = _whole(_derenderer(tok, _req(stop=["\n\n"], include_stop_str_in_output=True), parsers=False),
                 _ids(tok, "para one\n\npara two"))
    assert out["choices"][0]["message"]["content"] == "para one\n\n"
    assert out["choices"][0]["stop_reason"] == "\n\n"


@pytest.mark.parametrize("size", [1, 2, 100])
def test_the_eos_token_is_counted_but_never_shown_even_with_special_tokens_kept(tok: Any, size: int) -> None:
    req = _req(skip_special_tokens=False)
    ids = _ids(tok, "Done.")
    chunks = _stream(_derenderer(tok, req, parsers=False), ids, size=size)
    assert assemble_message(chunks)["content"] == "Done."
    # the finish may also come alone, after the eos arrived in an earlier chunk
    d = _derenderer(tok, req, parsers=False)
    text = "".join((s.chunk or {"choices": [{"delta": {}}]})["choices"][0]["delta"].get("content") or ""
                   for s in [d.push(0, ids), d.push(0, [], finish_reason="stop")])
    assert text == "Done."
    assert d.completion_tokens == len(ids)


def test_a_special_token_cut_by_length_is_shown_when_special_tokens_are_kept(tok: Any) -> None:
    ids = _ids(tok, "Done.")
    out = _whole(_derenderer(tok, _req(skip_special_tokens=False), parsers=False), ids, finish="length")
    assert out["choices"][0]["message"]["content"] == "Done.<|im_end|>"


def test_continuous_usage_stats_put_running_usage_on_every_chunk(tok: Any) -> None:
    req = _req(stream=True, stream_options={"include_usage": True, "continuous_usage_stats": True})
    chunks = _stream(_derenderer(tok, req, parsers=False), _ids(tok, "a b c"))
    assert [c["usage"]["completion_tokens"] for c in chunks] == list(range(1, len(chunks) + 1))


def test_n_choices_are_derendered_independently(tok: Any) -> None:
    d = _derenderer(tok, _req(n=2), parsers=False)
    resp = GenerateResponse(request_id="chatcmpl-t", choices=[
        GenerateChoice(index=0, finish_reason="stop", token_ids=_ids(tok, "first")),
        GenerateChoice(index=1, finish_reason="length", token_ids=_ids(tok, "second", eos=False))])
    out = chat_response(d, resp)
    assert [c["message"]["content"] for c in out["choices"]] == ["first", "second"]
    assert out["usage"]["completion_tokens"] == len(_ids(tok, "first")) + len(_ids(tok, "second", eos=False))


# --- logprobs ------------------------------------------------------------------------------------------


def test_logprobs_have_openais_chat_shape_and_bytes_rebuild_split_characters(tok: Any) -> None:
    ids = _ids(tok, "ok 🦩", eos=False)
    entries = [{"token_id": i, "logprob": -float(k), "rank": 1,
                "top_logprobs": [{"token_id": i, "logprob": -float(k), "rank": 1}]} for k, i in enumerate(ids)]
    out = _whole(_derenderer(tok, _req(logprobs=True, top_logprobs=1), parsers=False), ids, finish="length",
                 logprobs=entries)
    content = out["choices"][0]["logprobs"]["content"]
    assert [set(e) for e in content] == [{"token", "logprob", "bytes", "top_logprobs"}] * len(ids)
    assert bytes(b for e in content for b in e["bytes"]).decode() == "ok 🦩"
    assert any(e["token"] == "\ufffd" for e in content)  # a token inside the flamingo's 4 bytes
    assert content[0]["top_logprobs"] == [{"token": "ok", "logprob": -0.0, "bytes": list(b"ok")}]


def test_logprobs_are_streamed_with_the_tokens_that_produced_them(tok: Any) -> None:
    d = _derenderer(tok, _req(logprobs=True), parsers=False)
    ids = _ids(tok, "a b", eos=False)
    step = d.push(0, ids[:1], [TokenLogprob(token_id=ids[0], logprob=-1.0, top_logprobs=[TopLogprob(token_id=1, logprob=-2)])])
    assert step.chunk is not None
    assert step.chunk["choices"][0]["logprobs"]["content"][0]["token"] == "a"
    assert step.chunk["choices"][0]["logprobs"]["content"][0]["top_logprobs"] == []  # top_logprobs 0 asked


# --- empty content (issue 20 item 4) ----------------------------------------------------------------


@pytest.mark.parametrize("tools", [False, True])
def test_a_reasoning_only_answer_has_null_content_as_vllm(tok: Any, tools: bool) -> None:
    req = _req(tools=[WEATHER]) if tools else _req()
    for ids, finish in ((_ids(tok, "<think>\nLet me think.\n</think>"), "stop"),
                        (_ids(tok, "Still thinking", eos=False), "length")):
        out = _whole(_derenderer(tok, req, parsers=tools, reasoning=True), ids, finish)
        message = out["choices"][0]["message"]
        assert message["content"] is None
        assert message["reasoning"] in ("\nLet me think.\n", "Still thinking")
        chunks = _stream(_derenderer(tok, req, parsers=tools, reasoning=True), ids, finish=finish)
        assert all(c["choices"][0]["delta"]["content"] is None for c in chunks)


def test_without_a_reasoning_parser_an_empty_answer_is_an_empty_string(tok: Any) -> None:
    out = _whole(_derenderer(tok, None, parsers=False), [tok.eos_token_id])
    assert out["choices"][0]["message"]["content"] == ""
