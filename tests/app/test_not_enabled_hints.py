"""A route or frame a server has but keeps off says how to turn it on (issue 40 §3 item 7): plain
``serve`` names ``--enable-scale-out`` in the 404 of ``/v1/*/render`` and in the ``not_enabled``
error of a ``render`` frame; ``launch render`` without an engine names ``--engine-url``."""

from __future__ import annotations

from dataclasses import replace

import orjson
import pytest
from starlette.testclient import TestClient

from server.app import create_app
from server.gating import ENV_VAR, decide
from server.settings import Mode
from tests.app.ws_fakes import make_ctx


def _client(mode: Mode, environ: dict[str, str] | None = None) -> TestClient:
    return TestClient(create_app(replace(make_ctx(), gating=decide(mode, environ or {}))))


@pytest.mark.parametrize("path", ["/v1/chat/completions/render", "/v1/messages/render",
                                  "/v1/completions/derender", "/inference/v1/generate"])
def test_a_scale_out_route_on_plain_serve_is_a_404_that_names_the_flag(path: str) -> None:
    with _client(Mode.SERVE) as client:
        r = client.post(path, json={})
    assert r.status_code == 404
    error = r.json()["error"]
    assert error["message"] == (f"{path} is not enabled on this server: start the server with "
                                f"--enable-scale-out (or {ENV_VAR}=1).")


def test_with_the_switch_set_to_zero_the_hint_says_to_unset_it_first() -> None:
    with _client(Mode.SERVE, {ENV_VAR: "0"}) as client:
        message = client.post("/v1/chat/completions/render", json={}).json()["error"]["message"]
    assert message.endswith(f"unset {ENV_VAR}=0 and start the server with --enable-scale-out.")


def test_an_unknown_path_is_still_a_plain_404() -> None:
    with _client(Mode.SERVE) as client:
        r = client.post("/v1/nothing/render", json={})
    assert (r.status_code, r.json()["error"]["message"]) == (404, "Not found: POST /v1/nothing/render")


def test_a_render_frame_on_plain_serve_is_not_enabled_naming_the_flag() -> None:
    with _client(Mode.SERVE) as client, client.websocket_connect("/v1/session") as ws:
        assert orjson.loads(ws.receive_text())["type"] == "session.created"
        ws.send_text(orjson.dumps({"type": "render", "id": "r", "kind": "chat", "body": {}}).decode())
        error = orjson.loads(ws.receive_text())["error"]
    assert error["code"] == "not_enabled"
    assert error["message"] == ("render frames are not enabled on this server: start the server with "
                                f"--enable-scale-out (or {ENV_VAR}=1) (enabled: session.update, chat, "
                                "completion, messages, response, cancel, ping).")


def test_launch_render_without_an_engine_names_engine_url() -> None:
    with _client(Mode.RENDER) as client:
        message = client.post("/v1/chat/completions", json={}).json()["error"]["message"]
        with client.websocket_connect("/v1/session") as ws:
            ws.receive_text()
            ws.send_text(orjson.dumps({"type": "chat", "id": "c", "body": {}}).decode())
            frame_message = orjson.loads(ws.receive_text())["error"]["message"]
    assert "--engine-url URL" in message and "--engine-url URL" in frame_message
