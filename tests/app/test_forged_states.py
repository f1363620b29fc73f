"""Validly signed garbage: every restore path answers a 4xx, never a 500 (issue 19 item 5).

Someone who holds the state secret (a leaked or weak one) can sign any payload. The signature then
proves nothing about the body, so the body must be checked like any other input. Each example
takes a real state or checkpoint, replaces or deletes one value anywhere in its body with
arbitrary JSON, signs the result with the server's own secret, and sends it on a restore path of
the real app (the real tokenizer and parsers, the real local engine on tiny-qwen3):

- ``POST /v1/chat/completions/derender`` and ``/v1/completions/derender`` with ``stream: true``;
- the WebSocket ``derender`` frame;
- a WebSocket ``chat`` / ``messages`` request resumed from a checkpoint (``resume``).

The answer is a 200 / a delta, or a 4xx naming ``stream_state`` / ``bad_state``; and the server
goes on serving the real state afterwards.
"""

from __future__ import annotations

import base64
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from starlette.testclient import TestClient

from engine.local import LocalEngine
from server.app import create_app
from server.context import ServerContext
from server.gating import decide
from server.settings import Mode, Settings
from session.errors import StateError
from session.state import StateBinding, StateCodec

MODEL = "tiny-qwen3"
SECRET = b"forged-states-secret-0123456789-abcdefghijklmn"
WEATHER = {"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}}
CHAT_REQUEST = {"messages": [{"role": "user", "content": "Weather in Paris?"}], "tools": [WEATHER], "stream": True,
                "stop": ["<|fin|>"]}
COMPLETION_REQUEST = {"prompt": "The weather", "stream": True, "stop": ["<|fin|>"]}
OUTPUT = ('<think>\nThe user wants 天气 🌤️.\n</think>\n\nSure.<tool_call>\n'
          '{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>')
RESUME_CHAT = {"messages": [{"role": "user", "content": "Count to ten."}], "max_tokens": 10, "temperature": 0,
               "ignore_eos": True}
RESUME_MESSAGES = {**RESUME_CHAT, "model": MODEL}
SETTINGS = settings(max_examples=300, deadline=None, derandomize=True, database=None,
                    suppress_health_check=list(HealthCheck))

# JSON of every kind, with the numbers that break arithmetic and the strings parsers look for
LEAVES = st.one_of(st.none(), st.booleans(), st.integers(-(2**64) + 1, 2**64 - 1),
                   st.sampled_from([0, -1, 1, 2, 255, 2**31, 2**53, 2**63, -(2**63)]),
                   st.floats(allow_nan=False, allow_infinity=False), st.text(max_size=12),
                   st.sampled_from(["", "b", "s", "content", "reasoning", "call", "value", "<tool_call>",
                                    "</think>", "\ud7ff", "hermes", "qwen3", "key"]))
JSON = st.recursive(LEAVES, lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=3), inner,
                                                                                      max_size=4), max_leaves=10)


