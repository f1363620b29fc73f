"""What a web page on another site (or on a re-pointed DNS name) can make a server without an API
key do (issue 19 item 6), in-process:

- a POST whose body is not sent as ``application/json`` (no Content-Type, ``text/plain``, a form:
  what a page may send to any server without a CORS preflight) is a 415 on every POST route, before
  anything is done: no generation started, no request aborted;
- a request whose ``Host`` is not one of the server's names (DNS rebinding) is a 400, on every path.
The real CLI's defaults are tested on a real process in ``tests/e2e/test_browser_guards.py``.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from starlette.testclient import TestClient

from server.app import create_app, enabled_routes
from server.openapi import openapi_path
from tests.app.ws_fakes import make_ctx

NOT_JSON = [
    ({}, "no Content-Type"),
    ({"content-type": "text/plain"}, "Content-Type 'text/plain'"),
    ({"content-type": "text/plain;charset=UTF-8"}, "Content-Type 'text/plain'"),
    ({"content-type": "application/x-www-form-urlencoded"}, "Content-Type 'application/x-www-form-urlencoded'"),
    ({"content-type": "multipart/form-data; boundary=x"}, "Content-Type 'multipart/form-data'"),
    ({"content-type": "application/jsonp"}, "Content-Type 'application/jsonp'"),
]


@pytest.fixture(scope="module")
def client() -> Iterator[TestClient]:
    with TestClient(create_app(make_ctx()), base_url="http://127.0.0.1:8000") as c:
        yield c


def _post_paths() -> list[str]:
    return sorted(r.path for r in enabled_routes(make_ctx()) if "POST" in r.methods)


def test_every_post_route_refuses_a_body_not_sent_as_json_with_415(client: TestClient) -> None:
    paths = _post_paths()
    assert {"/v1/chat/completions", "/abort_requests", "/inference/v1/abort_requests"} <= set(paths)
    for path in paths:
        for headers, named in NOT_JSON:
            r = client.post(path, content=b'{"request_ids": ["x"], "messages": []}', headers=headers)
            assert r.status_code == 415, (path, headers, r.text)
            body = r.json()
            message = body["error"]["message"]
            assert named in message and "Content-Type: application/json" in message, message
        # the same body as JSON is read (and answered on its merits: never 415)
        for ctype in ("application/json", "application/json; charset=utf-8", "application/vnd.api+json"):
            r = client.post(path, content=b"{}", headers={"content-type": ctype})
            assert r.status_code != 415, (path, ctype, r.text)


def test_the_openapi_document_declares_the_415(client: TestClient) -> None:
    doc = client.get("/openapi.json").json()
    for path in _post_paths():
        op = doc["paths"][openapi_path(path)]["post"]
        if "requestBody" in op:
            assert "415" in op["responses"], path


@pytest.mark.parametrize("host", ["rebind.example:8000", "testserver", "127.0.0.1.nip.io:8000"])
def test_a_host_that_is_not_one_of_the_servers_names_is_400_on_every_path(host: str) -> None:
    app = create_app(make_ctx(allowed_hosts=("api.example",)))
    with TestClient(app, base_url=f"http://{host}") as c:
        for method, path in (("GET", "/health"), ("GET", "/v1/models"), ("POST", "/abort_requests")):
            r = c.request(method, path, json={"request_ids": ["x"]})
            assert r.status_code == 400, (path, r.text)
            assert "--allowed-host" in r.json()["error"]["message"]
    for allowed in ("127.0.0.1:8000", "localhost:8000", "[::1]:8000", "api.example:8000"):
        with TestClient(app, base_url=f"http://{allowed}") as c:
            assert c.get("/health").status_code == 200, allowed
