"""Token selection for one engine step, batched over the sequences that need a token.

Order of operations (vLLM v1's): raw logprobs are taken from the model's logits first; then
``allowed_token_ids``, ``min_tokens`` (stop ids masked until reached), ``logit_bias``, the
repetition / frequency / presence penalties; then greedy rows take the argmax, and sampled rows
apply temperature, ``top_k``, ``top_p`` and ``min_p`` and draw one token.

The draw is an inverse-CDF sample with one uniform number that is a pure function of
``(seed, choice index, position of the token)`` (a SplitMix64 counter hash, see
:func:`uniform`). So the same seed gives the same tokens whatever else shares the batch, and a
generation resumed from ``prompt + its first k tokens`` draws exactly what the uninterrupted one
drew at step k (the position of step k's token is the same in both).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from engine.local.params import ResolvedParams
from engine.protocol import TokenLogprob, TopLogprob

_MASK64 = (1 << 64) - 1


def _splitmix64(x: int) -> int:
    x = (x + 0x9E3779B97F4A7C15) & _MASK64
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & _MASK64
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & _MASK64
    return x ^ (x >> 31)


def uniform(seed: int, index: int, position: int) -> float:
    """A uniform number in [0, 1) that depends only on its three arguments."""
    h = _splitmix64((seed & _MASK64) ^ _splitmix64(((index & 0xFFFF) << 48) ^ (position & ((1 << 48) - 1))))
    return (h >> 11) * (1.0 / (1 << 53))


@dataclass(slots=True)
class SampleRow:
    """One sequence that needs its next token in this step."""

    params: ResolvedParams
    seed: int
    index: int  # choice index
    prompt: list[int]
    output: list[int]

    @property
    def position(self) -> int:
        return len(self.prompt) + len(self.output)


@dataclass(slots=True)
class Sampled:
    token_id: int
    logprob: TokenLogprob | None = None


def sample(logits: torch.Tensor, rows: list[SampleRow]) -> list[Sampled]:
    """Pick one token per row of ``logits`` (``[len(rows), vocab]``, any float dtype)."""
    raw = logits.float()
    vocab = raw.shape[-1]
    want_lp = [i for i, r in enumerate(rows) if r.params.logprobs is not None]
    raw_lp = torch.log_softmax(raw[want_lp], dim=-1) if want_lp else None

    x = _process(raw, rows)
    tokens = [0] * len(rows)
    greedy = [i for i, r in enumerate(rows) if r.params.greedy]
    if greedy:
        picked = (x if len(greedy) == len(rows) else x[greedy]).argmax(dim=-1).tolist()
        for i, tok in zip(greedy, picked, strict=True):
            tokens[i] = tok
    sampled = [i for i, r in enumerate(rows) if not r.params.greedy]
    if sampled:
        for i, tok in zip(sampled, _draw(x[sampled], [rows[i] for i in sampled], vocab), strict=True):
            tokens[i] = tok

    out = [Sampled(t) for t in tokens]
    if raw_lp is not None:
        for j, i in enumerate(want_lp):
            out[i].logprob = _logprob_entry(raw_lp[j], tokens[i], rows[i].params.logprobs or 0)
    return out


def _process(raw: torch.Tensor, rows: list[SampleRow]) -> torch.Tensor:
    """Allowed ids, min_tokens, logit_bias and penalties (a copy only when something applies)."""
    x = raw
    for i, row in enumerate(rows):
        p = row.params
        masks_stop = len(row.output) < p.min_tokens and bool(p.all_stop_ids)
        if not (p.allowed_token_ids or masks_stop or p.logit_bias or p.needs_penalties):
            continue
        if x is raw:
            x = raw.clone()
        xi = x[i]
        if p.allowed_token_ids:
            keep = torch.full_like(xi, float("-inf"))
            ids = torch.tensor(p.allowed_token_ids)
            keep[ids] = xi[ids]
            xi.copy_(keep)
        if masks_stop:
            xi[torch.tensor(sorted(p.all_stop_ids))] = float("-inf")
        if p.logit_bias:
            ids = torch.tensor([t for t, _ in p.logit_bias])
            xi.index_add_(0, ids, torch.tensor([b for _, b in p.logit_bias], dtype=xi.dtype))
        if p.needs_penalties:
            _penalize(xi, row)
    return x


def _penalize(x: torch.Tensor, row: SampleRow) -> None:
    p = row.params
    vocab = x.shape[-1]
    output = row.output
    if p.output_offset:  # a resumed generation: its earlier output sits at the end of the prompt
        output = [*row.prompt[len(row.prompt) - p.output_offset:], *row.output]
    out_counts = (torch.bincount(torch.tensor(output, dtype=torch.long), minlength=vocab)[:vocab]
                  if output else torch.zeros(vocab, dtype=torch.long))
    if p.repetition_penalty != 1.0:
        seen = out_counts > 0
        seen[torch.tensor(row.prompt, dtype=torch.long)] = True
        penalized = torch.where(x > 0, x / p.repetition_penalty, x * p.repetition_penalty)
        x.copy_(torch.where(seen, penalized, x))
    if p.frequency_penalty:
        x.sub_(out_counts.to(x.dtype) * p.frequency_penalty)
    if p.presence_penalty:
        x.sub_((out_counts > 0).to(x.dtype) * p.presence_penalty)


def _draw(x: torch.Tensor, rows: list[SampleRow], vocab: int) -> list[int]:
    temps = torch.tensor([r.params.temperature for r in rows], dtype=x.dtype)
    x = x / temps[:, None]
    if any(r.params.top_k > 0 or r.params.top_p < 1.0 for r in rows):
        x = _top_k_top_p(x, rows, vocab)
    if any(r.params.min_p > 0 for r in rows):
        probs = torch.softmax(x, dim=-1)
        min_p = torch.tensor([r.params.min_p for r in rows], dtype=x.dtype)
        x = x.masked_fill(probs < min_p[:, None] * probs.max(dim=-1, keepdim=True).values, float("-inf"))
    probs = torch.softmax(x, dim=-1, dtype=torch.float64)
    cdf = probs.cumsum(dim=-1)
    u = torch.tensor([uniform(r.seed, r.index, r.position) for r in rows], dtype=torch.float64)
    picked = torch.searchsorted(cdf, (u * cdf[:, -1])[:, None], right=True).squeeze(-1)
    return picked.clamp_(max=vocab - 1).tolist()


def _top_k_top_p(x: torch.Tensor, rows: list[SampleRow], vocab: int) -> torch.Tensor:
    sorted_x, order = x.sort(dim=-1, descending=True)
    ks = torch.tensor([r.params.top_k if r.params.top_k > 0 else vocab for r in rows])
    sorted_x = sorted_x.masked_fill(torch.arange(vocab)[None, :] >= ks[:, None], float("-inf"))
    ps = torch.tensor([r.params.top_p for r in rows], dtype=x.dtype)
    if bool((ps < 1.0).any()):
        probs = torch.softmax(sorted_x, dim=-1)
        before = probs.cumsum(dim=-1) - probs  # mass of the tokens ranked above each one
        sorted_x = sorted_x.masked_fill((before >= ps[:, None]) & (ps[:, None] < 1.0), float("-inf"))
    return torch.full_like(x, float("-inf")).scatter_(-1, order, sorted_x)


def _logprob_entry(lp: torch.Tensor, token: int, k: int) -> TokenLogprob:
    value = lp[token]
    rank = int((lp > value).sum()) + 1
    top: list[TopLogprob] = []
    if k > 0:
        values, ids = lp.topk(k)
        top = [TopLogprob(token_id=t, logprob=v, rank=j + 1)
               for j, (t, v) in enumerate(zip(ids.tolist(), values.tolist(), strict=True))]
    return TokenLogprob(token_id=token, logprob=float(value), rank=rank, top_logprobs=top)
