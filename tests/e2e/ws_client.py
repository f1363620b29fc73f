"""A small test client for /v1/session over a real socket (the ``websockets`` library)."""

from __future__ import annotations

from typing import Any

import orjson
from websockets.asyncio.client import ClientConnection, connect


class SessionClient:
    """Sends frames, reads frames checking that ``seq`` grows by exactly one, routes by ``id``."""

    def __init__(self, ws: ClientConnection) -> None:
        self.ws = ws
        self.seq = 0
        self.frames: list[dict[str, Any]] = []
        self.created: dict[str, Any] = {}

    @classmethod
    async def open(cls, ws_url: str, **kwargs: Any) -> SessionClient:
        kwargs.setdefault("subprotocols", ["tokenwire.v1"])
        kwargs.setdefault("max_size", 64 * 1024 * 1024)
        client = cls(await connect(ws_url + "/v1/session", **kwargs))
        client.created = await client.next()
        assert client.created["type"] == "session.created"
        return client

    async def send(self, **frame: Any) -> None:
        await self.ws.send(orjson.dumps(frame).decode())

    async def next(self) -> dict[str, Any]:
        frame: dict[str, Any] = orjson.loads(await self.ws.recv())
        assert frame["seq"] == self.seq + 1, f"seq {frame['seq']} after {self.seq}"
        self.seq = frame["seq"]
        self.frames.append(frame)
        return frame

    async def until(self, request_id: str, final: str) -> list[dict[str, Any]]:
        """This request's frames up to its final frame (or error); other frames are kept in ``frames``."""
        out = []
        while True:
            frame = await self.next()
            if frame.get("id") == request_id:
                out.append(frame)
                if frame["type"] in (final, "error"):
                    return out

    async def close(self) -> None:
        await self.ws.close()


def chat_text(frames: list[dict[str, Any]]) -> str:
    return "".join(ch["choices"][0]["delta"].get("content") or "" for fr in frames if fr["type"] == "chat.delta"
                   for ch in fr["chunks"] if ch.get("choices"))
