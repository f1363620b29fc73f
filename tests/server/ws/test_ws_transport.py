"""The direct writer's frames are the bytes the websockets library writes for the same text."""

from __future__ import annotations

import pytest
from websockets.frames import Frame, Opcode

from server.ws.transport import frame_writer, text_frame


@pytest.mark.parametrize("size", [0, 1, 125, 126, 127, 65535, 65536, 70000])
def test_text_frames_are_what_websockets_serializes_for_a_server(size: int) -> None:
    payload = ("é" * size).encode()[:size]
    want = Frame(Opcode.TEXT, payload).serialize(mask=False, extensions=[])
    assert text_frame(payload) == want


def test_without_the_servers_own_protocol_the_session_sends_through_asgi() -> None:
    async def send(message: object) -> None: ...

    assert frame_writer({"type": "websocket"}) is None
    assert frame_writer({"type": "websocket", "tokenwire.raw_send": send}) is None


class _Transport:
    def __init__(self) -> None:
        self.closing = False
        self.data: list[bytes] = []

    def is_closing(self) -> bool:
        return self.closing

    def write(self, data: bytes) -> None:
        self.data.append(data)


def test_the_writer_is_ready_only_while_open_and_taking_more() -> None:
    import asyncio
    from types import SimpleNamespace

    from websockets.protocol import OPEN, State
    from websockets.server import ServerProtocol

    from server.ws.transport import FrameWriter

    conn = ServerProtocol()
    conn.state = OPEN
    transport, writable = _Transport(), asyncio.Event()
    writable.set()
    protocol = SimpleNamespace(conn=conn, transport=transport, writable=writable, close_sent=False)
    writer = FrameWriter(protocol)
    assert writer.ready
    writer.write_one(b'{"type":"pong"}')
    assert transport.data == [text_frame(b'{"type":"pong"}')]
    writable.clear()  # past the transport's high-water mark: the session queues instead
    assert not writer.ready and writer.backed_up
    writable.set()
    protocol.close_sent = True
    assert not writer.ready
    protocol.close_sent = False
    transport.closing = True
    assert not writer.ready
    transport.closing = False
    conn.state = State.CLOSING
    assert not writer.ready
