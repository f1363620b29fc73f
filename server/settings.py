"""Server settings: one frozen value built by the CLI (or by tests) and read everywhere else."""

from __future__ import annotations

import os
from dataclasses import dataclass, field, replace
from enum import StrEnum
from functools import cache
from importlib import metadata
from pathlib import Path
from typing import Any

from server.resume_budget import RESUME_WINDOW_S, RESUMES_PER_CHECKPOINT


@cache
def package_version() -> str:
    """tokenwire's installed version (``/version``, the session's ``server`` info): read once, since
    the lookup scans ``sys.path`` on disk and its callers run on the event loop."""
    try:
        return metadata.version("tokenwire")
    except metadata.PackageNotFoundError:
        return "0+unknown"


class Mode(StrEnum):
    """The three ways to run tokenwire (mirroring vLLM's CLI)."""

    RENDER = "render"  # tokenwire launch render MODEL [--engine-url URL]
    TOKENS_ONLY = "tokens-only"  # tokenwire serve MODEL --tokens-only
    SERVE = "serve"  # tokenwire serve [MODEL]

    @property
    def command(self) -> str:
        return {
            Mode.RENDER: "tokenwire launch render",
            Mode.TOKENS_ONLY: "tokenwire serve --tokens-only",
            Mode.SERVE: "tokenwire serve",
        }[self]


@dataclass(frozen=True, slots=True)
class Settings:
    mode: Mode
    model_dir: Path
    served_model_name: str
    host: str = "127.0.0.1"
    port: int = 8000
    max_model_len: int | None = None
    chat_template: str | None = None  # template text (the CLI reads --chat-template files)
    tool_call_parser: str | None = None
    # sampling defaults (server/generation_config.py): "auto" (the model's generation_config.json),
    # "vllm" (none) or a folder; the override is merged on top, as vLLM's flags of the same names
    generation_config: str = "auto"
    override_generation_config: dict[str, Any] = field(default_factory=dict)
    reasoning_parser: str | None = None
    enable_auto_tool_choice: bool = False
    api_keys: tuple[str, ...] = ()
    state_secret: bytes | None = None  # signs derender states (session/state.py: 32 bytes or more)
    previous_state_secret: bytes | None = None  # still verifies them, while rotating to state_secret
    engine_url: str | None = None
    engine_timeout: float = 300.0  # seconds a remote engine may take to answer (--engine-timeout)
    engine_api_key: str | None = field(default=None, repr=False)  # sent to the engine (--engine-api-key)
    enable_scale_out: bool = False  # the --enable-scale-out flag
    log_level: str = "info"
    access_log: bool = True  # a line per HTTP request and per WebSocket connection (at INFO)
    # engine
    dtype: str = "auto"
    max_num_seqs: int = 32
    max_num_batched_tokens: int = 2048
    max_waiting: int = 256
    # websocket / limits
    allowed_origins: tuple[str, ...] = ()
    # Host names clients may use to reach this server (server/hosts.py; "*": any). The CLI sets the
    # default for the bind address and whether API keys are set (server/hosts.default_allowed_hosts).
    allowed_hosts: tuple[str, ...] = ("*",)
    ws_max_frame_bytes: int = 16 * 1024 * 1024  # a 128k-token prompt as JSON fits several times over
    ws_max_in_flight: int = 64  # requests in flight per session
    ws_idle_timeout: float = 300.0  # seconds without frames or requests before the server closes
    ws_max_lifetime: float = 24 * 3600.0  # seconds a session may live
    ws_per_message_deflate: bool = False  # token streams compress poorly and cost CPU
    responses_ws_max_lifetime: float = 3600.0  # seconds a Responses WebSocket may live (OpenAI's 60 minutes)
    # where stored Responses API responses live (server/responses_store.py): redis://…, None: in-process
    responses_store: str | None = None
    # Kernel send buffer per connection (0: the kernel's autotuning, up to net.ipv4.tcp_wmem's max,
    # 4 MiB here): past it a slow reader's deltas coalesce in the session instead of queueing.
    socket_send_buffer: int = 128 * 1024
    shutdown_timeout: float = 20.0  # seconds SIGTERM waits for work in flight before ending it
    # abuse limits (server/limits.py); 0 turns a limit off
    rate_limit: float = 0  # requests per minute per client (API key, else address)
    max_concurrent_requests: int = 0  # requests in flight per client
    body_timeout: float = 60.0  # seconds a request body may take to arrive
    header_timeout: float = 10.0  # seconds a request's headers may take to arrive (server/header_timeout.py)
    # prompts (engine requests) one completion may carry: its share of the engine's wait queue
    max_prompts_per_request: int = 64
    # how long, and how often, one resume checkpoint may start a stream (server/resume_budget.py)
    resume_window: float = RESUME_WINDOW_S
    resumes_per_checkpoint: int = RESUMES_PER_CHECKPOINT
    worker: int | None = None  # this process's index among --workers N processes (None: it runs alone)
    environ: dict[str, str] = field(default_factory=lambda: dict(os.environ))

    def with_(self, **changes: object) -> Settings:
        return replace(self, **changes)  # type: ignore[arg-type]

    @property
    def needs_local_engine(self) -> bool:
        return self.mode is not Mode.RENDER
