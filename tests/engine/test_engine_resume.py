"""A resumed generation continues exactly as the interrupted one, in fp32 and in bf16 (issue 20
item 6), on the real LocalEngine with tiny-qwen3.

The resumed request is the interrupted one's prompt plus the k tokens it had produced, with
``extra_args.output_offset: k`` (what the pipeline's resume sends). The engine prefills the prompt
before them and recomputes those k tokens one decode step each, as the interrupted stream did, so
keys, values and logits are the same bits and a seeded draw picks the same token. Re-prefilling
them in one forward instead (``resume_replay: false``) computes the same values with other matmul
shapes, which in bf16 moves the sampling distribution enough to change seeded draws."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.engine_harness import EngineHarness, request, running_engine

MODEL = "tiny-qwen3"
TOKENS = 40
CUTS = (1, 6, 13, 25, 39)


@pytest.fixture(scope="module", params=["float32", "bfloat16"])
def h(request: pytest.FixtureRequest, asset: Callable[[str], Path]) -> Iterator[EngineHarness]:
    with running_engine(asset(MODEL), dtype=request.param, max_num_seqs=8) as harness:
        yield harness


@pytest.fixture(scope="module")
def prompt(tokenizer: Callable[[str], Any]) -> list[int]:
    return list(tokenizer(MODEL)("Tell me a story about a lighthouse keeper.")["input_ids"])


def seeded(ids: list[int], **kw: Any) -> Any:
    kw.setdefault("seed", 20)
    return request(ids, temperature=1.0, ignore_eos=True, **kw)


@pytest.mark.slow
def test_a_seeded_resume_continues_exactly_at_every_cut(h: EngineHarness, prompt: list[int]) -> None:
    full = h.run(seeded(prompt, max_tokens=TOKENS))[0].ids
    assert len(full) == TOKENS
    for k in CUTS:
        rest = h.run(seeded(prompt + full[:k], max_tokens=TOKENS - k, extra_args={"output_offset": k}))[0].ids
        assert full[:k] + rest == full, f"resumed after {k} tokens"


@pytest.mark.slow
def test_a_greedy_resume_continues_exactly(h: EngineHarness, prompt: list[int]) -> None:
    full = h.run(request(prompt, max_tokens=TOKENS, temperature=0.0, ignore_eos=True))[0].ids
    for k in (3, 17):
        rest = h.run(request(prompt + full[:k], max_tokens=TOKENS - k, temperature=0.0, ignore_eos=True,
                             extra_args={"output_offset": k}))[0].ids
        assert full[:k] + rest == full


def test_a_resume_replayed_beside_other_requests_is_still_exact_in_fp32(h: EngineHarness, prompt: list[int]) -> None:
    if h.engine.dtype.itemsize < 4:
        pytest.skip("bf16 CPU matmuls are not batch-invariant: a shared batch may change any stream (engine.md)")
    full = h.run(seeded(prompt, max_tokens=TOKENS))[0].ids
    k = 13
    others = [seeded(prompt[i:], max_tokens=20, seed=i) for i in range(1, 4)]
    runs = h.run(others[0], seeded(prompt + full[:k], max_tokens=TOKENS - k, extra_args={"output_offset": k}),
                 *others[1:], stagger=0.01)
    assert full[:k] + runs[1].ids == full


@pytest.mark.slow
def test_the_replay_can_be_turned_off_and_is_what_makes_bf16_exact(h: EngineHarness, prompt: list[int]) -> None:
    full = h.run(seeded(prompt, max_tokens=TOKENS))[0].ids
    exact = []
    for k in CUTS:
        rest = h.run(seeded(prompt + full[:k], max_tokens=TOKENS - k,
                            extra_args={"output_offset": k, "resume_replay": False}))[0].ids
        exact.append(full[:k] + rest == full)
    if h.engine.dtype.itemsize < 4:
        assert not all(exact), "a bf16 re-prefill no longer differs: this test cannot see the replay's effect"


def test_resume_replay_must_be_a_boolean(h: EngineHarness, prompt: list[int]) -> None:
    from engine.errors import InvalidGenerateRequest
    with pytest.raises(InvalidGenerateRequest, match="resume_replay"):
        h.run(seeded(prompt, max_tokens=2, extra_args={"output_offset": 1, "resume_replay": "yes"}))


def _forwards(h: EngineHarness) -> int:
    return sum(h.engine.runner.threads.forwards.values())


def test_a_resume_replays_its_earlier_output_in_one_forward_not_one_step_per_token(
        h: EngineHarness, prompt: list[int]) -> None:
    """Issue 39 item 5: a resume covering k tokens cost k decode steps (1,511 steps for 1,500
    tokens). In bf16 with the native kernels it is one replay forward per chunk of the step's token
    budget; fp32 keeps one decode step per token (its linears' and SDPA's bits depend on the number
    of rows: docs/engine.md, "Exactness") and says so."""
    runner = h.engine.runner
    stats = h.engine.stats()
    if h.engine.dtype.itemsize == 4:
        assert not runner.one_pass_replay and stats["resume_replay_chunk"] == 0
        assert stats["resume_replay"].startswith("one decode step per token (the linears are not the native kernel")
        return
    assert runner.one_pass_replay, runner.resume_replay
    assert stats["resume_replay"] == "one pass per chunk (the same bits as one decode step per token)"
    assert stats["resume_replay_chunk"] == h.engine.scheduler.max_num_batched_tokens  # one thread: the budget
    full = h.run(seeded(prompt, max_tokens=TOKENS))[0].ids
    before = _forwards(h)
    rest = h.run(seeded(prompt + full[:39], max_tokens=1, extra_args={"output_offset": 39}))[0].ids
    assert rest == full[39:40]
    assert _forwards(h) - before == 2  # the prompt's prefill and one replay forward, not 1 + 39


@pytest.mark.parametrize("chunk", [5, 16])
def test_the_one_pass_replay_gives_the_bits_of_the_per_token_replay(
        h: EngineHarness, prompt: list[int], chunk: int) -> None:
    """Same tokens and the same logprobs, bit for bit, whether the earlier output is replayed in
    chunks (several per resume here, beside other requests that prefill and decode) or one decode
    step per token, as before issue 39."""
    if not h.engine.runner.one_pass_replay:
        pytest.skip(f"no one-pass replay in {h.engine.dtype}: {h.engine.runner.resume_replay}")
    full = h.run(seeded(prompt, max_tokens=TOKENS))[0].ids
    sched = h.engine.scheduler
    kept = sched.replay_chunk

    def resumes() -> list[tuple[list[int], list[float]]]:
        reqs = [seeded(prompt + full[:k], max_tokens=8, logprobs=2, extra_args={"output_offset": k}) for k in (13, 25, 39)]
        others = [seeded(prompt[i:], max_tokens=6, seed=i) for i in (1, 2)]
        runs = h.run(reqs[0], others[0], reqs[1], others[1], reqs[2], stagger=0.005)
        return [(r.ids, [lp.logprob for lp in r.logprobs[0]]) for r in (runs[0], runs[2], runs[4])]

    try:
        sched.replay_chunk = chunk  # read by the engine thread when a request is added
        chunked = resumes()
        sched.replay_chunk = 0
        per_token = resumes()
    finally:
        sched.replay_chunk = kept
    assert chunked == per_token
    for (ids, _), k in zip(chunked, (13, 25, 39), strict=True):
        assert ids[:TOKENS - k] == full[k:k + 8]  # the uninterrupted stream had 40 tokens
