"""A client side and a server side of the session protocol wired in memory (h11's ConnectionPair).

``ServerSide`` is the real :class:`session.machine.Session` plus a scripted worker that carries out
its ``Start*`` actions synchronously; ``ClientSide`` encodes client frames to bytes and decodes the
server's bytes back into typed frames, checking that ``seq`` strictly increases.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from session import client_frames as f
from session import server_frames as sf
from session.actions import (
    Action,
    Cancel,
    Close,
    Send,
    Start,
    StartDerender,
    StartGenerate,
    StartPipeline,
    StartRender,
)
from session.machine import Session, SessionConfig

ALL_FRAMES = frozenset(f.REQUEST_FRAME_TYPES)

# A script says what the work of a started request does: a list of steps, each
# ("delta", payload) / ("done", result) / ("fail", ErrorInfo) / ("hold",) — hold keeps it running.
Script = Callable[[Start], list[tuple[Any, ...]]]


def echo_script(start: Start) -> list[tuple[Any, ...]]:
    if isinstance(start, StartRender):
        return [("done", {"rendered": start.body})]
    if isinstance(start, StartDerender):
        return [("done", {"chunk": {"echo": start.body.get("generate_chunk")}, "stream_state": None})]
    if isinstance(start, StartGenerate):
        return [("delta", {"request_id": "g", "choices": [{"index": 0, "token_ids": [1, 2]}]}),
                ("delta", {"request_id": "g", "choices": [{"index": 0, "token_ids": [3],
                                                           "finish_reason": "length"}]}),
                ("done", {"prompt_tokens": 1, "completion_tokens": 3, "total_tokens": 4})]
    return [("delta", {"object": "chat.completion.chunk", "n": 1}),
            ("delta", {"object": "chat.completion.chunk", "n": 2}), ("done", None)]


@dataclass
class ServerSide:
    config: SessionConfig
    script: Script = echo_script
    now: float = 0.0
    tagger: Any = None
    session: Session = field(init=False)
    wire: list[bytes] = field(default_factory=list)  # bytes "sent" to the client
    held: dict[str, Start] = field(default_factory=dict)
    closed: Close | None = None
    cancelled: list[str] = field(default_factory=list)
    started: list[Start] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.session = Session(self.config, now=self.now, state_tagger=self.tagger)
        self.run()

    def receive(self, data: bytes) -> None:
        self.session.receive_text(data, now=self.now)
        self.run()

    def run(self) -> None:
        while True:
            actions: list[Action] = self.session.actions()
            if not actions:
                return
            for action in actions:
                self._do(action)

    def _do(self, action: Action) -> None:
        if isinstance(action, Send):
            self.wire.append(self.session.stamp(action.frame))
        elif isinstance(action, Close):
            self.closed = action
        elif isinstance(action, Cancel):
            self.cancelled.append(action.id)
            if self.held.pop(action.id, None) is not None:
                self.session.aborted(action.id, now=self.now)
        else:
            self.started.append(action)
            self._work(action)

    def _work(self, start: Start) -> None:
        for step in self.script(start):
            if step[0] == "hold":
                self.held[start.id] = start
                return
            if step[0] == "delta":
                if isinstance(start, StartPipeline):
                    self.session.pipeline_delta(start.id, [step[1]], now=self.now,
                                                checkpoint="ck" if start.checkpoints else None,
                                                output_token_ids=[7] if start.checkpoints else None,
                                                stream_id="chatcmpl-7" if start.checkpoints else None)
                else:
                    self.session.generate_delta(start.id, step[1], now=self.now)
            elif step[0] == "done":
                if isinstance(start, StartGenerate):
                    self.session.done(start.id, now=self.now, usage=step[1])
                else:
                    self.session.done(start.id, now=self.now, result=step[1])
            elif step[0] == "fail":
                self.session.failed(start.id, step[1], now=self.now)

    def finish(self, request_id: str, result: Any = None) -> None:
        self.held.pop(request_id)
        self.session.done(request_id, now=self.now, result=result)
        self.run()


@dataclass
class ClientSide:
    received: list[sf.AnyServerFrame] = field(default_factory=list)
    last_seq: int = 0

    def send(self, frame: f.ClientFrame) -> bytes:
        return f.encode_client_frame(frame)

    def receive(self, data: bytes) -> sf.AnyServerFrame:
        frame = sf.decode_server_frame(data)
        assert frame.seq > self.last_seq, f"seq went from {self.last_seq} to {frame.seq}"
        self.last_seq = frame.seq
        self.received.append(frame)
        return frame

    def of(self, request_id: str) -> list[sf.AnyServerFrame]:
        return [fr for fr in self.received if getattr(fr, "id", None) == request_id]


@dataclass
class Pair:
    server: ServerSide
    client: ClientSide = field(default_factory=ClientSide)

    @classmethod
    def open(cls, script: Script = echo_script, **config: Any) -> Pair:
        cfg = SessionConfig(**{"model": "m", "frames": ALL_FRAMES, **config})
        pair = cls(ServerSide(cfg, script=script))
        pair.pump()
        return pair

    def send(self, frame: f.ClientFrame | bytes) -> list[sf.AnyServerFrame]:
        data = frame if isinstance(frame, bytes) else self.client.send(frame)
        self.server.receive(data)
        return self.pump()

    def pump(self) -> list[sf.AnyServerFrame]:
        out = [self.client.receive(data) for data in self.server.wire]
        self.server.wire.clear()
        return out
