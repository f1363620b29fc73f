"""The client's tasks (client_sdk/connection.py, client_sdk/http_fallback.py, engine/task_host.py):
each transport's background work (the session's reader and keep-alive, the cancels being sent, an
HTTP request in flight) runs in the transport's task group, so that closing the client leaves
nothing running, a reader that fails raises in the requests waiting on it and in later calls, and a
request cancelled while its reader waits ends. Against a scripted ``/v1/session`` server on a thread
of its own (websockets' threading server): every task in the test's event loop is the client's or
the test's."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import httpx
import orjson
import pytest
from websockets.sync.server import ServerConnection, serve

import client_sdk
from client_sdk import errors
from client_sdk.connection import WebSocketTransport
from client_sdk.http_fallback import HttpTransport
from client_sdk.options import Options
from client_sdk.types import SessionInfo
from session.client_frames import Generate


def chunk(ids: list[int]) -> dict[str, Any]:
    return {"request_id": "r", "choices": [{"index": 0, "token_ids": ids, "finish_reason": None}]}


class Scripted:
    """``session.created``, then for each ``generate`` frame ``deltas`` deltas and nothing more; a
    ``cancel`` ends its request (``generate.done``, cancelled); a ``ping`` gets its ``pong``."""

    def __init__(self, deltas: int = 1) -> None:
        self.deltas = deltas
        self.cancels: list[str] = []
        self.url = ""

    def session(self, ws: ServerConnection) -> None:
        seq = 0

        def send(frame: dict[str, Any]) -> None:
            nonlocal seq
            seq += 1
            ws.send(orjson.dumps({**frame, "seq": seq}).decode())

        send({"type": "session.created", "session_id": "s", "protocol_version": 1, "server": {},
              "frames": ["generate", "cancel", "ping"], "limits": {"max_in_flight": 8, "idle_timeout_s": 90},
              "session": {"model": "m"}})
        for text in ws:
            frame = orjson.loads(text)
            if frame["type"] == "generate":
                for k in range(self.deltas):
                    send({"type": "generate.delta", "id": frame["id"], "chunk": chunk([k + 1])})
            elif frame["type"] == "cancel":
                self.cancels.append(frame["id"])
                send({"type": "generate.done", "id": frame["id"], "status": "cancelled"})
            elif frame["type"] == "ping":
                send({"type": "pong", "event_id": frame.get("event_id")})


@contextmanager
def scripted(deltas: int = 1) -> Iterator[Scripted]:
    script = Scripted(deltas)
    with serve(script.session, "127.0.0.1", 0) as server:
        thread = threading.Thread(target=server.serve_forever, daemon=True)
        thread.start()
        script.url = f"http://127.0.0.1:{server.socket.getsockname()[1]}"
        try:
            yield script
        finally:
            server.shutdown()
            thread.join(5)


def others(*besides: asyncio.Task[Any]) -> list[str]:
    """The unfinished tasks of this event loop besides the one running the test and ``besides``."""
    current = asyncio.current_task()
    return sorted(t.get_name() for t in asyncio.all_tasks() if t is not current and t not in besides and not t.done())


def test_closing_the_client_leaves_no_task_running_and_ends_a_waiting_reader() -> None:
    with scripted() as server:
        async def main() -> tuple[list[str], list[str], BaseException]:
            client = await client_sdk.connect(server.url, transport="websocket")
            stream = await client.generate(token_ids=[1, 2], sampling_params={"max_tokens": 8})
            await anext(stream)
            waiting = asyncio.create_task(anext(stream), name="test reader")  # nothing more will come
            await asyncio.sleep(0.05)
            running = others(waiting)
            await client.aclose()
            after = others(waiting)  # before anything else runs
            with pytest.raises(errors.ConnectionLostError) as info:
                await waiting
            return running, after, info.value

        running, after, error = asyncio.run(main())
    assert "tokenwire session reader" in running and "tokenwire keepalive" in running, running
    assert after == []
    assert "the client was closed" in str(error)


def test_a_reader_that_fails_raises_in_the_waiting_request_and_in_later_calls(monkeypatch: pytest.MonkeyPatch) -> None:
    dispatch = WebSocketTransport._dispatch
    seen = []

    def failing(self: WebSocketTransport, message: str) -> None:
        seen.append(message)
        if len(seen) == 2:  # the second delta: a bug of ours on the reader's path
            raise RuntimeError("a bug in the reader")
        dispatch(self, message)

    monkeypatch.setattr(WebSocketTransport, "_dispatch", failing)
    with scripted(deltas=2) as server:
        async def main() -> tuple[BaseException, BaseException, list[str]]:
            client = await client_sdk.connect(server.url, transport="websocket")
            stream = await client.generate(token_ids=[1, 2], sampling_params={"max_tokens": 8})
            with pytest.raises(errors.ConnectionLostError) as waiting:
                async for _ in stream:
                    pass
            with pytest.raises(errors.ConnectionLostError) as later:
                await client.generate(token_ids=[1, 2], sampling_params={"max_tokens": 8})
            await client.aclose()
            return waiting.value, later.value, others()

        waiting, later, after = asyncio.run(main())
    for error in (waiting, later):
        assert "reader failed" in str(error)
    assert isinstance(later.__cause__, RuntimeError) and "a bug in the reader" in str(later.__cause__)
    assert after == []


def test_a_stream_cancelled_while_its_reader_waits_ends_cancelled_and_the_cancel_reaches_the_server() -> None:
    with scripted() as server:
        async def main() -> tuple[str | None, list[str], list[str]]:
            async with client_sdk.connect(server.url, transport="websocket") as client:
                stream = await client.generate(token_ids=[1, 2], sampling_params={"max_tokens": 8})
                await anext(stream)

                async def rest() -> list[Any]:
                    return [c async for c in stream]

                reader = asyncio.create_task(rest(), name="test reader")
                await asyncio.sleep(0.05)  # the reader waits in the channel
                await stream.cancel()
                left = await asyncio.wait_for(reader, 30)
                assert left == []
            return stream.status, [stream.id], others()

        status, ids, after = asyncio.run(main())
        assert server.cancels == ids
    assert status == "cancelled" and after == []


def test_over_http_cancel_and_close_end_the_request_tasks() -> None:
    """An HTTP request in flight is a task of the transport's group with its own cancel scope:
    ``cancel(id)`` ends it "cancelled", even before it ran; ``aclose`` ends those still running."""
    hung = asyncio.Event()

    async def app(request: httpx.Request) -> httpx.Response:
        await hung.wait()  # never set: the request waits for an answer
        return httpx.Response(200)

    async def main() -> tuple[list[str], list[str], str, str]:
        transport = HttpTransport(["http://test"], Options())
        transport._http = httpx.AsyncClient(base_url="http://test", transport=httpx.MockTransport(app))
        transport._info = SessionInfo(transport="http", url="http://test", model="m", frames=frozenset({"generate"}))
        first = await transport.start(Generate(id="g1", body={"token_ids": [1]}))
        await transport.cancel("g1")  # before its task ran
        second = await transport.start(Generate(id="g2", body={"token_ids": [1]}))
        await asyncio.sleep(0.05)
        running = others()
        done1 = await asyncio.wait_for(first.next(30), 30)
        await transport.aclose()
        after = others()
        done2 = await asyncio.wait_for(second.next(30), 30)
        return running, after, getattr(done1, "status", ""), getattr(done2, "status", "")

    running, after, status1, status2 = asyncio.run(main())
    assert "http g2" in running and "http g1" not in running, running
    assert after == [] and status1 == status2 == "cancelled"
