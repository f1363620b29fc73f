"""Background responses (``background: true``) and resumed streams (``GET /v1/responses/{id}
?stream=true&starting_after=N``), in process, through the official ``openai`` SDK: the front end of
``launch render --engine-url`` over the scripted engine (tests/support/scripted_engine.py), in a
TestClient for runs that end, and on a real socket (uvicorn on a thread) for runs held open by the
engine's ``hang_after_one`` fault, where a dropped stream must not stop the response. Every event
validates against the SDK's own types; a resumed stream's sequence numbers continue the dropped
one's, and its text is the uninterrupted stream's."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import openai
import orjson
import pytest
from openai.types.responses import (
    Response,
    ResponseCompletedEvent,
    ResponseCreatedEvent,
    ResponseStreamEvent,
    ResponseTextDeltaEvent,
)
from pydantic import TypeAdapter
from starlette.testclient import TestClient

from server.app import create_app
from tests.support.responses_front import ids_of, on_socket, render_context, sdk, sse_events
from tests.support.scripted_engine import ScriptedEngine
from tests.support.waiting import wait_until

EVENTS: TypeAdapter[Any] = TypeAdapter(ResponseStreamEvent)
TEXT = "<think>\nThe user wants a story.\n</think>\n\nOnce upon a time a robot learned to paint.<|im_end|>"



@pytest.fixture(scope="module")
def engine() -> Iterator[ScriptedEngine]:
    with ScriptedEngine(ids_of(TEXT), step=2) as scripted:
        yield scripted


@pytest.fixture(scope="module")
def front(engine: ScriptedEngine) -> Iterator[TestClient]:
    with TestClient(create_app(render_context(engine))) as client:
        yield client


@pytest.fixture
def behaving(engine: ScriptedEngine) -> Iterator[ScriptedEngine]:
    engine.fault = None
    yield engine
    engine.fault = None



def first_id(events: list[Any]) -> str:
    """The response id of a stream's first event (``response.created``)."""
    created = events[0]
    assert isinstance(created, ResponseCreatedEvent)
    return created.response.id



def without_ids(event: dict[str, Any]) -> bytes:
    """An event with its response / item ids and timestamps blanked (each response makes its own)."""
    def blank(value: Any) -> Any:
        if isinstance(value, dict):
            return {k: ("" if k in ("id", "item_id", "created_at", "completed_at") else blank(v))
                    for k, v in value.items()}
        if isinstance(value, list):
            return [blank(v) for v in value]
        return value
    out = blank(event)
    if isinstance(out.get("response"), dict):
        out["response"]["background"] = None  # the one field a background response differs in
    return orjson.dumps(out)


# --- create, poll, resume (runs that end) ----------------------------------------------------


def test_a_background_response_is_answered_at_once_and_polled_to_completed(front: TestClient,
                                                                           behaving: ScriptedEngine) -> None:
    client = sdk(front)
    first = client.responses.create(model="qwen3", input="A story?", background=True)
    assert first.background is True and first.status in ("queued", "in_progress") and first.output == []
    wait_until(lambda: client.responses.retrieve(first.id).status == "completed",
               "the background response to complete", timeout=30, interval=0.02)
    final = client.responses.retrieve(first.id)
    assert final.background is True and final.output_text == "\n\nOnce upon a time a robot learned to paint."
    assert final.usage is not None and final.usage.output_tokens == len(ids_of(TEXT))
    plain = client.responses.create(model="qwen3", input="A story?")
    assert plain.background is False and plain.output_text == final.output_text


def test_a_dropped_background_stream_resumes_with_exactly_the_remaining_events(front: TestClient,
                                                                               behaving: ScriptedEngine) -> None:
    client = sdk(front)
    whole = [e.model_dump(mode="json", exclude_none=True)
             for e in client.responses.create(model="qwen3", input="A story?", stream=True)]
    k = 7
    seen = []
    with client.responses.create(model="qwen3", input="A story?", stream=True, background=True) as stream:
        for event in stream:
            seen.append(event)
            if len(seen) == k:
                break  # the client drops the stream here
    rid = first_id(seen)
    assert [e.sequence_number for e in seen] == list(range(k))
    rest = list(client.responses.retrieve(rid, stream=True, starting_after=seen[-1].sequence_number))
    assert [e.sequence_number for e in rest] == list(range(k, len(whole)))  # continuous, nothing twice
    last = rest[-1]
    assert isinstance(last, ResponseCompletedEvent) and last.response.id == rid and last.response.background
    got = [e.model_dump(mode="json", exclude_none=True) for e in [*seen, *rest]]
    assert [without_ids(e) for e in got] == [without_ids(e) for e in whole]  # the uninterrupted stream
    text = "".join(e.delta for e in [*seen, *rest] if isinstance(e, ResponseTextDeltaEvent))
    assert text == client.responses.retrieve(rid).output_text == "\n\nOnce upon a time a robot learned to paint."
    # without starting_after: the whole stream again, every event validating as the SDK's own
    again = sse_events(front.get(f"/v1/responses/{rid}", params={"stream": "true"}).text)
    assert [e["sequence_number"] for e in again] == list(range(len(whole)))
    for raw in again:
        EVENTS.validate_python(raw)


