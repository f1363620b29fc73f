"""One engine step, with the model and the sampler behind small protocols (no torch here).

:func:`run_step` is the whole per-step algorithm: plan (scheduler), apply pending KV row
moves, prefill the planned chunks, start the sequences whose prompt is complete (forking
``n > 1`` requests), decode every running sequence by one token, sample, append, check stop
conditions (freeing finished rows at once), and package one :class:`EngineOutput` per request
that got tokens. ``LocalEngine`` runs it on the engine thread with the real model runner and
sampler; tests run it with a simulated KV store to check row moves token for token. A resumed
generation's replay steps (:attr:`~engine.local.scheduler.Sequence.replaying`) run in the forwards
like any row and are left out of sampling.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from engine.errors import EngineError, EngineInternalError
from engine.interface import ChoiceDelta, EngineOutput
from engine.local.scheduler import KVOp, PrefillChunk, RequestGroup, Scheduler
from engine.local.scheduler import Sequence as Seq
from engine.protocol import TokenLogprob, UsageInfo

log = logging.getLogger("tokenwire.engine")


class Runner(Protocol):
    def apply(self, ops: list[KVOp]) -> None: ...

    def prefill(self, chunks: list[PrefillChunk]) -> Any:
        """Indexable: one logits row per chunk (its last token)."""

    def decode(self, seqs: list[Seq]) -> Any:
        """Iterable: one logits row per sequence."""


class Picked(Protocol):
    token_id: int
    logprob: TokenLogprob | None


# (logits rows, sequences) -> one pick per sequence
Sampler = Callable[[list[Any], list[Seq]], Sequence[Picked]]
Delivery = list[tuple[str, EngineOutput | EngineError]]


@dataclass
class StepResult:
    outputs: Delivery = field(default_factory=list)
    tokens: int = 0  # tokens generated in this step


def run_step(sched: Scheduler, runner: Runner, sampler: Sampler, *, max_model_len: int) -> StepResult:
    result = StepResult()
    plan = sched.plan()
    try:
        runner.apply(sched.take_ops())
        if plan.empty:
            return result
        rows: list[Seq] = []
        picks: list[Any] = []
        if plan.prefill:
            logits = runner.prefill(plan.prefill)
            for i, starters in enumerate(sched.prefilled(plan.prefill)):
                for seq in starters:
                    if not seq.replaying:  # a resumed prompt's earlier output comes next: nothing to draw
                        rows.append(seq)
                        picks.append(logits[i])
        if plan.decode:
            logits = runner.decode(plan.decode)
            for seq, row_logits in zip(plan.decode, logits, strict=True):
                seq.computed += 1
                if not seq.replaying:  # replay steps recompute known tokens
                    rows.append(seq)
                    picks.append(row_logits)
        if not rows:
            return result
        sampled = sampler(picks, rows)
    except Exception:
        log.exception("engine step failed")
        failed = {c.seq.group for c in plan.prefill} | {s.group for s in plan.decode}
        for group in failed:
            for seq in group.seqs:
                sched.finish(seq, "error")
            result.outputs.append((group.request_id, EngineInternalError(
                "The engine failed while generating this request; see the server log.")))
        return result

    result.tokens = len(rows)
    deltas: dict[str, list[ChoiceDelta]] = {}
    groups: dict[str, RequestGroup] = {}
    for seq, pick in zip(rows, sampled, strict=True):
        seq.output.append(pick.token_id)
        check_stop(sched, seq, pick.token_id, max_model_len)
        delta = ChoiceDelta(seq.index, [pick.token_id], [pick.logprob] if pick.logprob is not None else None,
                            seq.finish_reason, seq.stop_reason)
        deltas.setdefault(seq.group.request_id, []).append(delta)
        groups[seq.group.request_id] = seq.group
    for key, choices in deltas.items():
        group = groups[key]
        if group.finished:
            result.outputs.append((key, final_output(group, choices)))
        else:
            choices.sort(key=lambda c: c.index)
            result.outputs.append((key, EngineOutput(group.external_id, choices)))
    return result


def check_stop(sched: Scheduler, seq: Seq, token: int, max_model_len: int) -> None:
    """vLLM's order: nothing stops before min_tokens; then eos, stop ids, max_tokens, context."""
    p = seq.group.params
    n = len(seq.output)
    if n >= p.min_tokens:
        if p.eos_token_id is not None and token == p.eos_token_id:
            sched.finish(seq, "stop", None)
            return
        if token in p.stop_ids:
            sched.finish(seq, "stop", token)
            return
    if n >= p.max_tokens or seq.length >= max_model_len:
        sched.finish(seq, "length", None)


def final_output(group: RequestGroup, choices: list[ChoiceDelta]) -> EngineOutput:
    """The last output of a request: finish reasons for choices that had no token in it."""
    have = {c.index for c in choices}
    for seq in group.seqs:
        if seq.index not in have:
            choices.append(ChoiceDelta(seq.index, [], None, seq.finish_reason or "abort", seq.stop_reason))
    choices.sort(key=lambda c: c.index)
    return EngineOutput(group.external_id, choices, finished=True,
                        usage=UsageInfo.of(len(group.prompt), group.completion_tokens))
