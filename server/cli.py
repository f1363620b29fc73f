"""The ``tokenwire`` command line (``tokenwire --help`` prints :data:`DESCRIPTION`).

Every configuration error (a bad flag value, a port in use, a missing model directory, invalid
gating) prints one line and exits 2, and the flags and the port are checked before anything slow
(the model, the tokenizer) loads.
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import os
import socket
import sys
from collections.abc import Callable, Mapping, MutableMapping, Sequence
from pathlib import Path
from typing import NoReturn
from urllib.parse import urlsplit

from engine.access import KEY_ENV as ENGINE_KEY_ENV
from engine.access import check_key
from engine.local.omp import prefer_passive_wait
from engine.local.threads import PLAN_ENV, resolve_plan
from server.assets import ensure_default_model
from server.assets.cli import main as assets_main
from server.gating import GatingError, decide
from server.generation_config import load_generation_defaults, parse_override
from server.hosts import default_allowed_hosts
from server.listener import bind
from server.responses_store import STORE_VARIABLE, check_store_url
from server.resume_budget import RESUME_WINDOW_S, RESUMES_PER_CHECKPOINT
from server.settings import Mode, Settings
from server.workers import Seat, check_workers, seat_of, supervise
from session.parsers import REASONING_PARSERS, TOOL_PARSERS
from session.parsers.auto import AUTO
from session.parsers.auto import resolve as resolve_auto
from session.protocol.generation_defaults import AUTO as GENERATION_AUTO
from session.protocol.generation_defaults import VLLM, resolve
from session.state import check_secret

EXIT_USAGE = 2

DESCRIPTION = """\
tokenwire: a WebSocket streaming-first LLM session server (render -> generate -> derender).

commands:
  tokenwire serve [MODEL] [--tokens-only] [options]   the full server (or the tokens-only engine)
  tokenwire launch render MODEL [--engine-url URL]     render + derender only, no torch
  tokenwire assets [--only NAME ...]                  build the offline model assets

`tokenwire COMMAND --help` documents every flag of a command. A configuration error prints one
line and exits with status 2."""

ENVIRONMENT = """\
environment:
  TOKENWIRE_API_KEY                     an API key to require (as --api-key)
  TOKENWIRE_ENGINE_API_KEY              the key to send to the --engine-url engine (as --engine-api-key)
  TOKENWIRE_STATE_SECRET                the derender state secret (as --state-secret)
  TOKENWIRE_STATE_SECRET_PREVIOUS       the previous state secret while rotating (as a second --state-secret)
  TOKENWIRE_ENABLE_SCALE_OUT_ENDPOINTS  0 or 1 (alias VLLM_ENABLE_SCALE_OUT_ENDPOINTS; 1 as --enable-scale-out)
  TOKENWIRE_RESPONSES_STORE             where stored Responses API responses live (as --responses-store)
  TOKENWIRE_CACHE_DIR                   where the offline model assets are built (default ~/.cache/tokenwire)"""

ENGINE_ENVIRONMENT = """
  TOKENWIRE_NUM_THREADS                 torch threads of the local engine (default: OMP_NUM_THREADS,
                                        else every CPU this process may run on but one, left to
                                        the event loop)
  TOKENWIRE_THREAD_PLAN                 adaptive (default: each forward runs at the thread count that
                                        measured fastest for its size) or fixed (always all of them)
  OMP_WAIT_POLICY                       what torch's OpenMP threads do at a barrier (default under serve:
                                        PASSIVE, they sleep; ACTIVE spins; docs/engine.md, Threads)
  TOKENWIRE_NATIVE_SPIN_US              µs a thread of the native kernels waits awake for the next
                                        kernel before it sleeps (default 100 while the thread count
                                        leaves a CPU free, else 0; 0 sleeps at once)"""

NUM_THREADS_ENV = "TOKENWIRE_NUM_THREADS"


class _Parser(argparse.ArgumentParser):
    """argparse with one-line errors: ``tokenwire serve: error: argument --port: ...`` and exit 2."""

    def error(self, message: str) -> NoReturn:
        self.exit(EXIT_USAGE, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def _int_in(low: int, high: int | None = None, what: str = "") -> Callable[[str], int]:
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
        if value < low or (high is not None and value > high):
            bound = f"{low} to {high}" if high is not None else f"{low} or more"
            raise argparse.ArgumentTypeError(f"{value} is out of range ({bound}{what})")
        return value

    return parse


def _engine_url(text: str) -> str:
    """``--engine-url``: http(s):// for a vLLM-compatible engine, ws(s):// for a tokenwire engine link."""
    try:
        parts = urlsplit(text)
        parts.port  # noqa: B018 - raises on a port that is not a number in range
    except ValueError:
        parts = None
    if parts is None or parts.scheme not in ("http", "https", "ws", "wss") or not parts.hostname:
        raise argparse.ArgumentTypeError(f"{text!r} is not http://HOST[:PORT], https://…, ws://HOST[:PORT] "
                                         "or wss://…")
    return text


