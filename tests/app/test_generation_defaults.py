"""The model's generation_config.json defaults on every endpoint, as the engine receives them.

A front end (``launch render --engine-url``, its engine built by ``server.context.create_engine`` as
the CLI builds it) over the scripted engine of tests/support/scripted_engine.py, through both engine
transports (``http://``: ``RemoteEngine``; ``ws://``: the engine link), on a copy of the real qwen3
tokenizer asset whose ``generation_config.json`` asks for Qwen3's sampling values (temperature 0.6,
top_p 0.95, top_k 20). Each API (chat, completions, messages, a ``/v1/session`` chat frame, the
Responses API, ``/render``) sends no sampling parameters (as Codex CLI does), and the engine
request carries the model's values; a request's own value wins; ``--generation-config vllm`` turns
them off; ``--override-generation-config`` overrides and caps; the start-up line names them.
"""

from __future__ import annotations

import json
import logging
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from starlette.testclient import TestClient

from server.app import create_app
from server.context import ServerContext, create_engine
from server.gating import decide
from server.settings import Mode, Settings
from tests.support.scripted_engine import ScriptedEngine

QWEN3_SAMPLING = {"temperature": 0.6, "top_k": 20, "top_p": 0.95}
USER = [{"role": "user", "content": "Weather in Paris?"}]
SECRET = b"test-state-secret-0123456789-abcdefghijklmnopqrstuvwxyz"


@pytest.fixture(scope="module")
def engine(tokenizer: Callable[[str], Any]) -> Iterator[ScriptedEngine]:
    tok = tokenizer("qwen3")
    with ScriptedEngine([*tok.encode("Sunny.", add_special_tokens=False), tok.eos_token_id]) as scripted:
        yield scripted


