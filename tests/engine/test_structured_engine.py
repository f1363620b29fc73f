"""Structured outputs through the local engine on a tiny random model (whose unconstrained output
is noise): every seeded output of every schema of the suite validates, JSON mode always parses,
``tool_choice: "required"`` always yields a valid call of a declared tool, and the grammar works
inside continuous batching (n > 1, resumption, neighbours unaffected, one compile per schema)."""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from engine.errors import InvalidGenerateRequest
from engine.protocol import GenerateResponse
from engine.structured import structured_outputs
from session.derender import chat_derenderer, chat_response
from session.protocol.openai import ChatCompletionRequest
from session.render.renderer import Renderer
from tests.support.engine_harness import EngineHarness, Result, request, running_engine
from tests.support.structured_suite import MAX_TOKENS, SCHEMAS, TOOL_MAX_TOKENS, TOOLS

MODEL = "tiny-qwen3"
EOS = {151645, 151643}
# Seeds per schema. The acceptance figure is 100 (TOKENWIRE_STRUCTURED_SEEDS=100, about 10-20 minutes
# on 2 cores); the default keeps the whole suite inside CI's budget with the same checks.
N_SEEDS = int(os.environ.get("TOKENWIRE_STRUCTURED_SEEDS", "16"))
N_LONG = max(4, N_SEEDS // 2)  # JSON mode and required tool calls: longer documents, fewer seeds
# A few minutes on 2 cores (16 seeded generations per schema): the full suite runs it, the fast loop
# (pytest -m "not slow") does not.
pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def h(asset: Callable[[str], Path]) -> Iterator[EngineHarness]:
    with running_engine(asset(MODEL), dtype="float32", max_num_seqs=N_SEEDS, max_num_batched_tokens=8192,
                        max_model_len=2048) as harness:
        yield harness


@pytest.fixture(scope="module")
def tok(tokenizer: Callable[[str], Any]) -> Any:
    return tokenizer(MODEL)


@pytest.fixture(scope="module")
def prompt(tok: Any) -> list[int]:
    return list(tok("Answer in JSON.")["input_ids"])


def constrained(prompt: list[int], seed: int, **so: Any) -> Any:
    return request(prompt, temperature=1.0, seed=seed, max_tokens=MAX_TOKENS, structured_outputs=structured_outputs(**so))


def text_of(tok: Any, ids: list[int]) -> str:
    return str(tok.decode([t for t in ids if t not in EOS]))


def finished_documents(tok: Any, results: list[Result]) -> list[Any]:
    docs = []
    for r in results:
        for index, ids in r.tokens.items():
            assert r.finish[index] == "stop", (r.finish[index], text_of(tok, ids)[:200])
            assert ids[-1] in EOS  # the grammar ended the output with the eos token
            docs.append(json.loads(text_of(tok, ids)))
    return docs


@pytest.mark.timeout(600)
@pytest.mark.parametrize("name", sorted(SCHEMAS))
def test_every_seeded_output_validates_against_its_schema(h: EngineHarness, tok: Any, prompt: list[int],
                                                          name: str) -> None:
    schema = SCHEMAS[name]
    results = h.run(*[constrained(prompt, seed, json=schema) for seed in range(N_SEEDS)])
    docs = finished_documents(tok, results)
    assert len(docs) == N_SEEDS
    for doc in docs:
        jsonschema.validate(doc, schema)
    assert len({json.dumps(d, sort_keys=True) for d in docs}) > 5  # noise, but constrained


@pytest.mark.timeout(900)
def test_json_object_mode_always_parses_as_an_object(h: EngineHarness, tok: Any, prompt: list[int]) -> None:
    # JSON mode leaves strings and keys free: a noise model closes a string only when it happens to
    # draw a quote, so most of these documents would outlive max_tokens; budget-aware closing ends
    # every one of them within it.
    results = h.run(*[request(prompt, temperature=1.0, seed=seed, max_tokens=MAX_TOKENS,
                              structured_outputs=structured_outputs(json_object=True)) for seed in range(N_LONG)])
    docs = finished_documents(tok, results)
    assert len(docs) == N_LONG and all(isinstance(d, dict) for d in docs)
    assert all(len(r.ids) <= MAX_TOKENS for r in results)
    assert sum(len(r.ids) == MAX_TOKENS for r in results) > N_LONG // 2  # closing did the ending


@pytest.mark.timeout(900)
def test_required_tool_choice_always_yields_a_valid_call_of_a_declared_tool(h: EngineHarness, tok: Any) -> None:
    renderer = Renderer(tok, model_name=MODEL, max_model_len=4096, tool_call_parser="hermes")
    body = {"messages": [{"role": "user", "content": "What is the weather in Oslo?"}], "tools": TOOLS,
            "tool_choice": "required", "temperature": 1.0, "max_tokens": TOOL_MAX_TOKENS}
    chats = [ChatCompletionRequest.model_validate({**body, "seed": seed}) for seed in range(N_LONG)]
    reqs = [renderer.render_chat(c) for c in chats]
    results = h.run(*reqs)
    params = {t["function"]["name"]: t["function"]["parameters"] for t in TOOLS}
    calls = 0
    for chat, req, res in zip(chats, reqs, results, strict=True):
        d = chat_derenderer(chat, req.token_ids, request_id="chatcmpl-x", created=0, model=MODEL, tokenizer=tok,
                            tool_parser="hermes")
        response = GenerateResponse.model_validate({"request_id": "x", "choices": [
            {"index": 0, "token_ids": res.ids, "finish_reason": res.finish[0], "stop_reason": res.stop_reason[0]}]})
        choice = chat_response(d, response)["choices"][0]
        # vLLM's schema lets the model add calls without limit; closing ends the array in time
        assert choice["finish_reason"] == "tool_calls", text_of(tok, res.ids)[:200]
        assert len(res.ids) <= TOOL_MAX_TOKENS
        complete = choice["message"]["tool_calls"]
        assert complete, text_of(tok, res.ids)[:200]
        for call in complete:
            name = call["function"]["name"]
            assert name in params
            jsonschema.validate(json.loads(call["function"]["arguments"]), params[name])
            calls += 1
    assert calls >= N_LONG


def test_named_tool_choice_yields_arguments_of_that_tool(h: EngineHarness, tok: Any) -> None:
    renderer = Renderer(tok, model_name=MODEL, max_model_len=4096, tool_call_parser="hermes")
    named = {"type": "function", "function": {"name": "add"}}
    chats = [ChatCompletionRequest.model_validate({
        "messages": [{"role": "user", "content": "2+3?"}], "tools": TOOLS, "tool_choice": named,
        "temperature": 1.0, "seed": seed, "max_tokens": MAX_TOKENS}) for seed in range(20)]
    for res in h.run(*[renderer.render_chat(c) for c in chats]):
        assert res.finish[0] == "stop"
        jsonschema.validate(json.loads(text_of(tok, res.ids)), TOOLS[1]["function"]["parameters"])


def test_n_choices_each_follow_the_grammar_and_differ(h: EngineHarness, tok: Any, prompt: list[int]) -> None:
    schema = SCHEMAS["person"]
    res = h.run(request(prompt, temperature=1.0, seed=7, n=6, max_tokens=MAX_TOKENS,
                        structured_outputs=structured_outputs(json=schema)))[0]
    docs = finished_documents(tok, [res])
    assert len(docs) == 6
    for doc in docs:
        jsonschema.validate(doc, schema)
    assert len({json.dumps(d) for d in docs}) > 1


@pytest.mark.parametrize("k", [1, 5, 12])
def test_a_resumed_generation_continues_the_grammar_exactly(h: EngineHarness, prompt: list[int], k: int) -> None:
    so = structured_outputs(json=SCHEMAS["nested_objects"])
    full = h.run(request(prompt, temperature=1.0, seed=11, max_tokens=MAX_TOKENS, structured_outputs=so))[0].ids
    assert len(full) > k
    rest = h.run(request(prompt + full[:k], temperature=1.0, seed=11, max_tokens=MAX_TOKENS - k,
                         structured_outputs=so, extra_args={"output_offset": k}))[0].ids
    assert full[:k] + rest == full


def test_resumed_output_the_grammar_refuses_is_a_clear_error(h: EngineHarness, tok: Any, prompt: list[int]) -> None:
    not_json = list(tok("hello")["input_ids"])
    with pytest.raises(InvalidGenerateRequest) as info:
        h.run(request(prompt + not_json, seed=1, max_tokens=8, extra_args={"output_offset": len(not_json)},
                      structured_outputs=structured_outputs(json=SCHEMAS["person"])))
    assert info.value.param == "sampling_params.extra_args.output_offset"


def test_unconstrained_neighbours_get_the_tokens_they_get_alone(h: EngineHarness, prompt: list[int]) -> None:
    plain = [request(prompt, temperature=1.0, seed=100 + i, max_tokens=24, ignore_eos=True) for i in range(4)]
    alone = [r.ids for r in h.run(*plain)]
    mixed = h.run(*plain, *[constrained(prompt, i, json=SCHEMAS["matrix"]) for i in range(4)])
    assert [r.ids for r in mixed[:4]] == alone


def test_a_schema_is_compiled_once_and_then_found_in_the_cache(h: EngineHarness, prompt: list[int]) -> None:
    schema = {"type": "object", "properties": {"only_here": {"type": "boolean"}}, "required": ["only_here"]}
    before = h.engine.grammars.compiled
    h.run(*[constrained(prompt, seed, json=schema) for seed in range(5)])
    h.run(constrained(prompt, 99, json=json.loads(json.dumps(schema))))
    assert h.engine.grammars.compiled == before + 1


@pytest.mark.parametrize(("so", "extra", "param"), [
    ({"regex": "(unclosed"}, {}, "sampling_params.structured_outputs.regex"),
    ({"grammar": "root ::= missing_rule"}, {}, "sampling_params.structured_outputs.grammar"),
    ({"json": {"type": "integer", "minimum": 5, "maximum": 1}}, {}, "sampling_params.structured_outputs.json"),
    ({"json": {"type": "array", "uniqueItems": True}}, {}, "sampling_params.structured_outputs.json.uniqueItems"),
    ({"json_object": True}, {"ignore_eos": True}, "sampling_params.ignore_eos"),
    ({"json_object": True}, {"min_tokens": 3}, "sampling_params.min_tokens"),
])
def test_constraints_the_engine_cannot_honour_are_400s_naming_the_field(
        h: EngineHarness, prompt: list[int], so: dict[str, Any], extra: dict[str, Any], param: str) -> None:
    with pytest.raises(InvalidGenerateRequest) as info:
        h.run(request(prompt, max_tokens=8, structured_outputs=structured_outputs(**so), **extra))
    assert info.value.param == param
    assert info.value.status == 400


def test_regex_and_choice_constraints_are_enforced(h: EngineHarness, tok: Any, prompt: list[int]) -> None:
    import re

    for r in h.run(*[constrained(prompt, s, regex=r"[0-9]{3}-[a-z]{2,4}") for s in range(10)]):
        assert re.fullmatch(r"[0-9]{3}-[a-z]{2,4}", text_of(tok, r.ids))
    choices = ["yes", "no", "maybe \"so\""]
    for r in h.run(*[constrained(prompt, s, choice=choices) for s in range(10)]):
        assert text_of(tok, r.ids) in choices


@pytest.mark.parametrize("name", ["nested_objects", "refs_and_formats", "array_of_objects"])
def test_a_tight_budget_still_gives_a_valid_document_that_uses_it(h: EngineHarness, tok: Any, prompt: list[int],
                                                                  name: str) -> None:
    # 40 tokens: many documents need the closing path; each validates and ends with the eos
    # as the 40th token at the latest
    schema = SCHEMAS[name]
    results = h.run(*[request(prompt, temperature=1.0, seed=seed, max_tokens=40,
                              structured_outputs=structured_outputs(json=schema)) for seed in range(8)])
    for doc in finished_documents(tok, results):
        jsonschema.validate(doc, schema)
    assert all(len(r.ids) <= 40 for r in results)
    assert any(len(r.ids) == 40 for r in results)


def test_max_tokens_below_the_shortest_completion_says_length(h: EngineHarness, tok: Any, prompt: list[int]) -> None:
    # {"name":"","age":0} needs more than 4 tokens: nothing can close it, the honest finish remains
    for r in h.run(*[request(prompt, temperature=1.0, seed=seed, max_tokens=4,
                             structured_outputs=structured_outputs(json=SCHEMAS["person"])) for seed in range(3)]):
        assert r.finish[0] == "length" and len(r.ids) == 4


def test_closing_can_be_turned_off_for_vllms_truncated_length(h: EngineHarness, prompt: list[int]) -> None:
    def run(closing: bool) -> list[Result]:
        return h.run(*[request(prompt, temperature=1.0, seed=seed, max_tokens=30, extra_args={"structured_closing": closing},
                               structured_outputs=structured_outputs(json_object=True)) for seed in range(6)])

    def closing() -> tuple[int, int, float]:
        stats = h.engine.stats()
        return stats["closing_walks"], stats["closing_forced"], stats["closing_seconds"]

    before = closing()
    assert {r.finish[0] for r in run(True)} == {"stop"}
    on = closing()
    assert on[0] > before[0] and on[1] > before[1] and on[2] > before[2]  # /engine/stats shows closing's work
    assert "length" in {r.finish[0] for r in run(False)}
    assert closing() == on  # turned off: no walk, nothing forced
    with pytest.raises(InvalidGenerateRequest) as info:
        h.run(request(prompt, max_tokens=8, extra_args={"structured_closing": "no"},
                      structured_outputs=structured_outputs(json_object=True)))
    assert info.value.param == "sampling_params.extra_args.structured_closing"


@pytest.mark.parametrize("back", [2, 6])
def test_a_generation_resumed_while_closing_continues_exactly(h: EngineHarness, prompt: list[int], back: int) -> None:
    # JSON mode at 30 tokens: the closing path decides the last tokens; a generation resumed `back`
    # tokens before the end makes the same decisions
    so = structured_outputs(json_object=True)
    fulls = [r.ids for r in h.run(*[request(prompt, temperature=1.0, seed=seed, max_tokens=30, structured_outputs=so)
                                    for seed in range(6)])]
    closed = [(seed, full) for seed, full in enumerate(fulls) if len(full) == 30]
    assert len(closed) >= 2
    for seed, full in closed[:2]:
        k = len(full) - back
        rest = h.run(request(prompt + full[:k], temperature=1.0, seed=seed, max_tokens=30 - k,
                             structured_outputs=so, extra_args={"output_offset": k}))[0].ids
        assert full[:k] + rest == full
