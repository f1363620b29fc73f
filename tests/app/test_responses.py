"""The OpenAI Responses API over HTTP (``/v1/responses``), in process, through the official ``openai``
SDK (its ``http_client`` the app's TestClient): the front end of ``launch render --engine-url`` over
the scripted engine of tests/support/scripted_engine.py (reasoning and tool calls on the qwen3
tokenizer, split by the hermes and qwen3 parsers), and ``serve`` on the tiny qwen3 model for greedy
text. Every streamed event and every response validates against the SDK's own types; streamed
output equals the JSON answer; the store, ``previous_response_id``, sealed reasoning,
``input_tokens`` and the errors that name their field."""

from __future__ import annotations

import json
import socket
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import openai
import orjson
import pytest
import uvicorn
from openai.types.responses import Response, ResponseStreamEvent
from pydantic import TypeAdapter
from starlette.testclient import TestClient

from engine.local import LocalEngine
from server import metrics
from server.app import create_app
from server.context import ServerContext, create_engine
from server.gating import decide
from server.settings import Mode, Settings
from tests.conftest import asset_path, tokenizer_of
from tests.support.scripted_engine import ScriptedEngine
from tests.support.waiting import wait_until

SECRET = b"test-state-secret-0123456789-abcdefghijklmnopqrstuvwxyz"
OTHER_SECRET = b"another-state-secret-9876543210-zyxwvutsrqponmlkjihgfedcba"
EVENTS: TypeAdapter[Any] = TypeAdapter(ResponseStreamEvent)
THINK = "<think>\nThe user wants the weather.\n</think>\n\n"
CALL = ("Let me check.\n<tool_call>\n"
        '{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call><|im_end|>')
