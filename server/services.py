"""The process's services, built once at start-up, typed, in one place.

:func:`build_services` builds them from the :class:`~server.context.ServerContext` before the
server answers anything (``server/runner.py``; ``create_app`` builds them itself when a test hands
it a context alone): the renderer, the state codec, the derender service, the pipeline, the
WebSocket session's stages and configuration, the limiter, the drain state and the Responses
service (with its store). The app holds them
(``app.state.services``); a route or the WebSocket endpoint reads its own with :func:`services_of`
and the context with :func:`ctx_of`. Nothing here imports a route module: routes depend on
services, never the other way round (tests/project/test_import_rules.py).

Built up front, a configuration the process refuses stops start-up with a ``ValueError`` (the CLI
prints it and exits 2): a ``--chat-template`` that does not compile, an unknown parser name where
the derender routes are served. A missing ``--state-secret`` is warned about at start-up where
the derender routes are served, else noted at INFO when a resumable stream first signs a checkpoint.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from starlette.requests import HTTPConnection

from server import metrics
from server.context import ServerContext, model_architectures, model_type, model_vocab_size
from server.gating import RouteGroup
from server.generation_config import load_generation_defaults, log_generation_defaults
from server.limits import Limiter
from server.pipeline import Pipeline
from server.responses import ResponsesService
from server.responses_background import BackgroundRuns
from server.responses_store import store_from
from server.routing import Route
from server.settings import package_version
from server.shutdown import Drain
from server.ws.end_of_tick import EndOfTick
from server.ws.stages import PipelineStages
from server.ws.work import Stages
from session.derender import DerenderService, resolve_parsers
from session.machine import SessionConfig
from session.render import Renderer
from session.render.harmony import HarmonyRender, is_harmony_model_type
from session.render.vision import Vision
from session.state import StateCodec

# Which route group enables which WebSocket request frame (the same gating as the HTTP routes).
FRAMES_BY_GROUP = {
    RouteGroup.RENDER: ("render",),
    RouteGroup.DERENDER: ("derender",),
    RouteGroup.GENERATE: ("generate",),
    RouteGroup.PIPELINE: ("chat", "completion", "messages", "response"),
}


@dataclass(frozen=True, slots=True)
class Services:
    renderer: Renderer
    codec: StateCodec
    derender: DerenderService | None  # built where the derender routes (and frames) are served
    pipeline: Pipeline
    stages: Stages  # what a WebSocket session drives
    session: SessionConfig  # a WebSocket session's frames, limits and server info
    limiter: Limiter
    drain: Drain
    responses: ResponsesService  # the Responses API, over the pipeline (its store: --responses-store)
    ws_ticks: EndOfTick = field(default_factory=EndOfTick)  # the WebSocket sessions' end-of-tick flushes


def build_services(ctx: ServerContext) -> Services:
    serves_derender = RouteGroup.DERENDER in ctx.gating
    renderer = build_renderer(ctx)
    codec = StateCodec.from_secret(ctx.settings.state_secret, previous=ctx.settings.previous_state_secret,
                                   warn=serves_derender)
    derender = build_derender_service(ctx, codec) if serves_derender else None
    pipeline = Pipeline(ctx, renderer, codec, warn_random_secret=not serves_derender)
    s = ctx.settings
    drain = Drain()
    background = BackgroundRuns(drain, max_per_client=s.max_concurrent_requests)
    responses = ResponsesService(pipeline, codec, store_from(s.responses_store), background=background)
    return Services(renderer=renderer, codec=codec, derender=derender, pipeline=pipeline,
                    stages=PipelineStages(pipeline, derender, responses), session=session_config(ctx),
                    limiter=Limiter(rate_per_minute=s.rate_limit, max_concurrent=s.max_concurrent_requests),
                    drain=drain, responses=responses)


def build_renderer(ctx: ServerContext) -> Renderer:
    """The model's tokenizer, its chat template or ``--chat-template``, the tool-choice flags, its
    image processor when the model takes images (it copies the tokenizer and compiles the
    template: the first request does not pay for it), and its sampling defaults
    (``--generation-config``, logged in one line)."""
    s = ctx.settings
    defaults = load_generation_defaults(s.model_dir, s.generation_config, s.override_generation_config)
    log_generation_defaults(defaults)
    renderer = Renderer(ctx.tokenizer, model_name=ctx.model_name, max_model_len=ctx.max_model_len,
                        chat_template=s.chat_template, tool_call_parser=s.tool_call_parser,
                        enable_auto_tool_choice=s.enable_auto_tool_choice,
                        vision=Vision.load(s.model_dir, ctx.tokenizer), architectures=model_architectures(s.model_dir),
                        harmony=harmony_render(ctx), generation_defaults=defaults)
    return metrics.time_methods(renderer, metrics.RENDER_SECONDS,  # type: ignore[no-any-return]
                                ("render_chat", "render_completion", "render_messages"))


def harmony_render(ctx: ServerContext) -> HarmonyRender | None:
    """gpt-oss's prompt builder, where vLLM 0.32 uses harmony (config.json ``model_type: gpt_oss``),
    with vLLM's environment settings for it (``VLLM_SYSTEM_START_DATE``,
    ``VLLM_GPT_OSS_HARMONY_SYSTEM_INSTRUCTIONS``)."""
    if not is_harmony_model_type(model_type(ctx.settings.model_dir)):
        return None
    return HarmonyRender.from_environ(ctx.tokenizer, ctx.settings.environ)


def build_derender_service(ctx: ServerContext, codec: StateCodec) -> DerenderService:
    """The model's tokenizer, the configured parsers, the state codec and the model's
    ``vocab_size`` (the bound on token ids). Shared by the HTTP routes and WebSocket frames."""
    s = ctx.settings
    parsers = resolve_parsers(s.tool_call_parser, s.reasoning_parser,
                              enable_auto_tool_choice=s.enable_auto_tool_choice)
    service = DerenderService(ctx.tokenizer, model_name=ctx.model_name, max_model_len=ctx.max_model_len,
                              parsers=parsers, codec=codec, vocab_size=model_vocab_size(s.model_dir))
    return metrics.time_methods(service, metrics.DERENDER_SECONDS,  # type: ignore[no-any-return]
                                ("chat", "chat_stream", "completion", "completion_stream"))


def session_config(ctx: ServerContext) -> SessionConfig:
    s = ctx.settings
    frames = frozenset(t for group, types in FRAMES_BY_GROUP.items() if group in ctx.gating for t in types)
    hints = {t: hint for group, types in FRAMES_BY_GROUP.items() if (hint := ctx.gating.hints.get(group))
             for t in types if t not in frames}
    return SessionConfig(model=ctx.model_name, frames=frames, frame_hints=hints, max_in_flight=s.ws_max_in_flight,
                         max_frame_bytes=s.ws_max_frame_bytes, idle_timeout=s.ws_idle_timeout or None,
                         max_lifetime=s.ws_max_lifetime or None,
                         server={"name": "tokenwire", "version": package_version(),
                                 **({"worker": str(s.worker)} if s.worker is not None else {})},
                         features={"tool_call_parser": s.tool_call_parser,
                                   "auto_tool_choice": s.enable_auto_tool_choice and s.tool_call_parser is not None,
                                   "reasoning_parser": s.reasoning_parser})


def ctx_of(conn: HTTPConnection) -> ServerContext:
    """The context of the app serving ``conn`` (a request or a WebSocket)."""
    return conn.app.state.ctx  # type: ignore[no-any-return]


def services_of(conn: HTTPConnection) -> Services:
    """The services of the app serving ``conn``."""
    return conn.app.state.services  # type: ignore[no-any-return]


def routes_of(conn: HTTPConnection) -> tuple[Route, ...]:
    """The HTTP routes the app serving ``conn`` registered (the OpenAPI document lists them)."""
    return conn.app.state.routes  # type: ignore[no-any-return]
