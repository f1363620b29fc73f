"""Scheduler and step loop without a model: a simulated KV store records which token sits at
each position of each row, so every row move, swap and fork is checked token for token."""

from __future__ import annotations

import itertools
import random
from dataclasses import dataclass

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from engine.local.params import ResolvedParams
from engine.local.scheduler import KVOp, Overloaded, PrefillChunk, RequestGroup, Scheduler, SeqState
from engine.local.scheduler import Sequence as Seq
from engine.local.step import run_step

MAX_LEN = 400


class SimRunner:
    """Rows of token ids standing in for keys/values; checks what the real runner assumes."""

    def __init__(self) -> None:
        self.rows: dict[int, list[int]] = {}
        self.prefill_batches: list[list[PrefillChunk]] = []

    def _row(self, r: int) -> list[int]:
        return self.rows.setdefault(r, [-1] * MAX_LEN)

    def apply(self, ops: list[KVOp]) -> None:
        for op in ops:
            src, dst = self._row(op.src), self._row(op.dst)
            if op.kind == "move":
                dst[:op.length] = src[:op.length]
            else:
                src[:op.length], dst[:op.length] = dst[:op.length], src[:op.length]

    def prefill(self, chunks: list[PrefillChunk]) -> list[int]:
        rows = [c.seq.row for c in chunks]
        assert rows == list(range(rows[0], rows[0] + len(rows))), rows
        self.prefill_batches.append(chunks)
        for c in chunks:
            assert self._row(c.seq.row)[:c.start] == c.seq.prompt[:c.start]  # earlier chunks in place
            self._row(c.seq.row)[c.start:c.start + c.count] = c.seq.prompt[c.start:c.start + c.count]
        return [0] * len(chunks)

    def decode(self, seqs: list[Seq]) -> list[int]:
        for i, s in enumerate(seqs):
            assert s.row == i
            self.check(s)  # everything before the new token is in place
            self._row(i)[s.computed] = s.last_token
        return [0] * len(seqs)

    def check(self, seq: Seq) -> None:
        want = (seq.prompt + seq.output)[:seq.computed]
        assert self._row(seq.row)[:seq.computed] == want, (seq.group.request_id, seq.index)


@dataclass
class Pick:
    token_id: int
    logprob: None = None


def sampler_from(rng: random.Random) -> object:
    def sampler(logits: list[int], seqs: list[Seq]) -> list[Pick]:
        return [Pick(rng.randrange(3, 50)) for _ in seqs]
    return sampler


def params(max_tokens: int, n: int = 1, stop: frozenset[int] = frozenset()) -> ResolvedParams:
    return ResolvedParams(max_tokens=max_tokens, n=n, stop_ids=stop, all_stop_ids=stop)


def group(rid: str, prompt_len: int, max_tokens: int, n: int = 1, stop: frozenset[int] = frozenset()) -> RequestGroup:
    prompt = [1000 + hash((rid, i)) % 1000 for i in range(prompt_len)]
    return RequestGroup(rid, prompt, params(max_tokens, n, stop), [7] * n, external_id=rid)


def test_decode_rows_stay_compact_as_sequences_finish() -> None:
    s = Scheduler(max_num_seqs=8, max_num_batched_tokens=64, max_waiting=10)
    runner = SimRunner()
    for i, mt in enumerate([3, 9, 5, 12]):
        s.add(group(f"r{i}", 5 + i, mt))
    sampler = sampler_from(random.Random(0))
    lengths = []
    while s.has_work:
        run_step(s, runner, sampler, max_model_len=MAX_LEN)  # type: ignore[arg-type]
        s.check()
        lengths.append(len(s.decoding))
    assert lengths[:2] == [4, 4] and lengths[-1] == 0
    assert s.live_sequences == 0


def test_admission_waits_for_free_sequence_slots() -> None:
    s = Scheduler(max_num_seqs=2, max_num_batched_tokens=64, max_waiting=10)
    s.add(group("a", 4, 5, n=2))
    s.add(group("b", 4, 5))
    plan = s.plan()
    assert [c.seq.group.request_id for c in plan.prefill] == ["a"]
    assert [g.request_id for g in s.waiting] == ["b"]


def test_waiting_queue_is_bounded() -> None:
    s = Scheduler(max_num_seqs=1, max_num_batched_tokens=64, max_waiting=2)
    s.add(group("a", 4, 5))
    s.add(group("b", 4, 5))
    with pytest.raises(Overloaded):
        s.add(group("c", 4, 5))


def test_long_prompt_is_prefilled_in_budget_sized_chunks_while_others_decode() -> None:
    s = Scheduler(max_num_seqs=4, max_num_batched_tokens=16, max_waiting=10)
    runner = SimRunner()
    sampler = sampler_from(random.Random(1))
    s.add(group("short", 3, 30))
    run_step(s, runner, sampler, max_model_len=MAX_LEN)  # type: ignore[arg-type]
    s.add(group("long", 40, 3))
    steps_with_decode = 0
    while any(seq.state is not SeqState.DECODE for seq in s.groups["long"].seqs):
        run_step(s, runner, sampler, max_model_len=MAX_LEN)  # type: ignore[arg-type]
        s.check()
        steps_with_decode += 1
    chunks = [c.count for batch in runner.prefill_batches for c in batch if c.seq.group.request_id == "long"]
    assert sum(chunks) == 40 and max(chunks) <= 16 - 1
    assert len(s.groups["short"].seqs[0].output) == 1 + steps_with_decode  # short kept decoding


