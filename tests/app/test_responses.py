"""The OpenAI Responses API over HTTP (``/v1/responses``), in process, through the official ``openai``
SDK (its ``http_client`` the app's TestClient): the front end of ``launch render --engine-url`` over
the scripted engine of tests/support/responses_front.py (reasoning and tool calls on the qwen3
tokenizer, split by the hermes and qwen3 parsers), and ``serve`` on the tiny qwen3 model for greedy
text. Every streamed event and every response validates against the SDK's own types; streamed
output equals the JSON answer; the errors name their field. Tools, the store and cancel have
files of their own (tests/app/test_responses_tools.py, _store.py, _cancel.py)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from openai.types.responses import Response
from starlette.testclient import TestClient

from engine.local import LocalEngine
from server import metrics
from server.app import create_app
from server.context import ServerContext
from server.gating import decide
from server.settings import Mode, Settings
from tests.conftest import asset_path, tokenizer_of
from tests.support import responses_front
from tests.support.responses_front import EVENTS, WEATHER, prompt_text, sdk, shape, sse_events
from tests.support.scripted_engine import ScriptedEngine

engine, front = responses_front.engine, responses_front.front  # the shared fixtures, by name


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


# --- bad input -------------------------------------------------------------------------------


@pytest.mark.parametrize(("body", "param", "words"), [
    ({"input": [{"type": "item_reference", "id": "x"}]}, "input.0", "unknown input item type"),
    ({"input": [{"role": "user", "content": [{"type": "input_file", "file_id": "f"}]}]}, "input.0.content.0",
     "unknown content part type"),
    ({"input": [{"type": "function_call_output", "call_id": "call_1", "output": "x"}]}, "input.0.call_id",
     "No tool call found for function call output with call_id call_1"),
    ({"input": "hi", "background": True, "store": False}, "background",
     "background can only be used when `store` is true"),
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


def test_openapi_lists_the_routes(front: TestClient) -> None:
    paths = front.get("/openapi.json").json()["paths"]
    for path in ("/v1/responses", "/v1/responses/input_tokens", "/v1/responses/{response_id}",
                 "/v1/responses/{response_id}/cancel", "/v1/responses/{response_id}/input_items"):
        assert path in paths
    assert paths["/v1/responses/{response_id}"]["get"]["parameters"][0]["name"] == "response_id"
    assert set(paths["/v1/responses/{response_id}"]) == {"get", "delete"}


def test_unknown_fields_are_counted_as_ignored(front: TestClient) -> None:
    before = metrics.IGNORED_FIELDS.labels("responses")._value.get()
    assert front.post("/v1/responses", json={"input": "hi", "temprature": 0.2}).status_code == 200
    assert metrics.IGNORED_FIELDS.labels("responses")._value.get() == before + 1
