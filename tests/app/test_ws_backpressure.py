"""A slow reader never grows server memory: deltas coalesce, and reading stops while answers pile up."""

from __future__ import annotations

from typing import Any

import anyio
import orjson
import pytest

from server.ws.connection import Connection
from server.ws.send_queue import SendQueue
from session import client_frames as f
from session.machine import Session, SessionConfig
from session.server_frames import ChatDelta, ChatDone, Pong
from tests.app.ws_fakes import FakePipeline

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


class SlowSocket:
    """An ASGI-ish socket whose client reads only when the test lets it."""

    def __init__(self, incoming: list[dict[str, Any]]) -> None:
        self.incoming = incoming
        self.received_calls = 0
        self.sent: list[dict[str, Any]] = []
        self.reading = anyio.Event()
        self.closed: tuple[int, str] | None = None
        self.done = anyio.Event()

    async def receive(self) -> dict[str, Any]:
        self.received_calls += 1
        if self.incoming:
            return self.incoming.pop(0)
        await self.done.wait()
        return {"type": "websocket.disconnect", "code": 1000}

    async def send_text(self, text: str) -> None:
        await self.reading.wait()
        self.sent.append(orjson.loads(text))

    async def close(self, code: int = 1000, reason: str | None = None) -> None:
        self.closed = (code, reason or "")


def text(frame: dict[str, Any]) -> dict[str, Any]:
    return {"type": "websocket.receive", "text": orjson.dumps(frame).decode()}


async def test_pending_deltas_of_a_request_coalesce_while_the_client_does_not_read() -> None:
    socket = SlowSocket([text({"type": "chat", "id": "c", "body": {"n": 200}})])
    session = Session(SessionConfig(model="m", frames=frozenset(f.REQUEST_FRAME_TYPES)), now=0.0)
    conn = Connection(socket, session, FakePipeline())  # type: ignore[arg-type]
    async with anyio.create_task_group() as tg:
        tg.start_soon(conn.run)
        with anyio.fail_after(10):
            while session.in_flight or conn.send_queue.coalesced == 0:
                await anyio.sleep(0.01)
        assert len(conn.send_queue) <= 2  # session.created is being sent; one slot holds every delta
        socket.reading.set()
        with anyio.fail_after(10):
            while not socket.sent or socket.sent[-1]["type"] != "chat.done":
                await anyio.sleep(0.01)
        socket.done.set()
    deltas = [fr for fr in socket.sent if fr["type"] == "chat.delta"]
    assert len(deltas) < 200
    texts = [ch["choices"][0]["delta"]["content"] for fr in deltas for ch in fr["chunks"]]
    assert texts == [f"text-{i}" for i in range(200)]
    seqs = [fr["seq"] for fr in socket.sent]
    assert seqs == sorted(set(seqs))


async def test_the_reader_stops_reading_while_unread_answers_fill_the_send_queue() -> None:
    pings = [text({"type": "ping", "event_id": str(i)}) for i in range(100)]
    socket = SlowSocket(pings)
    session = Session(SessionConfig(model="m", frames=frozenset()), now=0.0)
    conn = Connection(socket, session, FakePipeline(), send_queue_capacity=8)  # type: ignore[arg-type]
    async with anyio.create_task_group() as tg:
        tg.start_soon(conn.run)
        await anyio.sleep(0.2)
        assert socket.received_calls <= 10  # 8 queued answers + the one being written + one more read
        socket.reading.set()
        with anyio.fail_after(10):
            while len(socket.sent) < 101:
                await anyio.sleep(0.01)
        socket.done.set()
    assert [fr["event_id"] for fr in socket.sent[1:]] == [str(i) for i in range(100)]


async def test_the_send_queue_keeps_request_order_and_sends_a_done_after_its_deltas() -> None:
    box = SendQueue()
    box.put(ChatDelta(id="a", chunks=[{"n": 1}]))
    box.put(Pong())
    box.put(ChatDelta(id="b", chunks=[{"n": 1}]))
    box.put(ChatDelta(id="a", chunks=[{"n": 2}]))
    box.put(ChatDone(id="a", status="completed"))
    first = box.take()
    assert [fr.type for fr in first] == ["chat.delta", "chat.done"]
    assert first[0].chunks == [{"n": 1}, {"n": 2}]  # type: ignore[attr-defined]
    assert [fr.type for fr in box.take()] == ["pong"]
    assert [fr.type for fr in box.take()] == ["chat.delta"]
    assert box.take() == [] and box.coalesced == 1 and not box.full