def _number(low: float, *, strict: bool = False, what: str = "") -> Callable[[str], float]:
    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
        if not math.isfinite(value):
            raise argparse.ArgumentTypeError(f"{text!r} is not a finite number")
        if value < low or (strict and value == low):
            bound = f"more than {low:g}" if strict else f"{low:g} or more"
            raise argparse.ArgumentTypeError(f"{text} is out of range ({bound}{what})")
        return value

    return parse


def _add_server_flags(p: argparse.ArgumentParser, *, render: bool) -> None:
    p.add_argument("--host", default="127.0.0.1", help="interface to bind (default 127.0.0.1)")
    p.add_argument("--port", type=_int_in(0, 65535, "; 0 picks a free port"), default=8000,
                   help="port to bind (default 8000; 0 picks a free port and prints it)")
    p.add_argument("--served-model-name", default=None,
                   help="model name clients use (default: the model directory's name)")
    p.add_argument("--max-model-len", type=_int_in(1), default=None,
                   help="context length (default: from the model's config)")
    p.add_argument("--chat-template", default=None,
                   help="a Jinja chat template file (or template text) to use instead of the model's")
    p.add_argument("--generation-config", default="auto", metavar="auto|vllm|DIR",
                   help="where requests that leave temperature, top_p, top_k, min_p, repetition_penalty, "
                        "presence_penalty, frequency_penalty or the output limit unset get their defaults, as "
                        "vLLM's flag: auto (default) reads the model's generation_config.json (its "
                        "max_new_tokens is the default output limit); vllm uses vLLM's own defaults; a folder "
                        "reads that folder's generation_config.json, whose max_new_tokens then caps every "
                        "request")
    p.add_argument("--override-generation-config", type=_json_object, default=None, metavar="JSON",
                   help='generation config values merged over --generation-config\'s, as vLLM\'s flag, e.g. '
                        '\'{"temperature": 0.5}\' (null removes one); its max_new_tokens caps every request')
    p.add_argument("--tool-call-parser", default=None, type=_parser_name("tool call", TOOL_PARSERS), metavar="NAME",
                   help=f"tool-call parser, by vLLM's name, or auto (chosen from the model's chat template and "
                        f"config.json): {', '.join(sorted(TOOL_PARSERS))}")
    p.add_argument("--reasoning-parser", default=None, type=_parser_name("reasoning", REASONING_PARSERS),
                   metavar="NAME", help=f"reasoning parser, by vLLM's name, or auto: "
                                        f"{', '.join(sorted(REASONING_PARSERS))}")
    p.add_argument("--enable-auto-tool-choice", action="store_true",
                   help='allow tool_choice "auto" (needs --tool-call-parser)')
    p.add_argument("--api-key", action="append", default=None,
                   help="require this API key (repeatable; env TOKENWIRE_API_KEY)")
    p.add_argument("--state-secret", action="append", default=None, metavar="SECRET",
                   help="secret that signs derender states, at least 32 bytes of random text; share it between "
                        "replicas. Give it twice to rotate: the new secret first (it signs), then the previous "
                        "one (it still verifies) (env TOKENWIRE_STATE_SECRET, TOKENWIRE_STATE_SECRET_PREVIOUS; "
                        "default: random per process, with a warning)")
    p.add_argument("--engine-url", default=None, type=_engine_url,
                   help="the engine for full pipelines: http://HOST:PORT for any vLLM-compatible tokens-only "
                        "engine (one HTTP stream per request), ws://HOST:PORT for a tokenwire `serve "
                        "--tokens-only` (every request on a few multiplexed WebSockets, one message per "
                        "engine step: the cheaper link)"
                   if render else "URL of a remote tokens-only engine to use instead of the local one "
                        "(http:// for vLLM's HTTP API, ws:// for a tokenwire engine's multiplexed link)")
    p.add_argument("--engine-api-key", default=None, metavar="KEY",
                   help="the key this server sends to its --engine-url engine (`Authorization: Bearer KEY` on "
                        "ws:// links and http:// requests): one of the engine's --api-key values (env "
                        "TOKENWIRE_ENGINE_API_KEY; default: none, for an engine that runs without a key)")
    p.add_argument("--engine-timeout", type=_number(0, strict=True), default=300.0,
                   help="seconds a remote engine (--engine-url, http:// or ws://) may send nothing for a "
                        "request before that request fails with 504 (default 300)")
    p.add_argument("--enable-scale-out", action="store_true",
                   help="expose the scale-out endpoints (same as TOKENWIRE_ENABLE_SCALE_OUT_ENDPOINTS=1)")
    p.add_argument("--allowed-origin", action="append", default=None,
                   help="allow WebSocket connections from this Origin (repeatable; default: same host)")
    p.add_argument("--allowed-host", action="append", default=None, metavar="NAME",
                   help="a host name clients may use in the Host header (repeatable; '*': any). Default "
                        "without an API key: localhost and IP addresses, plus this machine's name when bound "
                        "to 0.0.0.0 / ::, or the --host name; with an API key: any. Guards against DNS "
                        "rebinding")
    p.add_argument("--ws-max-frame-bytes", type=_int_in(1), default=16 * 1024 * 1024,
                   help="largest WebSocket message accepted, in bytes (default 16 MiB; larger closes 1009)")
    p.add_argument("--ws-max-in-flight", type=_int_in(1), default=64,
                   help="requests in flight per WebSocket session (default 64)")
    p.add_argument("--ws-idle-timeout", type=_number(0, strict=True), default=300.0,
                   help="close a WebSocket session idle this many seconds (default 300; ping frames count)")
    p.add_argument("--ws-max-lifetime", type=_number(0, strict=True), default=24 * 3600.0,
                   help="close a WebSocket session after this many seconds (default 86400)")
    p.add_argument("--ws-per-message-deflate", action="store_true",
                   help="offer permessage-deflate on WebSocket sessions (default off)")
    p.add_argument("--responses-ws-max-lifetime", type=_number(0, strict=True), default=3600.0,
                   help="close a Responses API WebSocket (GET /v1/responses) after this many seconds, with "
                        "OpenAI's websocket_connection_limit_reached (default 3600, OpenAI's 60 minutes)")
    p.add_argument("--responses-store", metavar="URL", default=None,
                   help="where stored Responses API responses (store: true) live: redis://[:PASSWORD@]HOST[:PORT][/DB], "
                        "shared by every front end pointed at it (env TOKENWIRE_RESPONSES_STORE; default: the "
                        "embedded store, in-process and bounded; docs/responses.md)")
    p.add_argument("--socket-send-buffer", type=_int_in(0), default=128 * 1024,
                   help="kernel send buffer per connection in bytes (default 128 KiB; 0: kernel autotuning, "
                        "which lets a slow reader's stale deltas pile up in megabytes of socket buffer)")
    p.add_argument("--rate-limit", type=_number(0), default=0,
                   help="requests per minute per client (API key, else address), HTTP and WebSocket request "
                        "frames together; past it 429 / error frame rate_limited (default 0: off)")
    p.add_argument("--max-concurrent-requests", type=_int_in(0), default=0,
                   help="requests in flight per client (default 0: off)")
    p.add_argument("--header-timeout", type=_number(0), default=10.0,
                   help="seconds an HTTP request's line and headers may take to arrive, from the connection "
                        "(or the first byte of a later request on it); past it the server answers 408 and "
                        "closes the connection (default 10; 0: off)")
    p.add_argument("--body-timeout", type=_number(0), default=60.0,
                   help="seconds a request body may take to arrive before 408 (default 60; 0: off)")
    p.add_argument("--max-prompts-per-request", type=_int_in(1), default=64,
                   help="prompts one completion may carry, each an engine request: its share of the engine's "
                        "wait queue; more is a 400 before any is queued (default 64; a local engine also caps "
                        "it at --max-waiting)")
    p.add_argument("--resume-window", type=_number(0, strict=True), default=float(RESUME_WINDOW_S), metavar="SECONDS",
                   help="seconds a resume checkpoint may start a stream after the delta that carried it, on any "
                        f"replica; later it is refused as expired (default {RESUME_WINDOW_S})")
    p.add_argument("--resumes-per-checkpoint", type=_int_in(1), default=RESUMES_PER_CHECKPOINT, metavar="N",
                   help="streams one resume checkpoint may start on this replica; more are refused as replayed "
                        f"(default {RESUMES_PER_CHECKPOINT}; the SDKs resume at most 3 times in a row from one "
                        "checkpoint)")
    p.add_argument("--workers", type=_int_in(1), default=1, metavar="N",
                   help="server processes on the one port (SO_REUSEPORT; Linux), each with its own "
                        + ("engine link" if render else "engine (with --tokens-only) or engine link (with --engine-url)")
                        + "; /metrics labels each worker's samples worker=\"K\". Without --state-secret they share "
                          "one generated for them. A worker that dies is restarted (default 1)"
                        + ("" if render else "; plain `serve` runs its model in its own process and takes 1 only"))
    p.add_argument("--shutdown-timeout", type=_number(0), default=20.0,
                   help="on SIGTERM, seconds to let requests in flight finish before ending them with a "
                        "'shutting down' error (default 20; new connections are refused at once)")
    p.add_argument("--log-level", default="info", choices=["debug", "info", "warning", "error"],
                   help="log level (default info)")
    p.add_argument("--disable-access-log", action="store_true",
                   help="no access log: by default each HTTP request and each WebSocket connection is "
                        "logged at INFO")
    if not render:
        p.add_argument("--dtype", default="auto", choices=["auto", "bfloat16", "float32", "float16"],
                       help="weights dtype for the local engine (auto: bf16 when the CPU supports it)")
        p.add_argument("--max-num-seqs", type=_int_in(1), default=32, help="max running sequences (default 32)")
        p.add_argument("--max-num-batched-tokens", type=_int_in(1), default=2048,
                       help="max tokens in one engine step, prefill included (default 2048)")
        p.add_argument("--max-waiting", type=_int_in(0), default=256,
                       help="max queued requests before answering 503 overloaded (default 256)")
        p.add_argument("--num-threads", type=_int_in(1), default=None, metavar="N",
                       help="torch threads of the local engine (as TOKENWIRE_NUM_THREADS, which it overrides; "
                            "default: every usable CPU but one)")


