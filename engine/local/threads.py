"""How many of the engine's torch threads each forward gets (torch-free: the runner applies it).

With passive OpenMP threads (engine/local/omp.py) every parallel region of a forward pays a
wake-up (the native kernels' own threads pay less: native/pool.c), so a small step may run faster
on fewer threads; where the line lies depends on the machine, its load and the model, so
:class:`ThreadPlan` measures it while serving. Each forward falls into a bucket (prefill or
decode, tokens or rows, KV length, each to a power of two); a bucket tries each thread count once
(1, the configured count, the powers of two between), runs the fastest by wall time, and
re-checks the others at its 4th forward and then every 32nd, less often while they keep losing.
It assumes a forward's time depends on its own thread count, which holds for passive threads
(and for the native pool's spin, which ends 100 µs after its last call by default). Why, what it
measured and what it costs: docs/engine-design.md, "Each forward's thread count".
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field

PLAN_ENV = "TOKENWIRE_THREAD_PLAN"
PLANS = ("adaptive", "fixed")
WARM_SAMPLES = 1  # tries of each arm before a bucket runs its best one
FIRST_RETRY = 4  # the bucket's forward at which its losing arms are first tried again
EXPLORE_EVERY = 32  # forwards of a bucket between two later tries of an arm that is not its best
MAX_BACKOFF = 16  # an arm that keeps losing is tried every EXPLORE_EVERY * 16 forwards at most
ALPHA = 0.3  # weight of the newest forward in the running arm's average


def resolve_plan(value: str | None = None) -> str:
    """``TOKENWIRE_THREAD_PLAN``: ``adaptive`` (the default) or ``fixed`` (every forward gets every thread)."""
    raw = os.environ.get(PLAN_ENV, "") if value is None else value
    plan = raw.strip().lower() or "adaptive"
    if plan not in PLANS:
        raise ValueError(f"{PLAN_ENV}={raw!r} is not one of {', '.join(PLANS)}")
    return plan


def arms_for(threads: int) -> tuple[int, ...]:
    """1, the powers of two below ``threads``, and ``threads``."""
    arms = {1, threads}
    n = 2
    while n < threads:
        arms.add(n)
        n *= 2
    return tuple(sorted(arms))


@dataclass
class _Bucket:
    arms: tuple[int, ...]
    seconds: list[float | None] = field(init=False)  # running wall time per forward, per arm
    samples: list[int] = field(init=False)
    visits: int = 0
    next_try: int = FIRST_RETRY  # the visit at which a losing arm is tried next
    backoff: int = 1
    rotation: int = 0  # which losing arm is tried next
    trying: int | None = None  # the arm index under trial in the forward now running

    def __post_init__(self) -> None:
        self.seconds = [None] * len(self.arms)
        self.samples = [0] * len(self.arms)

    def best(self) -> int:
        return min(range(len(self.arms)), key=lambda i: self.seconds[i] or 0.0)

    def choose(self) -> int:
        self.trying = None
        cold = [i for i, n in enumerate(self.samples) if n < WARM_SAMPLES]
        if cold:  # learning: the arm with the fewest samples (round-robin between them)
            return min(cold, key=lambda i: self.samples[i])
        self.visits += 1
        best = self.best()
        if self.visits < self.next_try:
            return best
        others = [i for i in range(len(self.arms)) if i != best]
        self.trying = others[self.rotation % len(others)]
        self.rotation += 1
        self.next_try = self.visits + EXPLORE_EVERY * self.backoff
        return self.trying

    def record(self, arm: int, seconds: float) -> None:
        before = self.seconds[arm]
        if self.trying == arm or before is None:  # a try stands for the present on its own
            self.seconds[arm] = seconds
        else:
            self.seconds[arm] = before + ALPHA * (seconds - before)
        self.samples[arm] += 1
        if self.trying == arm:
            won = self.best() == arm
            self.backoff = 1 if won else min(self.backoff * 2, MAX_BACKOFF)
            self.trying = None


class ThreadPlan:
    """Chooses each forward's thread count and learns from its wall time.

    ``choose(kind, tokens, kv_len)`` before the forward, ``record(seconds)`` after it; with one
    thread, or ``fixed``, ``choose`` always returns the configured count and nothing is timed
    (:attr:`timed` is False)."""

    def __init__(self, threads: int, plan: str = "adaptive") -> None:
        self.threads = threads
        self.plan = plan
        self.arms = arms_for(threads) if plan == "adaptive" else (threads,)
        self.timed = len(self.arms) > 1
        self._buckets: dict[tuple[str, int, int], _Bucket] = {}
        self._pending: tuple[_Bucket, int] | None = None
        self.forwards = dict.fromkeys(self.arms, 0)  # forwards run at each thread count

    def choose(self, kind: str, tokens: int, kv_len: int) -> int:
        if not self.timed:
            self.forwards[self.threads] += 1
            return self.threads
        key = (kind, tokens.bit_length(), kv_len.bit_length())
        bucket = self._buckets.get(key)
        if bucket is None:
            bucket = self._buckets[key] = _Bucket(self.arms)
        arm = bucket.choose()
        self._pending = (bucket, arm)
        n = self.arms[arm]
        self.forwards[n] += 1
        return n

    def record(self, seconds: float) -> None:
        if self._pending is None:
            return
        bucket, arm = self._pending
        self._pending = None
        bucket.record(arm, seconds)

    def describe(self) -> str:
        if self.timed:
            return f"adaptive: each forward runs at {'/'.join(map(str, self.arms))} threads, as measured"
        if self.threads == 1:
            return "1 thread"
        return f"fixed: every forward at {self.threads} threads"

    def stats(self) -> dict[str, object]:
        return {"thread_plan": self.describe(),
                "forwards_by_threads": self.counts()}

    def counts(self) -> dict[str, int]:
        """How many calls ran at each thread count, keyed as JSON keys."""
        return {str(n): c for n, c in self.forwards.items()}
