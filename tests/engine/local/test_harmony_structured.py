"""gpt-oss structured outputs at render (session/render/harmony_structured.py): the
``structured_outputs`` field tokenwire writes for a gpt-oss request equals, key for key and the
``structural_tag`` string byte for byte, what vLLM 0.32's render server wrote for the same request
(``tests/data/vllm/harmony_structured/vllm.json``, recorded by scripts/record_harmony_structured.py
on tiny-gpt-oss with ``--tool-call-parser openai --reasoning-parser openai_gptoss``); and the tags
compile with xgrammar and accept what they promise (the ``analysis`` channel free, the ``final``
message constrained)."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from session.errors import RenderError
from session.protocol.openai import ChatCompletionRequest
from session.render.harmony import HarmonyRender
from session.render.renderer import Renderer
from tests.conftest import tokenizer_of

DATA = json.loads((Path(__file__).resolve().parents[2] / "data/vllm/harmony_structured/vllm.json")
                  .read_text(encoding="utf-8"))
CASES = DATA["cases"]


@pytest.fixture(scope="module")
def renderer() -> Renderer:
    tok = tokenizer_of("tiny-gpt-oss")
    return Renderer(tok, model_name="m", max_model_len=4096, tool_call_parser="openai",
                    enable_auto_tool_choice=True, harmony=HarmonyRender(tok, start_date="2025-08-05"))


def render(renderer: Renderer, request: dict[str, Any]) -> dict[str, Any] | None:
    req = ChatCompletionRequest.model_validate({**request, "model": "m"})
    return renderer.render_chat(req).sampling_params.structured_outputs


def test_the_recording_covers_the_cases() -> None:
    assert DATA["vllm_version"].startswith("0.32")
    assert len(CASES) >= 20
    assert sum(1 for c in CASES.values() if c["structured_outputs"] is not None) >= 15


@pytest.mark.parametrize("name", sorted(CASES))
def test_structured_outputs_equal_vllms(renderer: Renderer, name: str) -> None:
    case = CASES[name]
    if case["status"] != 200:
        with pytest.raises((ValidationError, RenderError)) as err:
            render(renderer, case["request"])
        assert case["error"].split(" (parameter=")[0] in str(err.value)
        return
    got = render(renderer, case["request"])
    want = case["structured_outputs"]
    if want is None:
        assert got is None
        return
    assert got is not None
    assert got["structural_tag"] == want["structural_tag"]  # the string itself, byte for byte
    assert got == want


def test_a_strict_tool_with_a_schema_the_engine_cannot_enforce_is_refused(renderer: Renderer) -> None:
    tool = {"type": "function", "function": {"name": "f", "strict": True, "parameters": {
        "type": "object", "properties": {"tags": {"type": "array", "uniqueItems": True}}}}}
    with pytest.raises(RenderError, match=r"tools\[0\]\.function\.parameters\.properties\.tags\.uniqueItems") as err:
        render(renderer, {"messages": [{"role": "user", "content": "x"}], "tools": [tool], "tool_choice": "required"})
    assert err.value.param == "tools[0].function.parameters"
    # not strict: its arguments are any JSON (vLLM), so the schema is not enforced and not refused
    loose = {"type": "function", "function": {**tool["function"], "strict": False}}
    so = render(renderer, {"messages": [{"role": "user", "content": "x"}], "tools": [loose], "tool_choice": "required"})
    assert so is not None and '"json_schema": true' in so["structural_tag"]


def _matcher(tag: str) -> Any:
    import xgrammar as xgr

    tok = tokenizer_of("tiny-gpt-oss")
    info = xgr.TokenizerInfo.from_huggingface(tok, vocab_size=201088)
    compiled = xgr.GrammarCompiler(info).compile_grammar(xgr.Grammar.from_structural_tag(tag))
    return xgr.GrammarMatcher(compiled, override_stop_tokens=[200002, 199999, 200012])


def test_the_schema_tag_leaves_analysis_free_and_constrains_final() -> None:
    pytest.importorskip("xgrammar")
    tag = CASES["json_schema"]["structured_outputs"]["structural_tag"]
    free = "<|channel|>analysis<|message|>anything {not json at all <|end|><|start|>assistant"
    good = '<|channel|>final <|constrain|>json<|message|>{"name": "Ada", "age": 36}'
    m = _matcher(tag)
    assert m.accept_string(free + good) and m.is_completed()
    for bad in ('<|channel|>final json<|message|>{"name": "Ada"}',  # age is required
                '<|channel|>final json<|message|>{"name": "Ada", "age": -1}',  # minimum 0
                "<|channel|>final<|message|>plain text",  # the final message must be JSON
                "<|channel|>commentary<|message|>x"):  # only analysis may come first
        m = _matcher(tag)
        assert not (m.accept_string(bad) and m.is_completed()), bad


def test_the_required_tag_forces_a_call_of_a_declared_tool() -> None:
    pytest.importorskip("xgrammar")
    tag = CASES["required"]["structured_outputs"]["structural_tag"]
    m = _matcher(tag)
    assert m.accept_string(' to=functions.add<|channel|>commentary <|constrain|>json<|message|>{"a": 1}')
    assert m.is_completed()
    m = _matcher(tag)
    assert not m.accept_string(" to=functions.other<|channel|>commentary json<|message|>{}")
    m = _matcher(tag)
    assert m.accept_string("<|channel|>final<|message|>") is False  # no plain answer


@pytest.mark.parametrize("name", sorted(n for n, c in CASES.items() if c["structured_outputs"]))
def test_the_compile_worker_bounds_every_recorded_tag(name: str) -> None:
    """The completion bound reads the grammar xgrammar prints for a structural tag (its TagDispatch
    rules span lines): vLLM's harmony tags need at most a few hundred bytes to complete."""
    xgr = pytest.importorskip("xgrammar")
    from engine.local.grammar_bound import completion_bound
    from engine.local.grammar_worker import bounded_whitespace

    tag = json.loads(CASES[name]["structured_outputs"]["structural_tag"])
    printed = str(xgr.Grammar.from_structural_tag(json.dumps(bounded_whitespace(tag))))
    assert "TagDispatch(" in printed
    bound = completion_bound(printed, lambda p: str(xgr.Grammar.from_regex(p)))
    longest = max(len(b) for b in re.findall(r'"begin": "((?:[^"\\]|\\.)*)"', json.dumps(tag)))
    assert longest < bound < 400