@pytest.mark.parametrize(("body", "words"), [
    ({"input": "hi", "background": True, "store": False}, "background can only be used when `store` is true"),
    ({"input": "hi", "background": True, "model": "gpt-9"}, "gpt-9"),
])
def test_a_background_request_the_server_cannot_run_is_a_400(front: TestClient, body: dict[str, Any],
                                                             words: str) -> None:
    r = front.post("/v1/responses", json=body)
    assert r.status_code in (400, 404), r.text
    error = r.json()["error"]
    assert words in error["message"]
    if "store" in body:
        assert r.status_code == 400 and error["param"] == "background"


def test_bad_resume_requests_are_4xx_naming_what_to_fix(front: TestClient, behaving: ScriptedEngine) -> None:
    client = sdk(front)
    bg = client.responses.create(model="qwen3", input="A story?", background=True)
    wait_until(lambda: client.responses.retrieve(bg.id).status == "completed", "completion", timeout=30,
               interval=0.02)
    for raw in ("-1", "x", "1.5", ""):
        r = front.get(f"/v1/responses/{bg.id}", params={"stream": "true", "starting_after": raw})
        assert r.status_code == 400 and r.json()["error"]["param"] == "starting_after", (raw, r.text)
    r = front.get(f"/v1/responses/{bg.id}", params={"stream": "true", "starting_after": "100000"})
    assert r.status_code == 400 and "has no event after it" in r.json()["error"]["message"]
    r = front.get(f"/v1/responses/{bg.id}", params={"stream": "maybe"})
    assert r.status_code == 400 and r.json()["error"]["param"] == "stream"
    r = front.get("/v1/responses/resp_unknown", params={"stream": "true", "starting_after": "3"})
    assert r.status_code == 404 and r.json()["error"]["param"] == "response_id"
    with pytest.raises(openai.NotFoundError):
        list(client.responses.retrieve("resp_unknown", stream=True, starting_after=0))
    plain = client.responses.create(model="qwen3", input="A story?")  # not background: nothing to stream
    r = front.get(f"/v1/responses/{plain.id}", params={"stream": "true"})
    assert r.status_code == 400 and "not created with background" in r.json()["error"]["message"]


def test_a_finished_response_s_log_is_dropped_after_its_time(front: TestClient, behaving: ScriptedEngine) -> None:
    runs = front.app.state.services.responses.background  # type: ignore[attr-defined]
    client = sdk(front)
    bg = client.responses.create(model="qwen3", input="A story?", background=True)
    wait_until(lambda: client.responses.retrieve(bg.id).status == "completed", "completion", timeout=30,
               interval=0.02)
    assert front.get(f"/v1/responses/{bg.id}", params={"stream": "true"}).status_code == 200
    keep = runs.keep_s
    runs.keep_s = 0.0
    try:
        r = front.get(f"/v1/responses/{bg.id}", params={"stream": "true", "starting_after": "2"})
    finally:
        runs.keep_s = keep
    assert r.status_code == 400 and r.json()["error"]["code"] == "event_log_expired", r.text
    assert "without stream" in r.json()["error"]["message"]
    assert client.responses.retrieve(bg.id).status == "completed"  # the response itself stays stored


def test_a_response_running_on_another_front_end_is_a_409(engine: ScriptedEngine, front: TestClient) -> None:
    """Two front ends sharing one store (as over Redis): the one not running it says so."""
    with TestClient(create_app(render_context(engine))) as other:
        other.app.state.services.responses.store = front.app.state.services.responses.store  # type: ignore[attr-defined]
        engine.fault = "hang_after_one"
        try:
            bg = sdk(other).responses.create(model="qwen3", input="A story?", background=True)
            assert sdk(front).responses.retrieve(bg.id).status == "in_progress"
            r = front.get(f"/v1/responses/{bg.id}", params={"stream": "true", "starting_after": "0"})
            assert r.status_code == 409 and r.json()["error"]["code"] == "response_not_local", r.text
            assert sdk(other).responses.cancel(bg.id).status == "cancelled"
        finally:
            engine.fault = None


