"""Completion derender: engine token ids → ``text_completion`` chunks and responses.

The same per-choice machinery as chat (:mod:`session.derender.choice`) without parsers. One
:class:`CompletionDerenderer` serves one prompt (one engine request); its choices are re-indexed
``prompt_index * n + index`` as vLLM numbers them across prompts. With ``echo`` the prompt text
leads the first chunk of each choice (and the non-streaming text).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from engine.protocol import GenerateResponse, TokenLogprob
from session.derender.chat import usage_dict
from session.derender.choice import ChoiceStream, Piece, StreamSpec
from session.derender.logprobs import completion_logprobs

__all__ = ["CompletionDerenderer", "CompletionStep", "completion_response"]


class CompletionStep:
    """As :class:`~session.derender.chat.ChatStep`, for completions."""

    __slots__ = ("chunk", "finished", "piece", "stop_engine")

    def __init__(self, chunk: dict[str, Any] | None, piece: Piece, stop_engine: bool = False,
                 finished: bool = False) -> None:
        self.chunk = chunk
        self.piece = piece
        self.stop_engine = stop_engine
        self.finished = finished


class CompletionDerenderer:
    """Incremental completion derender of one prompt's engine request (``n`` choices)."""

    __slots__ = ("created", "echo_text", "index_base", "model", "prompt_tokens", "request_id",
                 "return_token_ids", "spec", "streams", "top_logprobs", "want_logprobs")

    def __init__(self, spec: StreamSpec, *, request_id: str, created: int, model: str, n: int = 1,
                 prompt_tokens: int = 0, index_base: int = 0, echo_text: str | None = None,
                 want_logprobs: bool = True, top_logprobs: int | None = None,
                 return_token_ids: bool = False, streams: dict[int, ChoiceStream] | None = None) -> None:
        self.spec = spec
        self.request_id = request_id
        self.created = created
        self.model = model
        self.prompt_tokens = prompt_tokens
        self.index_base = index_base
        self.echo_text = echo_text
        self.want_logprobs = want_logprobs
        self.top_logprobs = top_logprobs
        self.return_token_ids = return_token_ids
        self.streams: dict[int, ChoiceStream] = (
            streams if streams is not None else {i: ChoiceStream.new(spec, i) for i in range(n)})

    def stream(self, index: int) -> ChoiceStream:
        s = self.streams.get(index)
        if s is None:
            s = self.streams[index] = ChoiceStream.new(self.spec, index)
        return s

    def snapshot(self, index: int) -> dict[str, Any]:
        return self.stream(index).snapshot()

    def restore(self, index: int, snap: dict[str, Any]) -> None:
        self.streams[index] = ChoiceStream.restore(self.spec, index, snap)

    @property
    def completion_tokens(self) -> int:
        return sum(s.count for s in self.streams.values())

    def _logprobs(self, stream: ChoiceStream, entries: Sequence[TokenLogprob] | None,
                  counted: int) -> dict[str, Any] | None:
        if entries is None or not self.want_logprobs:
            return None
        lp, stream.text_offset = completion_logprobs(self.spec.table, entries[:counted], self.top_logprobs,
                                                     stream.text_offset)
        return lp

    def _lead(self, stream: ChoiceStream) -> str:
        """The echoed prompt before the first text of a choice (sets the logprob offset)."""
        if stream.started:
            return ""
        stream.started = True
        lead = self.echo_text or ""
        stream.text_offset = len(lead)
        return lead

    def push(self, index: int, token_ids: Sequence[int], logprobs: Sequence[TokenLogprob] | None = None,
             finish_reason: str | None = None, stop_reason: int | str | None = None, *,
             always: bool = False) -> CompletionStep:
        stream = self.stream(index)
        piece = stream.push(token_ids, finish_reason, stop_reason)
        first = not stream.started
        lead = self._lead(stream)
        lp = self._logprobs(stream, logprobs if logprobs else None, piece.counted)
        text = lead + piece.content
        if not (text or piece.finish_reason or lp or always or (first and self.echo_text is not None)):
            return CompletionStep(None, piece)
        choice = {"index": self.index_base + index, "text": text, "logprobs": lp,
                  "finish_reason": piece.finish_reason, "stop_reason": piece.stop_reason,
                  "prompt_token_ids": None,
                  "token_ids": list(token_ids[: piece.counted]) if self.return_token_ids else None}
        chunk = {"id": self.request_id, "object": "text_completion", "created": self.created,
                 "model": self.model, "choices": [choice], "usage": None, "system_fingerprint": None,
                 "metrics": None}
        return CompletionStep(chunk, piece, piece.stop_engine, stream.finished)

    def usage_chunk(self, usage: dict[str, Any] | None = None) -> dict[str, Any]:
        if usage is None:
            usage = usage_dict(self.prompt_tokens, self.completion_tokens)
        return {"id": self.request_id, "object": "text_completion", "created": self.created,
                "model": self.model, "choices": [], "usage": usage, "system_fingerprint": None, "metrics": None}

    def response_choices(self, response: GenerateResponse) -> list[dict[str, Any]]:
        """Non-streaming choices for this prompt's whole engine response."""
        out = []
        for gc in response.choices:
            stream = self.stream(gc.index)
            ids = gc.token_ids or []
            piece = stream.push(ids, gc.finish_reason, gc.stop_reason, final=True)
            lead = self._lead(stream)
            lp = self._logprobs(stream, gc.logprobs.content if gc.logprobs is not None else None, piece.counted)
            out.append({"index": self.index_base + gc.index, "text": lead + piece.content, "logprobs": lp,
                        "finish_reason": piece.finish_reason, "stop_reason": piece.stop_reason,
                        "token_ids": list(ids[: piece.counted]) if self.return_token_ids else None,
                        "prompt_logprobs": None, "prompt_token_ids": None, "routed_experts": None})
        return out


def completion_response(derenderers: Sequence[CompletionDerenderer], responses: Sequence[GenerateResponse], *,
                        request_id: str, created: int, model: str) -> dict[str, Any]:
    """One ``text_completion`` for all prompts (one derenderer and one engine response each)."""
    choices: list[dict[str, Any]] = []
    prompt_tokens = completion_tokens = 0
    for d, r in zip(derenderers, responses, strict=True):
        choices.extend(d.response_choices(r))
        prompt_tokens += d.prompt_tokens
        completion_tokens += d.completion_tokens
    choices.sort(key=lambda c: c["index"])
    return {"id": request_id, "object": "text_completion", "created": created, "model": model,
            "choices": choices, "service_tier": None, "system_fingerprint": None,
            "usage": usage_dict(prompt_tokens, completion_tokens), "kv_transfer_params": None,
            "ec_transfer_params": None, "metrics": None}
