"""The non-streaming answer (``chat.completion`` / ``text_completion`` / Anthropic message): every
engine request of a prepared request run to its end, at once, stopping early at a stop string, then
derendered in one go. docs/serve.md, "How a request flows".
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import anyio

from engine.interface import Engine
from engine.protocol import GenerateRequest, GenerateResponse
from server import metrics
from server.generate_output import GenerateOutputs
from server.pipeline.prepare import Prepared, base_id
from session.derender import ChatDerenderer, CompletionDerenderer, chat_response, completion_response
from session.derender.anthropic_out import message_from_chat
from session.derender.choice import ChoiceStream


async def complete(engine: Engine, prep: Prepared, *, model_name: str) -> dict[str, Any]:
    """The whole answer to ``prep`` (prepared with ``stream: false``)."""
    responses = await collect_all(engine, prep, model_name=model_name)
    if prep.kind == "completion":
        derenderers = [d for d in prep.derenderers if isinstance(d, CompletionDerenderer)]
        return completion_response(derenderers, responses, request_id=base_id(prep.requests), created=prep.created,
                                   model=model_name)
    d = prep.derenderers[0]
    assert isinstance(d, ChatDerenderer)
    chat = chat_response(d, responses[0])
    if prep.kind == "messages":
        assert prep.messages is not None
        return message_from_chat(chat, model=model_name, stop_sequences=list(prep.messages.stop_sequences or []))
    return chat


async def collect_all(engine: Engine, prep: Prepared, *, model_name: str) -> list[GenerateResponse]:
    """Every engine request of one answer, run at once (the engine batches a completion's
    prompts, as vLLM does); the first error cancels the others and is raised as itself."""
    pairs = list(zip(prep.requests, prep.derenderers, strict=True))
    if len(pairs) == 1:
        return [await collect(engine, *pairs[0], model_name=model_name)]
    responses: list[GenerateResponse | None] = [None] * len(pairs)
    errors: list[Exception] = []

    async def one(k: int, req: GenerateRequest, d: ChatDerenderer | CompletionDerenderer) -> None:
        try:
            responses[k] = await collect(engine, req, d, model_name=model_name)
        except Exception as exc:  # kept, not raised: a task group would wrap it in a group
            errors.append(exc)
            tasks.cancel_scope.cancel()

    async with anyio.create_task_group() as tasks:
        for k, (req, d) in enumerate(pairs):
            tasks.start_soon(one, k, req, d)
    if errors:
        raise errors[0]
    done = [r for r in responses if r is not None]
    assert len(done) == len(pairs), "every engine request ended with a response or an error"
    return done


async def collect(engine: Engine, req: GenerateRequest, d: ChatDerenderer | CompletionDerenderer, *,
                  model_name: str) -> GenerateResponse:
    """Run one engine request to the end (stopping early when derender sees a stop string)
    and return its whole response for the non-streaming derender."""
    n = req.sampling_params.n
    outputs = GenerateOutputs(req, req.request_id or "")
    watch = StopWatch(d) if req.sampling_params.stop else None
    stream = metrics.generate(engine, req)
    try:
        async for out in stream:
            outputs.add(out)
            if watch is not None:
                for c in out.choices:
                    if watch.stopped(c.index, c.token_ids):
                        outputs.stop(c.index)  # derender finds the same stop string and reports it
            if outputs.finished() == n:
                break
    finally:
        await stream.aclose()
    return outputs.response(model_name, n=n)


class StopWatch:
    """Runs a choice's tokens through a separate derender stream only to notice stop strings, so
    a non-streaming request stops generating as soon as its text is complete."""

    def __init__(self, d: ChatDerenderer | CompletionDerenderer) -> None:
        self.spec = d.spec
        self.streams: dict[int, ChoiceStream] = {}

    def stopped(self, index: int, token_ids: Sequence[int]) -> bool:
        stream = self.streams.get(index)
        if stream is None:
            stream = self.streams[index] = ChoiceStream.new(self.spec, index)
        return bool(stream.push(token_ids).stop_engine)
