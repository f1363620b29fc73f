"""Continuous-batching scheduler of the local engine: admission, KV rows, step planning (no torch).

A plain object driven by the engine thread (it never touches tensors): the waiting queue, admission
under ``max_num_seqs``, the row table (decoding rows first, fixed with :class:`KVOp` row moves), and
:meth:`Scheduler.plan` under ``max_num_batched_tokens``; a resumed generation replays its earlier
output in replay chunks under the same budget where the runner can (:attr:`PrefillChunk.replay`,
``Scheduler.replay_chunk``), else one decode step per token (:attr:`Sequence.replaying`). How:
docs/engine-design.md, "Scheduler and continuous batching", and docs/engine.md, "Exactness".
"""

from __future__ import annotations

import enum
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from engine.local.params import ResolvedParams
from engine.local.prefix import PrefixCache


class SeqState(enum.Enum):
    WAITING = "waiting"
    PREFILL = "prefill"
    DECODE = "decode"
    FINISHED = "finished"


@dataclass(eq=False, slots=True)
class Sequence:
    """One choice of one request."""

    group: RequestGroup
    index: int  # the choice index
    seed: int
    output: list[int] = field(default_factory=list)
    computed: int = 0  # tokens whose keys/values are in the KV store
    row: int = -1
    state: SeqState = SeqState.WAITING
    finish_reason: str | None = None
    stop_reason: int | str | None = None
    matcher: Any = None  # this choice's grammar matcher (structured outputs; engine.local.grammar)
    closing: Any = None  # its budget-aware closing state (engine.local.structured_closing.Closing)

    @property
    def prompt(self) -> list[int]:
        return self.group.prompt

    @property
    def length(self) -> int:
        """Tokens in the sequence so far (prompt + output)."""
        return len(self.group.prompt) + len(self.output)

    @property
    def last_token(self) -> int:
        return self.output[-1] if self.output else self.group.prompt[-1]

    @property
    def replay_start(self) -> int:
        """Where a resumed generation's earlier output starts in the prompt (its length when none)."""
        return len(self.group.prompt) - self.group.params.replay

    @property
    def prefill_end(self) -> int:
        """Prompt positions computed before the sequence decodes: the whole prompt where the
        earlier output is replayed in one pass per chunk (:attr:`RequestGroup.one_pass_replay`),
        else up to :attr:`replay_start`, the rest by decode steps."""
        return len(self.group.prompt) if self.group.one_pass_replay else self.replay_start

    @property
    def next_input(self) -> int:
        """The token a decode step feeds: the one at position ``computed`` (the last token, except
        while replaying earlier output)."""
        prompt = self.group.prompt
        return prompt[self.computed] if self.computed < len(prompt) else self.output[self.computed - len(prompt)]

    @property
    def replaying(self) -> bool:
        """Its next logits belong to a token already known (earlier output being recomputed)."""
        return self.computed < len(self.group.prompt)


@dataclass(eq=False, slots=True)
class RequestGroup:
    """One request: its prompt, resolved params and ``n`` sequences."""

    request_id: str  # the engine's own key (unique even when clients reuse an id)
    prompt: list[int]
    params: ResolvedParams
    seeds: list[int]
    external_id: str = ""  # the id the client knows
    seqs: list[Sequence] = field(default_factory=list)
    admitted: bool = False  # left the waiting queue; its n sequences count against max_num_seqs
    aborted: bool = False
    grammar: Any = None  # compiled structured-output constraint (engine.local.grammar), or None
    mm: Any = None  # the prompt's images (engine.local.vision.VisionPrompt), or None
    one_pass_replay: bool = False  # its earlier output (params.replay) is replayed in replay chunks
    cache_salt: str | None = None  # its prefix-cache tenant (engine.local.prefix): matches only its own salt

    def __post_init__(self) -> None:
        if not self.seqs:
            self.seqs = [Sequence(self, i, seed) for i, seed in enumerate(self.seeds)]

    @property
    def finished(self) -> bool:
        return all(s.state is SeqState.FINISHED for s in self.seqs)

    @property
    def completion_tokens(self) -> int:
        return sum(len(s.output) for s in self.seqs)