def test_n_greater_than_one_forks_after_the_prefill() -> None:
    s = Scheduler(max_num_seqs=8, max_num_batched_tokens=64, max_waiting=10)
    runner = SimRunner()
    s.add(group("solo", 6, 20))
    sampler = sampler_from(random.Random(2))
    run_step(s, runner, sampler, max_model_len=MAX_LEN)  # type: ignore[arg-type]
    s.add(group("fan", 5, 4, n=3))
    s.add(group("late", 7, 4))  # still prefilling behind the fork's new rows
    res = run_step(s, runner, sampler, max_model_len=MAX_LEN)  # type: ignore[arg-type]
    s.check()
    fan = [seq for seq in s.decoding if seq.group.request_id == "fan"]
    assert [seq.index for seq in fan] == [0, 1, 2]
    out = dict(res.outputs)["fan"]
    assert [c.index for c in out.choices] == [0, 1, 2]  # type: ignore[union-attr]
    while s.has_work:
        run_step(s, runner, sampler, max_model_len=MAX_LEN)  # type: ignore[arg-type]
        s.check()
    assert s.reserved == 0 and s.live_sequences == 0


def test_a_fork_keeps_the_rows_prefilled_in_the_same_batch() -> None:
    s = Scheduler(max_num_seqs=6, max_num_batched_tokens=64, max_waiting=10)
    runner = SimRunner()
    s.add(group("fan", 3, 1, n=3))
    s.add(group("next", 6, 2))  # prefilled in the same forward, right behind the forking prompt
    run_step(s, runner, sampler_from(random.Random(4)), max_model_len=MAX_LEN)  # type: ignore[arg-type]
    runner.apply(s.take_ops())
    (nxt,) = s.groups["next"].seqs
    assert nxt.state is SeqState.DECODE and nxt.computed == 6
    runner.check(nxt)


def test_abort_frees_rows_and_reserved_slots_at_once() -> None:
    s = Scheduler(max_num_seqs=6, max_num_batched_tokens=64, max_waiting=10)
    runner = SimRunner()
    sampler = sampler_from(random.Random(3))
    s.add(group("a", 4, 50))
    s.add(group("b", 4, 50, n=2))
    run_step(s, runner, sampler, max_model_len=MAX_LEN)  # type: ignore[arg-type]
    s.add(group("c", 4, 50, n=3))
    s.add(group("d", 4, 50))
    assert s.live_sequences == 3
    aborted = s.abort(["b", "d", "nope"])
    assert [g.request_id for g in aborted] == ["b", "d"]
    assert s.live_sequences == 1 and [g.request_id for g in s.waiting] == ["c"]
    s.plan()  # admits c: its prefill holds a row, its two forks are reserved
    assert s.live_sequences == 2 and s.reserved == 2
    s.abort(["a", "c"])
    assert s.live_sequences == 0 and s.reserved == 0 and not s.groups


def test_stop_ids_finish_with_the_stop_reason() -> None:
    s = Scheduler(max_num_seqs=2, max_num_batched_tokens=64, max_waiting=10)
    s.add(group("a", 4, 50, stop=frozenset({9})))
    runner = SimRunner()
    tokens = iter([5, 6, 9, 7])

    def sampler(logits: list[int], seqs: list[Seq]) -> list[Pick]:
        return [Pick(next(tokens)) for _ in seqs]

    outs = []
    while s.has_work:
        outs += run_step(s, runner, sampler, max_model_len=MAX_LEN).outputs  # type: ignore[arg-type]
    last = outs[-1][1]
    assert last.finished and last.usage is not None  # type: ignore[union-attr]
    assert last.choices[0].finish_reason == "stop" and last.choices[0].stop_reason == 9  # type: ignore[union-attr]
    assert last.usage.completion_tokens == 3  # type: ignore[union-attr]


ops = st.lists(st.tuples(st.sampled_from(["add", "step", "step", "step", "abort"]),
                         st.integers(1, 30), st.integers(1, 12), st.integers(1, 3)), min_size=1, max_size=60)


@settings(max_examples=150, deadline=None)
@given(ops, st.integers(4, 40), st.integers(2, 6))
def test_random_traffic_keeps_every_row_intact(actions: list[tuple[str, int, int, int]], budget: int,
                                               max_seqs: int) -> None:
    s = Scheduler(max_num_seqs=max_seqs, max_num_batched_tokens=budget, max_waiting=100)
    runner = SimRunner()
    sampler = sampler_from(random.Random(budget))
    ids = itertools.count()
    for kind, a, b, c in actions:
        if kind == "add":
            s.add(group(f"g{next(ids)}", a, b, n=min(c, max_seqs)))
        elif kind == "abort" and s.groups:
            s.abort([sorted(s.groups)[a % len(s.groups)]])
        else:
            run_step(s, runner, sampler, max_model_len=MAX_LEN)  # type: ignore[arg-type]
        s.check()
        assert s.live_sequences + s.reserved <= max_seqs
    while s.has_work:
        runner.apply(s.take_ops())
        for seq in s.decoding + s.prefilling:
            runner.check(seq)
        run_step(s, runner, sampler, max_model_len=MAX_LEN)  # type: ignore[arg-type]
        s.check()
    assert s.live_sequences == 0 and s.reserved == 0 and not s.groups
