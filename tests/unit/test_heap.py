"""The server freezes its start-up heap once serving begins (server/heap.py)."""

from __future__ import annotations

import asyncio
import gc

import pytest
import uvicorn

from server import shutdown
from server.heap import freeze_startup_heap
from server.shutdown import Drain, GracefulServer


def test_freezing_moves_the_live_heap_out_of_the_collectors_walks() -> None:
    gc.unfreeze()
    try:
        freeze_startup_heap()
        assert gc.get_freeze_count() > 1000  # this interpreter's modules and objects, at least
    finally:
        gc.unfreeze()


def test_the_server_freezes_once_its_startup_ran(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[str] = []

    async def startup(self: uvicorn.Server, sockets: object = None) -> None:
        calls.append("uvicorn startup (the lifespan: the engine is loaded)")

    monkeypatch.setattr(uvicorn.Server, "startup", startup)
    monkeypatch.setattr(shutdown, "freeze_startup_heap", lambda: calls.append("freeze"))
    server = GracefulServer(uvicorn.Config(app=lambda *a: None), Drain(), None, shutdown_timeout=1)
    asyncio.run(server.startup())
    assert calls == ["uvicorn startup (the lifespan: the engine is loaded)", "freeze"]
