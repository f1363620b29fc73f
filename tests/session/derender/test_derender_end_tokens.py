"""Issue 24: a stream that ends with ``finish_reason: "stop"`` loses no real token.

Only an end id is ever dropped at the end of a stream: an eos, a ``stop_token_ids`` id or a special
token (the ids an engine with a detokenizer does not put in the text). An engine that ends a "stop"
stream without its end token (engines other than vLLM, vLLM with some stop settings) keeps every
token of the text, and streaming and non-streaming agree, whatever the split.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from engine.protocol import GenerateChoice, GenerateResponse
from session.derender import ChatDerenderer, assemble_message, chat_derenderer, chat_response
from session.detokenizer import token_table
from session.protocol.openai import ChatCompletionRequest
from tests.conftest import TOKENIZERS

WEATHER = {"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}}
LLAMA_SURE_GET = [40914, 25, 510, 456]  # "Sure", ":", " [", "get" (Llama 3.1)
PYTHONIC_CALL = '[get_weather(city="Paris")]'
WEATHER_PARIS = ("get_weather", '{"city": "Paris"}')

# (tool parser, reasoning parser): every parser, alone and chained
PARSERS: list[tuple[str | None, str | None]] = [
    (None, None), ("hermes", None), ("llama3_json", None), ("mistral", None), ("pythonic", None),
    ("deepseek_v3", None), (None, "qwen3"), (None, "deepseek_r1"), ("hermes", "qwen3")]
# Each tool format's call of get_weather(city="Paris"), and text around it.
CALL_TEXT = {
    "hermes": '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>',
    "llama3_json": '{"name": "get_weather", "parameters": {"city": "Paris"}}',
    "mistral": '[TOOL_CALLS][{"name": "get_weather", "arguments": {"city": "Paris"}}]',
    "pythonic": PYTHONIC_CALL,
    "deepseek_v3": ("<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>get_weather<｜tool▁sep｜>"
                    '{"city": "Paris"}<｜tool▁call▁end｜><｜tool▁calls▁end｜>'),
}
PIECES = ["Sure: [get", " the weather", " 巴黎 🌤️", "<think>\nhmm 🤔\n</think>\n\n", "</think>", " café",
          "\n", " x)", "{\"a\": 1}", "]", " (ok)"]


def _request(tool: str | None, stop_ids: Sequence[int] = ()) -> ChatCompletionRequest:
    body: dict[str, Any] = {"messages": [{"role": "user", "content": "weather?"}]}
    if tool is not None:
        body["tools"] = [WEATHER]
    if stop_ids:
        body["stop_token_ids"] = list(stop_ids)
    return ChatCompletionRequest.model_validate(body)


def _derenderer(tok: Any, parsers: tuple[str | None, str | None], request: ChatCompletionRequest) -> ChatDerenderer:
    return chat_derenderer(request, [1, 2, 3], request_id="chatcmpl-e", created=0, model="m", tokenizer=tok,
                           tool_parser=parsers[0], reasoning_parser=parsers[1], enable_auto_tool_choice=True)


def _view(message: dict[str, Any]) -> tuple[str, str, list[tuple[str, str]]]:
    return (message["content"] or "", message["reasoning"] or "",
            [(c["function"]["name"], c["function"]["arguments"]) for c in message.get("tool_calls", [])])


def one_shot(tok: Any, parsers: tuple[str | None, str | None], request: ChatCompletionRequest, ids: list[int],
             finish: str) -> dict[str, Any]:
    out = chat_response(_derenderer(tok, parsers, request), GenerateResponse(request_id="chatcmpl-e", choices=[
        GenerateChoice(index=0, finish_reason=finish, token_ids=ids)]))
    return out["choices"][0]  # type: ignore[no-any-return]


def streamed(tok: Any, parsers: tuple[str | None, str | None], request: ChatCompletionRequest, ids: list[int],
             finish: str, sizes: Sequence[int], finish_alone: bool) -> dict[str, Any]:
    """Pushed in chunks of ``sizes`` (0 included), the choice's state going through JSON and a
    fresh derenderer between pushes, as a client-carried state does."""
    cuts, k = [], 0
    for n in sizes or [len(ids)]:
        if k >= len(ids):
            break
        cuts.append(ids[k:k + n])
        k += n
    if k < len(ids):
        cuts.append(ids[k:])
    if finish_alone or not cuts:
        cuts.append([])
    chunks, snap = [], None
    for c, piece in enumerate(cuts):
        d = _derenderer(tok, parsers, request)
        if snap is not None:
            d.restore(0, snap)
        step = d.push(0, piece, finish_reason=finish if c == len(cuts) - 1 else None)
        if step.chunk is not None:
            chunks.append(step.chunk)
        snap = orjson.loads(orjson.dumps(d.snapshot(0)))
    return assemble_message(chunks)


def _agree(streamed_msg: dict[str, Any], whole: dict[str, Any]) -> None:
    assert (streamed_msg["content"], streamed_msg["reasoning"],
            [(c["name"], c["arguments"]) for c in streamed_msg["tool_calls"]]) == _view(whole["message"])
    assert streamed_msg["finish_reason"] == whole["finish_reason"]


# --- the cases ---------------------------------------------------------------------------


@pytest.mark.parametrize("finish", ["stop", "length"])
def test_the_last_real_token_of_a_stop_stream_without_an_end_token_is_kept(
        tokenizer: Callable[[str], Any], finish: str) -> None:
    tok = tokenizer("llama3.1")
    request = _request(None)
    whole = one_shot(tok, (None, None), request, LLAMA_SURE_GET, finish)
    assert whole["message"]["content"] == "Sure: [get"
    assert whole["finish_reason"] == finish
    for size in (1, 2, 3, 4):
        _agree(streamed(tok, (None, None), request, LLAMA_SURE_GET, finish, [size] * 4, False), whole)
        _agree(streamed(tok, (None, None), request, LLAMA_SURE_GET, finish, [size] * 4, True), whole)


@pytest.mark.parametrize("end", ["eos", "eom", "stop_token_id"])
def test_an_end_token_is_still_dropped_when_the_stream_stops_on_it(tokenizer: Callable[[str], Any], end: str) -> None:
    tok = tokenizer("llama3.1")
    end_id = {"eos": tok.eos_token_id, "eom": tok.convert_tokens_to_ids("<|eom_id|>"),
              "stop_token_id": tok.encode(" Paris", add_special_tokens=False)[0]}[end]
    request = _request(None, [end_id] if end == "stop_token_id" else ())
    ids = [*LLAMA_SURE_GET, end_id]
    # (skip_special_tokens off, so a special end token would show if it were decoded)
    request = request.model_copy(update={"skip_special_tokens": False})
    whole = one_shot(tok, (None, None), request, ids, "stop")
    assert whole["message"]["content"] == "Sure: [get"
    assert whole["finish_reason"] == "stop"
    for size in (1, 2, 5):
        _agree(streamed(tok, (None, None), request, ids, "stop", [size] * 5, size == 5), whole)
    # the same id finishing with "length" (or in the middle) is text
    kept = one_shot(tok, (None, None), request, ids, "length")["message"]["content"]
    assert kept == tok.decode(ids, skip_special_tokens=False) and kept != "Sure: [get"


@pytest.mark.parametrize("eot", [False, True])
def test_a_pythonic_call_ending_in_stop_without_eot_is_a_call(tokenizer: Callable[[str], Any], eot: bool) -> None:
    tok = tokenizer("llama3.1")
    ids = tok.encode(PYTHONIC_CALL, add_special_tokens=False) + ([tok.eos_token_id] if eot else [])
    request = _request("pythonic")
    whole = one_shot(tok, ("pythonic", None), request, ids, "stop")
    assert whole["message"]["content"] is None
    assert _view(whole["message"])[2] == [WEATHER_PARIS]
    assert whole["finish_reason"] == "tool_calls"
    for size in (1, 2, 3):
        _agree(streamed(tok, ("pythonic", None), request, ids, "stop", [size] * len(ids), eot), whole)


@pytest.mark.parametrize("end", ["<|eom_id|>", "<|eot_id|>", None])
def test_a_python_tag_before_a_pythonic_list_is_a_call(tokenizer: Callable[[str], Any], end: str | None) -> None:
    """A documented difference (docs/parsers.md): vLLM 0.32 keeps special tokens in the text it
    parses and returns ``<|python_tag|>[get_weather(...)]`` as content; tokenwire decodes without
    special tokens (the request's ``skip_special_tokens``), so the pythonic parser sees the list
    and makes the call."""
    tok = tokenizer("llama3.1")
    ids = [tok.convert_tokens_to_ids("<|python_tag|>"), *tok.encode(PYTHONIC_CALL, add_special_tokens=False)]
    if end is not None:
        ids.append(tok.convert_tokens_to_ids(end))
    request = _request("pythonic")
    whole = one_shot(tok, ("pythonic", None), request, ids, "stop")
    assert (whole["message"]["content"], _view(whole["message"])[2]) == (None, [WEATHER_PARIS])
    assert whole["finish_reason"] == "tool_calls"
    _agree(streamed(tok, ("pythonic", None), request, ids, "stop", [1] * len(ids), False), whole)


# --- property: nothing of the text is lost, for every tokenizer and parser -----------------------


@st.composite
def texts(draw: st.DrawFn, tool: str | None) -> str:
    parts = draw(st.lists(st.sampled_from(PIECES), max_size=3))
    if tool is not None and draw(st.booleans()):
        parts.insert(draw(st.integers(0, len(parts))) if draw(st.booleans()) else 0, CALL_TEXT[tool])
    if draw(st.booleans()):
        parts.append(draw(st.text(max_size=12)))
    return "".join(parts)


@pytest.mark.parametrize("parsers", PARSERS, ids=[f"{t}+{r}" for t, r in PARSERS])
@pytest.mark.parametrize("name", TOKENIZERS)
def test_no_text_is_lost_with_or_without_an_end_token_and_streaming_agrees(
        name: str, parsers: tuple[str | None, str | None], tokenizer: Callable[[str], Any]) -> None:
    """For any text: its ids finishing "stop" without an end token, its ids plus an end token
    (eos, or a ``stop_token_ids`` id) finishing "stop", and its ids finishing "length" derender to
    the same content, reasoning and tool calls; without parsers that is the tokenizer's decode of
    the text's ids. Each streamed (any split, state through JSON) equals its one-shot answer."""
    tok = tokenizer(name)
    table = token_table(tok)
    stop_id = max(table.special_ids - table.eos_ids)  # an end id the request names
    tool = parsers[0]

    @settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(text=texts(tool), sizes=st.lists(st.integers(0, 5), max_size=12), finish_alone=st.booleans(),
           end=st.sampled_from(["eos", "stop_token_ids"]))
    def check(text: str, sizes: list[int], finish_alone: bool, end: str) -> None:
        ids = tok._tokenizer.encode(text, add_special_tokens=False).ids
        if not ids:
            return
        end_id = tok.eos_token_id if end == "eos" else stop_id
        request = _request(tool, [stop_id] if end == "stop_token_ids" else ())
        length = one_shot(tok, parsers, request, ids, "length")
        if ids[-1] in table.special_ids | {stop_id, tok.eos_token_id}:
            # the text itself ends with an end id: a "stop" on it drops it, as on an appended one
            reference = _view(one_shot(tok, parsers, request, ids[:-1], "length")["message"]) if ids[:-1] else None
        else:
            reference = _view(length["message"])
        if parsers == (None, None):
            assert length["message"]["content"] == tok.decode(ids, skip_special_tokens=True)
        variants = [(ids, "stop"), ([*ids, end_id], "stop"), (ids, "length")]
        for variant, finish in variants:
            whole = one_shot(tok, parsers, request, variant, finish)
            if reference is not None and (variant, finish) != (ids, "length"):
                assert _view(whole["message"]) == reference, (text, variant, finish)
            _agree(streamed(tok, parsers, request, variant, finish, sizes, finish_alone), whole)

    check()

