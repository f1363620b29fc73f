"""A scripted stand-in for the session stages (``server.ws.stages``) and an app around it."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from typing import Any, cast

import anyio
import pytest
from starlette.testclient import TestClient

from engine.interface import ChoiceDelta, EngineOutput
from engine.protocol import GenerateRequest, SamplingParams, UsageInfo
from server.app import create_app
from server.context import ServerContext
from server.gating import Gating, RouteGroup
from server.pipeline.stream import StreamEvent as Event
from server.services import build_services
from server.settings import Mode, Settings
from server.ws.work import Stages
from session.errors import RenderError, StateError
from tests.conftest import asset_path, tokenizer_of

ALL_GROUPS = frozenset(RouteGroup)


@dataclass
class FakePipeline:
    """Streams ``n`` chunks per pipeline request ("text-<i>"); ``body["hang"]`` makes a stream wait
    forever after its first chunk; ``body["fail"]`` raises the named error. Records what was
    closed (aborted) so tests can check that cancel and disconnect reach the engine."""

    closed: list[str] = field(default_factory=list)
    started: list[tuple[str, dict[str, Any]]] = field(default_factory=list)
    resumes: list[Any] = field(default_factory=list)
    release: anyio.Event | None = None

    def _maybe_fail(self, body: dict[str, Any]) -> None:
        fail = body.get("fail")
        if fail == "render":
            raise RenderError("messages: at least one message is required", param="messages")
        if fail == "internal":
            raise RuntimeError("secret internal detail /etc/passwd")
        if fail == "state":
            raise StateError("stream_state failed signature verification.", reason="bad_signature")

    async def render(self, kind: str, body: dict[str, Any]) -> list[GenerateRequest]:
        self._maybe_fail(body)
        prompts = body.get("prompt") if kind == "completion" else None
        count = len(prompts) if isinstance(prompts, list) else 1
        return [GenerateRequest(request_id=f"req-{i}", token_ids=[1, 2, 3 + i], sampling_params=SamplingParams(),
                                model=body.get("model")) for i in range(count)]

    def generate(self, request: GenerateRequest) -> AsyncIterator[EngineOutput]:
        return self._generate(request)

    async def _generate(self, request: GenerateRequest) -> AsyncIterator[EngineOutput]:
        rid = request.request_id or "gen"
        self.started.append(("generate", request.model_dump()))
        try:
            n = request.sampling_params.max_tokens or 3
            for i in range(n):
                await anyio.sleep(0)
                last = i == n - 1
                yield EngineOutput(rid, [ChoiceDelta(0, [100 + i], finish_reason="length" if last else None)],
                                   finished=last, usage=UsageInfo.of(len(request.token_ids), n) if last else None)
                if (request.model_extra or {}).get("hang"):
                    await anyio.sleep_forever()
        finally:
            self.closed.append(rid)

    async def derender_step(self, kind: str, body: dict[str, Any]) -> dict[str, Any]:
        self._maybe_fail(body)
        ids = (body.get("generate_chunk") or {}).get("choices", [{}])[0].get("token_ids", [])
        return {"chunk": {"object": "chat.completion.chunk", "choices": [{"index": 0, "delta": {
            "content": "".join(f"<{i}>" for i in ids)}}]}, "stream_state": f"state-after-{len(ids)}"}

    def stream(self, kind: str, body: dict[str, Any], *, resume: dict[str, Any] | None = None,
               checkpoints: bool = False) -> PushedEvents:
        return PushedEvents(self._stream(kind, body, resume, checkpoints))

    async def _stream(self, kind: str, body: dict[str, Any], resume: Any, checkpoints: bool) -> AsyncIterator[Event]:
        name = str(body.get("name", kind))
        self.started.append((kind, body))
        self.resumes.append(resume)
        self._maybe_fail(body)
        try:
            for i in range(int(body.get("n", 3))):
                await anyio.sleep(0)
                payload = ({"type": "content_block_delta", "delta": {"type": "text_delta", "text": f"text-{i}"}}
                           if kind == "messages" else
                           {"object": "chat.completion.chunk", "choices": [{"index": 0, "delta": {"content": f"text-{i}"}}]})
                yield Event(payload, checkpoint=f"ck-{i}" if checkpoints else None, output_token_ids=[i],
                            stream_id="chatcmpl-1")
                if body.get("hang"):
                    await anyio.sleep_forever()
                if self.release is not None and body.get("wait"):
                    await self.release.wait()
        finally:
            self.closed.append(name)


class PushedEvents:
    """The fake's events as the session takes a pipeline's (``server.ws.work.Pushed``): read and
    reported one by one; closing them closes the generator."""

    def __init__(self, events: AsyncIterator[Event]) -> None:
        self._events = events

    async def listen(self, on_events: Callable[[list[Event]], None]) -> None:
        async for event in self._events:
            on_events([event])

    async def aclose(self) -> None:
        await self._events.aclose()  # type: ignore[attr-defined]


def make_ctx(*, groups: frozenset[RouteGroup] = ALL_GROUPS, **settings: Any) -> ServerContext:
    """A context for the app around the fake pipeline (the real qwen3 tokenizer, because the
    derender routes build their service at app creation)."""
    model_dir = asset_path("qwen3")
    base = Settings(mode=Mode.SERVE, model_dir=model_dir, served_model_name="tiny",
                    state_secret=b"test-secret-0123456789-abcdefghijklmnopqrstuvwxyz", **settings)
    return ServerContext(settings=base, gating=Gating(groups), tokenizer=tokenizer_of("qwen3"),
                         max_model_len=4096, engine=None)


@contextmanager
def session_client(monkeypatch: pytest.MonkeyPatch, pipeline: FakePipeline | None = None,
                   **ctx_args: Any) -> Iterator[tuple[TestClient, FakePipeline]]:
    pipeline = pipeline or FakePipeline()
    ctx = make_ctx(**ctx_args)
    # the fake in place of the real stages (a scripted stand-in: its streams are async generators)
    app = create_app(ctx, replace(build_services(ctx), stages=cast(Stages, pipeline)))
    with TestClient(app) as client:
        yield client, pipeline
