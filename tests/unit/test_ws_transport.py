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