def test_a_deleted_background_response_is_stopped_and_its_events_are_gone(front: TestClient,
                                                                          engine: ScriptedEngine) -> None:
    runs = front.app.state.services.responses.background  # type: ignore[attr-defined]
    engine.fault = "hang_after_one"
    aborted = len(engine.aborted)
    try:
        rid = front.post("/v1/responses", json={"input": "A story?", "background": True}).json()["id"]
        assert front.get(f"/v1/responses/{rid}").json()["status"] == "in_progress"
        assert front.delete(f"/v1/responses/{rid}").json()["deleted"] is True
        wait_until(lambda: len(engine.aborted) > aborted, "the engine request to be aborted", timeout=10,
                   interval=0.01)
        wait_until(lambda: runs.running == 0, "the run to end", timeout=10, interval=0.01)
        assert front.get(f"/v1/responses/{rid}", params={"stream": "true"}).status_code == 404
        assert front.get(f"/v1/responses/{rid}").status_code == 404  # not stored again as it ended
    finally:
        engine.fault = None


def test_too_many_background_responses_are_refused(engine: ScriptedEngine) -> None:
    with TestClient(create_app(render_context(engine, max_concurrent_requests=1))) as small:
        engine.fault = "hang_after_one"
        try:
            first = small.post("/v1/responses", json={"input": "A story?", "background": True})
            assert first.status_code == 200, first.text
            second = small.post("/v1/responses", json={"input": "A story?", "background": True})
            assert second.status_code == 429 and "background responses" in second.json()["error"]["message"]
            runs = small.app.state.services.responses.background  # type: ignore[attr-defined]
            runs.max_running, runs.max_per_client = 1, 0
            third = small.post("/v1/responses", json={"input": "A story?", "background": True})
            assert third.status_code == 503 and "the most it runs at once" in third.json()["error"]["message"]
            assert small.post(f"/v1/responses/{first.json()['id']}/cancel").status_code == 200
            wait_until(lambda: runs.running == 0, "the cancelled run to end", timeout=10, interval=0.01)
        finally:
            engine.fault = None


# --- on a real socket: a dropped stream does not stop the response --------------------------


@pytest.fixture(scope="module")
def served(engine: ScriptedEngine) -> Iterator[str]:
    with on_socket(create_app(render_context(engine))) as url:
        yield url


def test_a_dropped_stream_runs_on_and_a_resumed_one_follows_it_live_to_its_cancel(
        served: str, engine: ScriptedEngine) -> None:
    engine.fault = "hang_after_one"  # one output, then silence: the response stays in progress
    aborted = len(engine.aborted)
    client = openai.OpenAI(base_url=served + "/v1", api_key="none", max_retries=0)
    try:
        seen = []
        with client.responses.create(model="qwen3", input="A story?", stream=True, background=True) as stream:
            for event in stream:
                seen.append(event)
                if len(seen) == 2:
                    break  # dropped
        rid = first_id(seen)
        assert client.responses.retrieve(rid).status == "in_progress"
        assert len(engine.aborted) == aborted  # the drop did not abort the engine request
        with httpx.Client(base_url=served, timeout=30) as http, \
                http.stream("GET", f"/v1/responses/{rid}", params={"stream": "true", "starting_after": "1"}) as live:
            lines = live.iter_lines()
            replayed = [orjson.loads(next(line for line in lines if line.startswith("data: "))[6:])
                        for _ in range(3)]  # in_progress's successors: the item, its part, a delta
            assert [e["sequence_number"] for e in replayed] == [2, 3, 4]
            assert http.post(f"/v1/responses/{rid}/cancel").json()["status"] == "cancelled"
            rest = [orjson.loads(line[6:]) for line in lines if line.startswith("data: ")]
        events = [*(e.model_dump(mode="json") for e in seen), *replayed, *rest]
        assert [e["sequence_number"] for e in events] == list(range(len(events)))
        assert events[-1]["type"] == "response.incomplete" and events[-1]["response"]["status"] == "cancelled"
        for event in events:
            EVENTS.validate_python(event)
        wait_until(lambda: len(engine.aborted) > aborted, "the engine request to be aborted", timeout=10,
                   interval=0.01)
        final = client.responses.retrieve(rid)
        Response.model_validate(final.model_dump())
        assert final.status == "cancelled" and final.background is True
        with pytest.raises(openai.BadRequestError):  # no longer running
            client.responses.cancel(rid)
    finally:
        engine.fault = None
