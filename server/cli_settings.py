"""The ``tokenwire`` flags and environment as :class:`~server.settings.Settings`, and the checks that
need no model, done before any loads (the rules between flags, the environment, the port). The
argument table: server/cli_flags.py; the commands: server/cli.py.
"""

from __future__ import annotations

import argparse
import socket
from collections.abc import MutableMapping
from pathlib import Path

from engine.access import KEY_ENV as ENGINE_KEY_ENV
from engine.access import check_key
from engine.local.threads import PLAN_ENV, resolve_plan
from server.assets import ensure_default_model
from server.cli_parsers import auto_parsers
from server.generation_config import load_generation_defaults
from server.hosts import default_allowed_hosts
from server.listener import bind
from server.responses_store import STORE_VARIABLE, check_store_url
from server.settings import Mode, Settings
from server.workers import Seat, check_workers
from session.protocol.generation_defaults import AUTO as GENERATION_AUTO
from session.protocol.generation_defaults import VLLM, resolve
from session.state import check_secret

NUM_THREADS_ENV = "TOKENWIRE_NUM_THREADS"


def settings_from_args(args: argparse.Namespace, environ: dict[str, str]) -> Settings:
    if args.command == "serve":
        mode = Mode.TOKENS_ONLY if args.tokens_only else Mode.SERVE
    else:
        mode = Mode.RENDER
    if args.model is None:
        model_dir = ensure_default_model()
    else:
        model_dir = Path(args.model).expanduser().resolve()
    template = args.chat_template
    if template is not None and "{" not in template:
        path = Path(template).expanduser()
        try:
            template = path.read_text()
        except OSError as exc:
            raise ValueError(f"cannot read --chat-template {path}: {exc.strerror}") from None
    tool_parser, reasoning_parser = auto_parsers(args, model_dir, template)
    keys = tuple(args.api_key or ()) or tuple(k for k in [environ.get("TOKENWIRE_API_KEY")] if k)
    secret, previous = state_secrets(args, environ)
    extra = {}
    if mode is not Mode.RENDER:
        extra = {"dtype": args.dtype, "max_num_seqs": args.max_num_seqs,
                 "max_num_batched_tokens": args.max_num_batched_tokens, "max_waiting": args.max_waiting}
    return Settings(
        mode=mode,
        model_dir=model_dir,
        served_model_name=args.served_model_name or model_dir.name,
        host=args.host,
        port=args.port,
        max_model_len=args.max_model_len,
        chat_template=template,
        tool_call_parser=tool_parser,
        generation_config=args.generation_config,
        override_generation_config=dict(args.override_generation_config or {}),
        reasoning_parser=reasoning_parser,
        enable_auto_tool_choice=args.enable_auto_tool_choice,
        api_keys=keys,
        state_secret=secret,
        previous_state_secret=previous,
        engine_url=args.engine_url,
        engine_timeout=args.engine_timeout,
        engine_api_key=engine_api_key(args, environ),
        enable_scale_out=args.enable_scale_out,
        log_level=args.log_level,
        access_log=not args.disable_access_log,
        allowed_origins=tuple(args.allowed_origin or ()),
        allowed_hosts=(tuple(args.allowed_host) if args.allowed_host
                       else default_allowed_hosts(args.host, api_keys=bool(keys))),
        ws_max_frame_bytes=args.ws_max_frame_bytes,
        ws_max_in_flight=args.ws_max_in_flight,
        ws_idle_timeout=args.ws_idle_timeout,
        ws_max_lifetime=args.ws_max_lifetime,
        ws_per_message_deflate=args.ws_per_message_deflate,
        responses_ws_max_lifetime=args.responses_ws_max_lifetime,
        responses_store=responses_store(args, environ),
        socket_send_buffer=args.socket_send_buffer,
        shutdown_timeout=args.shutdown_timeout,
        rate_limit=args.rate_limit,
        max_concurrent_requests=args.max_concurrent_requests,
        body_timeout=args.body_timeout,
        header_timeout=args.header_timeout,
        max_prompts_per_request=args.max_prompts_per_request,
        resume_window=args.resume_window,
        resumes_per_checkpoint=args.resumes_per_checkpoint,
        environ=environ,
        **extra,
    )


