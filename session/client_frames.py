"""WebSocket session frames, client side of the wire, and the protocol constants (docs/protocol.md).

- **Client frames** arrive from an untrusted peer. They are pydantic models joined in one
  discriminated union on ``type``; :data:`CLIENT_FRAMES` is the ``TypeAdapter`` built once at
  import. :func:`decode_client_frame` reads the text with orjson, the JSON reader of the HTTP
  bodies (so a frame holds nothing a server frame could not echo: an integer past 64 bits is read
  as orjson reads it), then validates; a failure tells a fatal envelope violation (close 1007 /
  1002) from a frame-level mistake that is answered with an ``error`` frame.
- **Server frames** live in :mod:`session.server_frames` (frozen dataclasses + orjson).

Nothing here does I/O.
"""

from __future__ import annotations

import json
from typing import Annotated, Any, Literal

import orjson
from pydantic import BaseModel, ConfigDict, Field, NonNegativeInt, TypeAdapter, ValidationError

from engine.json_depth import SHOWN, field_name, too_deep, too_deep_message

PROTOCOL_VERSION = 1
SUPPORTED_VERSIONS = (1,)
SUBPROTOCOL_PREFIX = "tokenwire.v"  # "tokenwire.v1"
AUTH_SUBPROTOCOL_PREFIX = "tokenwire.auth."  # + base64url(api key), no padding

# Close codes (RFC 6455 §7.4.1).
CLOSE_NORMAL = 1000
CLOSE_GOING_AWAY = 1001
CLOSE_PROTOCOL_ERROR = 1002
CLOSE_UNSUPPORTED_DATA = 1003
CLOSE_INVALID_DATA = 1007
CLOSE_POLICY_VIOLATION = 1008
CLOSE_TOO_BIG = 1009
CLOSE_INTERNAL_ERROR = 1011

MAX_ID_CHARS = 128
MAX_CHECKPOINT_CHARS = 64 * 1024

RequestId = Annotated[str, Field(min_length=1, max_length=MAX_ID_CHARS)]
EventId = Annotated[str, Field(max_length=MAX_ID_CHARS)]
Kind = Literal["chat", "completion", "messages"]
PipelineKind = Literal["chat", "completion", "messages", "response"]  # the whole-pipeline request frames


def subprotocol(version: int = PROTOCOL_VERSION) -> str:
    return f"{SUBPROTOCOL_PREFIX}{version}"


# --------------------------------------------------------------------------------------------
# Client → server


