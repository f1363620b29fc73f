"""The one place that chains render → generate → derender, for every full pipeline (OpenAI and
Anthropic endpoints, JSON and SSE, and the WebSocket ``chat`` / ``completion`` / ``messages``
frames): render on a worker thread, admit before any byte is sent, derender each engine step in
memory, stop the engine at a stop string; resumable streams carry signed checkpoints bound to an
:class:`OutputDigest`. How a request flows, how streams are consumed and resumed: docs/serve.md,
"How a request flows" and "Resumable streams (WebSocket)".
"""


from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from typing import Any

import anyio

from engine.errors import EngineUnavailable
from engine.interface import Engine, EngineStream
from engine.protocol import GenerateRequest, GenerateResponse
from server import metrics
from server.context import ServerContext
from server.generate_output import GenerateOutputs
from server.http import validate
from server.pipeline_stream import (
    OutputDigest,
    PipelineStream,
    _Prepared,
)
from server.render_work import json_size, render_work
from server.resume_budget import ResumeBudget
from session.client_frames import Kind
from session.derender import (
    ChatDerenderer,
    CompletionDerenderer,
    chat_derenderer,
    chat_response,
    completion_derenderer,
    completion_response,
)
from session.derender.anthropic_out import message_from_chat
from session.derender.choice import ChoiceStream
from session.errors import InvalidRequest, StateError
from session.protocol.anthropic import MessagesRequest
from session.protocol.generation_defaults import with_default_max_tokens
from session.protocol.openai import ChatCompletionRequest, CompletionRequest
from session.render import Renderer
from session.render.anthropic import to_openai_chat
from session.state import RANDOM_SECRET_NOTE, StateBinding, StateCodec, context_digest


