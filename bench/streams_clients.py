"""The streaming benchmark's client, one per mode (bench/streams_bench.py): each opens its connections
before the clock starts (:func:`connect`), sends ``c`` requests spread over the ramp, and records
when each content token arrived (:func:`run_mode`). SSE and WebSocket frames are read by hand,
equally lean (bench/loopback.py's ``SseStream`` / ``WsStream``); ``ws_client="websockets"`` uses
the ``websockets`` library's client instead, which costs more per frame."""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from typing import Any

import orjson

from bench.loopback import SseStream, WsStream


@dataclass
class Stream:
    key: str = ""  # the engine's request id
    sent_ns: int = 0
    recv_ns: list[int] = field(default_factory=list)  # one per content token


def _chat_body(i: int, tokens: int) -> dict[str, Any]:
    return {"model": "bench", "messages": [{"role": "user", "content": f"Stream {i}: tell me a story."}],
            "max_tokens": tokens, "temperature": 0}


def _responses_body(i: int, tokens: int) -> dict[str, Any]:
    return {"model": "bench", "input": f"Stream {i}: tell me a story.", "max_output_tokens": tokens,
            "temperature": 0, "store": False}


def _responses_tokens(event: dict[str, Any]) -> int:
    return len(event["delta"].split()) if event["type"] == "response.output_text.delta" else 0


RESPONSES_END = ("response.completed", "response.incomplete", "response.failed", "error")


def _content_tokens(chunk: dict[str, Any]) -> int:
    """How many of the paced engine's tokens (one word each) a chunk's content carries: a delta that
    a lagging session merged carries several, and each counts as received now."""
    choices = chunk.get("choices") or []
    content = choices[0].get("delta", {}).get("content") if choices else None
    return len(content.split()) if content else 0


async def _arrive(i: int, c: int, ramp_s: float) -> None:
    """Request ``i`` of ``c`` is sent ``i / c`` of the way through the ramp (arrivals spread evenly)."""
    if ramp_s > 0 and i:
        await asyncio.sleep(ramp_s * i / c)


async def _direct(conns: list[SseStream], c: int, tokens: int, ramp_s: float, tag: str) -> list[Stream]:
    streams = [Stream(key=f"{tag}-{i}") for i in range(c)]

    async def read(conn: SseStream, s: Stream) -> None:
        async for data in conn.events():
            if data == b"[DONE]":
                break
            now = time.monotonic_ns()
            for ch in orjson.loads(data)["choices"]:
                s.recv_ns += [now] * len(ch["token_ids"])
        conn.close()

    async def one(i: int, conn: SseStream, s: Stream) -> None:
        body = orjson.dumps({"request_id": s.key, "token_ids": list(range(100, 120)), "stream": True,
                             "sampling_params": {"max_tokens": tokens, "output_kind": 1}})
        await _arrive(i, c, ramp_s)
        s.sent_ns = time.monotonic_ns()
        conn.send("/inference/v1/generate", body)
        await read(conn, s)

    await asyncio.gather(*(one(i, conn, s) for i, (conn, s) in enumerate(zip(conns, streams, strict=True))))
    return streams


async def _sse(conns: list[SseStream], c: int, tokens: int, ramp_s: float) -> list[Stream]:
    streams = [Stream() for _ in range(c)]

    async def read(conn: SseStream, s: Stream) -> None:
        async for data in conn.events():
            if data == b"[DONE]":
                break
            chunk = orjson.loads(data)
            if n := _content_tokens(chunk):
                s.recv_ns += [time.monotonic_ns()] * n
                s.key = chunk["id"]
        conn.close()

    async def one(i: int, conn: SseStream, s: Stream) -> None:
        body = orjson.dumps({**_chat_body(i, tokens), "stream": True})
        await _arrive(i, c, ramp_s)
        s.sent_ns = time.monotonic_ns()
        conn.send("/v1/chat/completions", body)
        await read(conn, s)

    await asyncio.gather(*(one(i, conn, s) for i, (conn, s) in enumerate(zip(conns, streams, strict=True))))
    return streams


async def _responses_sse(conns: list[SseStream], c: int, tokens: int, ramp_s: float) -> list[Stream]:
    streams = [Stream() for _ in range(c)]

    async def one(i: int, conn: SseStream, s: Stream) -> None:
        body = orjson.dumps({**_responses_body(i, tokens), "stream": True})
        await _arrive(i, c, ramp_s)
        s.sent_ns = time.monotonic_ns()
        conn.send("/v1/responses", body)
        async for data in conn.events():
            event = orjson.loads(data)
            if n := _responses_tokens(event):
                s.recv_ns += [time.monotonic_ns()] * n
            elif event["type"] in ("response.failed", "error"):
                raise RuntimeError(f"Responses stream failed: {event}")
        conn.close()

    await asyncio.gather(*(one(i, conn, s) for i, (conn, s) in enumerate(zip(conns, streams, strict=True))))
    return streams


