"""Tools in the Responses API over HTTP (tests/support/responses_front.py's front end and scripted
engine): the requests Codex CLI recorded are answered, a tool call round trips statelessly and with
``previous_response_id`` to the same prompt, namespace tools are flattened with their calls keeping
the namespace, and built-in tools are left out of the prompt, counted."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from openai.types.responses import Response
from starlette.testclient import TestClient

from server import metrics
from tests.support import responses_front
from tests.support.responses_front import (
    ANSWER,
    EVENTS,
    NAMESPACED,
    SECRET,
    SHELL,
    WEATHER,
    front_of,
    prompt_text,
    sdk,
    sse_events,
)
from tests.support.scripted_engine import ScriptedEngine

engine, front, script = responses_front.engine, responses_front.front, responses_front.script  # shared fixtures


# --- Codex's requests -------------------------------------------------------------------------

CODEX = Path(__file__).parents[1] / "data" / "codex" / "http.json"


def codex_bodies() -> list[dict[str, Any]]:
    """The ``POST /v1/responses`` bodies Codex CLI sent (tests/data/codex/http.json, recorded by
    scripts/record_codex_requests.py), each turn's."""
    turns = json.loads(CODEX.read_text())["turns"]
    return [x["body"] for t in turns for x in t["exchanges"] if x.get("path") == "/v1/responses"]


def test_codexs_recorded_requests_are_answered(engine: ScriptedEngine) -> None:
    bodies = codex_bodies()
    assert len(bodies) >= 2
    with front_of(engine, SECRET, max_model_len=32768) as codex_front:
        for body in bodies:
            assert body["stream"] is True and body["store"] is False
            assert {t["type"] for t in body["tools"]} >= {"function", "namespace", "web_search"}
            r = codex_front.post("/v1/responses", json={**body, "model": "qwen3"})
            assert r.status_code == 200, r.text
            events = sse_events(r.text)
            for event in events:
                EVENTS.validate_python(event)
            assert events[-1]["type"] == "response.completed"
            reasoning = events[-1]["response"]["output"][0]
            assert reasoning["type"] == "reasoning" and reasoning["encrypted_content"].startswith("tw1.")
            text = prompt_text(engine)
            namespace = next(t for t in body["tools"] if t["type"] == "namespace")
            for inner in namespace["tools"]:
                assert f'"name": "{namespace["name"]}__{inner["name"]}"' in text
            assert '"web_search"' not in text
            count = codex_front.post("/v1/responses/input_tokens", json={**body, "model": "qwen3"}).json()
            assert count["input_tokens"] == len(engine.requests[-1]["token_ids"])


# --- tools -----------------------------------------------------------------------------------


def test_tool_call_round_trip_with_items_and_with_previous_response_id(front: TestClient, engine: ScriptedEngine,
                                                                      script: Callable[[str], None]) -> None:
    client = sdk(front)
    first = client.responses.create(model="qwen3", input="Weather in Paris?", tools=[WEATHER])  # type: ignore[list-item]
    call = first.output[-1]
    assert call.type == "function_call"
    script(ANSWER)
    output = {"type": "function_call_output", "call_id": call.call_id, "output": "sunny, 24 C"}
    # stateless: the client sends the whole conversation back
    items = [{"role": "user", "content": "Weather in Paris?"},
             *[item.model_dump(exclude_none=True) for item in first.output], output]
    again = client.responses.create(model="qwen3", input=items, tools=[WEATHER], store=False)  # type: ignore[arg-type,list-item]
    assert again.output_text == "\n\nIt is sunny in Paris."
    stateless = engine.requests[-1]["token_ids"]
    text = prompt_text(engine)
    assert "<tool_response>\nsunny, 24 C\n</tool_response>" in text and '"city": "Paris"' in text
    # stored: only the new item, with previous_response_id
    chained = client.responses.create(model="qwen3", input=[output], tools=[WEATHER],  # type: ignore[list-item]
                                      previous_response_id=first.id)
    assert chained.output_text == "\n\nIt is sunny in Paris." and chained.previous_response_id == first.id
    assert engine.requests[-1]["token_ids"] == stateless  # the same prompt, token for token


def test_namespace_tools_are_flattened_and_calls_keep_their_namespace(front: TestClient, engine: ScriptedEngine,
                                                                     script: Callable[[str], None]) -> None:
    script(NAMESPACED)
    r = front.post("/v1/responses", json={"input": "List files", "tools": [WEATHER, SHELL, {"type": "web_search"}]})
    assert r.status_code == 200, r.text
    call = r.json()["output"][-1]
    assert (call["type"], call["name"], call["namespace"]) == ("function_call", "exec", "shell")
    assert '"name": "shell__exec"' in prompt_text(engine) and "web_search" not in prompt_text(engine)
    Response.model_validate(r.json())
    stream = sse_events(front.post("/v1/responses", json={"input": "List files", "tools": [SHELL],
                                                          "stream": True}).text)
    added = [e["item"] for e in stream if e["type"] == "response.output_item.added"]
    assert added[-1]["namespace"] == "shell" and added[-1]["name"] == "exec"
    # the call given back renders under its flat name
    items = [{"role": "user", "content": "List files"}, call,
             {"type": "function_call_output", "call_id": call["call_id"], "output": "a.txt"}]
    assert front.post("/v1/responses", json={"input": items, "tools": [SHELL]}).status_code == 200
    assert '"name": "shell__exec"' in prompt_text(engine).split("<|im_start|>assistant")[1]
    # a tool_choice may name the namespaced tool by its own name
    r = front.post("/v1/responses", json={"input": "List files", "tools": [SHELL],
                                          "tool_choice": {"type": "function", "name": "exec"}})
    assert r.status_code == 200, r.text


def test_built_in_tools_are_left_out_counted_and_a_choice_naming_one_is_a_400(front: TestClient) -> None:
    before = metrics.RESPONSES_TOOLS_LEFT_OUT._value.get()
    tools = [WEATHER, {"type": "web_search"}, {"type": "code_interpreter", "container": {"type": "auto"}},
             {"type": "custom", "name": "apply_patch"}]
    assert front.post("/v1/responses", json={"input": "hi", "tools": tools}).status_code == 200
    assert metrics.RESPONSES_TOOLS_LEFT_OUT._value.get() == before + 3
    assert "tokenwire_responses_tools_left_out_total" in front.get("/metrics").text
    r = front.post("/v1/responses", json={"input": "hi", "tools": tools, "tool_choice": {"type": "web_search"}})
    assert r.status_code == 400 and r.json()["error"]["param"] == "tool_choice"
    assert "leaves out of the prompt" in r.json()["error"]["message"]
    r = front.post("/v1/responses", json={"input": "hi", "tools": [{"type": "web_search"}], "tool_choice": "required"})
    assert r.status_code == 400 and "web_search" in r.json()["error"]["message"]
