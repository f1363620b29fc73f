"""Greedy output of LocalEngine equals ``model.generate(do_sample=False)`` token for token, on the
tiny test models and on the default model, alone and while other requests share the batch.

Alone, the engine runs exactly transformers' computation (no mask, the same shapes), in the
default dtype (bf16 on CPUs that have it) as in fp32. Sharing the batch changes the shapes of
every matmul; in bf16 those are not batch-invariant on CPU (transformers' own static batch
differs from its batch-1 output there), so the shared-batch parity is asserted in fp32, where
the reduction order does not change the argmax.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import DEFAULT_MODEL, TINY_MODELS
from tests.support.engine_harness import EngineHarness, Reference, request, running_engine

# Several minutes on 2 cores (the default model's shared batch alone up to 140 s): the full suite runs
# it, the fast loop (pytest -m "not slow") does not.
pytestmark = pytest.mark.slow

TEXTS = [
    "The quick brown fox",
    "Write a short poem about rivers and the people who live by them.",
    "1, 2, 3, 4,",
    "def fibonacci(n):",
    "Bonjour! Comment allez-vous aujourd'hui ?",
    "Once upon a time, in a kingdom far away, there lived a",
]
NEW = 24


def prompts(tok: Any, chat: bool = True) -> list[list[int]]:
    out = [list(tok(t, add_special_tokens=False)["input_ids"]) for t in TEXTS]
    if chat and getattr(tok, "chat_template", None):
        out.append(list(tok.apply_chat_template([{"role": "user", "content": "What is 2+2?"}],
                                                add_generation_prompt=True, tokenize=True, return_dict=False)))
    return out


@pytest.fixture(scope="module", params=[*TINY_MODELS, DEFAULT_MODEL])
def model_name(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture(scope="module")
def fp32(model_name: str, asset: Callable[[str], Path]) -> Iterator[tuple[EngineHarness, Reference]]:
    path = asset(model_name)
    with running_engine(path, dtype="float32") as h:
        yield h, Reference(path, "float32")


def expected(ref: Reference, ps: list[list[int]], new: int = NEW) -> list[list[int]]:
    return [ref.greedy(p, new) for p in ps]


def test_greedy_alone_matches_model_generate_fp32(fp32: tuple[EngineHarness, Reference], model_name: str,
                                                  tokenizer: Callable[[str], Any]) -> None:
    h, ref = fp32
    ps = prompts(tokenizer(model_name))[:4]
    want = expected(ref, ps)
    got = [h.run(request(p, max_tokens=NEW))[0].ids for p in ps]
    assert got == want


def test_greedy_in_a_shared_batch_matches_model_generate(fp32: tuple[EngineHarness, Reference], model_name: str,
                                                         tokenizer: Callable[[str], Any]) -> None:
    """Requests join mid-flight (staggered) and leave at different lengths."""
    h, ref = fp32
    ps = prompts(tokenizer(model_name))
    lengths = [NEW - (i % 3) * 5 for i in range(len(ps))]
    want = [w[:n] for w, n in zip(expected(ref, ps), lengths, strict=True)]
    got = h.run(*[request(p, max_tokens=n) for p, n in zip(ps, lengths, strict=True)], stagger=0.03)
    assert [r.ids for r in got] == want
    assert h.wait_idle() == 0


def test_greedy_with_chunked_prefill_matches_model_generate(asset: Callable[[str], Path],
                                                            tokenizer: Callable[[str], Any]) -> None:
    name = TINY_MODELS[0]
    path = asset(name)
    ref = Reference(path, "float32")
    long = [t for p in prompts(tokenizer(name), chat=False) for t in p]
    with running_engine(path, dtype="float32", max_num_batched_tokens=16) as h:
        got = h.run(request(long, max_tokens=12), request(long[:9], max_tokens=12), stagger=0.02)
    assert [r.ids for r in got] == [ref.greedy(long, 12), ref.greedy(long[:9], 12)]


@pytest.mark.parametrize("name", [*TINY_MODELS, DEFAULT_MODEL])
def test_greedy_alone_matches_model_generate_in_the_default_dtype(name: str, asset: Callable[[str], Path],
                                                                  tokenizer: Callable[[str], Any]) -> None:
    path = asset(name)
    ps = prompts(tokenizer(name))[:3]
    with running_engine(path) as h:  # dtype "auto": bf16 where the CPU has it
        dtype = str(h.engine.dtype).removeprefix("torch.")
        got = [h.run(request(p, max_tokens=NEW))[0].ids for p in ps]
    assert got == expected(Reference(path, dtype), ps)
