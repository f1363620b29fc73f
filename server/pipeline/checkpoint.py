"""A resumable stream's checkpoints (docs/protocol.md §8): what each one signs, and resuming a
stream from one. A checkpoint binds the request's context, the derender state after the event, and
the output ids so far (:class:`OutputDigest`); a resume checks all three, its expiry and this
replica's budget for it (``server/resume_budget.py``), then extends the engine prompt with the
output already received. docs/serve.md, "Resumable streams (WebSocket)".
"""

from __future__ import annotations

import array
import base64
import hashlib
import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from server.pipeline.prepare import ParserNames, Prepared
from server.resume_budget import ResumeBudget
from session.errors import InvalidRequest, StateError
from session.state import RANDOM_SECRET_NOTE, StateBinding, StateCodec, context_digest


class OutputDigest:
    """A running digest of a stream's output token ids, the same however the ids were split into
    steps: each id as 8 little-endian bytes into SHA-256. A checkpoint carries the first 16 bytes
    (22 base64url characters) under its signature, so the ids a resume sends are bound to it."""

    __slots__ = ("_hash",)

    def __init__(self, ids: Sequence[int] = ()) -> None:
        self._hash = hashlib.sha256(b"tokenwire-output-ids|")
        self.update(ids)

    def update(self, ids: Sequence[int]) -> None:
        if ids:
            self._hash.update(array.array("Q", ids).tobytes())  # OverflowError past 2**64 - 1

    def digest(self) -> str:
        return base64.urlsafe_b64encode(self._hash.copy().digest()[:16]).rstrip(b"=").decode()


@dataclass(slots=True)
class Resumed:
    """Where a resumed stream starts: the output tokens already produced, their digest (which its
    checkpoints continue), and an Anthropic stream's event state."""

    offset: int
    digest: OutputDigest
    events: dict[str, Any] | None = None


class Checkpoints:
    """Signs and checks the checkpoints of one server's streams (built once, by ``Pipeline``)."""

    def __init__(self, codec: StateCodec, resumes: ResumeBudget, *, parser_names: ParserNames, model_name: str,
                 warn_random_secret: bool = False) -> None:
        self._codec = codec
        self.resumes = resumes
        self.parser_names = parser_names
        self.model_name = model_name
        # a random per-process secret not yet mentioned (no derender routes): an INFO line at first use
        self._warn_random_secret = warn_random_secret and codec.random_secret

    @property
    def codec(self) -> StateCodec:
        if self._warn_random_secret:
            self._warn_random_secret = False
            logging.getLogger("tokenwire.state").info(RANDOM_SECRET_NOTE)
        return self._codec

    def binding(self, prep: Prepared, index: int) -> StateBinding:
        req = prep.requests[0]
        if prep.context is None:
            # Once, from the rendered prompt: a resumed stream's engine prompt also holds the
            # earlier output, and its checkpoints must bind to the same context as the first
            # stream's, so that it can be resumed again.
            prep.context = context_digest(
                "pipeline", prep.kind, {k: v for k, v in prep.body.items() if k not in ("stream", "request_id")},
                req.token_ids[-64:], len(req.token_ids), self.parser_names, self.model_name)
        return StateBinding(req.request_id or "", index, prep.context)

    def sign(self, prep: Prepared, index: int, count: int, digest: OutputDigest, *,
             events: dict[str, Any] | None = None) -> str:
        """The checkpoint after ``count`` output ids of choice ``index`` (whose digest is ``digest``):
        the derender state, and an Anthropic stream's event state."""
        body: dict[str, Any] = {"t": prep.created, "st": prep.derenderers[0].snapshot(index), "n": count,
                                "h": digest.digest(), "x": int(time.time())}  # x: issued (resume_budget.py)
        if events is not None:
            body["a"] = events
        return self.codec.encode(self.binding(prep, index), count, body)

    def resume(self, prep: Prepared, resume: dict[str, Any]) -> Resumed:
        """Restore the derenderer from a checkpoint and extend the engine prompt with the output
        received so far."""
        if len(prep.requests) != 1:
            raise InvalidRequest("resume supports one prompt per request", param="resume")
        req = prep.requests[0]
        if req.sampling_params.n != 1:
            raise InvalidRequest("resume supports n = 1 only", param="resume")
        rid = resume.get("request_id")
        output = resume.get("output_token_ids")
        if not isinstance(rid, str) or not rid:
            raise InvalidRequest("resume.request_id must be the id of the interrupted stream", param="resume.request_id")
        if not isinstance(output, list) or not all(isinstance(t, int) and 0 <= t < 2**64 for t in output):
            raise InvalidRequest("resume.output_token_ids must be a list of token ids", param="resume.output_token_ids")
        req.request_id = rid
        d = prep.derenderers[0]
        d.request_id = rid
        decoded = self.codec.decode(resume.get("checkpoint"), self.binding(prep, 0))
        snap, count = decoded.body.get("st"), decoded.body.get("n")
        if not isinstance(snap, dict) or count != len(output):
            raise StateError(f"resume.output_token_ids has {len(output)} ids but the checkpoint covers "
                             f"{count}; send the ids received up to that checkpoint.", reason="wrong_request",
                             param="resume")
        digest = OutputDigest(output)
        if decoded.body.get("h") != digest.digest():
            raise StateError("resume.output_token_ids are not the ids the interrupted stream produced up to "
                             "this checkpoint; send them exactly as its frames carried them.",
                             reason="wrong_request", param="resume")
        # expiry (any replica) and the per-checkpoint budget (this replica): server/resume_budget.py
        self.resumes.take(str(resume.get("checkpoint")).rsplit(".", 1)[-1], decoded.body.get("x"), time.time())
        d.restore(0, snap)
        resumed = Resumed(len(output), digest)
        if prep.kind == "messages":
            events = decoded.body.get("a")
            if not isinstance(events, dict):
                raise StateError("the checkpoint does not carry a messages stream's event state.",
                                 reason="wrong_request", param="resume")
            resumed.events = events
        created = decoded.body.get("t", prep.created)
        if type(created) is not int:  # a checkpoint this server did not write (a leaked secret): 400, not 500
            raise StateError("the checkpoint is malformed.", reason="malformed", param="resume")
        prep.created = created
        d.created = prep.created
        sp = req.sampling_params
        if sp.max_tokens is not None:
            remaining = sp.max_tokens - len(output)
            if remaining <= 0:
                raise InvalidRequest("the interrupted stream already used its whole max_tokens budget",
                                     param="resume")
            sp.max_tokens = remaining
        sp.min_tokens = max(0, sp.min_tokens - len(output))
        sp.extra_args = {**(sp.extra_args or {}), "output_offset": len(output)}
        req.token_ids = [*req.token_ids, *output]
        return resumed
