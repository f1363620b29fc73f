""":class:`Pipeline`: render → generate → derender, chained for the routes and the WebSocket
session (``prepare`` → ``checkpoint`` on a resume → ``stream`` or ``complete``), and the three
stages separately for the WebSocket primitive frames. How a request flows, how streams are
consumed and resumed: docs/serve.md, "How a request flows" and "Resumable streams (WebSocket)".
"""

from __future__ import annotations

from typing import Any

from engine.errors import EngineUnavailable
from engine.interface import Engine, EngineStream
from engine.protocol import GenerateRequest
from server import metrics
from server.context import ServerContext
from server.pipeline import prepare
from server.pipeline.checkpoint import Checkpoints
from server.pipeline.complete import complete
from server.pipeline.stream import PipelineStream
from server.resume_budget import ResumeBudget
from session.client_frames import Kind
from session.protocol.generation_defaults import with_default_max_tokens
from session.render import Renderer
from session.state import StateCodec


class Pipeline:
    """Built once, at start-up, by ``server/services.py`` (with the process's renderer and state codec)."""

    def __init__(self, ctx: ServerContext, renderer: Renderer, codec: StateCodec, *,
                 warn_random_secret: bool = False) -> None:
        self.ctx = ctx
        self.renderer = renderer
        s = ctx.settings
        self.parser_names = (s.tool_call_parser, s.reasoning_parser, s.enable_auto_tool_choice)
        # how often each checkpoint was resumed on this replica (--resume-window, --resumes-per-checkpoint)
        self.resumes = ResumeBudget(window_s=s.resume_window, per_checkpoint=s.resumes_per_checkpoint)
        self.checkpoints = Checkpoints(codec, self.resumes, parser_names=self.parser_names,
                                       model_name=ctx.model_name, warn_random_secret=warn_random_secret)

    @property
    def engine(self) -> Engine:
        if self.ctx.engine is None:
            raise EngineUnavailable("This server has no engine: start it with `tokenwire serve` or "
                                    "`tokenwire launch render --engine-url URL`.")
        return self.ctx.engine

    @property
    def codec(self) -> StateCodec:
        return self.checkpoints.codec

    # --- the three stages, separately (WebSocket primitive frames) -----------------------------
    async def render(self, kind: Kind, body: dict[str, Any]) -> list[GenerateRequest]:
        return await prepare.render(self.renderer, kind, body)

    def generate(self, request: GenerateRequest) -> EngineStream:
        """A tokens-in request (a ``generate`` frame): its own sampling params, with the model's
        default output limit where it names none (vLLM's tokens-only rule)."""
        request = with_default_max_tokens(request, self.renderer.generation_defaults, self.ctx.max_model_len)
        return metrics.generate(self.engine, request)

    # --- whole pipelines ----------------------------------------------------------------------
    async def complete(self, kind: Kind, body: dict[str, Any]) -> dict[str, Any]:
        """The non-streaming answer (``chat.completion`` / ``text_completion`` / Anthropic message)."""
        prep = await prepare.prepare(self.ctx, self.renderer, self.parser_names, kind, {**body, "stream": False})
        return await complete(self.engine, prep, model_name=self.ctx.model_name)

    async def open_stream(self, kind: Kind, body: dict[str, Any], *, resume: dict[str, Any] | None = None,
                          checkpoints: bool = False) -> PipelineStream:
        """Validate, render and admit; the returned stream yields the events."""
        prep = await prepare.prepare(self.ctx, self.renderer, self.parser_names, kind, {**body, "stream": True})
        resumed = self.checkpoints.resume(prep, resume) if resume is not None else None
        stream = PipelineStream(self.engine, prep, model_name=self.ctx.model_name,
                                checkpoints=self.checkpoints if checkpoints else None, resumed=resumed)
        await stream.admit()
        return stream
