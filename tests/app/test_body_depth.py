"""Deeply nested JSON in a request is a 400 (an ``invalid_frame`` error frame over WebSocket) that
names the field, never a 500 and never a traceback in the log (issue 39 item 3).

orjson parses up to 1,024 levels but serializes only 255, and templates' ``tojson`` recurses once
per level, so a body nested 300 levels (a tool schema, say) used to pass the reader and fail where
a part of it was serialized again: the render-size measure, a checkpoint's context digest, the
compile worker. Bodies and frames are bounded at ``MAX_JSON_DEPTH`` (128) levels where they are
parsed, and so are the JSON strings a request carries (a tool call's ``arguments``, a
``structured_outputs.json`` schema), against the real app (tiny-qwen3, the real local engine).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest
from starlette.testclient import TestClient

from engine.json_depth import MAX_JSON_DEPTH
from engine.local import LocalEngine
from server.app import create_app
from server.context import ServerContext
from server.gating import decide
from server.settings import Mode, Settings

MODEL = "tiny-qwen3"
SECRET = b"body-depth-secret-0123456789-abcdefghijklmnopq"
JSON = {"content-type": "application/json"}
USER = [{"role": "user", "content": "hi"}]
DEEP = "@deep@"  # where :func:`text` puts the nested JSON


def deep(levels: int) -> str:
    """JSON text of ``levels`` nested objects (built as text: orjson cannot write it)."""
    return '{"a":' * (levels - 1) + '{"a":1}' + "}" * (levels - 1)


def text(value: Any, inner: str) -> str:
    """``value`` as JSON text with ``inner`` (JSON text) in place of the string :data:`DEEP`."""
    return orjson.dumps(value).decode().replace(orjson.dumps(DEEP).decode(), inner)


def tools_with(levels: int) -> str:
    return text([{"type": "function", "function": {"name": "f", "parameters": {
        "type": "object", "properties": {"x": DEEP}}}}], deep(levels))


TOOL_CALL = [*USER, {"role": "assistant", "tool_calls": [{"id": "c", "type": "function", "function": {
    "name": "f", "arguments": DEEP}}]}, {"role": "tool", "tool_call_id": "c", "content": "ok"}]
TOOL_USE = [*USER, {"role": "assistant", "content": [{"type": "tool_use", "id": "t", "name": "f", "input": DEEP}]},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t", "content": "ok"}]}]

# (route, body, the field the answer names), each nested 300 levels somewhere (a tool call's
# arguments 1,000: under the 512-token context a shorter one is refused for its length)
CASES = {
    "a tool schema": ("/v1/chat/completions",
                      text({"messages": USER, "max_tokens": 2, "tools": DEEP}, tools_with(300)),
                      "tools[0].function.parameters.properties.x"),
    "a tool schema, streamed": ("/v1/chat/completions",
                                text({"stream": True, "messages": USER, "max_tokens": 2, "tools": DEEP},
                                     tools_with(300)),
                                "tools[0].function.parameters.properties.x"),
    "chat_template_kwargs": ("/v1/chat/completions",
                             text({"messages": USER, "max_tokens": 2, "chat_template_kwargs": {"x": DEEP}}, deep(300)),
                             "chat_template_kwargs.x"),
    "a schema's default": ("/v1/chat/completions",
                           text({"messages": USER, "max_tokens": 2, "response_format": {
                               "type": "json_schema", "json_schema": {"name": "x", "schema": {
                                   "type": "object", "default": DEEP}}}}, deep(300)),
                           "response_format.json_schema.schema.default"),
    "vllm_xargs": ("/v1/completions", text({"prompt": "hi", "max_tokens": 2, "vllm_xargs": {"x": DEEP}}, deep(300)),
                   "vllm_xargs.x"),
    "an Anthropic tool_use input": ("/v1/messages",
                                    text({"model": MODEL, "max_tokens": 2, "messages": TOOL_USE}, deep(300)),
                                    "messages[1].content[0].input"),
    "a tool call's arguments string": (  # the template's tojson: a RecursionError
        "/v1/chat/completions", text({"max_tokens": 2, "messages": TOOL_CALL}, orjson.dumps(deep(1000)).decode()),
        "messages[1].tool_calls[0].function.arguments"),
    "a structured_outputs.json string": (
        "/v1/completions", text({"prompt": "hi", "max_tokens": 2, "structured_outputs": {"json": DEEP}},
                                orjson.dumps(deep(300)).decode()),
        "structured_outputs"),
}


@pytest.fixture(scope="module")
def client(asset: Callable[[str], Path], tokenizer: Callable[[str], Any]) -> Iterator[TestClient]:
    model_dir = asset(MODEL)
    settings = Settings(mode=Mode.SERVE, model_dir=model_dir, served_model_name=MODEL, environ={},
                        state_secret=SECRET, tool_call_parser="hermes", reasoning_parser="qwen3",
                        enable_auto_tool_choice=True, dtype="float32", enable_scale_out=True)
    engine = LocalEngine(model_dir, model_name=MODEL, max_model_len=512, dtype="float32", num_threads=1)
    ctx = ServerContext(settings=settings, gating=decide(Mode.SERVE, {}, enable_scale_out=True),
                        tokenizer=tokenizer(MODEL), max_model_len=512, engine=engine)
    with TestClient(create_app(ctx), raise_server_exceptions=False) as c:
        yield c


def _no_errors_logged(caplog: pytest.LogCaptureFixture) -> None:
    bad = [r for r in caplog.records if r.levelno >= logging.ERROR or r.exc_info]
    assert not bad, [(r.name, r.getMessage()) for r in bad]


@pytest.mark.parametrize("case", list(CASES))
def test_a_body_nested_300_levels_is_a_400_naming_the_field(client: TestClient, caplog: pytest.LogCaptureFixture,
                                                            case: str) -> None:
    path, body, field = CASES[case]
    with caplog.at_level(logging.INFO):
        r = client.post(path, content=body, headers=JSON)
    assert r.status_code == 400, r.text
    error = r.json()["error"]
    assert field in error["message"] and f"deeper than {MAX_JSON_DEPTH} levels" in error["message"], error
    if "param" in error:  # the OpenAI envelope names it there too (Anthropic's has no such field)
        assert error["param"].startswith(field) or field.startswith(error["param"]), error
    _no_errors_logged(caplog)


def test_the_bound_is_128_levels_of_the_whole_body(client: TestClient) -> None:
    # body (1) > chat_template_kwargs (2) > x (3 …): 126 levels under x make 128 in all
    for levels, status in ((126, 200), (127, 400)):
        body = text({"messages": USER, "max_tokens": 1, "chat_template_kwargs": {"x": DEEP}}, deep(levels))
        r = client.post("/v1/chat/completions", content=body, headers=JSON)
        assert r.status_code == status, (levels, r.text)


def test_a_frame_nested_300_levels_is_an_invalid_frame_and_the_session_lives_on(
        client: TestClient, caplog: pytest.LogCaptureFixture) -> None:
    chat = text({"type": "chat", "id": "c1", "body": {"messages": USER, "max_tokens": 2, "tools": DEEP}},
                tools_with(300))
    derender = text({"type": "derender", "id": "d1", "kind": "chat", "body": {
        "stream": True, "model": MODEL, "prompt_token_ids": [1, 2], "chat_request": {"messages": USER, "tools": DEEP},
        "generate_chunk": {"request_id": "r", "choices": [{"index": 0, "token_ids": [1], "finish_reason": None}]}}},
        tools_with(300))
    with caplog.at_level(logging.INFO), client.websocket_connect("/v1/session", subprotocols=["tokenwire.v1"]) as ws:
        assert orjson.loads(ws.receive_text())["type"] == "session.created"
        for rid, frame, param in (("c1", chat, "body.tools[0].function.parameters.properties.x.a"),
                                  ("d1", derender, "body.chat_request.tools[0].function.parameters.properties.x")):
            ws.send_text(frame)
            error = orjson.loads(ws.receive_text())
            assert (error["type"], error["id"], error["error"]["code"]) == ("error", rid, "invalid_frame"), error
            assert error["error"]["param"] == param, error
            assert f"deeper than {MAX_JSON_DEPTH} levels" in error["error"]["message"], error
        ws.send_text('{"type":"ping","event_id":"p"}')
        assert orjson.loads(ws.receive_text())["type"] == "pong"
    _no_errors_logged(caplog)
