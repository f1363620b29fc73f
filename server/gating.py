"""Which route groups a server exposes: the one place that decides it.

Semantics (README.md, "Scale-out endpoints"; after vLLM's ``VLLM_ENABLE_SCALE_OUT_ENDPOINTS``):

- ``TOKENWIRE_ENABLE_SCALE_OUT_ENDPOINTS`` (alias ``VLLM_ENABLE_SCALE_OUT_ENDPOINTS``) accepts only
  ``0`` and ``1``; both set and different is a startup error; ``--enable-scale-out`` means ``1``.
- Dedicated modes (``launch render``, ``serve --tokens-only``) always expose their endpoints; an
  explicit ``0`` there is a startup error naming the mode.
- Plain ``serve`` exposes the scale-out endpoints only with ``1``; otherwise it logs an INFO hint
  and the routes do not exist: a request for one is a 404, and its frame ``not_enabled``, that
  says how to enable it (``Gating.hints``: ``--enable-scale-out``; ``--engine-url`` for the
  pipelines of ``launch render``).
- ``/abort_requests`` exists only in ``--tokens-only`` mode.
- ``/tokenize`` and ``/detokenize`` exist in every mode (vLLM registers them on every server).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum

from server.settings import Mode

ENV_VAR = "TOKENWIRE_ENABLE_SCALE_OUT_ENDPOINTS"
ENV_ALIAS = "VLLM_ENABLE_SCALE_OUT_ENDPOINTS"
DISABLED_HINT = f"Scale-out endpoints are disabled. Start with --enable-scale-out (or {ENV_VAR}=1) to enable them."
# How to enable a route group that is off (named by its "not enabled" errors: 404s and frame errors).
ENABLE_SCALE_OUT = f"start the server with --enable-scale-out (or {ENV_VAR}=1)"
ENABLE_SCALE_OUT_OVER_ZERO = "unset {name}=0 and start the server with --enable-scale-out"
ENABLE_PIPELINE = "start `tokenwire launch render` with --engine-url URL (an engine to generate with)"


class RouteGroup(StrEnum):
    ALWAYS = "always"  # /health, /v1/models, /version, /openapi.json
    TOKENIZE = "tokenize"  # /tokenize, /detokenize  (every mode, as vLLM)
    RENDER = "render"  # /v1/*/render  (scale-out)
    DERENDER = "derender"  # /v1/*/derender  (scale-out)
    GENERATE = "generate"  # /inference/v1/generate  (scale-out, needs an engine)
    ABORT = "abort"  # /abort_requests  (tokens-only)
    PIPELINE = "pipeline"  # /v1/chat/completions, /v1/completions, /v1/messages (+ /count_tokens), /v1/responses
    #                        (HTTP, and its WebSocket mode: GET /v1/responses upgraded)
    WEBSOCKET = "websocket"  # /v1/session (frames are gated like the routes above)
    PLAYGROUND = "playground"  # / and the browser client


class GatingError(Exception):
    """A startup configuration error; the message is shown to the operator as is."""


@dataclass(frozen=True, slots=True)
class Gating:
    groups: frozenset[RouteGroup]
    info: str | None = None  # a line to log at INFO at startup
    hints: Mapping[RouteGroup, str] = field(default_factory=dict)  # how to enable a group that is off

    def __contains__(self, group: object) -> bool:
        return group in self.groups

    @property
    def scale_out(self) -> bool:
        return RouteGroup.RENDER in self.groups


def scale_out_setting(environ: Mapping[str, str], flag: bool) -> bool | None:
    """The effective scale-out switch: True / False, or None when nothing was said."""
    values: dict[str, str] = {}
    for name in (ENV_VAR, ENV_ALIAS):
        raw = environ.get(name)
        if raw is None:
            continue
        value = raw.strip()
        if value not in ("0", "1"):
            raise GatingError(f"{name}={raw!r} is invalid; use 0 or 1 (or unset it).")
        values[name] = value
    if len(set(values.values())) > 1:
        raise GatingError(
            f"{ENV_VAR}={values[ENV_VAR]} and {ENV_ALIAS}={values[ENV_ALIAS]} disagree; "
            "set one of them, or both to the same value."
        )
    env_value = next(iter(values.values()), None)
    if flag:
        if env_value == "0":
            name = ENV_VAR if ENV_VAR in values else ENV_ALIAS
            raise GatingError(f"{name}=0 conflicts with --enable-scale-out; unset it or set it to 1")
        return True
    return None if env_value is None else env_value == "1"


def decide(mode: Mode, environ: Mapping[str, str], *, enable_scale_out: bool = False,
           has_engine_url: bool = False) -> Gating:
    """Route groups for ``mode``. Raises :class:`GatingError` for invalid configuration."""
    switch = scale_out_setting(environ, enable_scale_out)
    base = {RouteGroup.ALWAYS, RouteGroup.TOKENIZE, RouteGroup.WEBSOCKET}
    scale_out = {RouteGroup.RENDER, RouteGroup.DERENDER}
    if mode in (Mode.RENDER, Mode.TOKENS_ONLY):
        if switch is False:
            name = ENV_VAR if ENV_VAR in environ else ENV_ALIAS
            raise GatingError(f"`{name}=0` conflicts with `{mode.command}`; unset it or set it to 1")
        if mode is Mode.RENDER:
            groups = base | scale_out
            if has_engine_url:
                groups |= {RouteGroup.PIPELINE, RouteGroup.PLAYGROUND}
                return Gating(frozenset(groups))
            return Gating(frozenset(groups), hints=dict.fromkeys((RouteGroup.PIPELINE, RouteGroup.PLAYGROUND),
                                                                 ENABLE_PIPELINE))
        return Gating(frozenset(base | scale_out | {RouteGroup.GENERATE, RouteGroup.ABORT}))
    groups = base | {RouteGroup.PIPELINE, RouteGroup.PLAYGROUND}
    if switch:
        return Gating(frozenset(groups | scale_out | {RouteGroup.GENERATE}))
    if switch is False:
        hint = ENABLE_SCALE_OUT_OVER_ZERO.format(name=ENV_VAR if ENV_VAR in environ else ENV_ALIAS)
    else:
        hint = ENABLE_SCALE_OUT
    off = (RouteGroup.RENDER, RouteGroup.DERENDER, RouteGroup.GENERATE)
    return Gating(frozenset(groups), info=DISABLED_HINT, hints=dict.fromkeys(off, hint))
