"""``session.created.features`` says what the server's request handling supports (issue 40 §3
item 2): the default server parses no tool calls, so the playground hides its Tools box."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from tests.app.ws_fakes import session_client


@pytest.mark.parametrize(("flags", "features"), [
    ({}, {"tool_call_parser": None, "auto_tool_choice": False, "reasoning_parser": None}),
    ({"tool_call_parser": "hermes"}, {"tool_call_parser": "hermes", "auto_tool_choice": False, "reasoning_parser": None}),
    ({"tool_call_parser": "hermes", "enable_auto_tool_choice": True, "reasoning_parser": "qwen3"},
     {"tool_call_parser": "hermes", "auto_tool_choice": True, "reasoning_parser": "qwen3"}),
])
def test_session_created_names_the_parsers_and_whether_tool_choice_auto_is_allowed(
        monkeypatch: pytest.MonkeyPatch, flags: dict[str, Any], features: dict[str, Any]) -> None:
    with session_client(monkeypatch, **flags) as (client, _), client.websocket_connect("/v1/session") as ws:
        created = orjson.loads(ws.receive_text())
    assert created["type"] == "session.created"
    assert created["features"] == features
    assert list(created)[-1] == "features"  # after the fields older clients know, in §5.1 order
