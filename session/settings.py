"""Session configuration (server limits) and the per-session settings changed by ``session.update``.

Pure values and functions: :class:`SessionSettings` is frozen; :func:`apply_patch` returns a new
one (or raises :class:`frames.FrameError`); :func:`apply_defaults` fills a request body's unset
fields from the session, never overriding what the request says.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

import orjson
from pydantic import ValidationError

from session.client_frames import FrameError, PipelineKind, SamplingDefaults, SessionPatch, describe

# Session sampling defaults → the request field each API names them by (None: not applied).
_OPENAI_FIELDS = {name: name for name in SamplingDefaults.model_fields}
_RESPONSES_FIELDS = {**_OPENAI_FIELDS, "max_tokens": "max_output_tokens"}
_ANTHROPIC_FIELDS = {"temperature": "temperature", "top_p": "top_p", "top_k": "top_k",
                     "max_tokens": "max_tokens", "stop": "stop_sequences"}
# The session settings, as session.updated echoes them, may take this many bytes of JSON: a
# session.update that would pass it is refused, so no session holds (or echoes) more.
MAX_SETTINGS_BYTES = 64 * 1024


@dataclass(frozen=True, slots=True)
class SessionConfig:
    model: str  # the served model: the session's default ``model``
    frames: frozenset[str]  # request frame types this server enables (gating)
    frame_hints: dict[str, str] = field(default_factory=dict)  # frame type off → how to enable it
    models: frozenset[str] = frozenset()  # names session.update may choose (default: {model})
    max_in_flight: int = 64
    max_frame_bytes: int = 16 * 1024 * 1024
    idle_timeout: float | None = 300.0
    max_lifetime: float | None = 24 * 3600.0
    max_consecutive_errors: int = 32
    state_ledger_size: int = 4096
    max_settings_bytes: int = MAX_SETTINGS_BYTES
    server: dict[str, str] = field(default_factory=lambda: {"name": "tokenwire"})
    # session.created's features: which tool-call and reasoning parsers run, whether tool_choice
    # "auto" is allowed (what a client such as the playground needs to offer tools)
    features: dict[str, Any] = field(default_factory=lambda: {"tool_call_parser": None, "auto_tool_choice": False,
                                                              "reasoning_parser": None})

    def limits(self) -> dict[str, float | int]:
        out: dict[str, float | int] = {"max_frame_bytes": self.max_frame_bytes,
                                       "max_in_flight": self.max_in_flight,
                                       "max_settings_bytes": self.max_settings_bytes}
        if self.idle_timeout is not None:
            out["idle_timeout_s"] = self.idle_timeout
        if self.max_lifetime is not None:
            out["max_lifetime_s"] = self.max_lifetime
        return out


@dataclass(frozen=True, slots=True)
class SessionSettings:
    model: str
    sampling: dict[str, Any] = field(default_factory=dict)
    chat_template_kwargs: dict[str, Any] = field(default_factory=dict)
    resumable: bool = False

    def as_dict(self) -> dict[str, Any]:
        return {"model": self.model, "sampling": dict(self.sampling),
                "chat_template_kwargs": dict(self.chat_template_kwargs), "resumable": self.resumable}


def apply_patch(current: SessionSettings, patch: SessionPatch, *, default_model: str,
                models: frozenset[str], event_id: str | None = None,
                max_bytes: int = MAX_SETTINGS_BYTES) -> SessionSettings:
    """The settings after ``patch`` (absent: unchanged; null: server default; maps merge by key),
    refused when their JSON would pass ``max_bytes``."""
    given = patch.model_fields_set
    out = current
    if "model" in given:
        model = patch.model if patch.model is not None else default_model
        if model not in models:
            raise FrameError("model_not_found", f"The model `{model[:200]}` does not exist; this server "
                             f"serves {', '.join(sorted(models))}.", event_id=event_id, param="session.model")
        out = replace(out, model=model)
    if "sampling" in given:
        merged = _merge(out.sampling, patch.sampling)
        try:
            SamplingDefaults.model_validate(merged)
        except ValidationError as exc:
            message, param = describe(exc, prefix="session.sampling.")
            raise FrameError("invalid_frame", f"Invalid session.update frame: {message}",
                             event_id=event_id, param=param) from None
        out = replace(out, sampling=merged)
    if "chat_template_kwargs" in given:
        out = replace(out, chat_template_kwargs=_merge(out.chat_template_kwargs, patch.chat_template_kwargs))
    if "resumable" in given:
        out = replace(out, resumable=bool(patch.resumable))
    _check_size(out, given, max_bytes, event_id)
    return out


def _check_size(settings: SessionSettings, given: set[str], max_bytes: int, event_id: str | None) -> None:
    data = settings.as_dict()
    total = len(orjson.dumps(data))
    if total <= max_bytes:
        return
    sizes = {name: len(orjson.dumps(value)) for name, value in data.items()}
    # name the field of this update that holds the most
    field_name = max((name for name in sizes if name in given), key=sizes.__getitem__, default="chat_template_kwargs")
    raise FrameError("invalid_frame", f"Invalid session.update frame: the session settings would take {total} bytes "
                     f"of JSON, over the limit of {max_bytes} (max_settings_bytes in session.created.limits); "
                     "send smaller values, or remove keys by setting them to null.",
                     event_id=event_id, param=f"session.{field_name}")


def _merge(base: dict[str, Any], patch: dict[str, Any] | None) -> dict[str, Any]:
    if patch is None:
        return {}
    out = dict(base)
    for key, value in patch.items():
        if value is None:
            out.pop(key, None)
        else:
            out[key] = value
    return out


def apply_defaults(kind: PipelineKind, body: dict[str, Any], settings: SessionSettings) -> dict[str, Any]:
    """A shallow copy of ``body`` with the session's model, sampling defaults and (chat and response)
    ``chat_template_kwargs`` filled in where the body leaves them unset."""
    out = dict(body)
    if out.get("model") is None:
        out["model"] = settings.model
    names = _ANTHROPIC_FIELDS if kind == "messages" else _RESPONSES_FIELDS if kind == "response" else _OPENAI_FIELDS
    for name, value in settings.sampling.items():
        target = names.get(name)
        if target is None or out.get(target) is not None:
            continue
        if target == "max_tokens" and kind == "chat" and out.get("max_completion_tokens") is not None:
            continue
        if target == "stop_sequences" and isinstance(value, str):
            value = [value]
        out[target] = value
    if kind in ("chat", "response") and settings.chat_template_kwargs:
        given = out.get("chat_template_kwargs")
        if given is None:
            out["chat_template_kwargs"] = dict(settings.chat_template_kwargs)
        elif isinstance(given, dict):  # anything else is left for render to refuse
            out["chat_template_kwargs"] = {**settings.chat_template_kwargs, **given}
    return out