class Pipeline:
    """Built once, at start-up, by ``server/services.py`` (with the process's renderer and state codec)."""

    def __init__(self, ctx: ServerContext, renderer: Renderer, codec: StateCodec, *,
                 warn_random_secret: bool = False) -> None:
        self.ctx = ctx
        self.renderer = renderer
        self._codec = codec
        # a random per-process secret not yet mentioned (no derender routes): an INFO line at first use
        self._warn_random_secret = warn_random_secret and codec.random_secret
        s = ctx.settings
        self.parser_names = (s.tool_call_parser, s.reasoning_parser, s.enable_auto_tool_choice)
        # how often each checkpoint was resumed on this replica (--resume-window, --resumes-per-checkpoint)
        self.resumes = ResumeBudget(window_s=s.resume_window, per_checkpoint=s.resumes_per_checkpoint)

    @property
    def engine(self) -> Engine:
        if self.ctx.engine is None:
            raise EngineUnavailable("This server has no engine: start it with `tokenwire serve` or "
                                    "`tokenwire launch render --engine-url URL`.")
        return self.ctx.engine

    @property
    def codec(self) -> StateCodec:
        if self._warn_random_secret:
            self._warn_random_secret = False
            logging.getLogger("tokenwire.state").info(RANDOM_SECRET_NOTE)
        return self._codec

    # --- the three stages, separately (WebSocket primitive frames) -----------------------------
    async def render(self, kind: Kind, body: dict[str, Any]) -> list[GenerateRequest]:
        if kind == "chat":
            chat = validate(ChatCompletionRequest, body)
            return [await render_work(self.renderer.render_chat, chat, _size(body))]
        if kind == "completion":
            comp = validate(CompletionRequest, body)
            return await render_work(self.renderer.render_completion, comp, _size(body))
        msgs = validate(MessagesRequest, body)
        return [await render_work(self.renderer.render_messages, msgs, _size(body))]

    def generate(self, request: GenerateRequest) -> EngineStream:
        """A tokens-in request (a ``generate`` frame): its own sampling params, with the model's
        default output limit where it names none (vLLM's tokens-only rule)."""
        request = with_default_max_tokens(request, self.renderer.generation_defaults, self.ctx.max_model_len)
        return metrics.generate(self.engine, request)

    # --- whole pipelines ----------------------------------------------------------------------
    async def complete(self, kind: Kind, body: dict[str, Any]) -> dict[str, Any]:
        """The non-streaming answer (``chat.completion`` / ``text_completion`` / Anthropic message)."""
        prep = await self._prepare(kind, {**body, "stream": False})
        responses = await self._collect_all(prep)
        if kind == "completion":
            derenderers = [d for d in prep.derenderers if isinstance(d, CompletionDerenderer)]
            rid = prep.requests[0].request_id or ""
            if len(prep.requests) > 1:
                rid = rid.rsplit("-", 1)[0]
            return completion_response(derenderers, responses, request_id=rid, created=prep.created,
                                       model=self.ctx.model_name)
        d = prep.derenderers[0]
        assert isinstance(d, ChatDerenderer)
        chat = chat_response(d, responses[0])
        if kind == "messages":
            assert prep.messages is not None
            return message_from_chat(chat, model=self.ctx.model_name,
                                     stop_sequences=list(prep.messages.stop_sequences or []))
        return chat

    async def open_stream(self, kind: Kind, body: dict[str, Any], *, resume: dict[str, Any] | None = None,
                          checkpoints: bool = False) -> PipelineStream:
        """Validate, render and admit; the returned stream yields the events."""
        prep = await self._prepare(kind, {**body, "stream": True})
        offsets = [0] * len(prep.requests)
        if resume is not None:
            offsets[0] = self._resume(prep, resume)
        stream = PipelineStream(self, prep, checkpoints=checkpoints, offsets=offsets)
        await stream.admit()
        return stream

    # --- internals ----------------------------------------------------------------------------
    async def _prepare(self, kind: Kind, body: dict[str, Any]) -> _Prepared:
        created = int(time.time())
        tok, model = self.ctx.tokenizer, self.ctx.model_name
        tool_parser, reasoning_parser, auto = self.parser_names
        if kind == "completion":
            comp = validate(CompletionRequest, body)
            self._check_prompt_count(len(comp.prompts()))
            reqs = await render_work(self.renderer.render_completion, comp, _size(body))
            ds: list[ChatDerenderer | CompletionDerenderer] = [
                completion_derenderer(comp, r.token_ids, request_id=_base_id(reqs), created=created, model=model,
                                      tokenizer=tok, prompt_index=k)
                for k, r in enumerate(reqs)
            ]
            so = comp.stream_options
            return _Prepared(kind, body, reqs, ds, completion=comp, created=created,
                             include_usage=bool(so and so.include_usage))
        msgs = None
        if kind == "messages":
            msgs = validate(MessagesRequest, body)
            chat = to_openai_chat(msgs)
            req = await render_work(self.renderer.render_messages, msgs, _size(body))
        else:
            chat = validate(ChatCompletionRequest, body)
            req = await render_work(self.renderer.render_chat, chat, _size(body))
        d = chat_derenderer(chat, req.token_ids, request_id=req.request_id or "", created=created, model=model,
                            tokenizer=tok, tool_parser=tool_parser, reasoning_parser=reasoning_parser,
                            enable_auto_tool_choice=auto)
        so = chat.stream_options
        return _Prepared(kind, body, [req], [d], chat=chat, messages=msgs, created=created,
                         include_usage=bool(so and so.include_usage))

    def _check_prompt_count(self, count: int) -> None:
        """A completion's prompts are one engine request each, all queued at once: past
        ``--max-prompts-per-request`` (its share of the wait queue) or past what the engine can
        queue at all, refuse it before anything is rendered or queued."""
        limit, why = self.ctx.settings.max_prompts_per_request, "--max-prompts-per-request"
        # what a local engine queues before it answers overloaded (``LocalEngine.max_waiting``,
        # --max-waiting); a remote engine's is not known here
        waiting = getattr(self.ctx.engine, "max_waiting", None)
        if isinstance(waiting, int) and max(1, waiting) < limit:
            limit, why = max(1, waiting), "the engine queues at most that many requests: --max-waiting"
        if count > limit:
            raise InvalidRequest(f"prompt holds {count} prompts; this server takes at most {limit} in one request "
                                 f"({why}). Send the others in further requests.", param="prompt")

    async def _collect_all(self, prep: _Prepared) -> list[GenerateResponse]:
        """Every engine request of one answer, run at once (the engine batches a completion's
        prompts, as vLLM does); the first error cancels the others and is raised as itself."""
        pairs = list(zip(prep.requests, prep.derenderers, strict=True))
        if len(pairs) == 1:
            return [await self._collect(*pairs[0])]
        responses: list[GenerateResponse | None] = [None] * len(pairs)
        errors: list[Exception] = []

        async def collect(k: int, req: GenerateRequest, d: ChatDerenderer | CompletionDerenderer) -> None:
            try:
                responses[k] = await self._collect(req, d)
            except Exception as exc:  # kept, not raised: a task group would wrap it in a group
                errors.append(exc)
                tasks.cancel_scope.cancel()

        async with anyio.create_task_group() as tasks:
            for k, (req, d) in enumerate(pairs):
                tasks.start_soon(collect, k, req, d)
        if errors:
            raise errors[0]
        done = [r for r in responses if r is not None]
        assert len(done) == len(pairs), "every engine request ended with a response or an error"
        return done

    async def _collect(self, req: GenerateRequest, d: ChatDerenderer | CompletionDerenderer) -> GenerateResponse:
        """Run one engine request to the end (stopping early when derender sees a stop string)
        and return its whole response for the non-streaming derender."""
        n = req.sampling_params.n
        outputs = GenerateOutputs(req, req.request_id or "")
        watch = _StopWatch(d) if req.sampling_params.stop else None
        stream = metrics.generate(self.engine, req)
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
        return outputs.response(self.ctx.model_name, n=n)

    def _binding(self, prep: _Prepared, index: int) -> StateBinding:
        req = prep.requests[0]
        if prep.context is None:
            # Once, from the rendered prompt: a resumed stream's engine prompt also holds the
            # earlier output, and its checkpoints must bind to the same context as the first
            # stream's, so that it can be resumed again.
            prep.context = context_digest(
                "pipeline", prep.kind, {k: v for k, v in prep.body.items() if k not in ("stream", "request_id")},
                req.token_ids[-64:], len(req.token_ids), self.parser_names, self.ctx.model_name)
        return StateBinding(req.request_id or "", index, prep.context)

    def _resume(self, prep: _Prepared, resume: dict[str, Any]) -> int:
        """Restore the derenderer from a checkpoint and extend the engine prompt with the output
        received so far. Returns the number of output tokens already produced."""
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
        decoded = self.codec.decode(resume.get("checkpoint"), self._binding(prep, 0))
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
        prep.output_digest = digest
        d.restore(0, snap)
        if prep.kind == "messages":
            events = decoded.body.get("a")
            if not isinstance(events, dict):
                raise StateError("the checkpoint does not carry a messages stream's event state.",
                                 reason="wrong_request", param="resume")
            prep.resume_events = events
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
        return len(output)



def _base_id(reqs: Sequence[GenerateRequest]) -> str:
    rid = reqs[0].request_id or ""
    return rid.rsplit("-", 1)[0] if len(reqs) > 1 else rid


class _StopWatch:
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


def _size(body: dict[str, Any]) -> int:
    """About the request body's size as JSON, up to just past the inline limit (what decides where it
    renders: ``server.render_work``); never serialized again, so any body the reader took is measured."""
    return json_size(body)
