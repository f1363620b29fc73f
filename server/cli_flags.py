"""The ``tokenwire`` command line's argument table: the commands, their flags with the types that
check each value as it is parsed (a bad one is a one-line usage error, exit 2), and the help texts.
The commands that read them: server/cli.py.
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable
from typing import NoReturn
from urllib.parse import urlsplit

from server.cli_parsers import parser_name
from server.generation_config import parse_override
from server.resume_budget import RESUME_WINDOW_S, RESUMES_PER_CHECKPOINT
from session.parsers import REASONING_PARSERS, TOOL_PARSERS

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


def _json_object(text: str) -> dict[str, object]:
    try:
        return parse_override(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc).removeprefix("--override-generation-config ")) from None


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
    p.add_argument("--tool-call-parser", default=None, type=parser_name("tool call", TOOL_PARSERS), metavar="NAME",
                   help=f"tool-call parser, by vLLM's name, or auto (chosen from the model's chat template and "
                        f"config.json): {', '.join(sorted(TOOL_PARSERS))}")
    p.add_argument("--reasoning-parser", default=None, type=parser_name("reasoning", REASONING_PARSERS),
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
