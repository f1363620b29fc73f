"""Server → client frames of the WebSocket session (docs/protocol.md): slotted dataclasses, treated
as values (never changed once built). They are not ``frozen``: a delta frame is built once per
token on the hot path, and a frozen dataclass pays an ``object.__setattr__`` per field.

``seq`` is stamped at write time (:meth:`ServerFrame.encode`, via ``Session.stamp``), so frames
coalesced while a client reads slowly still leave with strictly increasing ``seq``. Delta frames of
one request merge with ``merge`` — concatenation in order, never reinterpretation. Clients decode
frames with :func:`decode_server_frame`. Nothing here does I/O.
"""

from __future__ import annotations

import dataclasses
import secrets
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Annotated, Any, Literal, Self

import orjson
from pydantic import Field, TypeAdapter


@dataclass(slots=True, kw_only=True)
class ServerFrame:
    type: str
    seq: int = 0
    event_id: str | None = None

    def stamped(self, seq: int) -> Self:
        return dataclasses.replace(self, seq=seq)

    def encode(self, seq: int | None = None) -> bytes:
        """The frame's JSON; with ``seq``, as if :meth:`stamped` first (without the copy: this is
        the per-delta hot path)."""
        if seq is None:
            return orjson.dumps(self, option=orjson.OPT_NON_STR_KEYS)
        cls = type(self)
        codec = _CODECS.get(cls) or _codec_of(cls)
        return orjson.dumps(codec.to_dict(self, seq), option=orjson.OPT_NON_STR_KEYS)


@dataclass(frozen=True, slots=True)
class Codec:
    """How one frame class encodes, generated once from its fields (:func:`_codec_of`): a frame
    as a dict with ``seq`` set (``to_dict``), and the same JSON from the field values without a
    frame object (``encode_fields(seq, *values)``, the values in field order after ``seq``: the
    per-token path). Both come from one dict display, so they cannot differ."""

    to_dict: Callable[[Any, int], dict[str, Any]]
    encode_fields: Callable[..., bytes]


_CODECS: dict[type, Codec] = {}


def codec(cls: type[ServerFrame]) -> Codec:
    return _CODECS.get(cls) or _codec_of(cls)


def _codec_of(cls: type) -> Codec:
    """One dict display over the class's fields, compiled twice: reading a frame (``s.name``) and
    taking the values as arguments (a loop over the fields with ``getattr`` costs about three
    times as much, once per token)."""
    fields = [f for f in dataclasses.fields(cls) if f.name not in ("type", "seq")]
    names = [f.name for f in fields]
    assert all(name.isidentifier() and not name.startswith("_") for name in names)
    kind = next(f.default for f in dataclasses.fields(cls) if f.name == "type")

    def display(value: Callable[[str], str], type_: str) -> str:
        return "{'type': " + type_ + ", 'seq': seq" + "".join(f", {n!r}: {value(n)}" for n in names) + "}"

    namespace: dict[str, Any] = {"_dumps": orjson.dumps, "_OPTION": orjson.OPT_NON_STR_KEYS}
    exec(f"def to_dict(s, seq):\n    return {display(lambda n: 's.' + n, 's.type')}\n"
         f"def encode_fields(seq, {', '.join(names)}):\n"
         f"    return _dumps({display(lambda n: n, repr(kind))}, option=_OPTION)\n", namespace)
    made = _CODECS[cls] = Codec(namespace["to_dict"], namespace["encode_fields"])
    return made


@dataclass(slots=True, kw_only=True)
class SessionCreated(ServerFrame):
    type: Literal["session.created"] = "session.created"
    session_id: str
    protocol_version: int
    server: dict[str, str]
    frames: list[str]
    limits: dict[str, float | int]
    session: dict[str, Any]
    # what the server's request handling supports (docs/protocol.md §5.1): tool_call_parser,
    # auto_tool_choice, reasoning_parser; absent from older servers
    features: dict[str, Any] = field(default_factory=dict)


@dataclass(slots=True, kw_only=True)
class SessionUpdated(ServerFrame):
    type: Literal["session.updated"] = "session.updated"
    session: dict[str, Any]


@dataclass(slots=True, kw_only=True)
class Pong(ServerFrame):
    type: Literal["pong"] = "pong"