def responses_store(args: argparse.Namespace, environ: dict[str, str]) -> str | None:
    """``--responses-store``, else ``TOKENWIRE_RESPONSES_STORE``; ``ValueError`` for a URL that is not
    a Redis one (server/responses_store.py reads it)."""
    url = args.responses_store if args.responses_store is not None else environ.get(STORE_VARIABLE) or None
    if url is not None:
        check_store_url(url)
    return url


def engine_api_key(args: argparse.Namespace, environ: dict[str, str]) -> str | None:
    """``--engine-api-key``, else ``TOKENWIRE_ENGINE_API_KEY``, for a server with ``--engine-url``
    (the variable alone is ignored without one: an engine's environment may carry it too).
    ``ValueError`` for the flag without ``--engine-url`` or a key no header can carry."""
    if args.engine_api_key is not None and not args.engine_url:
        raise ValueError("--engine-api-key needs --engine-url (the engine it is sent to)")
    key = args.engine_api_key if args.engine_api_key is not None else environ.get(ENGINE_KEY_ENV) or None
    return check_key(key) if key is not None and args.engine_url else None


def state_secrets(args: argparse.Namespace, environ: dict[str, str]) -> tuple[bytes | None, bytes | None]:
    """The current and the previous state secret: ``--state-secret`` given once or twice, else the
    environment. ``ValueError`` for more than two or a weak one (session/state.py's rules)."""
    given = list(args.state_secret or ())
    if not given:
        given = [v for v in (environ.get("TOKENWIRE_STATE_SECRET"), environ.get("TOKENWIRE_STATE_SECRET_PREVIOUS")) if v]
        if len(given) == 1 and not environ.get("TOKENWIRE_STATE_SECRET"):
            raise ValueError("TOKENWIRE_STATE_SECRET_PREVIOUS needs TOKENWIRE_STATE_SECRET (the new secret)")
    if len(given) > 2:
        raise ValueError("--state-secret is given at most twice: the new secret, then the previous one")
    secrets = [g.encode() for g in given]
    for k, secret in enumerate(secrets):
        check_secret(secret, "--state-secret" if k == 0 else "the previous --state-secret")
    if len(secrets) == 2 and secrets[0] == secrets[1]:
        raise ValueError("the two --state-secret values are the same; give the new secret, then the previous one")
    return (secrets[0] if secrets else None), (secrets[1] if len(secrets) > 1 else None)


def check_before_loading(args: argparse.Namespace, environ: dict[str, str],
                         seat: Seat | None = None) -> socket.socket:
    """The checks that need no model, done before any is loaded: the rules between flags, the
    environment, and the port (bound here, listened on once the server is ready; a ``--workers``
    process gets its socket from its supervisor, ``seat``)."""
    if args.enable_auto_tool_choice and not args.tool_call_parser:
        raise ValueError("--enable-auto-tool-choice needs --tool-call-parser")
    if args.command == "serve" and args.tokens_only and args.engine_url:
        raise ValueError("--engine-url cannot be combined with --tokens-only")
    threads = environ.get(NUM_THREADS_ENV, "")
    if args.command == "serve" and threads and not (threads.isdigit() and int(threads) > 0):
        raise ValueError(f"{NUM_THREADS_ENV}={threads!r} is not a positive whole number of threads")
    if args.command == "serve":
        resolve_plan(environ.get(PLAN_ENV, ""))
    state_secrets(args, environ)
    engine_api_key(args, environ)
    check_workers(args.command, workers=args.workers, tokens_only=getattr(args, "tokens_only", False),
                  engine_url=args.engine_url)
    if args.generation_config not in (GENERATION_AUTO, VLLM):  # a folder without a generation config, or a bad value
        load_generation_defaults(Path(args.generation_config), args.generation_config,
                                 args.override_generation_config)
    else:  # the model directory's own file is read with the model (the default model may not be built yet)
        resolve(None, source=VLLM, override=args.override_generation_config)
    if seat is not None:  # a --workers process: its supervisor bound its socket
        return seat.socket()
    return bind(args.host, args.port, send_buffer=args.socket_send_buffer, reuse_port=args.workers > 1)


def num_threads_to_env(args: argparse.Namespace, environ: MutableMapping[str, str]) -> None:
    """``serve --num-threads N`` as ``TOKENWIRE_NUM_THREADS=N``, which the local engine and every
    ``--workers`` process read (engine/local/device.py)."""
    if args.command == "serve" and args.num_threads is not None:
        environ[NUM_THREADS_ENV] = str(args.num_threads)