def build_parser() -> argparse.ArgumentParser:
    raw = argparse.RawDescriptionHelpFormatter
    parser = _Parser(prog="tokenwire", description=DESCRIPTION, formatter_class=raw)
    sub = parser.add_subparsers(dest="command", required=True, metavar="{serve,launch,assets}")

    serve = sub.add_parser("serve", help="serve a model: OpenAI / Anthropic endpoints and WebSocket sessions",
                           epilog=ENVIRONMENT + ENGINE_ENVIRONMENT, formatter_class=raw)
    serve.add_argument("model", nargs="?", default=None,
                       help="local Hugging Face model directory (default: the embedded SmolLM2-135M-Instruct)")
    serve.add_argument("--tokens-only", action="store_true",
                       help="serve the token-in/token-out engine (/inference/v1/generate) plus render/derender")
    _add_server_flags(serve, render=False)

    launch = sub.add_parser("launch", help="launch a dedicated tier")
    launch_sub = launch.add_subparsers(dest="tier", required=True)
    render = launch_sub.add_parser("render", help="render + derender only (no torch)", epilog=ENVIRONMENT,
                                   formatter_class=raw)
    render.add_argument("model", help="local Hugging Face model directory (tokenizer and chat template)")
    _add_server_flags(render, render=True)

    assets = sub.add_parser("assets", help="build the offline model assets into the cache")
    assets.add_argument("--only", nargs="*", default=None, help="build only these assets")
    assets.add_argument("--list", action="store_true", help="list assets and where they are cached")
    assets.add_argument("--cache-dir", default=None, help="cache directory (env TOKENWIRE_CACHE_DIR)")
    return parser