@dataclass(slots=True, kw_only=True)
class ErrorFrame(ServerFrame):
    """``id`` is the request the error ends (null for frame- or session-level errors)."""

    type: Literal["error"] = "error"
    id: str | None = None
    error: dict[str, Any]


@dataclass(slots=True, kw_only=True)
class RenderDone(ServerFrame):
    type: Literal["render.done"] = "render.done"
    id: str
    result: Any


@dataclass(slots=True, kw_only=True)
class DerenderDelta(ServerFrame):
    type: Literal["derender.delta"] = "derender.delta"
    id: str
    result: dict[str, Any]


@dataclass(slots=True, kw_only=True)
class GenerateDelta(ServerFrame):
    """``chunk`` has the shape of one ``/inference/v1/generate`` stream event:
    ``{"request_id", "choices": [{"index", "token_ids", "finish_reason", "stop_reason", "logprobs"}]}``."""

    type: Literal["generate.delta"] = "generate.delta"
    id: str
    chunk: dict[str, Any]

    def merge(self, later: GenerateDelta) -> GenerateDelta:
        return dataclasses.replace(self, chunk=merge_generate_chunks(self.chunk, later.chunk))


@dataclass(slots=True, kw_only=True)
class _PipelineDelta(ServerFrame):
    id: str
    stream_id: str | None = None  # resumable streams: what a resume names as ``request_id``
    checkpoint: str | None = None
    output_token_ids: list[int] | None = None

    def _merged_ids(self, later: _PipelineDelta) -> list[int] | None:
        if self.output_token_ids is None:
            return later.output_token_ids
        if later.output_token_ids is None:
            return self.output_token_ids
        return self.output_token_ids + later.output_token_ids


@dataclass(slots=True, kw_only=True)
class ChatDelta(_PipelineDelta):
    type: Literal["chat.delta"] = "chat.delta"
    chunks: list[dict[str, Any]]

    def merge(self, later: ChatDelta) -> ChatDelta:
        return dataclasses.replace(self, chunks=self.chunks + later.chunks,
                                   checkpoint=later.checkpoint or self.checkpoint,
                                   stream_id=later.stream_id or self.stream_id,
                                   output_token_ids=self._merged_ids(later))


@dataclass(slots=True, kw_only=True)
class CompletionDelta(_PipelineDelta):
    type: Literal["completion.delta"] = "completion.delta"
    chunks: list[dict[str, Any]]

    def merge(self, later: CompletionDelta) -> CompletionDelta:
        return dataclasses.replace(self, chunks=self.chunks + later.chunks,
                                   checkpoint=later.checkpoint or self.checkpoint,
                                   stream_id=later.stream_id or self.stream_id,
                                   output_token_ids=self._merged_ids(later))


@dataclass(slots=True, kw_only=True)
class MessagesDelta(_PipelineDelta):
    type: Literal["messages.delta"] = "messages.delta"
    events: list[dict[str, Any]]

    def merge(self, later: MessagesDelta) -> MessagesDelta:
        return dataclasses.replace(self, events=self.events + later.events,
                                   checkpoint=later.checkpoint or self.checkpoint,
                                   stream_id=later.stream_id or self.stream_id,
                                   output_token_ids=self._merged_ids(later))


@dataclass(slots=True, kw_only=True)
class ResponseDelta(_PipelineDelta):
    """``events``: OpenAI Responses stream events, as ``POST /v1/responses`` streams them (never
    resumable: ``stream_id``, ``checkpoint`` and ``output_token_ids`` are null)."""

    type: Literal["response.delta"] = "response.delta"
    events: list[dict[str, Any]]

    def merge(self, later: ResponseDelta) -> ResponseDelta:
        return dataclasses.replace(self, events=self.events + later.events)


Status = Literal["completed", "cancelled"]


@dataclass(slots=True, kw_only=True)
class _Done(ServerFrame):
    id: str
    status: Status


@dataclass(slots=True, kw_only=True)
class GenerateDone(_Done):
    type: Literal["generate.done"] = "generate.done"
    usage: dict[str, Any] | None = None


@dataclass(slots=True, kw_only=True)
class ChatDone(_Done):
    type: Literal["chat.done"] = "chat.done"


@dataclass(slots=True, kw_only=True)
class CompletionDone(_Done):
    type: Literal["completion.done"] = "completion.done"