@dataclass(frozen=True, slots=True)
class KVOp:
    """A row operation for the KV store: ``move`` copies ``src``'s first ``length`` positions
    into ``dst``; ``swap`` exchanges two rows (``length`` covers both)."""

    kind: str  # "move" | "swap" | "load" (prefix cache entry -> row dst) | "save" (row src -> entry)
    src: int
    dst: int
    length: int
    entry: Any = None  # the prefix cache entry of a "load" / "save" (engine.local.prefix)


@dataclass(frozen=True, slots=True)
class PrefillChunk:
    seq: Sequence
    start: int  # first prompt position computed in this chunk
    count: int

    @property
    def completes(self) -> bool:
        return self.start + self.count == self.seq.prefill_end

    @property
    def replay(self) -> bool:
        """Positions of a resumed generation's earlier output, computed as decode steps are (one
        query row per token) in a forward of their own: ``ModelRunner.prefill``."""
        return self.start >= self.seq.replay_start


@dataclass(frozen=True, slots=True)
class StepPlan:
    prefill: list[PrefillChunk]
    decode: list[Sequence]  # in row order: decode[i].row == i

    @property
    def empty(self) -> bool:
        return not self.prefill and not self.decode


class Overloaded(Exception):
    """The waiting queue is full (the engine turns this into ``EngineOverloaded``)."""