@pytest.fixture(scope="module")
def model_dir(asset: Callable[[str], Path], tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The qwen3 asset with a generation_config.json that sets Qwen3's sampling defaults."""
    out = tmp_path_factory.mktemp("qwen3-gen") / "qwen3"
    shutil.copytree(asset("qwen3"), out)
    (out / "generation_config.json").write_text(json.dumps(
        {"bos_token_id": 151643, "do_sample": True, "eos_token_id": [151645, 151643], **QWEN3_SAMPLING}))
    return out


def _client(engine_url: str, model_dir: Path, tokenizer: Callable[[str], Any], **settings: Any) -> TestClient:
    s = Settings(mode=Mode.RENDER, model_dir=model_dir, served_model_name="qwen3", environ={}, engine_url=engine_url,
                 state_secret=SECRET, **settings)
    ctx = ServerContext(settings=s, gating=decide(Mode.RENDER, {}, has_engine_url=True), tokenizer=tokenizer("qwen3"),
                        max_model_len=4096, engine=create_engine(s, 4096))
    return TestClient(create_app(ctx))


@pytest.fixture(params=["http", "ws"])
def transport(request: pytest.FixtureRequest, engine: ScriptedEngine) -> str:
    return engine.url if request.param == "http" else engine.ws_url


def _sent(engine: ScriptedEngine, call: Callable[[], Any]) -> dict[str, Any]:
    """The sampling params of the one engine request ``call`` makes."""
    before = len(engine.requests)
    call()
    assert len(engine.requests) == before + 1, "one engine request"
    return dict(engine.requests[-1]["sampling_params"])


def _ok(r: Any) -> Any:
    assert r.status_code == 200, r.text
    return r


def _session_chat(client: TestClient, body: dict[str, Any]) -> None:
    with client.websocket_connect("/v1/session", subprotocols=["tokenwire.v1"]) as ws:
        ws.receive_json()  # session.created
        ws.send_json({"type": "chat", "id": "c", "body": body})
        frame = ws.receive_json()
        while not (frame.get("id") == "c" and frame["type"] in ("chat.done", "error")):
            frame = ws.receive_json()
        assert frame["type"] == "chat.done", frame


def _model_values(sp: dict[str, Any]) -> dict[str, Any]:
    return {k: sp.get(k) for k in QWEN3_SAMPLING}


def test_every_api_without_sampling_parameters_gets_the_models_defaults(
        engine: ScriptedEngine, transport: str, model_dir: Path, tokenizer: Callable[[str], Any]) -> None:
    with _client(transport, model_dir, tokenizer) as client:
        sent = {
            "chat": _sent(engine, lambda: _ok(client.post("/v1/chat/completions", json={"messages": USER}))),
            "chat_stream": _sent(engine, lambda: _ok(client.post("/v1/chat/completions",
                                                                  json={"messages": USER, "stream": True}))),
            "completion": _sent(engine, lambda: _ok(client.post("/v1/completions", json={"prompt": "Hi"}))),
            "messages": _sent(engine, lambda: _ok(client.post("/v1/messages",
                                                               json={"messages": USER, "max_tokens": 32}))),
            "session": _sent(engine, lambda: _session_chat(client, {"messages": USER})),
            "responses": _sent(engine, lambda: _ok(client.post("/v1/responses", json={"input": "Weather in Paris?"}))),
        }
        rendered = _ok(client.post("/v1/chat/completions/render", json={"messages": USER})).json()["sampling_params"]
    for api, sp in {**sent, "render": rendered}.items():
        assert _model_values(sp) == QWEN3_SAMPLING, api
    assert sent["completion"]["max_tokens"] == 16  # a completion keeps vLLM's 16
    assert sent["messages"]["max_tokens"] == 32


def test_a_requests_own_value_wins_and_the_session_default_comes_before_the_models(
        engine: ScriptedEngine, transport: str, model_dir: Path, tokenizer: Callable[[str], Any]) -> None:
    with _client(transport, model_dir, tokenizer) as client:
        own = _sent(engine, lambda: _ok(client.post("/v1/chat/completions",
                                                    json={"messages": USER, "temperature": 1.0, "top_k": 0})))
        anthropic = _sent(engine, lambda: _ok(client.post("/v1/messages", json={
            "messages": USER, "max_tokens": 8, "temperature": 0.9, "top_p": 0.5})))

        def session() -> None:
            with client.websocket_connect("/v1/session", subprotocols=["tokenwire.v1"]) as ws:
                ws.receive_json()
                ws.send_json({"type": "session.update", "event_id": "u", "session": {"sampling": {"top_p": 0.7}}})
                assert ws.receive_json()["type"] == "session.updated"
                ws.send_json({"type": "chat", "id": "c", "body": {"messages": USER}})
                frame = ws.receive_json()
                while frame.get("type") != "chat.done":
                    assert frame.get("type") != "error", frame
                    frame = ws.receive_json()

        in_session = _sent(engine, session)
    assert (own["temperature"], own.get("top_k", 0), own["top_p"]) == (1.0, 0, 0.95)  # top_p still the model's
    assert (anthropic["temperature"], anthropic["top_p"], anthropic["top_k"]) == (0.9, 0.5, 20)
    assert _model_values(in_session) == {"temperature": 0.6, "top_k": 20, "top_p": 0.7}


def test_generation_config_vllm_turns_the_models_defaults_off(
        engine: ScriptedEngine, transport: str, model_dir: Path, tokenizer: Callable[[str], Any]) -> None:
    with _client(transport, model_dir, tokenizer, generation_config="vllm") as client:
        sp = _sent(engine, lambda: _ok(client.post("/v1/chat/completions", json={"messages": USER})))
    assert (sp["temperature"], sp.get("top_k", 0), sp["top_p"]) == (1.0, 0, 1.0)


def test_the_override_replaces_a_value_and_its_max_new_tokens_caps_every_request(
        engine: ScriptedEngine, model_dir: Path, tokenizer: Callable[[str], Any]) -> None:
    override = {"temperature": 0.3, "top_k": None, "max_new_tokens": 3}
    with _client(engine.url, model_dir, tokenizer, override_generation_config=override) as client:
        plain = _sent(engine, lambda: _ok(client.post("/v1/chat/completions", json={"messages": USER})))
        asked = _sent(engine, lambda: _ok(client.post("/v1/chat/completions", json={"messages": USER,
                                                                                     "max_tokens": 50})))
        completion = _sent(engine, lambda: _ok(client.post("/v1/completions", json={"prompt": "Hi"})))
    assert (plain["temperature"], plain.get("top_k", 0), plain["top_p"], plain["max_tokens"]) == (0.3, 0, 0.95, 3)
    assert asked["max_tokens"] == completion["max_tokens"] == 3


def test_a_folder_s_max_new_tokens_is_the_limit_of_every_request(
        engine: ScriptedEngine, model_dir: Path, tokenizer: Callable[[str], Any], tmp_path: Path) -> None:
    (tmp_path / "generation_config.json").write_text(json.dumps({"temperature": 0.25, "max_new_tokens": 4}))
    with _client(engine.url, model_dir, tokenizer, generation_config=str(tmp_path)) as client:
        sp = _sent(engine, lambda: _ok(client.post("/v1/chat/completions", json={"messages": USER,
                                                                                  "max_tokens": 9})))
    assert (sp["temperature"], sp.get("top_k", 0), sp["max_tokens"]) == (0.25, 0, 4)  # the model's own file unread


def test_the_start_up_line_names_the_models_defaults(
        engine: ScriptedEngine, model_dir: Path, tokenizer: Callable[[str], Any],
        caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.INFO, logger="tokenwire"):
        _client(engine.url, model_dir, tokenizer)
        _client(engine.url, model_dir, tokenizer, generation_config="vllm")
    lines = [r.getMessage() for r in caplog.records if r.getMessage().startswith("sampling defaults")]
    assert lines == [
        "sampling defaults from the model's generation_config.json: temperature=0.6, top_k=20, top_p=0.95 "
        "(a request's own values win; --generation-config vllm turns them off)",
        "sampling defaults: vLLM's own (--generation-config vllm)"]


def _tokens_client(engine_url: str, model_dir: Path, tokenizer: Callable[[str], Any], **settings: Any) -> TestClient:
    """``serve --engine-url URL --enable-scale-out``: the tokens-in routes over the scripted engine."""
    s = Settings(mode=Mode.SERVE, model_dir=model_dir, served_model_name="qwen3", environ={}, engine_url=engine_url,
                 state_secret=SECRET, enable_scale_out=True, **settings)
    ctx = ServerContext(settings=s, gating=decide(Mode.SERVE, {}, enable_scale_out=True), tokenizer=tokenizer("qwen3"),
                        max_model_len=4096, engine=create_engine(s, 4096))
    return TestClient(create_app(ctx))


def _generate_frame(client: TestClient, body: dict[str, Any]) -> None:
    with client.websocket_connect("/v1/session", subprotocols=["tokenwire.v1"]) as ws:
        ws.receive_json()
        ws.send_json({"type": "generate", "id": "g", "body": body})
        frame = ws.receive_json()
        while not (frame.get("id") == "g" and frame["type"] in ("generate.done", "error")):
            frame = ws.receive_json()
        assert frame["type"] == "generate.done", frame


def test_a_tokens_in_request_without_max_tokens_gets_the_models_limit_and_nothing_else(
        engine: ScriptedEngine, transport: str, model_dir: Path, tokenizer: Callable[[str], Any]) -> None:
    """vLLM's tokens-only rule: only an absent ``max_tokens`` is filled in (the model's limit, else the
    room the prompt leaves); the other sampling fields are the client's, and a given limit stands."""
    ids = [151644, 872, 198, 13048]
    bare = {"token_ids": ids, "sampling_params": {}}
    with _tokens_client(transport, model_dir, tokenizer) as client:
        room = _sent(engine, lambda: _ok(client.post("/inference/v1/generate", json=bare)))
        frame = _sent(engine, lambda: _generate_frame(client, bare))
    assert room["max_tokens"] == frame["max_tokens"] == 4096 - len(ids)  # not SamplingParams' 16
    assert (room["temperature"], room.get("top_k", 0)) == (1.0, 0)  # the model's 0.6 and 20 are not applied here
    with _tokens_client(transport, model_dir, tokenizer, override_generation_config={"max_new_tokens": 6}) as client:
        limited = _sent(engine, lambda: _ok(client.post("/inference/v1/generate", json=bare)))
        given = _sent(engine, lambda: _ok(client.post("/inference/v1/generate", json={
            "token_ids": ids, "sampling_params": {"max_tokens": 9}})))
    assert (limited["max_tokens"], given["max_tokens"]) == (6, 9)
