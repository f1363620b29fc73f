"""The sampler on hand-made logits: every knob does what vLLM's does, draws depend only on
(seed, choice, position), logprobs come in vLLM 0.32's integer token_id form."""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import replace

import pytest
import torch

from engine.local.params import ResolvedParams
from engine.local.sampling import SampleRow, sample, uniform

V = 8
GREEDY = ResolvedParams(temperature=0.0, max_tokens=100)
HOT = ResolvedParams(temperature=1.0, max_tokens=100)


def row(params: ResolvedParams, *, seed: int = 1, index: int = 0, prompt: list[int] | None = None,
        output: list[int] | None = None) -> SampleRow:
    return SampleRow(params, seed, index, prompt if prompt is not None else [0], output or [])


def logits(*values: float) -> torch.Tensor:
    return torch.tensor([values], dtype=torch.float32)


def draws(x: torch.Tensor, params: ResolvedParams, n: int = 400) -> Counter[int]:
    """Distribution of picks over n different seeds."""
    return Counter(sample(x, [row(params, seed=s)])[0].token_id for s in range(n))


def test_greedy_takes_the_argmax_per_row() -> None:
    x = torch.tensor([[0, 3, 1, 0, 0, 0, 0, 0], [5, 0, 0, 0, 0, 0, 0, 9]], dtype=torch.float32)
    assert [s.token_id for s in sample(x, [row(GREEDY), row(GREEDY)])] == [1, 7]


def test_greedy_reads_bf16_logits_like_model_generate() -> None:
    x = logits(0, 1, 2, 3, 2, 1, 0, 0).to(torch.bfloat16)
    assert sample(x, [row(GREEDY)])[0].token_id == 3


def test_uniform_depends_only_on_seed_choice_and_position() -> None:
    assert uniform(7, 0, 12) == uniform(7, 0, 12)
    values = {uniform(7, 0, p) for p in range(200)}
    assert len(values) == 200
    assert all(0.0 <= v < 1.0 for v in values)
    assert uniform(7, 1, 12) != uniform(7, 0, 12)
    assert uniform(8, 0, 12) != uniform(7, 0, 12)


def test_same_seed_same_draw_whatever_else_is_in_the_batch() -> None:
    x = torch.randn(1, 50, generator=torch.Generator().manual_seed(0))
    alone = sample(x, [row(HOT, seed=42)])[0].token_id
    others = torch.randn(5, 50, generator=torch.Generator().manual_seed(1))
    batch = torch.cat([others[:2], x, others[2:]])
    rows = [row(HOT, seed=s) for s in (1, 2)] + [row(HOT, seed=42)] + [row(GREEDY), row(HOT, seed=3)]
    assert sample(batch, rows)[2].token_id == alone


def test_draws_follow_the_softmax_distribution() -> None:
    x = logits(math.log(0.7), math.log(0.2), math.log(0.1), -math.inf, -math.inf, -math.inf, -math.inf, -math.inf)
    counts = draws(x, HOT, 1000)
    assert set(counts) <= {0, 1, 2}
    assert counts[0] > counts[1] > counts[2] > 0


def test_top_k_keeps_only_the_k_best() -> None:
    x = logits(1, 2, 3, 4, 5, 6, 7, 8)
    counts = draws(x, replace(HOT, top_k=2))
    assert set(counts) == {6, 7}


def test_top_p_keeps_the_smallest_set_reaching_p() -> None:
    x = logits(*[math.log(p) for p in (0.5, 0.3, 0.15, 0.05, 1e-9, 1e-9, 1e-9, 1e-9)])
    assert set(draws(x, replace(HOT, top_p=0.75))) == {0, 1}
    assert set(draws(x, replace(HOT, top_p=0.5))) == {0}


def test_min_p_drops_tokens_below_a_fraction_of_the_best() -> None:
    x = logits(*[math.log(p) for p in (0.5, 0.3, 0.15, 0.05, 1e-9, 1e-9, 1e-9, 1e-9)])
    assert set(draws(x, replace(HOT, min_p=0.5))) == {0, 1}


