"""Issue 20 item 1: with the qwen3 reasoning parser, ``<tool_call>`` ends reasoning implicitly,
whatever follows it (vLLM 0.32's qwen3 grammar: ``(REASONING, "<tool_call>")`` → a tool call).

A Qwen3 that answers with a tool call directly (or a Qwen3-Instruct model) writes no think tags:
``<tool_call>\\n{"name": ...}</tool_call><|im_end|>`` is one call and ``content: null``, as vLLM 0.32
answers, not all reasoning. Checked through the chat derenderer with hermes + qwen3 (and the other
``tool_choice`` forms), one-shot and streamed at every chunk size with the state going through
JSON between pushes.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import orjson
import pytest

from engine.protocol import GenerateChoice, GenerateResponse
from session.derender import ChatDerenderer, assemble_message, chat_derenderer, chat_response
from session.protocol.openai import ChatCompletionRequest

WEATHER = {"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}}
TIME = {"type": "function", "function": {"name": "get_time", "parameters": {"type": "object"}}}


def call(name: str, arguments: dict[str, Any], *, ascii_only: bool = False) -> str:
    return "<tool_call>\n" + json.dumps({"name": name, "arguments": arguments}, ensure_ascii=ascii_only) + "\n</tool_call>"


PARIS = call("get_weather", {"city": "Paris"})
UTC = call("get_time", {"tz": "UTC"})
TOKYO = call("get_weather", {"city": "東京"})
PARIS_ARGS = ("get_weather", '{"city": "Paris"}')


@pytest.fixture(scope="module")
def tok(tokenizer: Callable[[str], Any]) -> Any:
    return tokenizer("qwen3")


def _prompt(tok: Any, thinking: bool = True) -> list[int]:
    text = "<|im_start|>user\nWeather?<|im_end|>\n<|im_start|>assistant\n"
    if not thinking:
        text += "<think>\n\n</think>\n\n"  # what Qwen3's template writes for enable_thinking: false
    return list(tok._tokenizer.encode(text, add_special_tokens=False).ids)


def _derenderer(tok: Any, request: ChatCompletionRequest, prompt: list[int]) -> ChatDerenderer:
    return chat_derenderer(request, prompt, request_id="chatcmpl-q", created=0, model="m", tokenizer=tok,
                           tool_parser="hermes", reasoning_parser="qwen3", enable_auto_tool_choice=True)


def derender(tok: Any, text: str, *, eos: bool = True, finish: str = "stop", thinking: bool = True,
             **fields: Any) -> dict[str, Any]:
    """The one-shot choice, after checking that every streamed split (1–4 tokens per push, the
    state through JSON and a fresh derenderer each push) gives the same message and finish."""
    request = ChatCompletionRequest.model_validate(
        {"messages": [{"role": "user", "content": "Weather?"}], "tools": [WEATHER, TIME], **fields})
    prompt = _prompt(tok, thinking)
    ids = list(tok._tokenizer.encode(text, add_special_tokens=False).ids) + ([tok.eos_token_id] if eos else [])
    whole = chat_response(_derenderer(tok, request, prompt), GenerateResponse(request_id="chatcmpl-q", choices=[
        GenerateChoice(index=0, finish_reason=finish, token_ids=ids)]))["choices"][0]
    message = whole["message"]
    for size in (1, 2, 3, 4):
        chunks, snap = [], None
        for k in range(0, len(ids), size):
            d = _derenderer(tok, request, prompt)
            if snap is not None:
                d.restore(0, snap)
            step = d.push(0, ids[k:k + size], finish_reason=finish if k + size >= len(ids) else None)
            if step.chunk is not None:
                chunks.append(step.chunk)
            snap = orjson.loads(orjson.dumps(d.snapshot(0)))
        got = assemble_message(chunks)
        assert got["content"] == (message["content"] or ""), size
        assert got["reasoning"] == (message["reasoning"] or ""), size
        assert [(c["id"], c["name"], c["arguments"]) for c in got["tool_calls"]] == \
            [(c["id"], c["function"]["name"], c["function"]["arguments"]) for c in message.get("tool_calls", [])]
        assert got["finish_reason"] == whole["finish_reason"], size
    return whole  # type: ignore[no-any-return]


def _calls(choice: dict[str, Any]) -> list[tuple[str, str]]:
    return [(c["function"]["name"], c["function"]["arguments"]) for c in choice["message"].get("tool_calls", [])]


def test_a_tool_call_with_no_think_tags_is_a_call_and_content_is_null(tok: Any) -> None:
    choice = derender(tok, PARIS)
    assert (choice["message"]["content"], choice["message"]["reasoning"]) == (None, None)
    assert _calls(choice) == [PARIS_ARGS]
    assert choice["finish_reason"] == "tool_calls"


def test_content_before_the_call_stays_content_after_a_think_block(tok: Any) -> None:
    choice = derender(tok, "<think>\nThe user wants the weather.\n</think>\n\nLet me check." + PARIS)
    assert choice["message"]["reasoning"] == "\nThe user wants the weather.\n"
    assert choice["message"]["content"] == "\n\nLet me check."
    assert _calls(choice) == [PARIS_ARGS]


def test_without_think_tags_the_text_before_the_call_is_reasoning(tok: Any) -> None:
    """vLLM 0.32's grammar starts in REASONING: the text before ``<tool_call>`` is reasoning."""
    choice = derender(tok, "I should look it up.\n" + PARIS)
    assert (choice["message"]["reasoning"], choice["message"]["content"]) == ("I should look it up.\n", None)
    assert _calls(choice) == [PARIS_ARGS]


