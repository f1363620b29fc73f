"""The Responses store over HTTP (tests/support/responses_front.py's front end and scripted engine):
stored responses are got, listed by input item and deleted, ``store: false`` is not kept, a
streamed response is stored and chains; sealed reasoning comes back on any front end holding the
secret; ``input_tokens`` counts the prompt the response used."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import openai
import pytest
from starlette.testclient import TestClient

from tests.support import responses_front
from tests.support.responses_front import (
    ANSWER,
    OTHER_SECRET,
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


@pytest.fixture(scope="module")
def other_front(engine: ScriptedEngine) -> Iterator[TestClient]:
    """A second front end sharing the secret (and nothing else: not its store)."""
    with front_of(engine, SECRET) as client:
        yield client


@pytest.fixture(scope="module")
def foreign_front(engine: ScriptedEngine) -> Iterator[TestClient]:
    with front_of(engine, OTHER_SECRET) as client:
        yield client


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
    # background: true counts as any request (nothing runs)
    r2 = front.post("/v1/responses/input_tokens", json={**kwargs, "background": True})
    assert r2.status_code == 200 and r2.json()["input_tokens"] == count.input_tokens, r2.text
    bad = front.post("/v1/responses/input_tokens", json={"input": [{"type": "nope"}]})
    assert bad.status_code == 400 and bad.json()["error"]["param"] == "input.0"