ANSWER = "<think>\nThey have the weather.\n</think>\n\nIt is sunny in Paris.<|im_end|>"
NAMESPACED = ('<tool_call>\n{"name": "shell__exec", "arguments": {"cmd": "ls"}}\n</tool_call><|im_end|>')
WEATHER = {"type": "function", "name": "get_weather", "description": "Get the weather",
           "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}
SHELL = {"type": "namespace", "name": "shell", "description": "Shell tools",
         "tools": [{"type": "function", "name": "exec", "parameters": {"type": "object",
                                                                       "properties": {"cmd": {"type": "string"}}}}]}


def ids_of(text: str) -> list[int]:
    return list(tokenizer_of("qwen3").encode(text, add_special_tokens=False))


def front_of(engine: ScriptedEngine, secret: bytes, max_model_len: int = 4096) -> TestClient:
    settings = Settings(mode=Mode.RENDER, model_dir=asset_path("qwen3"), served_model_name="qwen3", environ={},
                        engine_url=engine.url, tool_call_parser="hermes", enable_auto_tool_choice=True,
                        reasoning_parser="qwen3", state_secret=secret)
    ctx = ServerContext(settings=settings, gating=decide(Mode.RENDER, {}, has_engine_url=True),
                        tokenizer=tokenizer_of("qwen3"), max_model_len=max_model_len,
                        engine=create_engine(settings, max_model_len))
    return TestClient(create_app(ctx))


@pytest.fixture(scope="module")
def engine() -> Iterator[ScriptedEngine]:
    with ScriptedEngine(ids_of(THINK + CALL), step=2) as scripted:
        yield scripted


@pytest.fixture
def script(engine: ScriptedEngine) -> Iterator[Callable[[str], None]]:
    before = engine.token_ids

    def set_script(text: str) -> None:
        engine.token_ids = ids_of(text)
    yield set_script
    engine.token_ids = before


@pytest.fixture(scope="module")
def front(engine: ScriptedEngine) -> Iterator[TestClient]:
    with front_of(engine, SECRET) as client:
        yield client


@pytest.fixture(scope="module")
def other_front(engine: ScriptedEngine) -> Iterator[TestClient]:
    """A second front end sharing the secret (and nothing else: not its store)."""
    with front_of(engine, SECRET) as client:
        yield client


@pytest.fixture(scope="module")
def foreign_front(engine: ScriptedEngine) -> Iterator[TestClient]:
    with front_of(engine, OTHER_SECRET) as client:
        yield client


def sdk(client: TestClient) -> openai.OpenAI:
    return openai.OpenAI(base_url=str(client.base_url) + "/v1", api_key="none", http_client=client, max_retries=0)


def prompt_text(engine: ScriptedEngine) -> str:
    return str(tokenizer_of("qwen3").decode(engine.requests[-1]["token_ids"]))


def sse_events(text: str) -> list[dict[str, Any]]:
    names = [line[7:] for line in text.split("\n") if line.startswith("event: ")]
    events = [orjson.loads(line[6:]) for line in text.split("\n") if line.startswith("data: ")]
    assert names == [e["type"] for e in events]  # each event named by its type, as OpenAI's
    return events


def shape(items: list[Any]) -> list[tuple[Any, ...]]:
    """Output items without their ids (each request makes its own, call ids too)."""
    out = []
    for item in items:
        d = item if isinstance(item, dict) else item.model_dump(exclude_none=True)
        out.append((d["type"], d.get("status"), json.dumps(d.get("content")), d.get("name"), d.get("namespace"),
                    d.get("arguments"), str(d.get("call_id"))[:5]))
    return out


# --- the SDK, JSON and streaming -------------------------------------------------------------


def test_json_answer_has_reasoning_message_and_call_items(front: TestClient, engine: ScriptedEngine) -> None:
    r = sdk(front).responses.create(model="qwen3", input="Weather in Paris?", tools=[WEATHER])  # type: ignore[list-item]
    assert r.object == "response" and r.id.startswith("resp_") and r.status == "completed"
    assert [item.type for item in r.output] == ["reasoning", "message", "function_call"]
    reasoning, message, call = r.output
    assert reasoning.type == "reasoning" and reasoning.content is not None
    assert reasoning.content[0].text == "\nThe user wants the weather.\n"
    assert reasoning.encrypted_content is None  # only with include: ["reasoning.encrypted_content"]
    assert message.type == "message" and message.content[0].type == "output_text"
    assert message.content[0].text == "\n\nLet me check.\n"
    assert call.type == "function_call" and call.name == "get_weather" and call.call_id.startswith("call_")
    assert json.loads(call.arguments) == {"city": "Paris"}
    assert r.usage is not None and r.usage.input_tokens == len(engine.requests[-1]["token_ids"])
    assert r.usage.output_tokens == len(engine.token_ids)
    assert 0 < r.usage.output_tokens_details.reasoning_tokens < r.usage.output_tokens
    assert r.usage.total_tokens == r.usage.input_tokens + r.usage.output_tokens
    assert "<tools>" in prompt_text(engine) and '"get_weather"' in prompt_text(engine)


def test_streamed_events_validate_and_rebuild_the_json_answer(front: TestClient) -> None:
    client = sdk(front)
    full = client.responses.create(model="qwen3", input="Weather in Paris?", tools=[WEATHER])  # type: ignore[list-item]
    events: list[Any] = list(client.responses.create(model="qwen3", input="Weather in Paris?",
                                                     tools=[WEATHER], stream=True))  # type: ignore[list-item]
    kinds = [e.type for e in events]
    assert kinds[:2] == ["response.created", "response.in_progress"] and kinds[-1] == "response.completed"
    assert [e.sequence_number for e in events] == list(range(len(events)))
    # the sequence, with each run of deltas (as many as the engine's steps gave) counted once
    skeleton = [k for n, k in enumerate(kinds) if not (k.endswith(".delta") and kinds[n - 1] == k)]
    item = ["response.output_item.added", "response.content_part.added"]
    part_done = ["response.content_part.done", "response.output_item.done"]
    assert skeleton == [
        "response.created", "response.in_progress",
        *item, "response.reasoning_text.delta", "response.reasoning_text.done", *part_done,
        *item, "response.output_text.delta", "response.output_text.done", *part_done,
        "response.output_item.added", "response.function_call_arguments.delta",
        "response.function_call_arguments.done", "response.output_item.done", "response.completed"]
    final = events[-1].response
    assert shape(final.output) == shape(full.output)
    text = "".join(e.delta for e in events if e.type == "response.output_text.delta")
    assert text == full.output[1].content[0].text  # type: ignore[union-attr,index]
    args = "".join(e.delta for e in events if e.type == "response.function_call_arguments.delta")
    assert args == full.output[2].arguments  # type: ignore[union-attr]
    added = [e.item for e in events if e.type == "response.output_item.added"]
    assert [i.id for i in added] == [i.id for i in final.output]
    assert final.usage is not None and full.usage is not None
    assert final.usage.model_dump() == full.usage.model_dump()


def test_raw_events_validate_against_the_sdk_types(front: TestClient) -> None:
    r = front.post("/v1/responses", json={"input": "Weather in Paris?", "tools": [WEATHER], "stream": True,
                                          "include": ["reasoning.encrypted_content"]})
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream")
    for event in sse_events(r.text):
        EVENTS.validate_python(event)
    done = sse_events(r.text)[-1]["response"]
    Response.model_validate(done)
    assert done["output"][0]["encrypted_content"].startswith("tw1.")
    j = front.post("/v1/responses", json={"input": "Weather in Paris?", "tools": [WEATHER]})
    Response.model_validate(j.json())


def test_greedy_streamed_text_equals_the_json_answer_and_length_is_incomplete(serve: TestClient) -> None:
    client = sdk(serve)
    kwargs: dict[str, Any] = {"model": "tiny-qwen3", "input": "Tell me a story about a robot.",
                              "max_output_tokens": 12, "temperature": 0}
    full = client.responses.create(**kwargs)
    assert full.status == "incomplete" and full.incomplete_details is not None
    assert full.incomplete_details.reason == "max_output_tokens"
    assert full.usage is not None and full.usage.output_tokens == 12
    events: list[Any] = list(client.responses.create(**kwargs, stream=True))
    text = "".join(e.delta for e in events if e.type == "response.output_text.delta")
    final = events[-1]
    assert final.type == "response.incomplete"  # not response.completed: the output hit max_output_tokens
    assert text == full.output_text and final.response.output_text == full.output_text
    assert final.response.status == "incomplete" and final.response.incomplete_details == full.incomplete_details


def test_output_text_logprobs_when_included(serve: TestClient) -> None:
    body: dict[str, Any] = {"input": "Tell me a story.", "max_output_tokens": 6, "temperature": 0,
                            "include": ["message.output_text.logprobs"], "top_logprobs": 2}
    full = serve.post("/v1/responses", json=body).json()
    part = full["output"][-1]["content"][0]
    assert len(part["logprobs"]) == full["usage"]["output_tokens"] == 6
    assert all(len(lp["top_logprobs"]) == 2 and lp["logprob"] <= 0 for lp in part["logprobs"])
    assert "".join(lp["token"] for lp in part["logprobs"]) == part["text"]
    events = sse_events(serve.post("/v1/responses", json={**body, "stream": True}).text)
    streamed = [lp for e in events if e["type"] == "response.output_text.delta" for lp in e["logprobs"]]
    assert [lp["token"] for lp in streamed] == [lp["token"] for lp in part["logprobs"]]
    done = next(e for e in events if e["type"] == "response.output_text.done")
    assert done["logprobs"] == streamed
    Response.model_validate(full)
    for event in events:
        EVENTS.validate_python(event)
    plain = serve.post("/v1/responses", json={k: v for k, v in body.items() if k != "include"}).json()
    assert plain["output"][-1]["content"][0]["logprobs"] == []


@pytest.fixture(scope="module")
def serve() -> Iterator[TestClient]:
    path = asset_path("tiny-qwen3")
    settings = Settings(mode=Mode.SERVE, model_dir=path, served_model_name="tiny-qwen3", environ={})
    engine = LocalEngine(path, model_name="tiny-qwen3", max_model_len=4096, dtype="float32", num_threads=1)
    ctx = ServerContext(settings=settings, gating=decide(Mode.SERVE, {}), tokenizer=tokenizer_of("tiny-qwen3"),
                        max_model_len=4096, engine=engine)
    with TestClient(create_app(ctx)) as c:
        yield c


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


# --- bad input -------------------------------------------------------------------------------


@pytest.mark.parametrize(("body", "param", "words"), [
    ({"input": [{"type": "item_reference", "id": "x"}]}, "input.0", "unknown input item type"),
    ({"input": [{"role": "user", "content": [{"type": "input_file", "file_id": "f"}]}]}, "input.0.content.0",
     "unknown content part type"),
    ({"input": [{"type": "function_call_output", "call_id": "call_1", "output": "x"}]}, "input.0.call_id",
     "No tool call found for function call output with call_id call_1"),
    ({"input": "hi", "background": True}, "background", "background responses are not supported"),
    ({"input": "hi", "include": ["nope"]}, "include", "unknown include value"),
    ({"input": "hi", "max_output_tokens": 0}, "max_output_tokens", "greater than or equal to 1"),
    ({"input": "hi", "max_output_tokens": 10**6}, "max_output_tokens", "max_output_tokens"),
    ({"input": [{"role": "wizard", "content": "hi"}]}, "input.0.role", "Input should be"),
    ({"input": "hi", "tool_choice": {"type": "function", "name": "nope"}, "tools": [WEATHER]}, "tool_choice",
     "not found"),
    ({"input": "hi", "model": "gpt-9"}, None, "gpt-9"),
    ({"input": "many words " * 3000}, "input", "input"),  # past the 4096-token context
])
def test_bad_input_is_a_4xx_naming_the_field(front: TestClient, body: dict[str, Any], param: str | None,
                                              words: str) -> None:
    r = front.post("/v1/responses", json=body)
    assert 400 <= r.status_code < 500, r.text
    error = r.json()["error"]
    if param is not None:
        assert error["param"] == param, error
    assert words in error["message"], error


# --- the store -------------------------------------------------------------------------------


def test_stored_responses_get_delete_input_items(front: TestClient, other_front: TestClient) -> None:
    client = sdk(front)
    r = client.responses.create(model="qwen3", input="Weather in Paris?", tools=[WEATHER],  # type: ignore[list-item]
                                metadata={"k": "v"})
    got = client.responses.retrieve(r.id)
    assert got.model_dump() == r.model_dump() and got.metadata == {"k": "v"}
    items = client.responses.input_items.list(r.id)
    assert [(i.type, i.role) for i in items.data] == [("message", "user")]  # type: ignore[union-attr]
    assert items.data[0].content[0].text == "Weather in Paris?"  # type: ignore[union-attr,index]
    with pytest.raises(openai.NotFoundError):  # a store is per front end (the embedded one)
        sdk(other_front).responses.retrieve(r.id)
    with pytest.raises(openai.BadRequestError) as info:
        client.responses.cancel(r.id)
    assert "Cannot cancel a synchronous response." in str(info.value)
    client.responses.delete(r.id)
    with pytest.raises(openai.NotFoundError) as missing:
        client.responses.retrieve(r.id)
    assert missing.value.body["param"] == "response_id"  # type: ignore[index]
    with pytest.raises(openai.BadRequestError) as gone:
        client.responses.create(model="qwen3", input="And tomorrow?", previous_response_id=r.id)
    assert gone.value.code == "previous_response_not_found"
    assert gone.value.body["param"] == "previous_response_id"  # type: ignore[index]


def test_store_false_is_not_kept(front: TestClient) -> None:
    r = front.post("/v1/responses", json={"input": "hi", "store": False}).json()
    assert r["store"] is False
    assert front.get(f"/v1/responses/{r['id']}").status_code == 404
    r2 = front.post("/v1/responses", json={"input": "hi", "previous_response_id": r["id"]})
    assert r2.status_code == 400 and r2.json()["error"]["code"] == "previous_response_not_found"


def test_input_items_pages(front: TestClient) -> None:
    items = [{"role": "user", "content": f"message {k}"} for k in range(5)]
    rid = front.post("/v1/responses", json={"input": items}).json()["id"]
    page = front.get(f"/v1/responses/{rid}/input_items", params={"limit": 2, "order": "asc"}).json()
    assert [d["content"][0]["text"] for d in page["data"]] == ["message 0", "message 1"] and page["has_more"]
    rest = front.get(f"/v1/responses/{rid}/input_items",
                     params={"order": "asc", "after": page["last_id"]}).json()
    assert [d["content"][0]["text"] for d in rest["data"]] == ["message 2", "message 3", "message 4"]
    assert not rest["has_more"]
    desc = front.get(f"/v1/responses/{rid}/input_items").json()
    assert desc["data"][0]["content"][0]["text"] == "message 4"
    assert front.get(f"/v1/responses/{rid}/input_items", params={"limit": 0}).json()["error"]["param"] == "limit"


def test_a_streamed_response_is_stored_and_chains(front: TestClient, engine: ScriptedEngine,
                                                  script: Callable[[str], None]) -> None:
    events = sse_events(front.post("/v1/responses", json={"input": "Weather in Paris?", "tools": [WEATHER],
                                                          "stream": True}).text)
    done = events[-1]["response"]
    assert front.get(f"/v1/responses/{done['id']}").json() == done
    call = done["output"][-1]
    script(ANSWER)
    r = front.post("/v1/responses", json={"previous_response_id": done["id"], "tools": [WEATHER],
                                          "input": [{"type": "function_call_output", "call_id": call["call_id"],
                                                     "output": "sunny"}]})
    assert r.status_code == 200, r.text
    assert "The user wants the weather." in prompt_text(engine)  # the earlier turn's reasoning stays


# --- reasoning across stateless turns ----------------------------------------------------------


def test_encrypted_reasoning_comes_back_on_any_front_end_holding_the_secret(
        front: TestClient, other_front: TestClient, foreign_front: TestClient, engine: ScriptedEngine,
        script: Callable[[str], None]) -> None:
    first = front.post("/v1/responses", json={"input": "Weather in Paris?", "tools": [WEATHER], "store": False,
                                              "include": ["reasoning.encrypted_content"]}).json()
    reasoning, _, call = first["output"]
    sealed = {"type": "reasoning", "id": reasoning["id"], "summary": [],
              "encrypted_content": reasoning["encrypted_content"]}  # as Codex sends it back: no content
    script(ANSWER)
    items = [{"role": "user", "content": "Weather in Paris?"}, sealed, call,
             {"type": "function_call_output", "call_id": call["call_id"], "output": "sunny"}]
    body = {"input": items, "tools": [WEATHER], "store": False}
    r = other_front.post("/v1/responses", json=body)
    assert r.status_code == 200, r.text
    assert "<think>\nThe user wants the weather.\n</think>" in prompt_text(engine)
    tampered = {**sealed, "encrypted_content": sealed["encrypted_content"][:-3] + "AAA"}
    r = front.post("/v1/responses", json={**body, "input": [items[0], tampered, *items[2:]]})
    assert r.status_code == 400 and r.json()["error"]["param"] == "input.1.encrypted_content"
    assert "not sealed by this server, or was modified" in r.json()["error"]["message"]
    r = foreign_front.post("/v1/responses", json=body)
    assert r.status_code == 400 and r.json()["error"]["param"] == "input.1.encrypted_content"


# --- input_tokens -----------------------------------------------------------------------------


def test_input_tokens_equal_the_prompt_the_response_used(front: TestClient, engine: ScriptedEngine) -> None:
    client = sdk(front)
    kwargs: dict[str, Any] = {"model": "qwen3", "input": [{"role": "developer", "content": "Be brief."},
                                                          {"role": "user", "content": "Weather in Paris?"}],
                              "instructions": "You are a weather bot.", "tools": [WEATHER, SHELL]}
    count = client.responses.input_tokens.count(**kwargs)
    assert count.object == "response.input_tokens"
    r = client.responses.create(**kwargs)
    assert r.usage is not None and count.input_tokens == r.usage.input_tokens == len(engine.requests[-1]["token_ids"])
    bad = front.post("/v1/responses/input_tokens", json={"input": [{"type": "nope"}]})
    assert bad.status_code == 400 and bad.json()["error"]["param"] == "input.0"


def test_openapi_lists_the_routes(front: TestClient) -> None:
    paths = front.get("/openapi.json").json()["paths"]
    for path in ("/v1/responses", "/v1/responses/input_tokens", "/v1/responses/{response_id}",
                 "/v1/responses/{response_id}/cancel", "/v1/responses/{response_id}/input_items"):
        assert path in paths
    assert paths["/v1/responses/{response_id}"]["get"]["parameters"][0]["name"] == "response_id"
    assert set(paths["/v1/responses/{response_id}"]) == {"get", "delete"}





# --- cancel, on a real socket (a TestClient answers a stream only once it has ended) --------------


@pytest.fixture(scope="module")
def served(engine: ScriptedEngine) -> Iterator[str]:
    settings = Settings(mode=Mode.RENDER, model_dir=asset_path("qwen3"), served_model_name="qwen3", environ={},
                        engine_url=engine.url, tool_call_parser="hermes", enable_auto_tool_choice=True,
                        reasoning_parser="qwen3", state_secret=SECRET)
    ctx = ServerContext(settings=settings, gating=decide(Mode.RENDER, {}, has_engine_url=True),
                        tokenizer=tokenizer_of("qwen3"), max_model_len=4096, engine=create_engine(settings, 4096))
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    server = uvicorn.Server(uvicorn.Config(create_app(ctx), log_level="critical", lifespan="on",
                                           timeout_graceful_shutdown=1))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    try:
        wait_until(lambda: server.started, "the front end to start", timeout=60, interval=0.01)
        yield f"http://127.0.0.1:{sock.getsockname()[1]}"
    finally:
        server.should_exit = True
        thread.join(10)


def test_cancel_stops_a_running_stream_and_its_engine_request(served: str, engine: ScriptedEngine) -> None:
    engine.fault = "hang_after_one"  # one output, then the engine is silent: the response stays in progress
    aborted = len(engine.aborted)
    try:
        with httpx.Client(base_url=served, timeout=30) as http, \
                http.stream("POST", "/v1/responses", json={"input": "Weather?", "stream": True}) as stream:
            lines = stream.iter_lines()
            first = orjson.loads(next(line for line in lines if line.startswith("data: "))[6:])
            rid = first["response"]["id"]
            assert http.get(f"/v1/responses/{rid}").json()["status"] == "in_progress"
            r = http.post(f"/v1/responses/{rid}/cancel")
            assert r.status_code == 200, r.text
            assert r.json()["status"] == "cancelled"
            rest = [orjson.loads(line[6:]) for line in lines if line.startswith("data: ")]
            assert rest[-1]["type"] == "response.incomplete" and rest[-1]["response"]["status"] == "cancelled"
            for event in [first, *rest]:
                EVENTS.validate_python(event)
            wait_until(lambda: len(engine.aborted) > aborted, "the engine request to be aborted", timeout=10,
                       interval=0.01)
            assert http.get(f"/v1/responses/{rid}").json()["status"] == "cancelled"
            assert http.post(f"/v1/responses/{rid}/cancel").status_code == 400  # no longer running
    finally:
        engine.fault = None


def test_deleting_a_running_response_ends_it_and_it_stays_deleted(served: str, engine: ScriptedEngine) -> None:
    engine.fault = "hang_after_one"
    try:
        with httpx.Client(base_url=served, timeout=30) as http, \
                http.stream("POST", "/v1/responses", json={"input": "Weather?", "stream": True}) as stream:
            lines = stream.iter_lines()
            rid = orjson.loads(next(line for line in lines if line.startswith("data: "))[6:])["response"]["id"]
            assert http.delete(f"/v1/responses/{rid}").json() == {"id": rid, "object": "response.deleted",
                                                                  "deleted": True}
            rest = [orjson.loads(line[6:]) for line in lines if line.startswith("data: ")]
            assert rest[-1]["response"]["status"] == "cancelled"
            assert http.get(f"/v1/responses/{rid}").status_code == 404  # not stored again as it ended
    finally:
        engine.fault = None


def test_unknown_fields_are_counted_as_ignored(front: TestClient) -> None:
    before = metrics.IGNORED_FIELDS.labels("responses")._value.get()
    assert front.post("/v1/responses", json={"input": "hi", "temprature": 0.2}).status_code == 200
    assert metrics.IGNORED_FIELDS.labels("responses")._value.get() == before + 1
