"""What one engine request's outputs become on the generate stage's wire (vLLM 0.32's shapes).

The one place that turns :class:`engine.interface.EngineOutput` values into generate answers, for
every reader of an engine stream that answers with token ids: ``/inference/v1/generate`` (its SSE
events and its JSON answer), the WebSocket ``generate`` frame (one ``generate.delta`` chunk per
output, the usage in ``generate.done``) and the pipeline's non-streaming answer, whose whole
engine response goes to derender.
"""

from __future__ import annotations

from typing import Any

from engine.interface import EngineOutput
from engine.protocol import (
    ChoiceLogprobs,
    GenerateChoice,
    GenerateRequest,
    GenerateResponse,
    GenerateStreamResponse,
    UsageInfo,
)


class GenerateOutputs:
    """One engine request's outputs as they arrive: each becomes a stream chunk (:meth:`chunk`), or
    is kept for the whole answer (:meth:`add`, then :meth:`response`); either way the tokens are
    counted, so :attr:`usage` is the engine's own, or counted when the engine reported none."""

    __slots__ = ("choices", "completion", "prompt_tokens", "reported", "response_id", "want_logprobs")

    def __init__(self, request: GenerateRequest, response_id: str) -> None:
        self.response_id = response_id
        self.prompt_tokens = len(request.token_ids)
        self.want_logprobs = request.sampling_params.logprobs is not None
        self.completion = 0
        self.reported: UsageInfo | None = None
        self.choices: dict[int, GenerateChoice] = {}  # kept by add()

    @property
    def usage(self) -> UsageInfo:
        return self.reported or UsageInfo.of(self.prompt_tokens, self.completion)

    def chunk(self, out: EngineOutput, *, running_usage: bool = False) -> dict[str, Any] | None:
        """The stream event of ``out`` (None when it carries no choice: a usage-only output);
        ``running_usage``: with the usage so far (``stream_options.continuous_usage_stats``)."""
        self._count(out)
        if not out.choices:
            return None
        want = self.want_logprobs
        choices = [GenerateChoice(index=c.index, finish_reason=c.finish_reason, stop_reason=c.stop_reason,
                                  token_ids=c.token_ids,
                                  logprobs=ChoiceLogprobs(content=c.logprobs or []) if want else None)
                   for c in out.choices]
        running = UsageInfo.of(self.prompt_tokens, self.completion) if running_usage else None
        return GenerateStreamResponse(request_id=self.response_id, usage=running, choices=choices).model_dump(
            mode="json")

    def usage_chunk(self) -> dict[str, Any]:
        """The usage-only event that ends a stream with ``stream_options.include_usage``."""
        return {"request_id": self.response_id, "usage": self.usage.model_dump(mode="json", exclude_none=True),
                "output_mode": "tokens", "choices": []}

    def add(self, out: EngineOutput) -> None:
        """Keep ``out``'s tokens, logprobs and finish reasons for :meth:`response`."""
        self._count(out)
        for delta in out.choices:
            choice = self.choices.get(delta.index)
            if choice is None:
                choice = self.choices[delta.index] = GenerateChoice(
                    index=delta.index, token_ids=[],
                    logprobs=ChoiceLogprobs(content=[]) if self.want_logprobs else None)
            assert choice.token_ids is not None
            choice.token_ids.extend(delta.token_ids)
            if choice.logprobs is not None and delta.logprobs:
                choice.logprobs.content.extend(delta.logprobs)
            if delta.finish_reason is not None:
                choice.finish_reason, choice.stop_reason = delta.finish_reason, delta.stop_reason

    def _count(self, out: EngineOutput) -> None:
        self.completion += sum(len(c.token_ids) for c in out.choices)
        if out.usage is not None:
            self.reported = out.usage

    def finished(self) -> int:
        """How many kept choices have a finish reason."""
        return sum(c.finish_reason is not None for c in self.choices.values())

    def stop(self, index: int) -> None:
        """End choice ``index`` with ``length`` unless the engine finished it (derender saw a stop
        string: it reports the stop itself; ``length`` only says the output did not end on an eos
        token, which derender would drop)."""
        choice = self.choices.get(index)
        if choice is not None and choice.finish_reason is None:
            choice.finish_reason, choice.stop_reason = "length", None

    def response(self, model: str, *, n: int | None = None) -> GenerateResponse:
        """The whole answer from what :meth:`add` kept: the choices that produced output, or, with
        ``n``, every choice ``0..n-1`` (one that produced nothing or did not finish: ``abort``,
        its logprobs ``None`` when it has none), for derender."""
        if n is None:
            choices = [self.choices[i] for i in sorted(self.choices)]
        else:
            choices = []
            for i in range(n):
                choice = self.choices.get(i) or GenerateChoice(index=i, token_ids=[])
                if choice.finish_reason is None:
                    choice.finish_reason, choice.stop_reason = "abort", None
                if choice.logprobs is not None and not choice.logprobs.content:
                    choice.logprobs = None
                choices.append(choice)
        return GenerateResponse(request_id=self.response_id, model=model, usage=self.usage, choices=choices)