async def _responses_ws(sockets: list[Any], c: int, tokens: int, ramp_s: float) -> list[Stream]:
    streams = [Stream() for _ in range(c)]

    async def one(i: int, ws: Any, s: Stream) -> None:
        event_out = orjson.dumps({"type": "response.create", **_responses_body(i, tokens)})
        await _arrive(i, c, ramp_s)
        s.sent_ns = time.monotonic_ns()
        await ws.send(event_out)
        while True:
            message = await ws.recv()
            if message is None:
                raise RuntimeError("the server closed the Responses WebSocket mid-stream")
            event = orjson.loads(message)
            if n := _responses_tokens(event):
                s.recv_ns += [time.monotonic_ns()] * n
            elif event["type"] in RESPONSES_END:
                if event["type"] in ("response.failed", "error"):
                    raise RuntimeError(f"Responses stream failed: {event}")
                break
        await ws.close()

    await asyncio.gather(*(one(i, ws, s) for i, (ws, s) in enumerate(zip(sockets, streams, strict=True))))
    return streams


async def _open_sessions(ws_url: str, c: int, client: str) -> list[Any]:
    """``c`` sessions, created: each a lean :class:`WsStream` (``client="lean"``), or the
    ``websockets`` library's client, whose own cost per frame is several times the lean one's."""
    async def open_one() -> Any:
        if client == "lean":
            ws: Any = await WsStream.connect(ws_url + "/v1/session", "tokenwire.v1")
        else:
            from websockets.asyncio.client import connect

            ws = _LibraryWs(await connect(ws_url + "/v1/session", subprotocols=["tokenwire.v1"],  # type: ignore[list-item]
                                          max_size=1 << 24, open_timeout=60, ping_interval=None))
        await ws.recv()  # session.created
        return ws

    sockets: list[Any] = []
    for start in range(0, c, 100):
        sockets += await asyncio.gather(*(open_one() for _ in range(start, min(c, start + 100))))
    return sockets


class _LibraryWs:
    """The ``websockets`` client behind :class:`WsStream`'s three calls."""

    def __init__(self, ws: Any) -> None:
        self.ws = ws

    async def send(self, payload: bytes) -> None:
        await self.ws.send(payload.decode())

    async def recv(self) -> bytes | None:
        return await self.ws.recv(decode=False)  # type: ignore[no-any-return]

    async def close(self) -> None:
        await self.ws.close()


async def connect(mode: str, url: str, c: int, ws_client: str = "lean") -> Any:
    """The mode's connections (sessions: upgraded and created), opened before the clock starts."""
    if mode == "ws":
        return await _open_sessions("ws" + url[len("http"):], c, ws_client)
    if mode == "responses_ws":
        ws_url = "ws" + url[len("http"):] + "/v1/responses"
        sockets: list[Any] = []
        for start in range(0, c, 100):
            sockets += await asyncio.gather(*(WsStream.connect(ws_url, "tokenwire.v1")
                                              for _ in range(start, min(c, start + 100))))
        return sockets
    if mode == "sdk":
        import client_sdk

        return await client_sdk.connect(url, transport="websocket", timeout=120)
    return [await SseStream.connect(url) for _ in range(c)]


async def _sdk(client: Any, c: int, tokens: int, ramp_s: float) -> list[Stream]:
    """``c`` chats streamed by ``client_sdk`` on one session (what an SDK user with many
    concurrent requests does): the SDK's own cost per token is the client figure."""
    streams = [Stream() for _ in range(c)]

    async def one(i: int, s: Stream) -> None:
        await _arrive(i, c, ramp_s)
        s.sent_ns = time.monotonic_ns()
        stream = await client.chat.completions.create(**_chat_body(i, tokens), stream=True)
        async for chunk in stream:
            content = chunk.choices[0].delta.content if chunk.choices else None
            if content:
                s.recv_ns += [time.monotonic_ns()] * len(content.split())
                s.key = chunk.id

    await asyncio.gather(*(one(i, s) for i, s in enumerate(streams)))
    await client.aclose()
    return streams


async def _ws(sockets: list[Any], c: int, tokens: int, ramp_s: float) -> list[Stream]:
    streams = [Stream() for _ in range(c)]

    async def read(ws: Any, s: Stream) -> None:
        while True:
            message = await ws.recv()
            if message is None:
                raise RuntimeError("the server closed the session mid-stream")
            frame = orjson.loads(message)
            now = time.monotonic_ns()
            kind = frame["type"]
            if kind == "chat.delta":
                for chunk in frame["chunks"]:
                    if n := _content_tokens(chunk):
                        s.recv_ns += [now] * n
                        s.key = chunk["id"]
            elif kind in ("chat.done", "error"):
                if kind == "error":
                    raise RuntimeError(f"error frame: {frame}")
                break
        await ws.close()

    async def one(i: int, ws: Any, s: Stream) -> None:
        frame = orjson.dumps({"type": "chat", "id": "s", "body": _chat_body(i, tokens)})
        await _arrive(i, c, ramp_s)
        s.sent_ns = time.monotonic_ns()
        await ws.send(frame)
        await read(ws, s)

    await asyncio.gather(*(one(i, ws, s) for i, (ws, s) in enumerate(zip(sockets, streams, strict=True))))
    return streams


async def run_mode(mode: str, conns: Any, c: int, tokens: int, ramp_s: float, tag: str) -> list[Stream]:
    """``c`` streams of ``tokens`` in ``mode`` on the connections :func:`connect` opened for it;
    ``tag`` names the direct mode's engine requests (so that their emissions can be found)."""
    if mode == "direct":
        return await _direct(conns, c, tokens, ramp_s, tag)
    runners = {"sse": _sse, "ws": _ws, "sdk": _sdk, "responses_sse": _responses_sse, "responses_ws": _responses_ws}
    return await runners[mode](conns, c, tokens, ramp_s)
