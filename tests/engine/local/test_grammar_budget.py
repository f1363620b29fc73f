"""Grammar compilation under a budget (issue 19 item 1): the completion bound read from xgrammar's
printed grammar, the compile worker process (documents too long, CPU time, memory, cancellation,
a fresh worker after a kill) and the local engine's 400s naming the field, on tiny-qwen3's real
vocabulary."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import xgrammar as xgr

from engine.errors import InvalidGenerateRequest
from engine.local.grammar_bound import completion_bound
from engine.local.grammar_worker import Cancelled, CompileWorker, Refused
from engine.structured import structured_outputs
from tests.support.engine_harness import EngineHarness, request, running_engine
from tests.support.structured_suite import SCHEMAS

MODEL = "tiny-qwen3"
# the reproduction, and the one that stalled every generation for ~11 s
NESTED = "((a{1000}){1000}){1000}"
MILLION = "a{1000000}"
# tiny to write, costly to compile: 50 bounded repetitions in a row (137 s and +200 MB unbounded)
SLOW = "".join(f"[a-z]{{0,{1000 + i}}}" for i in range(50))


def bound(grammar: Any) -> int:
    return completion_bound(str(grammar), lambda p: str(xgr.Grammar.from_regex(p)))


def test_the_completion_bound_tells_kilobytes_from_gigabytes() -> None:
    assert bound(xgr.Grammar.from_regex(NESTED)) >= 10**9
    assert bound(xgr.Grammar.from_regex(MILLION)) >= 10**6
    assert bound(xgr.Grammar.from_ebnf('root ::= b b b b b b b b b b\nb ::= c c c c c c c c c c\n'
                                       'c ::= d d d d d d d d d d\nd ::= "xxxxxxxxxx"')) == 10**4
    nested_items = {"type": "array", "minItems": 1000,
                    "items": {"type": "array", "items": {"const": "x"}, "minItems": 1000}}
    assert bound(xgr.Grammar.from_json_schema(json.dumps(nested_items))) > 10**6
    # a schema's string pattern is read too, where xgrammar keeps it as a Regex(...) rule
    patterned = {"type": "array", "items": {"type": "string", "pattern": "a{100000}"}, "minItems": 1}
    assert bound(xgr.Grammar.from_json_schema(json.dumps(patterned))) > 10**5
    # what people write stays small: every schema of the structured suite, JSON mode, a phone number
    for schema in SCHEMAS.values():
        assert bound(xgr.Grammar.from_json_schema(json.dumps(schema), max_whitespace_cnt=24)) < 1000
    assert bound(xgr.Grammar.from_json_schema('{"type": "object"}', strict_mode=False)) < 100
    assert bound(xgr.Grammar.from_regex(r"\d{3}-\d{4}")) == 8
    assert bound(xgr.Grammar.from_regex("[a-z]{0,1000000}")) == 1  # long documents allowed, none demanded


@pytest.fixture(scope="module")
def info(tokenizer: Callable[[str], Any]) -> Any:
    tok = tokenizer(MODEL)
    return xgr.TokenizerInfo.from_huggingface(tok, vocab_size=max(len(tok), 151680))


@pytest.fixture(scope="module")
def worker(info: Any) -> Iterator[CompileWorker]:
    w = CompileWorker(info, cpu_s=0.5, wall_s=10.0)
    yield w
    w.close()


@pytest.mark.slow
def test_the_worker_compiles_what_the_engine_enforces(worker: CompileWorker) -> None:
    grammar = worker.compile("json", SCHEMAS["person"], True)
    matcher = xgr.GrammarMatcher(grammar)
    assert matcher.accept_string('{"name": "Ada", "age": 36}')
    refused = worker.compile("regex", "(unclosed", True)
    assert isinstance(refused, Refused) and refused.reason == "invalid"


@pytest.mark.parametrize(("kind", "value"), [
    ("regex", NESTED),
    ("regex", MILLION),
    ("json", {"type": "object", "properties": {"a": {"type": "string", "pattern": NESTED}}, "required": ["a"]}),
    ("json", {"type": "array", "items": {"type": "string", "pattern": MILLION}, "minItems": 1}),
    ("json", {"type": "string", "minLength": 1000000}),
    ("grammar", 'root ::= "a"{1000000}'),
    ("choice", ["x" * 100_000]),
])
def test_a_constraint_demanding_huge_documents_is_refused_before_compiling(worker: CompileWorker, kind: str,
                                                                           value: Any) -> None:
    pid = worker.pid
    refused = worker.compile(kind, value, True)
    assert isinstance(refused, Refused) and refused.reason == "too_long"
    assert worker.pid == pid or pid is None  # refused by reading, nothing killed


@pytest.mark.slow
def test_a_compile_over_its_cpu_budget_is_killed_and_the_next_one_gets_a_fresh_worker(worker: CompileWorker) -> None:
    worker.compile("json_object", True, True)  # started
    before, killed = worker.started, worker.killed
    refused = worker.compile("regex", SLOW, True)
    assert refused == Refused("time", "0.5 s")
    assert worker.killed == killed + 1
    assert not isinstance(worker.compile("json", SCHEMAS["matrix"], True), Refused)
    assert worker.started == before + 1


@pytest.mark.slow
def test_a_compile_over_its_memory_budget_fails_in_the_worker_and_the_next_one_gets_a_fresh_worker(info: Any) -> None:
    w = CompileWorker(info, cpu_s=60.0, wall_s=60.0, memory_bytes=64 << 20)
    big = {"type": "string", "enum": [f"value-{i:06d}-" + "x" * 40 for i in range(100_000)]}
    try:
        refused = w.compile("json", big, True)
        assert isinstance(refused, Refused) and refused.reason == "memory"
        assert w.killed == 1
        assert not isinstance(w.compile("json", SCHEMAS["person"], True), Refused)
        assert w.started == 2
    finally:
        w.close()


def test_a_cancelled_compile_kills_the_worker(worker: CompileWorker) -> None:
    worker.compile("json_object", True, True)
    cancel = threading.Event()
    threading.Timer(0.2, cancel.set).start()
    killed = worker.killed
    with pytest.raises(Cancelled):
        worker.compile("regex", SLOW, True, cancel)
    assert worker.killed == killed + 1


# --- through the local engine ---------------------------------------------------------------------

@pytest.fixture(scope="module")
def h(asset: Callable[[str], Path]) -> Iterator[EngineHarness]:
    with running_engine(asset(MODEL), dtype="float32", max_num_seqs=4) as harness:
        harness.engine.grammars.worker_options["cpu_s"] = 0.5  # before the worker starts
        yield harness


@pytest.mark.parametrize(("so", "param"), [
    ({"regex": NESTED}, "sampling_params.structured_outputs.regex"),
    ({"regex": MILLION}, "sampling_params.structured_outputs.regex"),
    ({"json": {"type": "object", "properties": {"a": {"type": "string", "pattern": NESTED}}, "required": ["a"]}},
     "sampling_params.structured_outputs.json"),
    ({"grammar": 'root ::= "a"{1000000}'}, "sampling_params.structured_outputs.grammar"),
])
@pytest.mark.slow
def test_the_engine_refuses_a_constraint_over_budget_with_a_400_naming_the_field(
        h: EngineHarness, so: dict[str, Any], param: str) -> None:
    with pytest.raises(InvalidGenerateRequest) as info:
        h.run(request([1, 2, 3], max_tokens=16, structured_outputs=structured_outputs(**so)))
    assert info.value.param == param
    assert "too long" in info.value.message
    # the same constraint again is answered from the refusals, without asking the worker
    worker = h.engine.grammars._worker
    assert worker is not None
    asked = worker.compiles
    with pytest.raises(InvalidGenerateRequest):
        h.run(request([1, 2, 3], max_tokens=16, structured_outputs=structured_outputs(**so)))
    assert worker.compiles == asked
    assert h.wait_idle() == 0


@pytest.mark.slow
def test_a_slow_constraint_is_a_400_and_the_next_constraint_compiles(h: EngineHarness) -> None:
    with pytest.raises(InvalidGenerateRequest) as info:
        h.run(request([1, 2, 3], max_tokens=16, structured_outputs=structured_outputs(regex=SLOW)))
    assert info.value.param == "sampling_params.structured_outputs.regex"
    assert "took more than" in info.value.message
    (res,) = h.run(request([1, 2, 3], max_tokens=8, structured_outputs=structured_outputs(regex="[ab]{3}")))
    assert res.finish[0] == "stop" and res.ids[-1] == 151645  # three letters, then the stop token
