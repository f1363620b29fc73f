"""The server settles its heap for serving once it begins: the start-up heap frozen, the youngest
generation collected less often (server/heap.py)."""

from __future__ import annotations

import asyncio
import gc

import pytest
import uvicorn

from server import shutdown
from server.heap import YOUNG_THRESHOLD, settle_heap_for_serving
from server.shutdown import Drain, GracefulServer


def test_settling_freezes_the_live_heap_and_collects_the_young_less_often() -> None:
    gc.unfreeze()
    threshold = gc.get_threshold()
    try:
        settle_heap_for_serving()
        assert gc.get_freeze_count() > 1000  # this interpreter's modules and objects, at least
        assert gc.get_threshold() == (YOUNG_THRESHOLD, *threshold[1:])
    finally:
        gc.unfreeze()
        gc.set_threshold(*threshold)


def test_the_server_settles_its_heap_once_its_startup_ran(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[str] = []

    async def startup(self: uvicorn.Server, sockets: object = None) -> None:
        calls.append("uvicorn startup (the lifespan: the engine is loaded)")

    monkeypatch.setattr(uvicorn.Server, "startup", startup)
    monkeypatch.setattr(shutdown, "settle_heap_for_serving", lambda: calls.append("freeze"))
    server = GracefulServer(uvicorn.Config(app=lambda *a: None), Drain(), None, shutdown_timeout=1)
    asyncio.run(server.startup())
    assert calls == ["uvicorn startup (the lifespan: the engine is loaded)", "freeze"]