@pytest.mark.parametrize("count", [2, 3])
def test_two_and_three_calls_without_think_tags(tok: Any, count: int) -> None:
    blocks = [PARIS, UTC, TOKYO][:count]
    choice = derender(tok, "\n".join(blocks))
    assert choice["message"]["content"] is None and choice["message"]["reasoning"] is None
    assert _calls(choice) == [PARIS_ARGS, ("get_time", '{"tz": "UTC"}'), ("get_weather", '{"city": "東京"}')][:count]
    assert len({c["id"] for c in choice["message"]["tool_calls"]}) == count
    assert choice["finish_reason"] == "tool_calls"


def test_unicode_and_escaped_arguments_are_canonical(tok: Any) -> None:
    arguments = {"city": "東京 🌧️", "note": 'a "quoted" word\\path\tand é', "n": [1, 2.5, None]}
    for ascii_only in (False, True):
        choice = derender(tok, call("get_weather", arguments, ascii_only=ascii_only))
        assert _calls(choice) == [("get_weather", json.dumps(arguments, ensure_ascii=False))]
        assert choice["message"]["content"] is None


def test_trailing_text_after_the_call_is_dropped(tok: Any) -> None:
    """As hermes does after ``</think>`` too: text after the last block is not content."""
    choice = derender(tok, PARIS + "\nI will wait for the result.")
    assert (choice["message"]["content"], choice["message"]["reasoning"]) == (None, None)
    assert _calls(choice) == [PARIS_ARGS]


def test_length_after_a_complete_call_keeps_the_call_and_says_length(tok: Any) -> None:
    choice = derender(tok, PARIS, eos=False, finish="length")
    assert _calls(choice) == [PARIS_ARGS]
    assert choice["message"]["content"] is None
    assert choice["finish_reason"] == "length"


def test_a_call_inside_an_unclosed_think_block_ends_the_reasoning(tok: Any) -> None:
    choice = derender(tok, "<think>\nNeed the weather.\n" + PARIS)
    assert choice["message"]["reasoning"] == "\nNeed the weather.\n"
    assert _calls(choice) == [PARIS_ARGS]


def test_qwen35_xml_calls_end_the_reasoning_too(tok: Any) -> None:
    """Any format after ``<tool_call>``: Qwen3.5's XML call is content (hermes, which reads JSON,
    then returns it as content, as vLLM's hermes parser does)."""
    xml = "<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n</function>\n</tool_call>"
    choice = derender(tok, "Let me see.\n" + xml)
    assert (choice["message"]["reasoning"], choice["message"]["content"]) == ("Let me see.\n", xml)
    assert _calls(choice) == []


def test_tool_choice_none_keeps_the_call_text_as_content(tok: Any) -> None:
    choice = derender(tok, PARIS, tool_choice="none")
    assert (choice["message"]["reasoning"], choice["message"]["content"]) == (None, PARIS)
    assert choice["finish_reason"] == "stop"


def test_tool_choice_named_reads_the_content_after_the_reasoning(tok: Any) -> None:
    named = {"type": "function", "function": {"name": "get_weather"}}
    choice = derender(tok, '<think>\nok\n</think>\n\n{"city": "Paris"}', tool_choice=named)
    assert choice["message"]["reasoning"] == "\nok\n"
    assert _calls(choice) == [("get_weather", '\n\n{"city": "Paris"}')]  # a named call's arguments are raw
    assert choice["finish_reason"] == "stop"  # a forced function ends "stop" (OpenAI)
    no_thinking = derender(tok, '{"city": "Paris"}', tool_choice=named, thinking=False)
    assert _calls(no_thinking) == [PARIS_ARGS] and no_thinking["message"]["reasoning"] is None


def test_tool_choice_required_reads_the_list_after_the_reasoning(tok: Any) -> None:
    text = '<think>\nok\n</think>\n\n[{"name": "get_weather", "parameters": {"city": "Paris"}}]'
    choice = derender(tok, text, tool_choice="required")
    assert choice["message"]["reasoning"] == "\nok\n"
    assert _calls(choice) == [PARIS_ARGS]
    assert choice["message"]["content"] is None


def test_a_reasoning_only_answer_has_null_content(tok: Any) -> None:
    """Issue 20 item 4: a non-streaming answer with only reasoning says ``content: null`` (vLLM)."""
    for text, eos, finish in (("<think>\nStill thinking", False, "length"), ("<think>\nDone.\n</think>", True, "stop"),
                              ("Just thinking, no tags", True, "stop")):
        choice = derender(tok, text, eos=eos, finish=finish)
        assert choice["message"]["content"] is None
        assert choice["message"]["reasoning"]