def test_low_temperature_sharpens() -> None:
    x = logits(1.0, 1.2, 0, 0, 0, 0, 0, 0)
    hot = draws(x, HOT)
    cold = draws(x, replace(HOT, temperature=0.05))  # p(1) = 1 / (1 + e^-4 + 6 e^-24) ≈ 0.98
    assert hot[1] < 200 < 380 < cold[1]


def test_logit_bias_and_allowed_token_ids() -> None:
    x = logits(5, 0, 0, 0, 0, 0, 0, 0)
    assert sample(x, [row(replace(GREEDY, logit_bias=((3, 10.0),)))])[0].token_id == 3
    assert sample(x, [row(replace(GREEDY, allowed_token_ids=(2, 4)))])[0].token_id in (2, 4)
    assert set(draws(x, replace(HOT, allowed_token_ids=(2, 4)))) == {2, 4}


def test_min_tokens_masks_every_stop_id_until_reached() -> None:
    x = logits(0, 0, 9, 8, 0, 0, 0, 0)
    p = replace(GREEDY, min_tokens=2, all_stop_ids=frozenset({2, 3}))
    assert sample(x, [row(p, output=[5])])[0].token_id not in (2, 3)
    assert sample(x, [row(p, output=[5, 5])])[0].token_id == 2


def test_repetition_penalty_divides_positive_and_multiplies_negative_seen_logits() -> None:
    x = logits(2.0, 1.5, -1.0, -1.2, 0, 0, 0, 0)
    p = replace(GREEDY, repetition_penalty=2.0)
    # token 0 is in the prompt: 2.0 → 1.0, so token 1 (1.5) wins
    assert sample(x, [row(p, prompt=[0])])[0].token_id == 1
    # negative seen logits get more negative
    y = logits(-1.0, -1.1, -5, -5, -5, -5, -5, -5)
    assert sample(y, [row(p, prompt=[0])])[0].token_id == 1


def test_frequency_and_presence_penalties_count_output_tokens_only() -> None:
    x = logits(3.0, 2.5, 0, 0, 0, 0, 0, 0)
    freq = replace(GREEDY, frequency_penalty=0.3)
    assert sample(x, [row(freq, prompt=[0, 0, 0], output=[])])[0].token_id == 0
    assert sample(x, [row(freq, output=[0])])[0].token_id == 0  # 3.0 - 0.3 > 2.5
    assert sample(x, [row(freq, output=[0, 0])])[0].token_id == 1  # 3.0 - 0.6 < 2.5
    pres = replace(GREEDY, presence_penalty=1.0)
    assert sample(x, [row(pres, output=[0, 0, 0])])[0].token_id == 1


def test_logprobs_are_raw_with_rank_and_top_entries_in_integer_form() -> None:
    x = logits(1, 4, 2, 3, 0, 0, 0, 0)
    p = replace(HOT, temperature=0.5, logprobs=2, logit_bias=((0, 50.0),))  # picks 0 after the bias
    out = sample(x, [row(p)])[0]
    assert out.token_id == 0
    lp = out.logprob
    assert lp is not None
    raw = torch.log_softmax(x[0], -1)
    assert lp.token_id == 0 and lp.logprob == pytest.approx(float(raw[0]))
    assert lp.rank == 4  # raw logits: 4, 3, 2 rank above
    assert [(t.token_id, t.rank) for t in lp.top_logprobs] == [(1, 1), (3, 2)]
    assert lp.model_dump()["top_logprobs"][0] == {"token_id": 1, "logprob": pytest.approx(float(raw[1])), "rank": 1}


def test_logprobs_zero_gives_the_token_only() -> None:
    out = sample(logits(0, 1, 0, 0, 0, 0, 0, 0), [row(replace(GREEDY, logprobs=0))])[0]
    assert out.logprob is not None and out.logprob.rank == 1 and out.logprob.top_logprobs == []
