"""client_sdk's parts that need no socket: resume bookkeeping, the per-request channel's merging,
error mapping, SSE decoding, accumulation, URL handling, and a resumable stream over a scripted
transport (interrupted, resumed, nothing duplicated or lost)."""

from __future__ import annotations

import asyncio
from typing import Any, Literal

import pytest

from client_sdk import errors
from client_sdk.accumulate import chat_response
from client_sdk.options import base_urls, ws_url
from client_sdk.resume import ResumeTracker
from client_sdk.sse import SSEDecoder
from client_sdk.streams import ChatCompletionStream, RequestStream
from client_sdk.transport import Channel, Handle, Interrupted
from client_sdk.types import ChatCompletionStreamResponse, SessionInfo
from session.client_frames import Chat, RequestFrame
from session.server_frames import ChatDelta, ChatDone, ErrorFrame


def chunk(text: str, *, finish: str | None = None, calls: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    delta: dict[str, Any] = {"content": text}
    if calls:
        delta["tool_calls"] = calls
    return {"id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 1, "model": "m",
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}


def test_the_tracker_keeps_ids_up_to_the_latest_checkpoint_and_holds_uncovered_frames() -> None:
    t = ResumeTracker()
    assert t.observe(stream_id="s", checkpoint="c1", output_token_ids=[1, 2], finishes=False)
    assert not t.observe(stream_id="s", checkpoint=None, output_token_ids=[3], finishes=False)
    assert t.resume_field() == {"request_id": "s", "checkpoint": "c1", "output_token_ids": [1, 2]}
    assert t.observe(stream_id="s", checkpoint="c2", output_token_ids=[4], finishes=True)
    assert t.resume_field() == {"request_id": "s", "checkpoint": "c2", "output_token_ids": [1, 2, 3, 4]}
    assert t.finished
    t2 = ResumeTracker()
    t2.observe(stream_id="s", checkpoint=None, output_token_ids=[9], finishes=False)
    t2.interrupted()
    assert t2.resume_field() is None and t2.pending_ids == []


def test_a_channel_merges_deltas_when_its_reader_falls_behind() -> None:
    async def main() -> list[Any]:
        ch = Channel("c", capacity=4)
        for i in range(100):
            ch.put(ChatDelta(id="c", chunks=[chunk(str(i))]))
        ch.put(ChatDone(id="c", status="completed"))
        out: list[Any] = []
        while not out or out[-1].type != "chat.done":
            out.append(await ch.get(1.0))
        return out

    frames = asyncio.run(main())
    assert len(frames) == 4 + 1  # four frames (the fourth absorbed the rest), then the final frame
    texts = [c["choices"][0]["delta"]["content"] for f in frames[:-1] for c in f.chunks]
    assert texts == [str(i) for i in range(100)]


def test_error_bodies_map_to_one_exception_tree() -> None:
    cases = {
        ("invalid_request", 400): errors.BadRequestError, ("bad_state", 400): errors.BadStateError,
        ("not_enabled", 404): errors.NotEnabledError, ("model_not_found", 404): errors.NotFoundError,
        ("too_many_requests", 429): errors.RateLimitError, ("overloaded", 503): errors.OverloadedError,
        ("engine_timeout", 504): errors.EngineTimeoutError, ("internal_error", 500): errors.InternalServerError,
    }
    for (code, status), cls in cases.items():
        exc = errors.from_error_body({"code": code, "status": status, "message": "m", "param": "p"})
        assert type(exc) is cls and exc.code == code and exc.status == status and exc.param == "p"
    assert isinstance(errors.from_error_body({"code": "cancelled", "status": 499}), errors.RequestCancelled)
    openai = errors.from_http(400, b'{"error": {"message": "bad", "type": "BadRequestError", "param": "x", "code": 400}}')
    assert isinstance(openai, errors.BadRequestError) and openai.param == "x" and openai.message == "bad"
    claude = errors.from_http(404, b'{"type": "error", "error": {"type": "not_found_error", "message": "no"}}')
    assert isinstance(claude, errors.NotFoundError) and claude.message == "no"
    assert isinstance(errors.from_http(502, b"<html>"), errors.EngineUnavailableError)
    assert errors.is_tokenwire_refusal(b'{"error": {"message": "Invalid API key."}}')
    assert not errors.is_tokenwire_refusal(b"<html>WebSockets are not allowed</html>")


def test_the_sse_decoder_splits_events_and_joins_data_lines() -> None:
    d = SSEDecoder()
    lines = [": comment", "event: message_start", "data: {\"a\":", "data: 1}", "", "data: [DONE]", ""]
    events = [e for line in lines if (e := d.line(line)) is not None]
    assert events == [("message_start", '{"a":\n1}'), ("message", "[DONE]")]


def test_chunks_accumulate_into_the_non_streaming_answer() -> None:
    chunks = [ChatCompletionStreamResponse.model_validate(c) for c in (
        chunk("Let me "), chunk("check.", calls=[{"index": 0, "id": "call_1", "type": "function",
                                                  "function": {"name": "f", "arguments": ""}}]),
        chunk("", calls=[{"index": 0, "function": {"arguments": '{"a": '}}]),
        chunk("", finish="tool_calls", calls=[{"index": 0, "function": {"arguments": "1}"}}]))]
    answer = chat_response(chunks)
    message = answer.choices[0].message
    assert message.content == "Let me check." and answer.choices[0].finish_reason == "tool_calls"
    assert message.tool_calls is not None
    assert [(c.id, c.function.name, c.function.arguments) for c in message.tool_calls] == [("call_1", "f", '{"a": 1}')]


def test_urls_accept_http_and_ws_forms() -> None:
    assert base_urls(["ws://h:1/v1/session", "https://h:2/"]) == ["http://h:1", "https://h:2"]
    assert ws_url("https://h:2") == "wss://h:2/v1/session"
    with pytest.raises(ValueError):
        base_urls("h:1")


class ScriptedTransport:
    """Plays scripted frames per started request; records what was sent."""

    kind: Literal["websocket", "http"] = "websocket"

    def __init__(self, scripts: list[list[Any]]) -> None:
        self.scripts = scripts
        self.sent: list[RequestFrame] = []
        self._n = 0

    @property
    def info(self) -> SessionInfo:
        return SessionInfo(transport="websocket", url="http://x", model="m", frames=frozenset({"chat"}))

    def new_id(self, prefix: str) -> str:
        self._n += 1
        return f"{prefix}-{self._n}"

    async def ready(self) -> None:
        return None

    async def start(self, frame: RequestFrame) -> Handle:
        self.sent.append(frame)
        channel = Channel(frame.id)
        for item in self.scripts.pop(0):
            if isinstance(item, BaseException):
                channel.fail(item)
            else:
                channel.put(item)
        return Handle(channel, cancel=lambda: None, release=lambda: None)


def delta(text: str, checkpoint: str | None, ids: list[int], *, finish: str | None = None) -> ChatDelta:
    return ChatDelta(id="x", stream_id="s1", checkpoint=checkpoint, output_token_ids=ids,
                     chunks=[chunk(text, finish=finish)])


def test_a_resumable_stream_resumes_from_its_last_checkpoint_without_duplicates() -> None:
    lost = Interrupted("connection lost")
    transport = ScriptedTransport([
        [delta("a", "c1", [1]), delta("b", "c2", [2]), delta("(held)", None, [3]), lost],
        [delta("c", "c3", [3]), delta("d", "c4", [4], finish="length"), ChatDone(id="x", status="completed")],
    ])

    async def main() -> tuple[list[str], RequestStream]:
        request = RequestStream(transport, Chat(id="chat-0", body={"messages": []}, resumable=True),  # type: ignore[arg-type]
                                timeout=5, resumable=True)
        await request.start()
        stream = ChatCompletionStream(request)
        return [c.choices[0].delta.content or "" async for c in stream], request

    texts, request = asyncio.run(main())
    assert texts == ["a", "b", "c", "d"]  # "(held)" was not covered by a checkpoint: sent again as "c"
    resumed = transport.sent[1]
    assert isinstance(resumed, Chat) and resumed.resume is not None
    assert (resumed.resume.request_id, resumed.resume.checkpoint, resumed.resume.output_token_ids) == ("s1", "c2", [1, 2])
    assert request.status == "completed" and request.tracker is not None and request.tracker.resumes == 1


def test_an_error_frame_raises_and_a_lost_plain_stream_is_connection_lost() -> None:
    transport = ScriptedTransport([
        [ErrorFrame(id="x", error={"code": "invalid_request", "status": 400, "message": "no", "param": "messages"})],
        [delta("a", None, []), Interrupted("gone")],
    ])

    async def main() -> None:
        with pytest.raises(errors.BadRequestError):
            await RequestStream(transport, Chat(id="c", body={}), timeout=5).start()  # type: ignore[arg-type]
        request = RequestStream(transport, Chat(id="d", body={}), timeout=5)  # type: ignore[arg-type]
        await request.start()
        with pytest.raises(errors.ConnectionLostError) as lost:
            while await request.next() is not None:
                pass
        assert not isinstance(lost.value, Interrupted)

    asyncio.run(main())


def test_stream_cancel_works_awaited_and_not_awaited() -> None:
    # `await stream.cancel()` was a TypeError (a plain method beside the awaitable client.cancel(id))
    cancels: list[str] = []

    class Recording(ScriptedTransport):
        async def start(self, frame: RequestFrame) -> Handle:
            channel = (await super().start(frame)).channel

            def cancel() -> None:  # the server answers a cancel frame with the final frame
                cancels.append(frame.id)
                channel.put(ChatDone(id=frame.id, status="cancelled"))

            return Handle(channel, cancel=cancel, release=lambda: None)

    script = [delta("a", None, [1]), delta("b", None, [2])]
    transport = Recording([list(script), list(script)])

    async def main() -> list[tuple[list[str], str | None]]:
        seen: list[tuple[list[str], str | None]] = []
        for i, awaited in enumerate((True, False)):
            request = RequestStream(transport, Chat(id=f"c{i}", body={}), timeout=5)  # type: ignore[arg-type]
            await request.start()
            stream = ChatCompletionStream(request)
            await stream.__anext__()
            if awaited:
                assert await stream.cancel() is None
            else:
                stream.cancel()
            rest = [c.choices[0].delta.content or "" async for c in stream]  # what was already sent
            seen.append((rest, stream.status))
        return seen

    assert asyncio.run(main()) == [(["b"], "cancelled"), (["b"], "cancelled")]
    assert cancels == ["c0", "c1"]


def test_over_http_a_scale_out_frame_the_server_lacks_is_not_enabled_naming_the_flag() -> None:
    from client_sdk.http_fallback import HttpTransport
    from client_sdk.options import Options
    from session.client_frames import Render

    transport = HttpTransport(["http://127.0.0.1:1"], Options())
    transport._info = SessionInfo(transport="http", url="http://127.0.0.1:1", model="m",  # what open() learnt
                                  frames=frozenset({"completion", "messages"}))

    async def main() -> None:
        with pytest.raises(errors.NotEnabledError) as refused:
            await transport.start(Render(id="r", kind="chat", body={}))
        assert "--enable-scale-out" in str(refused.value)
        with pytest.raises(errors.NotEnabledError) as other:  # not a scale-out frame: no such hint
            await transport.start(Chat(id="c", body={}))
        assert str(other.value) == "This server does not serve chat requests."

    asyncio.run(main())
