"""/v1/session through Starlette's TestClient (the in-process ring): the in-process twin of the
checks tests/e2e/ws_client.py's ``SessionClient`` makes over a real socket, ``seq`` growing by
exactly one on every frame and each request's frames read up to its final one."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import orjson
import pytest
from starlette.testclient import TestClient
from starlette.websockets import WebSocketDisconnect

from tests.support.cli_app import BASE_URL


class SessionFrames:
    """Sends frames, reads frames checking that ``seq`` grows by exactly one, routes by ``id``."""

    def __init__(self, ws: Any) -> None:
        self.ws = ws
        self.seq = 0
        self.frames: list[dict[str, Any]] = []
        self.created: dict[str, Any] = {}

    @property
    def subprotocol(self) -> str | None:
        return self.ws.accepted_subprotocol  # type: ignore[no-any-return]

    def send(self, **frame: Any) -> None:
        self.ws.send_text(orjson.dumps(frame).decode())

    def next(self) -> dict[str, Any]:
        frame: dict[str, Any] = orjson.loads(self.ws.receive_text())
        assert frame["seq"] == self.seq + 1, f"seq {frame['seq']} after {self.seq}"
        self.seq = frame["seq"]
        self.frames.append(frame)
        return frame

    def until(self, request_id: str, final: str) -> list[dict[str, Any]]:
        """This request's frames up to its final frame (or error); other frames are kept in ``frames``."""
        out = []
        while True:
            frame = self.next()
            if frame.get("id") == request_id:
                out.append(frame)
                if frame["type"] in (final, "error"):
                    return out

    def closed_with(self) -> tuple[int, str]:
        """Read on until the server closes: its close code and reason."""
        with pytest.raises(WebSocketDisconnect) as info:
            while True:
                self.next()
        return info.value.code, info.value.reason


def connect(client: TestClient, **kwargs: Any) -> Any:
    """``client.websocket_connect("/v1/session", **kwargs)`` with the ``Host`` a test sends a process
    on a local port (TestClient's WebSocket URL is always ``ws://testserver``), on a copy of
    ``headers`` (TestClient adds the upgrade headers to the dict it gets)."""
    headers = {"host": BASE_URL.removeprefix("http://"), **(kwargs.pop("headers", None) or {})}
    return client.websocket_connect("/v1/session", headers=headers, **kwargs)


@contextmanager
def open_session(client: TestClient, **kwargs: Any) -> Iterator[SessionFrames]:
    """A session opened with ``tokenwire.v1`` (unless ``subprotocols`` says otherwise), its
    ``session.created`` read into ``created``. ``kwargs``: TestClient's ``headers`` and ``subprotocols``."""
    kwargs.setdefault("subprotocols", ["tokenwire.v1"])
    with connect(client, **kwargs) as ws:
        session = SessionFrames(ws)
        session.created = session.next()
        assert session.created["type"] == "session.created"
        yield session