def test_the_bound_of_triggered_tags_counts_the_triggered_rule() -> None:
    xgr = pytest.importorskip("xgrammar")
    from engine.local.grammar_bound import completion_bound

    tag = {"type": "structural_tag", "format": {"type": "triggered_tags", "triggers": ["<t>"], "tags": [
        {"type": "tag", "begin": "<t>", "content": {"type": "const_string", "value": "x" * 300}, "end": "</t>"}]}}
    printed = str(xgr.Grammar.from_structural_tag(json.dumps(tag)))
    assert 300 < completion_bound(printed) < 320


def test_closing_opens_the_typed_final_message_first() -> None:
    from engine.local.structured_closing import tag_shape

    shape = tag_shape(json.loads(CASES["json_schema"]["structured_outputs"]["structural_tag"]))
    assert shape.ends == (b"<|end|>",)
    assert shape.begins[0] == b"<|channel|>final <|constrain|>json<|message|>"
    assert shape.begins[-1] == b"<|channel|>analysis<|message|>"
    assert set(shape.json_begins) == {b"<|channel|>final json<|message|>",
                                      b"<|channel|>final <|constrain|>json<|message|>"}
    tools = tag_shape(json.loads(CASES["auto_strict"]["structured_outputs"]["structural_tag"]))
    assert tools.begins[0] == b"<|channel|>final <|constrain|>json<|message|>"  # free text: an end closes it
    required = tag_shape(json.loads(CASES["required"]["structured_outputs"]["structural_tag"]))
    assert required.begins[0] == b" to=functions.get_weather<|channel|>commentary <|constrain|>json<|message|>"


def test_closing_follows_the_json_content_incrementally_as_from_scratch() -> None:
    """What closing reads of a structural tag's text (the last JSON content opened, its lexer) fed
    piece by piece equals reading the whole text again, at every split."""
    from engine.local.structured_closing import Region, tag_shape

    shape = tag_shape(json.loads(CASES["auto_strict_and_schema"]["structured_outputs"]["structural_tag"]))
    text = ('<|channel|>analysis<|message|>think {"a": [1, <|channel|>final json<|message|>{"x"'
            '<|end|><|start|>assistant<|channel|>final <|constrain|>json<|message|> {"x": [1, "}", {"y": 2.5e3')
    data = text.encode()
    for step in (1, 2, 3, 7, 13):
        region, grown = Region(), bytearray()
        for i in range(0, len(data), step):
            piece = data[i:i + step]
            grown += piece
            region = region.fed(grown, len(piece), shape)
            assert region == Region.of(grown, shape), grown
    assert region.open and region.lex.depth == 3  # inside {"x": [ … {"y": 2.5e3
