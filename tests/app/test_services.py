"""The process's services (server/services.py): built once, when the app is created, and shared by
the HTTP routes and the WebSocket stages; a missing --state-secret is warned about as before."""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from starlette.testclient import TestClient

from server.app import create_app
from server.context import ServerContext
from server.gating import decide
from server.services import Services
from server.settings import Mode, Settings
from server.ws.stages import PipelineStages
from session.state import RANDOM_SECRET_NOTE, RANDOM_SECRET_WARNING

SECRET = b"services-secret-0123456789-abcdefghijklmnopqrstuvwxyz"


def _ctx(asset: Callable[[str], Path], tokenizer: Callable[[str], Any], mode: Mode, **overrides: Any) -> ServerContext:
    settings = Settings(mode=mode, model_dir=asset("qwen3"), served_model_name="tiny", environ={},
                        **{"state_secret": SECRET, **overrides})
    return ServerContext(settings=settings, gating=decide(mode, {}), tokenizer=tokenizer("qwen3"), max_model_len=4096)


def test_the_services_are_built_once_when_the_app_is_created_and_shared(
        asset: Callable[[str], Path], tokenizer: Callable[[str], Any]) -> None:
    app = create_app(_ctx(asset, tokenizer, Mode.RENDER))
    services = app.state.services
    assert isinstance(services, Services)
    assert services.pipeline.renderer is services.renderer
    assert services.pipeline.codec is services.codec
    assert services.derender is not None and services.derender.codec is services.codec
    assert isinstance(services.stages, PipelineStages)
    assert services.stages.pipeline is services.pipeline and services.stages.derender is services.derender
    assert services.session.frames == frozenset({"render", "derender"})
    with TestClient(app) as client:  # a request renders with that renderer: nothing is built on the way
        r = client.post("/v1/chat/completions/render", json={"model": "tiny", "messages": [
            {"role": "user", "content": "Hi"}]})
        assert r.status_code == 200, r.text
        assert app.state.services is services
        assert [route.path for route in app.state.routes if route.path.endswith("/render")] == [
            "/v1/chat/completions/render", "/v1/completions/render", "/v1/messages/render", "/v1/responses/render"]


def test_the_derender_service_exists_only_where_its_routes_are_served(
        asset: Callable[[str], Path], tokenizer: Callable[[str], Any]) -> None:
    services = create_app(_ctx(asset, tokenizer, Mode.SERVE)).state.services
    assert services.derender is None
    assert services.session.frames == frozenset({"chat", "completion", "messages", "response"})


def test_a_chat_template_that_does_not_compile_stops_app_creation(
        asset: Callable[[str], Path], tokenizer: Callable[[str], Any]) -> None:
    with pytest.raises(ValueError, match="template"):
        create_app(_ctx(asset, tokenizer, Mode.SERVE, chat_template="{% if %}"))


def test_without_a_secret_plain_serve_says_so_at_info_when_a_checkpoint_is_first_signed(
        asset: Callable[[str], Path], tokenizer: Callable[[str], Any], caplog: pytest.LogCaptureFixture) -> None:
    # Plain `serve` says nothing at start-up (most users never resume a stream), and once, at INFO,
    # when a resumable stream first needs the codec: a single server resumes its own streams; no
    # WARNING, which is for servers whose derender states other replicas must accept.
    with caplog.at_level(logging.INFO, logger="tokenwire.state"):
        services = create_app(_ctx(asset, tokenizer, Mode.SERVE, state_secret=None)).state.services
        assert caplog.records == []
        assert services.pipeline.codec is services.codec
        assert services.pipeline.codec is services.codec
    assert [(r.levelno, r.getMessage()) for r in caplog.records] == [(logging.INFO, RANDOM_SECRET_NOTE)]
    assert RANDOM_SECRET_WARNING not in caplog.text


def test_without_a_secret_a_server_with_derender_routes_warns_at_start_up(
        asset: Callable[[str], Path], tokenizer: Callable[[str], Any], caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.INFO, logger="tokenwire.state"):
        create_app(_ctx(asset, tokenizer, Mode.RENDER, state_secret=None))
    assert [(r.levelno, r.getMessage()) for r in caplog.records] == [(logging.WARNING, RANDOM_SECRET_WARNING)]
