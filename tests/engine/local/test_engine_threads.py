"""Each forward's torch thread count (engine/local/threads.py): the plan learns per bucket which
count is fastest, keeps re-checking, and the engine applies it forward by forward with the same
tokens as one thread."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from itertools import pairwise
from pathlib import Path
from typing import Any

import pytest

from engine.local import threads
from engine.local.threads import ThreadPlan, arms_for, resolve_plan
from tests.support.engine_harness import request, running_engine


def drive(plan: ThreadPlan, cost: Callable[[int], float], forwards: int, *, kind: str = "decode",
          tokens: int = 1, kv_len: int = 100) -> list[int]:
    """Run ``forwards`` forwards of one bucket, each taking ``cost(threads)`` seconds."""
    chosen = []
    for _ in range(forwards):
        n = plan.choose(kind, tokens, kv_len)
        plan.record(cost(n))
        chosen.append(n)
    return chosen


def test_the_arms_are_one_the_powers_of_two_between_and_the_count() -> None:
    assert arms_for(1) == (1,)
    assert arms_for(2) == (1, 2)
    assert arms_for(6) == (1, 2, 4, 6)
    assert arms_for(8) == (1, 2, 4, 8)


@pytest.mark.parametrize(("n", "plan"), [(1, "adaptive"), (4, "fixed")])
def test_one_thread_or_a_fixed_plan_is_never_timed(n: int, plan: str) -> None:
    p = ThreadPlan(n, plan)
    assert not p.timed
    assert drive(p, lambda k: 1.0, 5) == [n] * 5
    assert p.stats()["forwards_by_threads"] == {str(n): 5}


@pytest.mark.parametrize("fast", [1, 2])
def test_a_bucket_runs_its_fastest_count_and_rechecks_the_other_rarely(fast: int) -> None:
    p = ThreadPlan(2)
    chosen = drive(p, lambda k: 0.010 if k == fast else 0.016, 1000)
    slow = 3 - fast
    tries = chosen.count(slow)
    # one try to learn, one at the 4th forward, then every 32nd forward, backing off to every 512th
    assert 3 <= tries <= 8, tries
    assert chosen[-100:].count(fast) >= 99
    assert p.stats()["forwards_by_threads"] == {"1": chosen.count(1), "2": chosen.count(2)}


def test_an_unlucky_first_sample_is_corrected_at_the_first_recheck() -> None:
    p = ThreadPlan(2)
    first = [True]

    def cost(k: int) -> float:
        if k == 2 and first[0]:  # a neighbour took the core during the 2-thread try
            first[0] = False
            return 0.050
        return 0.010 if k == 2 else 0.016

    chosen = drive(p, cost, 2 + threads.FIRST_RETRY + threads.EXPLORE_EVERY - 1)
    learning, then = chosen[:2], chosen[2:]
    assert learning == [1, 2]
    assert then[:threads.FIRST_RETRY - 1] == [1] * (threads.FIRST_RETRY - 1)  # the better-looking arm
    assert then[threads.FIRST_RETRY - 1:] == [2] * threads.EXPLORE_EVERY  # the re-check wins, and it stays


def test_a_change_of_load_is_noticed() -> None:
    p = ThreadPlan(2)
    load = [False]
    chosen = drive(p, lambda k: (0.010 if k == 2 else 0.016) if not load[0] else (0.040 if k == 2 else 0.017), 600)
    assert chosen[-100:].count(2) >= 99
    load[0] = True  # a busy neighbour: the second thread now waits for its core
    after = drive(p, lambda k: 0.040 if k == 2 else 0.017, 100)
    assert after[1] == 1  # the running arm's average gave it up after one slow forward
    assert after[1:].count(2) <= 1  # (and one re-check may fall in these 100)


def test_buckets_learn_apart() -> None:
    p = ThreadPlan(2)
    cost_small = {1: 0.016, 2: 0.025}  # a one-row decode step
    cost_large = {1: 0.620, 2: 0.390}  # a 512-token prefill
    small = large = []
    for _ in range(50):
        small = drive(p, cost_small.__getitem__, 1, kind="decode", tokens=1, kv_len=120)
        large = drive(p, cost_large.__getitem__, 1, kind="prefill", tokens=512, kv_len=512)
    assert small == [1] and large == [2]
    # a bucket is prefill or decode, tokens (rows) and KV length, each to a power of two
    assert drive(p, cost_large.__getitem__, 1, kind="prefill", tokens=700, kv_len=900) == [2]
    assert drive(p, cost_large.__getitem__, 1, kind="prefill", tokens=1100, kv_len=1100) == [1]  # new bucket


def test_the_losing_arm_is_tried_less_often_as_it_keeps_losing() -> None:
    p = ThreadPlan(2)
    chosen = drive(p, lambda k: 0.010 if k == 1 else 0.030, 3000)
    at = [i for i, n in enumerate(chosen) if n == 2]
    gaps = [b - a for a, b in pairwise(at)]
    assert gaps == sorted(gaps)
    assert gaps[0] == threads.FIRST_RETRY and gaps[-1] == threads.EXPLORE_EVERY * threads.MAX_BACKOFF


def test_every_arm_of_a_larger_count_is_tried() -> None:
    p = ThreadPlan(6)
    chosen = drive(p, lambda k: {1: 0.03, 2: 0.02, 4: 0.01, 6: 0.015}[k], 400)
    assert set(chosen) == {1, 2, 4, 6}
    assert Counter(chosen[-100:])[4] >= 97


def test_the_plan_setting() -> None:
    assert resolve_plan("") == "adaptive"
    assert resolve_plan(" Fixed ") == "fixed"
    with pytest.raises(ValueError, match="TOKENWIRE_THREAD_PLAN='sometimes' is not one of adaptive, fixed"):
        resolve_plan("sometimes")


@pytest.mark.slow
def test_the_engine_runs_each_forward_at_its_planned_count_with_one_threads_tokens(
        asset: Callable[[str], Path], tokenizer: Callable[[str], Any]) -> None:
    import torch

    model = "tiny-qwen3"
    prompt = list(tokenizer(model)("Tell me a story about a lighthouse keeper.")["input_ids"])
    reqs = [request(prompt[i:], max_tokens=24) for i in range(3)]
    with running_engine(asset(model), dtype="float32", num_threads=1) as h:
        one = [r.ids for r in h.run(*reqs)]
    with running_engine(asset(model), dtype="float32", num_threads=2, thread_plan="adaptive") as h:
        runner: Any = h.engine.runner
        seen: list[tuple[int, int]] = []
        decode = runner._decode

        def probe(seqs: Any) -> Any:
            seen.append((runner.threads.arms[runner.threads._pending[1]], torch.get_num_threads()))
            return decode(seqs)

        # The output projection has a plan of its own, applied inside the forward's count.
        projected: list[tuple[int, int, int]] = []
        project = runner._project

        def probe_projection(head: Any, x: Any) -> Any:
            outer = torch.get_num_threads()

            def seen_head(y: Any) -> Any:
                plan = runner.logits_threads
                projected.append((plan.arms[plan._pending[1]], torch.get_num_threads(), outer))
                return head(y)

            out = project(seen_head, x)
            assert torch.get_num_threads() == outer  # the forward goes on at its own count
            return out

        runner._decode = probe
        runner._project = probe_projection
        two = [r.ids for r in h.run(*reqs)]
        stats = h.engine.stats()
    assert two == one
    assert {n for n, _ in seen} == {1, 2}  # both counts were tried ...
    assert all(planned == applied for planned, applied in seen)  # ... and torch ran at the planned one
    assert stats["thread_plan"].startswith("adaptive")
    assert sum(stats["forwards_by_threads"].values()) >= len(seen)
    assert len(projected) >= len(seen)  # every forward projected its logits through the plan
    assert {n for n, _, _ in projected} == {1, 2}
    assert all(planned == applied for planned, applied, _ in projected)
    assert any(n != outer for n, _, outer in projected)  # its count is its own, not the forward's
    assert sum(stats["logits_by_threads"].values()) >= len(projected)