class _ClientFrame(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", strict=False)

    event_id: EventId | None = None


class SamplingDefaults(BaseModel):
    """Session-wide sampling defaults, applied to request bodies that do not set the field."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    temperature: float | None = Field(default=None, ge=0)
    top_p: float | None = Field(default=None, gt=0, le=1)
    top_k: int | None = Field(default=None, ge=-1)
    min_p: float | None = Field(default=None, ge=0, le=1)
    max_tokens: int | None = Field(default=None, ge=1)
    seed: int | None = None
    stop: str | list[str] | None = None
    presence_penalty: float | None = Field(default=None, ge=-2, le=2)
    frequency_penalty: float | None = Field(default=None, ge=-2, le=2)
    repetition_penalty: float | None = Field(default=None, gt=0)


class SessionPatch(BaseModel):
    """A partial update of the session settings: absent fields keep their value; ``null`` resets a
    field to the server default; ``sampling`` and ``chat_template_kwargs`` merge key by key
    (a key set to ``null`` removes that default)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    model: str | None = None
    sampling: dict[str, Any] | None = None
    chat_template_kwargs: dict[str, Any] | None = None
    resumable: bool | None = None


class SessionUpdate(_ClientFrame):
    type: Literal["session.update"] = "session.update"
    session: SessionPatch


class Render(_ClientFrame):
    type: Literal["render"] = "render"
    id: RequestId
    kind: Kind
    body: dict[str, Any]


class Generate(_ClientFrame):
    type: Literal["generate"] = "generate"
    id: RequestId
    body: dict[str, Any]


class Derender(_ClientFrame):
    type: Literal["derender"] = "derender"
    id: RequestId
    kind: Literal["chat", "completion"]
    body: dict[str, Any]


class Resume(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    request_id: RequestId  # the id of the interrupted stream (its chunks' ``id``)
    checkpoint: Annotated[str, Field(min_length=1, max_length=MAX_CHECKPOINT_CHARS)]
    output_token_ids: list[NonNegativeInt]


class _PipelineFrame(_ClientFrame):
    id: RequestId
    body: dict[str, Any]
    resumable: bool | None = None
    resume: Resume | None = None


class Chat(_PipelineFrame):
    type: Literal["chat"] = "chat"


class Completion(_PipelineFrame):
    type: Literal["completion"] = "completion"


class Messages(_PipelineFrame):
    type: Literal["messages"] = "messages"


class Response(_PipelineFrame):
    """An OpenAI Responses request; its frames carry the Responses stream events (not resumable:
    ``resumable: true`` and ``resume`` are refused by the session)."""

    type: Literal["response"] = "response"


class Cancel(_ClientFrame):
    type: Literal["cancel"] = "cancel"
    id: RequestId


class Ping(_ClientFrame):
    type: Literal["ping"] = "ping"


ClientFrame = (SessionUpdate | Render | Generate | Derender | Chat | Completion | Messages | Response | Cancel
               | Ping)
PipelineFrame = Chat | Completion | Messages | Response
RequestFrame = Render | Generate | Derender | Chat | Completion | Messages | Response

CLIENT_FRAMES: TypeAdapter[ClientFrame] = TypeAdapter(
    Annotated[ClientFrame, Field(discriminator="type")]
)
CLIENT_FRAME_TYPES: tuple[str, ...] = (
    "session.update", "render", "generate", "derender", "chat", "completion", "messages", "response", "cancel",
    "ping",
)
REQUEST_FRAME_TYPES = frozenset({"render", "generate", "derender", "chat", "completion", "messages", "response"})


class FatalFrameError(Exception):
    """The frame breaks the envelope itself: the session closes with ``code``. ``reason`` is a
    short fixed text for the close frame (never derived from exception text)."""

    def __init__(self, code: int, reason: str) -> None:
        super().__init__(reason)
        self.code = code
        self.reason = reason


class FrameError(Exception):
    """A frame the session answers with an ``error`` frame and then keeps serving."""

    def __init__(self, code: str, message: str, *, event_id: str | None = None,
                 request_id: str | None = None, param: str | None = None, reason: str | None = None) -> None:
        super().__init__(message)
        self.code = code
        self.reason = reason
        self.message = message
        self.event_id = event_id
        self.request_id = request_id
        self.param = param


def decode_client_frame(data: bytes | str) -> ClientFrame:
    """Decode one client text message.

    Raises :class:`FatalFrameError` (not JSON: 1007; not an object with a string ``type``: 1002)
    or :class:`FrameError` (``unknown_type``, ``invalid_frame``; also for nesting past
    :data:`~engine.json_depth.MAX_JSON_DEPTH` levels)."""
    try:
        # The HTTP bodies' JSON reader: a number a server frame could not echo (an integer past 64
        # bits) is read as orjson reads it, never kept as an unbounded Python int.
        raw = orjson.loads(data)
    except orjson.JSONDecodeError:
        raise _unreadable(data) from None
    deep = too_deep(raw, raw=data)
    if deep is not None:  # before any part of it is serialized again (engine/json_depth.py)
        raise _too_deep(raw, deep) from None
    try:
        return CLIENT_FRAMES.validate_python(raw)
    except ValidationError as exc:
        raise _classify(raw, exc) from None


def _unreadable(data: bytes | str) -> Exception:
    # Valid JSON whose strings escape unpaired UTF-16 surrogates ("\ud83d": what a browser's
    # JSON.stringify writes for half an emoji) is refused as a frame, not as a broken connection.
    raw = _loads_with_lone_surrogates(data)
    if raw is None:
        return FatalFrameError(CLOSE_INVALID_DATA, "frame is not valid JSON")
    envelope = _envelope(raw)
    if isinstance(envelope, FatalFrameError):
        return envelope
    return FrameError("invalid_frame", "Invalid frame: a string holds an unpaired UTF-16 surrogate escape "
                      "(such as \\ud83d without its pair); send well-formed Unicode text.",
                      event_id=_echoable(raw.get("event_id"), 0), request_id=_echoable(raw.get("id"), 1))


def _too_deep(raw: Any, path: list[str | int]) -> Exception:
    envelope = _envelope(raw)
    if isinstance(envelope, FatalFrameError):
        return envelope
    return FrameError("invalid_frame", f"Invalid {envelope[:64]} frame: {too_deep_message(field_name(path))}",
                      event_id=_echoable(raw.get("event_id"), 0), request_id=_echoable(raw.get("id"), 1),
                      param=field_name(path[:SHOWN]))


def _envelope(raw: Any) -> FatalFrameError | str:
    """The frame's ``type``, or the fatal error of an envelope that has none."""
    if not isinstance(raw, dict):
        return FatalFrameError(CLOSE_PROTOCOL_ERROR, "frame is not a JSON object")
    kind = raw.get("type")
    if not isinstance(kind, str):
        return FatalFrameError(CLOSE_PROTOCOL_ERROR, "frame has no string 'type'")
    return kind


def _classify(raw: Any, exc: ValidationError) -> Exception:
    kind = _envelope(raw)
    if isinstance(kind, FatalFrameError):
        return kind
    event_id = _echoable(raw.get("event_id"), 0)
    request_id = _echoable(raw.get("id"), 1)
    if kind not in CLIENT_FRAME_TYPES:
        return FrameError("unknown_type", f"Unknown frame type {kind[:64]!r}; this server speaks protocol "
                          f"version {PROTOCOL_VERSION} (types: {', '.join(CLIENT_FRAME_TYPES)}).",
                          event_id=event_id, request_id=request_id, param="type")
    message, param = describe(exc)
    return FrameError("invalid_frame", f"Invalid {kind} frame: {message}", event_id=event_id,
                      request_id=request_id, param=param)


def _loads_with_lone_surrogates(data: bytes | str) -> Any:
    """``data`` as JSON by the stdlib parser, which (unlike orjson) keeps unpaired surrogate escapes;
    ``None`` when it is not JSON for another reason (NaN and Infinity are not JSON either)."""
    def refuse(constant: str) -> Any:
        raise ValueError(constant)

    try:
        return json.loads(data, parse_constant=refuse)
    except (ValueError, RecursionError):
        return None


def _echoable(value: Any, min_chars: int) -> str | None:
    """An ``id`` / ``event_id`` that an error frame may echo: a string of the allowed length that
    encodes as UTF-8 (no unpaired surrogates)."""
    if not isinstance(value, str) or not min_chars <= len(value) <= MAX_ID_CHARS:
        return None
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return None
    return value


def describe(exc: ValidationError, *, prefix: str = "") -> tuple[str, str | None]:
    """Name each bad field (without the union tag pydantic puts first) and say what is wrong."""
    parts: list[str] = []
    first: str | None = None
    for err in exc.errors(include_url=False, include_input=False)[:6]:
        loc = [str(p) for p in err.get("loc", ())]
        if loc and loc[0] in CLIENT_FRAME_TYPES:
            loc = loc[1:]
        where = prefix + ".".join(loc) if loc else (prefix.rstrip(".") or "frame")
        first = first or where
        parts.append(f"{where}: {err.get('msg', 'invalid value')}")
    more = exc.error_count() - len(parts)
    if more > 0:
        parts.append(f"(and {more} more)")
    return "; ".join(parts) or "invalid frame", first


def encode_client_frame(frame: ClientFrame) -> bytes:
    """Client side: the JSON text of ``frame`` (unset optional fields left out)."""
    return orjson.dumps(frame.model_dump(mode="json", exclude_none=True))
