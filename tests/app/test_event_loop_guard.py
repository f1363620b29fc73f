"""The in-process ring's guard (tests/app/conftest.py) catches a blocking call on the event loop."""

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