class Scheduler:
    def __init__(self, *, max_num_seqs: int, max_num_batched_tokens: int, max_waiting: int,
                 prefix: PrefixCache | None = None, replay_chunk: int = 0) -> None:
        if max_num_seqs < 1 or max_num_batched_tokens < 1 or max_waiting < 0:
            raise ValueError("scheduler limits must be positive")
        self.prefix = prefix  # prefix caching (engine.local.prefix), or None
        self.max_num_seqs = max_num_seqs
        self.max_num_batched_tokens = max_num_batched_tokens
        self.max_waiting = max_waiting
        self.waiting: deque[RequestGroup] = deque()
        self.groups: dict[str, RequestGroup] = {}
        self.decoding: list[Sequence] = []  # row i == decoding[i]
        self.prefilling: list[Sequence] = []  # row len(decoding) + i
        self.reserved = 0  # sequences of admitted groups not yet holding a row (n > 1 forks)
        self.pending_ops: list[KVOp] = []
        # the most earlier-output tokens of a resumed generation one replay forward takes
        # (ModelRunner.replay_chunk); 0: they are recomputed one decode step each
        self.replay_chunk = replay_chunk

    # --- bookkeeping -----------------------------------------------------------------------
    @property
    def live_sequences(self) -> int:
        """Sequences holding a KV row."""
        return len(self.decoding) + len(self.prefilling)

    def kv_need(self) -> int:
        """Positions the live sequences need in the KV store right now."""
        need = [s.computed + 1 for s in self.decoding] + [s.prefill_end for s in self.prefilling]
        return max(need, default=0)

    @property
    def running_groups(self) -> int:
        return len(self.groups) - len(self.waiting)

    @property
    def has_work(self) -> bool:
        return bool(self.waiting or self.decoding or self.prefilling)

    def add(self, group: RequestGroup) -> None:
        if group.request_id in self.groups:
            raise ValueError(f"duplicate request id {group.request_id!r}")
        if len(self.waiting) >= self.max_waiting:
            raise Overloaded
        group.one_pass_replay = self.replay_chunk > 0 and group.params.replay > 0
        self.groups[group.request_id] = group
        self.waiting.append(group)

    def take_ops(self) -> list[KVOp]:
        ops, self.pending_ops = self.pending_ops, []
        return ops

    # --- planning --------------------------------------------------------------------------
    def plan(self) -> StepPlan:
        """What the next step computes. Admits waiting requests as room allows."""
        decode = list(self.decoding)
        budget = max(self.max_num_batched_tokens - len(decode), self.max_num_batched_tokens // 4, 1)
        chunks: list[PrefillChunk] = []
        width = 0  # longest prompt chunk in the batch (the batch is padded to it)
        prompts = 0  # prompt chunks in the batch
        replayed = 0  # tokens of replay chunks (each a forward of its own, unpadded)

        def fit(seq: Sequence) -> bool:
            nonlocal width, prompts, replayed
            if seq.computed >= seq.replay_start:  # earlier output of a resumed generation, one pass
                room = budget - prompts * width - replayed
                count = min(seq.prefill_end - seq.computed, max(self.replay_chunk, 1), room)
                if count < 1:
                    return False
                chunks.append(PrefillChunk(seq, seq.computed, count))
                replayed += count
                return True
            remaining = seq.replay_start - seq.computed
            if not chunks:
                count = min(remaining, budget)
            else:
                if (prompts + 1) * max(width, remaining) + replayed > budget:
                    return False
                count = remaining
            chunks.append(PrefillChunk(seq, seq.computed, count))
            width = max(width, count)
            prompts += 1
            return True

        for seq in self.prefilling:  # already started (chunked) prompts first, in row order
            if not fit(seq):
                break
        else:
            while self.waiting:
                group = self.waiting[0]
                if self.live_sequences + self.reserved + len(group.seqs) > self.max_num_seqs:
                    break
                first = group.seqs[0]
                hit = self._cached_prefix(first)
                todo = first.replay_start - (hit[1] if hit is not None else 0)
                if chunks and (prompts + 1) * max(width, todo) + replayed > budget:
                    break
                self.waiting.popleft()
                group.admitted = True
                self._start_prefill(first)
                if hit is not None:  # its first positions come from the prefix cache
                    assert self.prefix is not None
                    self.prefix.use(*hit)
                    self.pending_ops.append(KVOp("load", -1, first.row, hit[1], hit[0]))
                    first.computed = hit[1]
                self.reserved += len(group.seqs) - 1
                fit(first)
        return StepPlan(prefill=chunks, decode=decode)

    def _cacheable(self, seq: Sequence) -> bool:
        group = seq.group
        return (self.prefix is not None and self.prefix.enabled and group.mm is None
                and group.params.output_offset == 0)

    def _cached_prefix(self, seq: Sequence) -> tuple[Any, int] | None:
        if not self._cacheable(seq):
            return None
        assert self.prefix is not None
        return self.prefix.lookup(seq.prompt, seq.prefill_end - 1, seq.group.cache_salt)

    def _start_prefill(self, seq: Sequence) -> None:
        seq.state = SeqState.PREFILL
        seq.row = len(self.decoding) + len(self.prefilling)
        self.prefilling.append(seq)

    # --- transitions driven by the engine after a step -------------------------------------
    def prefilled(self, chunks: list[PrefillChunk]) -> list[list[Sequence]]:
        """Record a computed prefill batch. Every chunk's tokens count as computed first (row
        moves below copy them); then each sequence whose prompt is complete starts decoding,
        with its n-1 forks. Returns, per chunk, the sequences that now need their first token."""
        for chunk in chunks:
            chunk.seq.computed = chunk.start + chunk.count
        return [self._start_decoding(chunk) for chunk in chunks]

    def _start_decoding(self, chunk: PrefillChunk) -> list[Sequence]:
        seq = chunk.seq
        if not chunk.completes or seq.state is not SeqState.PREFILL:
            return []
        self._promote(seq)
        if self._cacheable(seq):
            assert self.prefix is not None
            entry = self.prefix.admit(seq.prompt, seq.prefill_end, seq.group.cache_salt)
            if entry is not None:  # copied out of its row before any later row move
                self.pending_ops.append(KVOp("save", seq.row, -1, len(entry.tokens), entry))
        forks = [s for s in seq.group.seqs if s is not seq and s.state is SeqState.WAITING]
        for child in forks:
            self._fork(seq, child)
        self.reserved -= len(forks)
        return [seq, *forks]

    def _promote(self, seq: Sequence) -> None:
        d = len(self.decoding)
        first = self.prefilling[0]
        if first is not seq:  # swap rows so prefilling stays right after decoding
            self.pending_ops.append(KVOp("swap", seq.row, first.row, max(seq.computed, first.computed)))
            i = self.prefilling.index(seq)
            self.prefilling[0], self.prefilling[i] = seq, first
            first.row, seq.row = seq.row, first.row
        self.prefilling.pop(0)
        seq.row = d
        seq.state = SeqState.DECODE
        self.decoding.append(seq)
        for i, other in enumerate(self.prefilling):
            other.row = d + 1 + i

    def _fork(self, parent: Sequence, child: Sequence) -> None:
        d = len(self.decoding)
        if self.prefilling:  # make room at row d: move the first prefilling row to the end
            first = self.prefilling.pop(0)
            new_row = d + 1 + len(self.prefilling)
            self.pending_ops.append(KVOp("move", first.row, new_row, first.computed))
            first.row = new_row
            self.prefilling.append(first)
        self.pending_ops.append(KVOp("move", parent.row, d, parent.computed))
        child.row = d
        child.computed = parent.computed
        child.state = SeqState.DECODE
        self.decoding.append(child)

    def finish(self, seq: Sequence, reason: str, stop_reason: int | str | None = None) -> None:
        """Mark ``seq`` finished and give its row back at once."""
        if seq.state is SeqState.FINISHED:
            return
        seq.finish_reason, seq.stop_reason = reason, stop_reason
        if seq.state is SeqState.DECODE:
            self._free_decode_row(seq)
        elif seq.state is SeqState.PREFILL:
            self._free_prefill_row(seq)
        elif seq.state is SeqState.WAITING and seq.group.admitted:
            self.reserved -= 1  # an admitted group's fork that never got a row
        seq.state = SeqState.FINISHED
        seq.row = -1
        group = seq.group
        if group.finished:
            self.groups.pop(group.request_id, None)
            if group in self.waiting:
                self.waiting.remove(group)

    def _free_decode_row(self, seq: Sequence) -> None:
        r = seq.row
        last = self.decoding.pop()
        if last is not seq:  # the last decoding row fills the hole
            self.pending_ops.append(KVOp("move", last.row, r, last.computed))
            last.row = r
            self.decoding[r] = last
        if self.prefilling:  # the last prefilling row fills the new hole at the end of decoding
            hole = len(self.decoding)
            tail = self.prefilling.pop()
            self.pending_ops.append(KVOp("move", tail.row, hole, tail.computed))
            tail.row = hole
            self.prefilling.insert(0, tail)

    def _free_prefill_row(self, seq: Sequence) -> None:
        i = self.prefilling.index(seq)
        last = self.prefilling.pop()
        if last is not seq:
            self.pending_ops.append(KVOp("move", last.row, seq.row, last.computed))
            last.row = seq.row
            self.prefilling[i] = last

    def abort(self, request_ids: Iterable[str]) -> list[RequestGroup]:
        """Finish every sequence of these requests with "abort"; unknown ids are ignored."""
        out = []
        for rid in request_ids:
            group = self.groups.get(rid)
            if group is None:
                continue
            group.aborted = True
            for seq in group.seqs:
                self.finish(seq, "abort")
            out.append(group)
        return out

    def check(self) -> None:
        """Assert the row layout invariant (used by tests)."""
        for i, s in enumerate(self.decoding):
            assert s.row == i and s.state is SeqState.DECODE, (i, s.row, s.state)
        d = len(self.decoding)
        for i, s in enumerate(self.prefilling):
            assert s.row == d + i and s.state is SeqState.PREFILL, (d + i, s.row, s.state)
