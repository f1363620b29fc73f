"""How often one resume checkpoint may start a stream (issue 39 item 5): an expiry every replica
enforces (the checkpoint's issue time ``x`` is under its signature: :data:`RESUME_WINDOW_S`) and a
budget per checkpoint on each replica (:class:`ResumeBudget`: :data:`RESUMES_PER_CHECKPOINT`, in
at most :data:`MAX_REMEMBERED` entries), since a client-carried checkpoint cannot be consumed. The
bounds and what a resumed stream costs: docs/reliability.md, "Resumed streams".
"""

from __future__ import annotations

from collections import OrderedDict

from session.errors import StateError

RESUME_WINDOW_S = 300  # a checkpoint resumes for 5 minutes after it was issued
CLOCK_SKEW_S = 60  # how far in this replica's future a checkpoint's issue time may be (clocks differ)
RESUMES_PER_CHECKPOINT = 4  # the SDKs resume at most 3 times in a row from one checkpoint (docs/protocol.md §8)
MAX_REMEMBERED = 65_536  # checkpoints remembered per replica (about 260 bytes each: 17 MB at most)


class ResumeBudget:
    """The checkpoints resumed on this replica within their window, and how often (sans-I/O: the
    caller passes the time; one per process, used from the event loop)."""

    def __init__(self, *, window_s: float = RESUME_WINDOW_S, per_checkpoint: int = RESUMES_PER_CHECKPOINT,
                 max_remembered: int = MAX_REMEMBERED) -> None:
        self.window_s = window_s
        self.per_checkpoint = per_checkpoint
        self.max_remembered = max_remembered
        self._used: OrderedDict[str, tuple[int, float]] = OrderedDict()  # signature -> (resumes, expires at)

    def __len__(self) -> int:
        return len(self._used)

    def take(self, signature: str, issued: object, now: float) -> None:
        """Count one resume of the checkpoint with this signature, issued at ``issued`` (the
        checkpoint's ``x``); raises :class:`StateError` when it has expired or is used up."""
        if type(issued) is not int:  # a checkpoint from before expiries (or not one of ours)
            raise StateError("the checkpoint has no issue time (a server before this one wrote it); it cannot be "
                             "resumed: restart the stream.", reason="expired", param="resume")
        if issued > now + CLOCK_SKEW_S:  # signed by a replica whose clock is ahead of this one's
            raise StateError(f"the checkpoint was issued {issued - now:.0f} s in this replica's future: the "
                             "replicas' clocks disagree (synchronize them); restart the stream.", reason="expired",
                             param="resume")
        expires = issued + self.window_s
        if now > expires:
            raise StateError(f"the checkpoint expired: a stream resumes within {self.window_s:g} s of its last "
                             "checkpoint; restart the stream.", reason="expired", param="resume")
        self._forget(now)
        count, _ = self._used.get(signature, (0, expires))
        if count >= self.per_checkpoint:
            raise StateError(f"this checkpoint was already resumed {count} times (at most {self.per_checkpoint}); "
                             "resume from a later checkpoint, or restart the stream.", reason="replayed",
                             param="resume")
        self._used[signature] = (count + 1, expires)
        self._used.move_to_end(signature)
        while len(self._used) > self.max_remembered:
            self._used.popitem(last=False)

    def _forget(self, now: float) -> None:
        """Drop expired entries from the oldest end (entries are in order of their last resume,
        which is close to the order of their expiry: every window is the same length)."""
        while self._used:
            key, (_, expires) = next(iter(self._used.items()))
            if expires >= now:
                return
            del self._used[key]