def _json_object(text: str) -> dict[str, object]:
    try:
        return parse_override(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc).removeprefix("--override-generation-config ")) from None


def _parser_name(kind: str, known: Mapping[str, object]) -> Callable[[str], str]:
    """An argparse type: a registered parser name or ``auto``, checked when the flags are parsed
    (a misspelt name is a usage error naming the valid ones, before any model loads)."""
    def check(value: str) -> str:
        if value == AUTO or value in known:
            return value
        raise argparse.ArgumentTypeError(f"unknown {kind} parser {value!r}; valid names: auto, "
                                         f"{', '.join(sorted(known))}")
    return check


def model_chat_template(model_dir: Path) -> str | None:
    """The chat template a model directory ships (``chat_template.jinja``, else the default one in
    ``tokenizer_config.json``), without loading the tokenizer."""
    path = model_dir / "chat_template.jinja"
    if path.is_file():
        return path.read_text(encoding="utf-8")
    try:
        config = json.loads((model_dir / "tokenizer_config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    template = config.get("chat_template") if isinstance(config, dict) else None
    if isinstance(template, list):  # named templates: the default one
        named = {t.get("name"): t.get("template") for t in template if isinstance(t, dict)}
        template = named.get("default")
    return template if isinstance(template, str) else None


def auto_parsers(args: argparse.Namespace, model_dir: Path, template: str | None) -> tuple[str | None, str | None]:
    """``--tool-call-parser`` / ``--reasoning-parser`` with ``auto`` resolved from the model's chat
    template (``--chat-template`` when given) and ``config.json``, logged in one line."""
    tool, reasoning = args.tool_call_parser, args.reasoning_parser
    if AUTO not in (tool, reasoning):
        return tool, reasoning
    try:
        config = json.loads((model_dir / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        config = None
    tool, reasoning, line = resolve_auto(tool, reasoning, template or model_chat_template(model_dir),
                                         config if isinstance(config, dict) else None)
    if line:
        logging.getLogger("tokenwire").info("%s", line)
    return tool, reasoning


def _fail(message: str) -> int:
    print(f"tokenwire: error: {message}", file=sys.stderr)
    return EXIT_USAGE


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


def keep_torch_out() -> None:
    """Make this process behave as if torch were not installed.

    ``launch render`` needs no torch, but transformers imports it eagerly whenever it can find it
    (seconds of start-up and hundreds of MB). A ``None`` entry in ``sys.modules`` makes
    ``importlib.util.find_spec("torch")`` answer "not installed" and ``import torch`` fail, so
    transformers takes its torch-free path."""
    if "torch" not in sys.modules:
        sys.modules["torch"] = None  # type: ignore[assignment]


def quiet_transformers(*, progress_bars: bool) -> None:
    """transformers' import-time advice (``[transformers] PyTorch was not found…`` under ``launch
    render``, where torch is deliberately kept out) is noise to an operator, and so is a server's
    "Loading weights" progress bar in its log: off in tokenwire's own processes unless the
    environment sets them (``tokenwire assets`` keeps its progress bars)."""
    os.environ.setdefault("TRANSFORMERS_NO_ADVISORY_WARNINGS", "1")
    if not progress_bars:
        os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")


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


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    args = build_parser().parse_args(argv)
    quiet_transformers(progress_bars=args.command == "assets")
    if args.command == "launch":
        keep_torch_out()
    num_threads_to_env(args, os.environ)
    if args.command == "serve":
        prefer_passive_wait()  # before torch loads: libgomp reads it once (engine/local/omp.py)
    if args.command == "assets":
        return assets_main(args)
    logging.basicConfig(level=args.log_level.upper(), format="%(levelname)s %(name)s: %(message)s")
    environ = dict(os.environ)
    seat = seat_of(environ)
    sock: socket.socket | None = None
    try:
        sock = check_before_loading(args, environ, seat)
        mode = Mode.RENDER if args.command == "launch" else Mode.TOKENS_ONLY if args.tokens_only else Mode.SERVE
        gating = decide(mode, environ, enable_scale_out=args.enable_scale_out,
                        has_engine_url=bool(args.engine_url))
        settings = settings_from_args(args, environ)
        if args.workers > 1 and seat is None:
            return supervise(argv, settings, sock, args.workers)
        if seat is not None:
            seat.watch_supervisor()
            settings = settings.with_(worker=seat.index)
        # lazy, after keep_torch_out(): the server's modules load transformers (and, under `serve`,
        # the local engine loads torch)
        from server.runner import run

        return run(settings, gating, sock, seat)
    except (GatingError, ValueError) as exc:  # server.context.ModelLoadError is a ValueError
        if seat is not None:  # a --workers process: its supervisor prints it, once for all
            seat.fail(str(exc))
            return EXIT_USAGE
        return _fail(str(exc))
    except KeyboardInterrupt:
        return 0
    finally:
        if sock is not None:
            sock.close()


if __name__ == "__main__":
    sys.exit(main())
