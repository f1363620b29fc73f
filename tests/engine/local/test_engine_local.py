"""LocalEngine behaviours on a real (tiny) model: seeded sampling, resumption, n > 1, stops,
logprobs, aborts freeing memory, admission limits, and torch staying off the event loop."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from engine.errors import EngineOverloaded, InvalidGenerateRequest
from engine.interface import EngineOutput
from tests.support.engine_harness import EngineHarness, collect, request, running_engine

MODEL = "tiny-qwen3"  # eos ids [151645 (primary), 151643] in its generation config
PRIMARY_EOS, EXTRA_EOS = 151645, 151643


@pytest.fixture(scope="module")
def h(asset: Callable[[str], Path]) -> Iterator[EngineHarness]:
    with running_engine(asset(MODEL), dtype="float32", max_num_seqs=16) as harness:
        yield harness


@pytest.fixture(scope="module")
def prompt(tokenizer: Callable[[str], Any]) -> list[int]:
    return list(tokenizer(MODEL)("Tell me a story about a lighthouse keeper.")["input_ids"])


def sampled(p: list[int], **kw: Any) -> Any:
    kw.setdefault("temperature", 0.9)
    kw.setdefault("top_p", 0.95)
    kw.setdefault("seed", 1234)
    return request(p, **kw)


@pytest.mark.slow
def test_same_seed_same_tokens_whatever_shares_the_batch(h: EngineHarness, prompt: list[int]) -> None:
    alone = h.run(sampled(prompt, max_tokens=20))[0].ids
    crowd = [sampled(prompt[i:], max_tokens=15 + i, seed=i) for i in range(1, 6)]
    shared = h.run(*crowd[:2], sampled(prompt, max_tokens=20), *crowd[2:], stagger=0.01)
    assert shared[2].ids == alone
    assert len({tuple(r.ids) for r in shared}) > 2  # the others really sampled something else


def test_different_seeds_give_different_samples(h: EngineHarness, prompt: list[int]) -> None:
    runs = h.run(*[sampled(prompt, max_tokens=12, seed=s, top_p=1.0) for s in range(4)])
    assert len({tuple(r.ids) for r in runs}) == 4


@pytest.mark.parametrize("k", [1, 7])
def test_resumed_generation_continues_exactly(h: EngineHarness, prompt: list[int], k: int) -> None:
    full = h.run(sampled(prompt, max_tokens=16, top_k=50, min_p=0.01))[0].ids
    rest = h.run(sampled(prompt + full[:k], max_tokens=16 - k, top_k=50, min_p=0.01))[0].ids
    assert full[:k] + rest == full


@pytest.mark.parametrize("k", [1, 4, 7])
def test_resumed_generation_with_penalties_continues_exactly_given_output_offset(
        h: EngineHarness, prompt: list[int], k: int) -> None:
    # Presence / frequency penalties count output tokens only: a resumed generation says how many
    # trailing prompt ids are earlier output, so the penalties see the same history. Greedy, so
    # the check is exact (a sampled draw can flip at a CDF boundary between the prefill and the
    # decode computation of the same logits).
    kw: dict[str, Any] = {"temperature": 0.0, "presence_penalty": 1.5, "frequency_penalty": 1.0}
    full = h.run(request(prompt, max_tokens=16, **kw))[0].ids
    rest = h.run(request(prompt + full[:k], max_tokens=16 - k, extra_args={"output_offset": k}, **kw))[0].ids
    assert full[:k] + rest == full
    without = h.run(request(prompt + full[:k], max_tokens=16 - k, **kw))[0].ids
    assert full[:k] + without != full  # the offset is what makes the continuation exact


def test_output_offset_outside_the_prompt_is_a_clear_error(h: EngineHarness, prompt: list[int]) -> None:
    with pytest.raises(InvalidGenerateRequest, match="output_offset"):
        h.run(sampled(prompt, max_tokens=2, extra_args={"output_offset": len(prompt)}))


def test_n_choices_sample_independently_and_choice_zero_matches_n_1(h: EngineHarness, prompt: list[int]) -> None:
    res = h.run(sampled(prompt, max_tokens=10, n=3))[0]
    single = h.run(sampled(prompt, max_tokens=10))[0]
    assert sorted(res.tokens) == [0, 1, 2]
    assert res.tokens[0] == single.ids
    assert len({tuple(t) for t in res.tokens.values()}) > 1
    final = res.outputs[-1]
    assert final.finished and final.usage is not None
    assert final.usage.completion_tokens == 30 and final.usage.prompt_tokens == len(prompt)


def test_a_fork_next_to_other_prefills_keeps_their_tokens(h: EngineHarness, prompt: list[int]) -> None:
    """n > 1 forks move the rows of prompts prefilled in the same batch; they must keep their KV."""
    others = [prompt[:5], prompt[2:], prompt[:-3]]
    alone = [h.run(request(p, max_tokens=8))[0].ids for p in others]
    together = h.run(sampled(prompt, max_tokens=8, n=3), *[request(p, max_tokens=8) for p in others])
    assert [r.ids for r in together[1:]] == alone
    assert together[0].tokens[0] == h.run(sampled(prompt, max_tokens=8))[0].ids


def test_stop_token_id_ends_with_it_and_reports_it(h: EngineHarness, prompt: list[int]) -> None:
    free = h.run(request(prompt, max_tokens=12))[0].ids
    stop = free[4]
    res = h.run(request(prompt, max_tokens=12, stop_token_ids=[stop]))[0]
    assert res.ids == free[:free.index(stop) + 1]
    assert (res.finish[0], res.stop_reason[0]) == ("stop", stop)


def test_eos_ids_from_the_generation_config_stop_unless_ignore_eos(h: EngineHarness, prompt: list[int]) -> None:
    primary = h.run(request(prompt, max_tokens=5, logit_bias={PRIMARY_EOS: 100}))[0]
    assert primary.ids == [PRIMARY_EOS] and (primary.finish[0], primary.stop_reason[0]) == ("stop", None)
    extra = h.run(request(prompt, max_tokens=5, logit_bias={EXTRA_EOS: 100}))[0]
    assert extra.ids == [EXTRA_EOS] and (extra.finish[0], extra.stop_reason[0]) == ("stop", EXTRA_EOS)
    ignored = h.run(request(prompt, max_tokens=5, logit_bias={PRIMARY_EOS: 100}, ignore_eos=True))[0]
    assert ignored.ids == [PRIMARY_EOS] * 5 and ignored.finish[0] == "length"


def test_min_tokens_holds_back_eos(h: EngineHarness, prompt: list[int]) -> None:
    res = h.run(request(prompt, max_tokens=10, min_tokens=3, logit_bias={PRIMARY_EOS: 100}))[0]
    assert PRIMARY_EOS not in res.ids[:3] and res.ids[3] == PRIMARY_EOS and len(res.ids) == 4


def test_logprobs_come_in_vllm_integer_form(h: EngineHarness, prompt: list[int]) -> None:
    res = h.run(request(prompt, max_tokens=4, logprobs=3))[0]
    entries = res.logprobs[0]
    assert [e.token_id for e in entries] == res.ids
    for e in entries:
        assert e.rank == 1  # greedy picks the raw argmax
        assert [t.rank for t in e.top_logprobs] == [1, 2, 3]
        assert e.top_logprobs[0].token_id == e.token_id and e.top_logprobs[0].logprob == e.logprob
        assert e.top_logprobs[0].logprob >= e.top_logprobs[1].logprob >= e.top_logprobs[2].logprob


def test_one_output_per_step_with_that_steps_tokens(h: EngineHarness, prompt: list[int]) -> None:
    res = h.run(request(prompt, max_tokens=6))[0]
    assert [len(o.choices[0].token_ids) for o in res.outputs] == [1] * 6
    assert [o.finished for o in res.outputs] == [False] * 5 + [True]
    assert res.outputs[-1].usage is not None and res.outputs[-1].usage.total_tokens == len(prompt) + 6


def test_stats_count_the_time_inside_model_steps(h: EngineHarness, prompt: list[int]) -> None:
    before = h.engine.stats()
    h.run(request(prompt, max_tokens=4))
    after = h.engine.stats()
    assert after["steps"] - before["steps"] == 4
    assert after["step_seconds"] > before["step_seconds"]
    assert after["step_cpu_seconds"] > before["step_cpu_seconds"]


def test_leaving_the_iteration_early_aborts_and_frees_memory(h: EngineHarness, prompt: list[int]) -> None:
    async def main() -> int:
        res = await collect(h.engine, request(prompt, max_tokens=500, ignore_eos=True), stop_after=2)
        assert len(res.ids) == 2
        return len(res.outputs)

    assert h.call(main) == 2
    assert h.wait_idle() == 0
    assert h.engine.stats()["running"] == 0
    assert h.engine.stats()["kv_cache_bytes"] == 0  # idle: the KV buffers are given back


def test_abort_by_id_ends_the_stream_with_abort(h: EngineHarness, prompt: list[int]) -> None:
    async def main() -> list[EngineOutput]:
        seen: list[EngineOutput] = []
        async for out in h.engine.generate(request(prompt, "victim", max_tokens=500, ignore_eos=True)):
            seen.append(out)
            if len(seen) == 2:
                await h.engine.abort(["generate-tokens-victim", "unknown-id"])
        return seen

    outs = h.call(main)
    assert outs[-1].finished and outs[-1].choices[-1].finish_reason == "abort"
    assert len(outs) <= 4  # stops within a step of the abort
    assert h.wait_idle() == 0


def test_invalid_request_fails_before_the_first_output(h: EngineHarness) -> None:
    with pytest.raises(InvalidGenerateRequest) as info:
        h.run(request([1, 2, 10**7]))
    assert info.value.param == "token_ids"


def test_full_waiting_queue_is_overloaded(asset: Callable[[str], Path], prompt: list[int]) -> None:
    """One running (max_num_seqs=1), one waiting (max_waiting=1): the third is refused with 503."""
    with running_engine(asset(MODEL), dtype="float32", max_num_seqs=1, max_waiting=1) as small:
        async def main() -> tuple[Any, Any, Any]:
            running = small.engine.generate(request(prompt, "r0", max_tokens=60, ignore_eos=True))
            await anext(running)  # r0 holds the only sequence slot
            waiting = asyncio.create_task(collect(small.engine, request(prompt, "r1", max_tokens=5)))
            refused = await asyncio.gather(collect(small.engine, request(prompt, "r2", max_tokens=5)),
                                           return_exceptions=True)
            rest = [out async for out in running]
            return rest[-1], await waiting, refused[0]

        last, waited, refused = small.call(main)
    assert isinstance(refused, EngineOverloaded)
    assert refused.status == 503 and "overloaded" in refused.message
    assert last.finished and waited.finish[0] == "length"


def test_model_work_never_runs_on_the_event_loop_thread(h: EngineHarness, prompt: list[int]) -> None:
    runner = h.engine.runner
    threads: set[str] = set()
    real_prefill, real_decode = runner.prefill, runner.decode

    def prefill(chunks: Any) -> Any:
        threads.add(threading.current_thread().name)
        return real_prefill(chunks)

    def decode(seqs: Any) -> Any:
        threads.add(threading.current_thread().name)
        return real_decode(seqs)

    async def loop_thread() -> str:
        return threading.current_thread().name

    runner.prefill, runner.decode = prefill, decode  # type: ignore[method-assign]
    try:
        h.run(request(prompt, max_tokens=3))
    finally:
        runner.prefill, runner.decode = real_prefill, real_decode  # type: ignore[method-assign]
    assert threads == {"tokenwire-engine"}
    assert h.call(loop_thread) != "tokenwire-engine"
