"""The Codex CLI recordings (tests/data/codex/, scripts/record_codex_requests.py) hold what their README
says Codex 0.171.0 sends: the facts the Responses API is built against, checked so that a re-recording
with another Codex release that changes them fails here rather than in a server test far away."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

DATA = Path(__file__).parents[1] / "data" / "codex"
SAMPLING = ("temperature", "top_p", "max_output_tokens", "top_logprobs", "instructions")


def load(name: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((DATA / f"{name}.json").read_text())
    return data


def roles(items: list[dict[str, Any]]) -> list[tuple[str, list[str]]]:
    assert all(i["type"] == "message" for i in items)
    return [(i["role"], [c["type"] for c in i["content"]]) for i in items]


@pytest.mark.parametrize("name", ["http", "websocket"])
def test_every_turn_completed_against_the_stand_in(name: str) -> None:
    data = load(name)
    assert data["codex_version"] == "codex-cli 0.171.0"
    assert [t["argv"][-3:] for t in data["turns"]][1] == ["resume", "--last", "Now say goodbye."]
    for turn in data["turns"]:
        assert turn["returncode"] == 0
        types = [e["type"] for e in turn["events"]]
        assert types[0] == "thread.started" and types[-1] == "turn.completed"
        assert "turn.failed" not in types
        texts = [e["item"]["text"] for e in turn["events"] if e["type"] == "item.completed"
                 and e["item"]["type"] == "agent_message"]
        assert texts == ["Hello from the stand-in."]


def test_http_sends_one_stateless_post_per_turn_with_the_whole_history() -> None:
    first, second = ([x for x in t["exchanges"]] for t in load("http")["turns"])
    assert [(x["kind"], x["method"], x["path"]) for x in first + second] == [("http", "POST", "/v1/responses")] * 2
    a, b = first[0]["body"], second[0]["body"]
    assert first[0]["headers"]["authorization"] == "Bearer tokenwire-test-key"
    assert a["stream"] is True and a["store"] is False and "previous_response_id" not in a
    assert a["include"] == ["reasoning.encrypted_content"] and a["reasoning"] == {"summary": "auto"}
    assert a["tool_choice"] == "auto" and a["parallel_tool_calls"] is True
    assert not [k for k in SAMPLING if k in a]
    assert roles(a["input"]) == [("developer", ["input_text"]), ("developer", ["input_text", "input_text"]),
                                 ("user", ["input_text"]), ("user", ["input_text"])]
    assert b["input"][:4] == a["input"]
    assert roles(b["input"][4:]) == [("assistant", ["output_text"]), ("user", ["input_text"])]
    assert b["input"][4]["content"][0]["text"] == "Hello from the stand-in."


def test_the_tools_hold_a_namespace_and_a_web_search() -> None:
    tools = load("http")["turns"][0]["exchanges"][0]["body"]["tools"]
    assert [t["type"] for t in tools].count("function") == 7
    namespace = next(t for t in tools if t["type"] == "namespace")
    assert namespace["name"] == "multi_agent_v1"
    assert {t["type"] for t in namespace["tools"]} == {"function"} and len(namespace["tools"]) == 5
    assert {"type": "web_search", "external_web_access": False} in tools


def test_websocket_warms_up_then_sends_only_the_new_items() -> None:
    for turn in load("websocket")["turns"]:
        x = turn["exchanges"]
        assert [e["kind"] for e in x] == ["ws_open", "ws_recv", "ws_recv", "ws_close"]
        hs = x[0]["headers"]
        assert x[0]["path"] == "/v1/responses"
        assert hs["openai-beta"] == "responses_websockets=2026-02-06"
        assert hs["authorization"] == "Bearer tokenwire-test-key"
        assert hs["sec-websocket-extensions"].startswith("permessage-deflate")
        warm, real = x[1]["message"], x[2]["message"]
        assert warm["type"] == real["type"] == "response.create"
        assert warm["generate"] is False and "generate" not in real
        assert roles(warm["input"]) == [("developer", ["input_text"])]
        assert real["previous_response_id"].startswith("resp_") and "previous_response_id" not in warm
        assert roles(real["input"])[0] == ("developer", ["input_text", "input_text"])
        assert len(warm["tools"]) == len(real["tools"]) == 9
    resumed = load("websocket")["turns"][1]["exchanges"][2]["message"]["input"]
    assert roles(resumed)[-2:] == [("assistant", ["output_text"]), ("user", ["input_text"])]


def test_nothing_machine_specific_is_left_in() -> None:
    for name in ("http", "websocket"):
        text = (DATA / f"{name}.json").read_text()
        assert "/tmp/" not in text and str(Path.home()) + "/" not in text
        assert "$WORKDIR" in text