@dataclass(slots=True, kw_only=True)
class MessagesDone(_Done):
    type: Literal["messages.done"] = "messages.done"


@dataclass(slots=True, kw_only=True)
class ResponseDone(_Done):
    type: Literal["response.done"] = "response.done"


DeltaFrame = GenerateDelta | ChatDelta | CompletionDelta | MessagesDelta | ResponseDelta
DoneFrame = RenderDone | DerenderDelta | GenerateDone | ChatDone | CompletionDone | MessagesDone | ResponseDone
AnyServerFrame = (SessionCreated | SessionUpdated | Pong | ErrorFrame | RenderDone | DerenderDelta
                  | GenerateDelta | GenerateDone | ChatDelta | ChatDone | CompletionDelta | CompletionDone
                  | MessagesDelta | MessagesDone | ResponseDelta | ResponseDone)

SERVER_FRAMES: TypeAdapter[AnyServerFrame] = TypeAdapter(
    Annotated[AnyServerFrame, Field(discriminator="type")]
)


def decode_server_frame(data: bytes | str) -> AnyServerFrame:
    """Client side: one server frame as its typed value (raises pydantic's ValidationError)."""
    return SERVER_FRAMES.validate_json(data)


@dataclass(frozen=True, slots=True)
class ErrorInfo:
    """A client-safe description of a failure: ``code`` (see docs/protocol.md), ``status`` (the HTTP
    status the same failure gets on the HTTP endpoints), a message written for the client."""

    code: str
    message: str
    status: int = 400
    param: str | None = None
    reason: str | None = None

    def as_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"code": self.code, "message": self.message, "status": self.status,
                               "param": self.param}
        if self.reason is not None:
            out["reason"] = self.reason
        return out


# --------------------------------------------------------------------------------------------
# Delta merging


def merge_generate_chunks(earlier: dict[str, Any], later: dict[str, Any]) -> dict[str, Any]:
    """Concatenate two generate stream chunks of one request: per choice index, token ids and
    logprobs append; the later finish / stop reason wins."""
    choices: dict[int, dict[str, Any]] = {}
    order: list[int] = []
    for chunk in (earlier, later):
        for choice in chunk.get("choices") or ():
            index = int(choice.get("index", 0))
            seen = choices.get(index)
            if seen is None:
                choices[index] = {**choice, "token_ids": list(choice.get("token_ids") or [])}
                order.append(index)
                continue
            seen["token_ids"].extend(choice.get("token_ids") or ())
            seen["logprobs"] = _merge_logprobs(seen.get("logprobs"), choice.get("logprobs"))
            if choice.get("finish_reason") is not None:
                seen["finish_reason"] = choice["finish_reason"]
                seen["stop_reason"] = choice.get("stop_reason")
    out = {**earlier, **later}
    out["choices"] = [choices[i] for i in order]
    return out


def _merge_logprobs(a: dict[str, Any] | None, b: dict[str, Any] | None) -> dict[str, Any] | None:
    if a is None or b is None:
        return a if b is None else b
    return {**a, "content": list(a.get("content") or []) + list(b.get("content") or [])}


DELTA_FRAME_OF: dict[str, type[DeltaFrame]] = {
    "generate": GenerateDelta, "chat": ChatDelta, "completion": CompletionDelta, "messages": MessagesDelta,
    "response": ResponseDelta,
}
PIPELINE_KINDS = frozenset(kind for kind, cls in DELTA_FRAME_OF.items() if issubclass(cls, _PipelineDelta))
# A pipeline delta's JSON from its values (``seq, event_id, id, stream_id, checkpoint, output_token_ids,
# chunks | events``), without the frame object: its class's own codec (the per-token path).
ENCODE_PIPELINE_DELTA: dict[str, Callable[..., bytes]] = {
    kind: codec(DELTA_FRAME_OF[kind]).encode_fields for kind in PIPELINE_KINDS}
DONE_FRAME_OF: dict[str, type[GenerateDone | ChatDone | CompletionDone | MessagesDone | ResponseDone]] = {
    "generate": GenerateDone, "chat": ChatDone, "completion": CompletionDone, "messages": MessagesDone,
    "response": ResponseDone,
}



def new_session_id() -> str:
    return "sess_" + secrets.token_hex(12)
