"""What a client keeps per resumable stream (docs/protocol.md §8), sans-I/O.

Per stream: the ``stream_id``, the latest non-null ``checkpoint`` and every ``output_token_ids``
received up to and including the frame that carried it. A frame without a checkpoint does not
advance the stream: its chunks are not covered by any checkpoint yet, so a stream that resumes
from the last checkpoint would send them again. :meth:`ResumeTracker.observe` therefore tells the
caller to *hold* such chunks until a later frame's checkpoint covers them (or the stream ends),
and to drop them when the stream resumes: nothing reaches the user twice, nothing is lost.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(slots=True)
class ResumeTracker:
    stream_id: str | None = None
    checkpoint: str | None = None
    covered_ids: list[int] = field(default_factory=list)
    pending_ids: list[int] = field(default_factory=list)
    finished: bool = False  # a chunk with a finish reason is covered: only usage / done can be missing
    resumes: int = 0

    def observe(self, *, stream_id: str | None, checkpoint: str | None, output_token_ids: list[int] | None,
                finishes: bool) -> bool:
        """Record one delta frame; True when its chunks (and any held before) are now covered."""
        if stream_id:
            self.stream_id = stream_id
        ids = output_token_ids or []
        if checkpoint:
            self.covered_ids.extend(self.pending_ids)
            self.covered_ids.extend(ids)
            self.pending_ids.clear()
            self.checkpoint = checkpoint
            self.finished = self.finished or finishes
            return True
        self.pending_ids.extend(ids)
        return False

    def interrupted(self) -> None:
        """The connection dropped: whatever was not covered will be sent again."""
        self.pending_ids.clear()

    def resume_field(self) -> dict[str, Any] | None:
        """The ``resume`` object of the frame that continues the stream (None: start it over, as
        nothing of it was delivered)."""
        if self.checkpoint is None or self.stream_id is None:
            return None
        return {"request_id": self.stream_id, "checkpoint": self.checkpoint,
                "output_token_ids": list(self.covered_ids)}
