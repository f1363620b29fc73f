"""The request-body rules of ``server.limits.LimitMiddleware`` in-process, with small limits: a body
refused as soon as it passes the size limit while it streams in (no Content-Length), and one that
does not arrive in time; both answered with the API's envelope, before the route sees a body. And
whom the rate limit counts when the server checks no keys."""

from __future__ import annotations

from collections.abc import Iterator

import anyio
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route
from starlette.testclient import TestClient

from server.app import _wrap
from server.gating import RouteGroup
from server.http import read_json
from server.limits import Limiter, LimitMiddleware
from server.routing import Route as TwRoute


async def echo(request: Request) -> Response:
    body = await read_json(request)
    return Response(str(len(body["x"])))


def app(max_body_bytes: int, body_timeout: float, limiter: Limiter | None = None, by_key: bool = True) -> Starlette:
    route = TwRoute("/v1/echo", echo, RouteGroup.ALWAYS)
    inner = Starlette(routes=[Route("/v1/echo", _wrap(route), methods=["POST"]),
                              Route("/v1/messages", _wrap(TwRoute("/v1/messages", echo, RouteGroup.ALWAYS)),
                                    methods=["POST"])])
    return LimitMiddleware(inner, limiter or Limiter(), body_timeout=body_timeout,  # type: ignore[return-value]
                           max_body_bytes=max_body_bytes, by_key=by_key)


@pytest.fixture
def client() -> Iterator[TestClient]:
    with TestClient(app(max_body_bytes=100, body_timeout=0.5)) as c:
        yield c


JSON = {"content-type": "application/json"}


def chunks(*parts: bytes) -> Iterator[bytes]:
    yield from parts


def test_a_streamed_body_is_refused_once_it_passes_the_limit(client: TestClient) -> None:
    r = client.post("/v1/echo", content=chunks(b'{"x": "', b"a" * 80, b"b" * 80, b'"}'), headers=JSON)
    assert r.status_code == 413 and r.json()["error"]["message"] == "Request body too large (limit 100 bytes)."
    r = client.post("/v1/messages", content=chunks(b"{}" * 80), headers=JSON)
    assert r.status_code == 413 and r.json()["type"] == "error"
    assert client.post("/v1/echo", json={"x": "a" * 50}).text == "50"


def test_a_body_that_does_not_arrive_in_time_is_a_408() -> None:
    async def main() -> list[dict[str, object]]:
        sent: list[dict[str, object]] = []
        parts = [{"type": "http.request", "body": b'{"x": ', "more_body": True}]

        async def receive() -> dict[str, object]:
            if parts:
                return parts.pop()
            await anyio.sleep(5)  # the rest never comes
            return {"type": "http.disconnect"}

        async def send(message: dict[str, object]) -> None:
            sent.append(message)

        scope = {"type": "http", "method": "POST", "path": "/v1/echo", "query_string": b"",
                 "headers": [(b"content-type", b"application/json")],
                 "http_version": "1.1", "scheme": "http", "server": ("t", 80), "client": ("c", 1), "root_path": ""}
        await app(max_body_bytes=100, body_timeout=0.2)(scope, receive, send)  # type: ignore[arg-type]
        return sent

    sent = anyio.run(main)
    assert sent[0]["status"] == 408
    assert b"did not arrive within 0.2 s" in sent[1]["body"]  # type: ignore[operator]


def test_without_checked_keys_a_made_up_key_is_no_new_rate_budget() -> None:
    # a server without --api-key counts clients by address: a key it does not check is no identity
    unchecked = app(max_body_bytes=100, body_timeout=5, limiter=Limiter(rate_per_minute=1), by_key=False)
    with TestClient(unchecked) as c:
        codes = [c.post("/v1/echo", json={"x": "a"}, headers={"Authorization": f"Bearer made-up-{i}"}).status_code
                 for i in range(3)]
    assert codes == [200, 429, 429]
    checked = app(max_body_bytes=100, body_timeout=5, limiter=Limiter(rate_per_minute=1))
    with TestClient(checked) as c:  # keys checked upstream (ApiKeyMiddleware): each key is a client
        codes = [c.post("/v1/echo", json={"x": "a"}, headers={"Authorization": f"Bearer key-{i}"}).status_code
                 for i in range(3)]
    assert codes == [200, 200, 200]
