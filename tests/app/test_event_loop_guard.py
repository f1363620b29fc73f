"""The in-process ring's guards (tests/app/conftest.py): a blocking call on the event loop is caught,
and a test gets the ring's short timeout."""

from __future__ import annotations

import time

import pytest
from blockbuster import BlockingError
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route
from starlette.testclient import TestClient


def test_a_route_that_sleeps_on_the_loop_raises_blocking_error() -> None:
    async def sleeps(request: Request) -> Response:
        time.sleep(0.001)  # what the guard is there to catch
        return Response("late")

    with TestClient(Starlette(routes=[Route("/", sleeps)])) as client, pytest.raises(BlockingError):
        client.get("/")


def test_a_test_of_the_ring_gets_the_ring_timeout(request: pytest.FixtureRequest) -> None:
    from tests.app.conftest import RING_TIMEOUT_S

    marker = request.node.get_closest_marker("timeout")
    assert marker is not None and marker.args == (RING_TIMEOUT_S,) and RING_TIMEOUT_S < 300


def test_metrics_are_collected_on_the_loop_they_count() -> None:
    # /metrics runs on the event loop (the loop's own task count is read there) and passes the guard
    from server.app import create_app
    from tests.app.ws_fakes import make_ctx

    with TestClient(create_app(make_ctx())) as client:
        text = client.get("/metrics").text
    assert "tokenwire_event_loop_tasks " in text and "process_resident_memory_bytes " in text
