"""A session's pipeline deltas on the direct writer: a loop tick's first one leaves at once, straight
from the machine (``Session.pipeline_delta`` with ``at_once``); later ones wait for the tick's end, and a backed-up
transport or a batch client sends them through the machine's actions, with ``seq`` in write order
and every chunk exactly once in every case."""

from __future__ import annotations

import asyncio
from typing import Any

import orjson

from server.pipeline.stream import StreamEvent
from server.ws.connection import Connection
from server.ws.transport import text_frame
from session import client_frames as f
from session.machine import RequestState, Session, SessionConfig

CONFIG = SessionConfig(model="m", frames=frozenset(f.REQUEST_FRAME_TYPES))


class RecordingWriter:
    """The ``FrameWriter`` surface a connection uses, recording each transport write."""

    def __init__(self) -> None:
        self.ready = True
        self.closed = False
        self.writes: list[bytes] = []

    @property
    def backed_up(self) -> bool:
        return not self.ready

    def write_one(self, payload: bytes) -> None:
        self.writes.append(text_frame(payload))

    def write(self, payloads: list[bytes]) -> bool:
        self.writes.append(b"".join(text_frame(p) for p in payloads))
        return True

    async def drained(self) -> None:
        return None

    def messages(self) -> list[dict[str, Any]]:
        """Every text frame written so far, decoded (the frames of one write in order)."""
        out = []
        for data in self.writes:
            while data:
                n, start = data[1] & 0x7F, 2
                if n == 126:
                    n, start = int.from_bytes(data[2:4], "big"), 4
                elif n == 127:
                    n, start = int.from_bytes(data[2:10], "big"), 10
                out.append(orjson.loads(data[start:start + n]))
                data = data[start + n:]
        return out


async def _connection(*, batch: bool = False) -> tuple[Connection, RecordingWriter]:
    loop = asyncio.get_running_loop()
    writer = RecordingWriter()
    conn = Connection(None, Session(CONFIG, now=loop.time()), None, batch=batch, direct=writer)  # type: ignore[arg-type]
    conn._loop, conn._now = loop, loop.time  # what ``run`` binds
    conn.carry_out()  # session.created
    await asyncio.sleep(0)  # its tick ends
    conn.session.receive_frame(f.Chat(id="r", event_id="e", body={}), now=loop.time())
    conn.session.actions()  # the StartPipeline action: its work is what this test plays
    assert conn.session.request_state("r") is RequestState.RUNNING
    return conn, writer


def _delta(conn: Connection, n: int) -> None:
    conn._report.pipeline_events("r", resumable=False)([StreamEvent({"n": n})])


def _chunks(messages: list[dict[str, Any]]) -> list[int]:
    return [c["n"] for m in messages if m["type"] == "chat.delta" for c in m["chunks"]]


def _frames(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [m for m in messages if m["type"] != "batch"] + [x for m in messages if m["type"] == "batch"
                                                           for x in m["frames"]]


def test_the_ticks_first_delta_leaves_at_once_and_the_rest_at_its_end_in_seq_order() -> None:
    async def main() -> tuple[list[int], list[dict[str, Any]], list[dict[str, Any]]]:
        conn, writer = await _connection()
        _delta(conn, 1)
        _delta(conn, 2)
        _delta(conn, 3)
        counts = [len(writer.writes)]  # session.created, then the tick's first delta
        await asyncio.sleep(0)  # the end of the tick
        counts.append(len(writer.writes))
        first = writer.messages()
        _delta(conn, 4)  # a new tick: at once again
        counts.append(len(writer.writes))
        await asyncio.sleep(0)
        return counts, first, writer.messages()

    counts, first, messages = asyncio.run(main())
    assert counts == [2, 3, 4]  # the end of the tick wrote deltas 2 and 3 together, in one write
    assert [m["type"] for m in first] == ["session.created", "chat.delta", "chat.delta", "chat.delta"]
    assert _chunks(messages) == [1, 2, 3, 4]
    assert [m["seq"] for m in messages] == [1, 2, 3, 4, 5]
    assert all(m["id"] == "r" and m["event_id"] == "e" for m in messages[1:])


def test_a_backed_up_transport_queues_and_merges_the_deltas_which_leave_once_it_drains() -> None:
    async def main() -> tuple[int, list[dict[str, Any]]]:
        conn, writer = await _connection()
        writer.ready = False  # past the high-water mark
        _delta(conn, 1)
        _delta(conn, 2)
        written = len(writer.writes)
        writer.ready = True
        assert await conn._send_pending()
        _delta(conn, 3)
        await asyncio.sleep(0)
        return written, writer.messages()

    written, messages = asyncio.run(main())
    assert written == 1  # session.created only
    assert [m["type"] for m in messages] == ["session.created", "chat.delta", "chat.delta"]
    assert [c["n"] for c in messages[1]["chunks"]] == [1, 2]  # merged while queued
    assert _chunks(messages) == [1, 2, 3]
    assert [m["seq"] for m in messages] == [1, 2, 3]


def test_a_batch_client_gets_a_ticks_deltas_as_one_batch_message() -> None:
    async def main() -> tuple[int, list[dict[str, Any]]]:
        conn, writer = await _connection(batch=True)
        _delta(conn, 1)
        _delta(conn, 2)
        before = len(writer.writes)
        await asyncio.sleep(0)
        return before, writer.messages()

    before, messages = asyncio.run(main())
    assert before == 1  # session.created only: nothing leaves singly
    assert [m["type"] for m in messages] == ["session.created", "batch"]
    frames = _frames(messages)
    assert _chunks(frames) == [1, 2]
    assert [m["seq"] for m in frames] == [1, 2, 3]
