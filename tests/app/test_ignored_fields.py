"""Unknown request fields are accepted and ignored, as vLLM does, but not silently (issue 40 §3
item 8): a WARNING names each ignored field once per process, and
``tokenwire_ignored_request_fields_total{api}`` counts every one."""

from __future__ import annotations

import logging
import secrets
from dataclasses import replace

import pytest
from starlette.testclient import TestClient

from server import http, metrics
from server.app import create_app
from server.gating import decide
from server.settings import Mode
from tests.app.ws_fakes import make_ctx

USER = [{"role": "user", "content": "Hi"}]


def _count(api: str) -> float:
    return metrics.REGISTRY.get_sample_value("tokenwire_ignored_request_fields_total", {"api": api}) or 0.0


def test_an_ignored_field_is_named_once_and_counted_every_time(caplog: pytest.LogCaptureFixture) -> None:
    typo = f"temprature_{secrets.token_hex(4)}"  # a name no other test has made this process log
    before = {api: _count(api) for api in ("chat", "completion", "messages")}
    app = create_app(replace(make_ctx(), gating=decide(Mode.RENDER, {})))
    with TestClient(app) as client, caplog.at_level(logging.WARNING, logger="tokenwire"):
        for _ in range(2):
            r = client.post("/v1/chat/completions/render", json={"messages": USER, typo: 0.2, "max_tokens": 3})
            assert r.status_code == 200, r.text  # ignored, as vLLM ignores it
        r = client.post("/v1/completions/render", json={"prompt": "Hi", typo: 1, "also_unknown": True})
        assert r.status_code == 200, r.text
        r = client.post("/v1/messages/render", json={"messages": USER, "max_tokens": 3})
        assert r.status_code == 200, r.text
        scrape = client.get("/metrics").text
    named = [rec.getMessage() for rec in caplog.records if "ignored" in rec.getMessage()]
    assert len(named) == 2, named  # the chat typo once (not per request); the completion's new name once
    assert f"a chat request but ignored: ['{typo}']" in named[0]
    assert "a completion request but ignored: ['also_unknown']" in named[1]
    assert {api: _count(api) - before[api] for api in before} == {"chat": 2, "completion": 2, "messages": 0}
    assert 'tokenwire_ignored_request_fields_total{api="chat"}' in scrape


def test_known_fields_are_not_reported(caplog: pytest.LogCaptureFixture) -> None:
    before = _count("chat")
    app = create_app(replace(make_ctx(), gating=decide(Mode.RENDER, {})))
    with TestClient(app) as client, caplog.at_level(logging.WARNING, logger="tokenwire"):
        r = client.post("/v1/chat/completions/render", json={"messages": USER, "temperature": 0.2, "top_k": 5,
                                                              "chat_template_kwargs": {"enable_thinking": False}})
        assert r.status_code == 200, r.text
    assert _count("chat") == before
    assert not [rec for rec in caplog.records if "ignored" in rec.getMessage()]


def test_one_request_with_many_unknown_fields_names_no_more_than_the_bound(
        caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch) -> None:
    """The bound on remembered (and logged) names holds within one request too: 5,000 unknown fields
    are all counted, and at most MAX_NAMED_FIELDS of them named and kept."""
    monkeypatch.setattr(http, "_named_fields", set())
    before = _count("chat")
    body: dict[str, object] = {"messages": USER, **{f"unknown_{i:05d}": 0 for i in range(5000)}}
    app = create_app(replace(make_ctx(), gating=decide(Mode.RENDER, {})))
    with TestClient(app) as client, caplog.at_level(logging.WARNING, logger="tokenwire"):
        r = client.post("/v1/chat/completions/render", json=body)
        assert r.status_code == 200, r.text
        r = client.post("/v1/chat/completions/render", json={"messages": USER, "one_more_unknown": 1})
        assert r.status_code == 200, r.text
    assert _count("chat") - before == 5001
    assert len(http._named_fields) == http.MAX_NAMED_FIELDS
    named = [rec.getMessage() for rec in caplog.records if "ignored" in rec.getMessage()]
    assert len(named) == 1, "the bound was reached: the next request's new name is counted, not logged"
    assert named[0].count("'unknown_") == http.MAX_NAMED_FIELDS