def _paths(node: Any, at: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    out = [at]
    if isinstance(node, dict):
        for k, v in node.items():
            out += _paths(v, (*at, k))
    elif isinstance(node, list):
        for i, v in enumerate(node):
            out += _paths(v, (*at, i))
    return out


def _mutated(data: st.DataObject, body: dict[str, Any]) -> dict[str, Any]:
    """``body`` with one value (anywhere, the body itself excepted) replaced or deleted."""
    body = orjson.loads(orjson.dumps(body))
    path = data.draw(st.sampled_from(_paths(body)[1:]), label="path")
    parent = body
    for step in path[:-1]:
        parent = parent[step]
    if data.draw(st.booleans(), label="delete") and isinstance(parent, dict):
        del parent[path[-1]]
    else:
        parent[path[-1]] = data.draw(JSON, label="value")
    return body


def _payload(token: str) -> dict[str, Any]:
    text = token.split(".")[2]
    return orjson.loads(base64.urlsafe_b64decode(text + "=" * (-len(text) % 4)))  # type: ignore[no-any-return]


def forge(codec: StateCodec, token: str, data: st.DataObject) -> str:
    """``token`` with a mutated body, validly signed with the server's secret."""
    p = _payload(token)
    body = _mutated(data, p["b"])
    try:
        return codec.encode(StateBinding(p["r"], p["i"], p["c"]), p["s"], body)
    except StateError:  # a body past 64-bit integers cannot even be signed: sign its text instead
        return codec.encode(StateBinding(p["r"], p["i"], p["c"]), p["s"], {"raw": repr(body)})


@pytest.fixture(scope="module")
def app(asset: Callable[[str], Path], tokenizer: Callable[[str], Any]) -> Iterator[TestClient]:
    model_dir = asset(MODEL)
    settings_ = Settings(mode=Mode.SERVE, model_dir=model_dir, served_model_name=MODEL, environ={},
                         state_secret=SECRET, tool_call_parser="hermes", reasoning_parser="qwen3",
                         enable_auto_tool_choice=True, dtype="float32", enable_scale_out=True)
    engine = LocalEngine(model_dir, model_name=MODEL, max_model_len=512, dtype="float32", num_threads=1)
    ctx = ServerContext(settings=settings_, gating=decide(Mode.SERVE, {}, enable_scale_out=True),
                        tokenizer=tokenizer(MODEL), max_model_len=512, engine=engine)
    with TestClient(create_app(ctx), raise_server_exceptions=False) as client:
        yield client


@pytest.fixture(scope="module")
def codec() -> StateCodec:
    return StateCodec([SECRET])


@pytest.fixture(scope="module")
def ids(tokenizer: Callable[[str], Any]) -> list[int]:
    tok = tokenizer(MODEL)
    return [*tok._tokenizer.encode(OUTPUT, add_special_tokens=False).ids, tok.eos_token_id]


def _chat_step(state: str | None, piece: list[int], finish: str | None = None) -> dict[str, Any]:
    return {"stream": True, "model": MODEL, "stream_state": state, "prompt_token_ids": [1, 2, 3],
            "chat_request": CHAT_REQUEST,
            "generate_chunk": {"request_id": "chatcmpl-forged", "choices": [
                {"index": 0, "token_ids": piece, "finish_reason": finish}]}}


def _completion_step(state: str | None, piece: list[int], finish: str | None = None) -> dict[str, Any]:
    return {"stream": True, "model": MODEL, "stream_state": state, "prompt_token_ids": [4, 5],
            "completion_request": COMPLETION_REQUEST,
            "generate_chunk": {"request_id": "cmpl-forged", "choices": [
                {"index": 0, "token_ids": piece, "finish_reason": finish}]}}


STEPS = {"chat": ("/v1/chat/completions/derender", _chat_step),
         "completion": ("/v1/completions/derender", _completion_step)}


@pytest.fixture(scope="module")
def states(app: TestClient, ids: list[int]) -> dict[str, list[str]]:
    """Real states of each kind at every point of the output (reasoning, content, inside a call)."""
    out: dict[str, list[str]] = {}
    for kind, (path, step) in STEPS.items():
        state, got = None, []
        for k in range(0, len(ids) - 3, 3):
            r = app.post(path, json=step(state, ids[k:k + 3]))
            assert r.status_code == 200, r.text
            state = r.json()["stream_state"]
            got.append(state)
        out[kind] = got
    return out


def _refused_cleanly(status: int, error: dict[str, Any]) -> None:
    assert 400 <= status < 500, error
    assert error.get("param") in ("stream_state", "resume", None) or error.get("code") == "bad_state", error


@SETTINGS
@given(data=st.data())
def test_a_validly_signed_garbage_state_is_a_4xx_over_http(app: TestClient, codec: StateCodec,
                                                          states: dict[str, list[str]], ids: list[int],
                                                          data: st.DataObject) -> None:
    kind = data.draw(st.sampled_from(list(STEPS)), label="kind")
    path, step = STEPS[kind]
    real = data.draw(st.sampled_from(states[kind]), label="state")
    finish = data.draw(st.sampled_from([None, "stop", "length"]), label="finish")
    r = app.post(path, json=step(forge(codec, real, data), ids[-4:-1], finish))
    if r.status_code != 200:
        _refused_cleanly(r.status_code, r.json()["error"])


def _ws_until(ws: Any, rid: str, final: tuple[str, ...]) -> list[dict[str, Any]]:
    frames = []
    while True:
        frame = orjson.loads(ws.receive_text())
        if frame.get("id") == rid:
            frames.append(frame)
            if frame["type"] in final:
                return frames


@pytest.fixture(scope="module")
def session(app: TestClient) -> Iterator[Any]:
    with app.websocket_connect("/v1/session", subprotocols=["tokenwire.v1"]) as ws:
        assert orjson.loads(ws.receive_text())["type"] == "session.created"
        yield ws


@SETTINGS
@given(data=st.data())
def test_a_validly_signed_garbage_state_is_a_bad_state_frame_over_websocket(
        session: Any, codec: StateCodec, states: dict[str, list[str]], ids: list[int], data: st.DataObject) -> None:
    kind = data.draw(st.sampled_from(list(STEPS)), label="kind")
    real = data.draw(st.sampled_from(states[kind]), label="state")
    body = STEPS[kind][1](forge(codec, real, data), ids[-4:-1], None)
    del body["stream"]
    session.send_text(orjson.dumps({"type": "derender", "id": "d", "kind": kind, "body": body}).decode())
    (frame,) = _ws_until(session, "d", ("derender.delta", "error"))
    if frame["type"] == "error":
        assert frame["error"]["status"] < 500, frame
    # the session lives on and still continues the real state
    fresh = STEPS[kind][1](None, ids[:3], None)
    del fresh["stream"]
    session.send_text(orjson.dumps({"type": "derender", "id": "ok", "kind": kind, "body": fresh}).decode())
    assert _ws_until(session, "ok", ("derender.delta", "error"))[0]["type"] == "derender.delta"


@pytest.fixture(scope="module")
def checkpoints(session: Any) -> dict[str, tuple[dict[str, Any], dict[str, Any]]]:
    """Per kind: the request and a real resume (checkpoint + the output ids it covers)."""
    out = {}
    for kind, request in (("chat", RESUME_CHAT), ("messages", RESUME_MESSAGES)):
        session.send_text(orjson.dumps({"type": kind, "id": kind, "body": request, "resumable": True}).decode())
        frames = _ws_until(session, kind, (f"{kind}.done", "error"))
        deltas = [f for f in frames if f["type"] == f"{kind}.delta"]
        cut = next(i for i, f in enumerate(deltas) if f.get("checkpoint") and i >= 2)
        resume = {"request_id": deltas[0]["stream_id"], "checkpoint": deltas[cut]["checkpoint"],
                  "output_token_ids": [t for f in deltas[:cut + 1] for t in f["output_token_ids"]]}
        out[kind] = (request, resume)
    return out


@settings(max_examples=60, deadline=None, derandomize=True, database=None, suppress_health_check=list(HealthCheck))
@given(data=st.data())
def test_a_validly_signed_garbage_checkpoint_is_a_bad_state_not_a_crash(
        session: Any, codec: StateCodec, checkpoints: dict[str, tuple[dict[str, Any], dict[str, Any]]],
        data: st.DataObject) -> None:
    kind = data.draw(st.sampled_from(list(checkpoints)), label="kind")
    request, resume = checkpoints[kind]
    forged = {**resume, "checkpoint": forge(codec, resume["checkpoint"], data)}
    session.send_text(orjson.dumps({"type": kind, "id": "r", "body": request, "resume": forged}).decode())
    frames = _ws_until(session, "r", (f"{kind}.done", "error"))
    errors = [f for f in frames if f["type"] == "error"]
    for frame in errors:
        assert frame["error"]["status"] < 500, frame
