"""The local engine on gpt-oss (the tiny random ``GptOssForCausalLM``): attention sinks, sliding-window
layers and MoE experts run through the model's own eager attention (the plain transformers path:
transformers has no SDPA path for sinks), and greedy output equals ``model.generate`` token for token,
alone (fp32 and the default dtype), in a shared batch (fp32) and past the 128-token sliding window,
with chunked prefill (issue 36)."""

from __future__ import annotations

import random
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.support.engine_harness import Reference, request, running_engine

pytestmark = pytest.mark.slow

MODEL = "tiny-gpt-oss"
NEW = 24
_R = random.Random(36)
# a harmony prompt, and ids of plain text around and past the sliding window (128)
PROMPTS = [[200006, 1428, 200008, 12194, 200007, 200006, 173781],
           *[[_R.randrange(1000, 150000) for _ in range(n)] for n in (5, 60, 127, 129, 300)]]


def test_the_engine_says_it_runs_the_models_own_attention(asset: Callable[[str], Path]) -> None:
    with running_engine(asset(MODEL), dtype="float32") as h:
        runner = h.engine.runner
        assert runner.attention_kernel.startswith("the model's own eager attention")
        assert runner.decode_forward == "model forward (gpt_oss has no lean decode)"
        assert runner.sliding_window == 128
        assert runner.model.config._attn_implementation == "tokenwire_eager"


@pytest.mark.parametrize("dtype", ["float32", "auto"])
def test_greedy_alone_and_in_a_shared_batch_matches_model_generate(asset: Callable[[str], Path], dtype: str) -> None:
    path = asset(MODEL)
    with running_engine(path, dtype=dtype) as h:
        engine_dtype = str(h.engine.dtype).removeprefix("torch.")
        alone = [h.run(request(p, max_tokens=NEW))[0].ids for p in PROMPTS]
        shared = h.run(*[request(p, max_tokens=NEW) for p in PROMPTS], stagger=0.02)
    ref = Reference(path, engine_dtype, attention="eager")
    want = [ref.greedy(p, NEW) for p in PROMPTS]
    assert alone == want
    if dtype == "float32":  # bf16 matmuls are not batch-invariant on CPU (test_engine_parity.py says why)
        assert [r.ids for r in shared] == want


def test_chunked_prefill_across_the_window_matches_model_generate(asset: Callable[[str], Path]) -> None:
    path = asset(MODEL)
    long = PROMPTS[-1]
    with running_engine(path, dtype="float32", max_num_batched_tokens=48) as h:
        got = h.run(request(long, max_tokens=12), request(long[:140], max_tokens=12),
                    stagger=0.02)
    ref = Reference(path, "float32", attention="eager")
    assert [r.ids for r in got] == [ref.greedy(long, 12), ref.greedy(long[:140], 12)]
