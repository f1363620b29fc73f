"""The ``response`` request kind of the ``/v1/session`` protocol, in process: the front end of
``launch render --engine-url`` over the scripted engine (qwen3 tokenizer, hermes and qwen3 parsers,
tests/support/responses_front.py's), through a Starlette TestClient socket. The frames carry exactly the
events ``POST /v1/responses`` streams (each validated against the ``openai`` SDK's own types), the
final response equals the HTTP JSON answer, the store chains across transports, session defaults
apply, cancel aborts the engine request, response frames count towards max_in_flight, and bad
bodies are error frames naming the field."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import orjson
import pytest
from openai.types.responses import Response
from starlette.testclient import TestClient

from server.app import create_app
from tests.conftest import tokenizer_of
from tests.support import responses_front
from tests.support.responses_front import ANSWER, EVENTS, WEATHER, render_context, shape
from tests.support.scripted_engine import ScriptedEngine
from tests.support.waiting import wait_until

engine, front, script = responses_front.engine, responses_front.front, responses_front.script  # shared fixtures


class Session:
    def __init__(self, ws: Any) -> None:
        self.ws = ws
        self.seq = 0
        self.created = self.next()
        assert self.created["type"] == "session.created"

    def next(self) -> dict[str, Any]:
        frame: dict[str, Any] = orjson.loads(self.ws.receive_text())
        assert frame["seq"] == self.seq + 1
        self.seq = frame["seq"]
        return frame

    def send(self, **frame: Any) -> None:
        self.ws.send_text(orjson.dumps(frame).decode())

    def frames(self, request_id: str) -> list[dict[str, Any]]:
        """The frames of one request, up to its final frame."""
        out = []
        while True:
            frame = self.next()
            if frame.get("id") == request_id:
                out.append(frame)
                if frame["type"] in ("response.done", "error"):
                    return out

    def response(self, request_id: str, body: dict[str, Any], **extra: Any) -> tuple[list[dict[str, Any]], str]:
        """Send a ``response`` frame: its events, concatenated, and its final status (or error code)."""
        self.send(type="response", id=request_id, body=body, **extra)
        frames = self.frames(request_id)
        final = frames[-1]
        for frame in frames[:-1]:
            assert frame["type"] == "response.delta"
            assert frame["stream_id"] is None and frame["checkpoint"] is None and frame["output_token_ids"] is None
        events = [e for frame in frames[:-1] for e in frame["events"]]
        return events, final["status"] if final["type"] == "response.done" else final["error"]["code"]


@pytest.fixture
def session(front: TestClient) -> Iterator[Session]:
    with front.websocket_connect("/v1/session") as ws:
        yield Session(ws)


def test_the_frame_kind_is_listed_where_the_pipeline_is_served(session: Session) -> None:
    assert "response" in session.created["frames"]


def test_events_are_the_sse_events_and_end_with_the_json_answer(front: TestClient, session: Session) -> None:
    body = {"input": "Weather in Paris?", "tools": [WEATHER]}
    events, status = session.response("r1", body)
    assert status == "completed"
    for event in events:
        EVENTS.validate_python(event)
    assert [e["sequence_number"] for e in events] == list(range(len(events)))
    sse = front.post("/v1/responses", json={**body, "stream": True})
    wire = [orjson.loads(line[6:]) for line in sse.text.split("\n") if line.startswith("data: ")]
    kinds = [e["type"] for e in events]
    assert kinds == [e["type"] for e in wire]  # the same generator: the same sequence, event for event
    assert kinds[0] == "response.created" and kinds[-1] == "response.completed"
    final = Response.model_validate(events[-1]["response"])
    full = Response.model_validate(front.post("/v1/responses", json=body).json())
    assert shape(final.output) == shape(full.output)
    text = "".join(e["delta"] for e in events if e["type"] == "response.output_text.delta")
    assert text == full.output[1].content[0].text == "\n\nLet me check.\n"  # type: ignore[union-attr,index]
    assert final.usage is not None and full.usage is not None
    assert final.usage.model_dump() == full.usage.model_dump()


def test_a_stored_response_chains_over_http_and_back(front: TestClient, session: Session,
                                                     engine: ScriptedEngine, script: Callable[[str], None]) -> None:
    events, _ = session.response("r1", {"input": "Weather in Paris?", "tools": [WEATHER]})
    first = events[-1]["response"]
    call = next(item for item in first["output"] if item["type"] == "function_call")
    assert front.get(f"/v1/responses/{first['id']}").json()["status"] == "completed"  # stored, as over HTTP
    script(ANSWER)
    r = front.post("/v1/responses", json={"previous_response_id": first["id"], "tools": [WEATHER],
                                          "input": [{"type": "function_call_output", "call_id": call["call_id"],
                                                     "output": "sunny"}]})
    assert r.status_code == 200, r.text
    events, status = session.response("r2", {"previous_response_id": r.json()["id"], "input": "Thanks!"})
    assert status == "completed"
    prompt = tokenizer_of("qwen3").decode(engine.requests[-1]["token_ids"])
    for part in ("Weather in Paris?", "sunny", "It is sunny in Paris.", "Thanks!"):  # the whole chain
        assert part in prompt


def test_session_defaults_fill_the_responses_fields(session: Session, engine: ScriptedEngine) -> None:
    session.send(type="session.update", session={"sampling": {"max_tokens": 7, "temperature": 0.25}})
    assert session.next()["type"] == "session.updated"
    events, _ = session.response("r1", {"input": "Hi"})
    params = engine.requests[-1]["sampling_params"]
    assert params["max_tokens"] == 7 and params["temperature"] == 0.25
    assert events[-1]["response"]["max_output_tokens"] == 7
    events, _ = session.response("r2", {"input": "Hi", "max_output_tokens": 9})  # the body wins
    assert engine.requests[-1]["sampling_params"]["max_tokens"] == 9


@pytest.mark.parametrize(("body", "param", "words"), [
    ({}, "input", "Field required"),
    ({"input": [{"type": "item_reference", "id": "x"}]}, "input.0", "unknown input item type"),
    ({"input": [{"type": "function_call_output", "call_id": "call_1", "output": "x"}]}, "input.0.call_id",
     "No tool call found"),
    ({"input": "hi", "background": True}, "background", "background responses are not supported"),
    ({"input": "hi", "max_output_tokens": 0}, "max_output_tokens", "greater than or equal to 1"),
    ({"input": "hi", "previous_response_id": "resp_nope"}, "previous_response_id", "not found"),
    ({"input": "many words " * 3000}, "input", "input"),  # past the 4096-token context
])
def test_bad_bodies_are_error_frames_naming_the_field(session: Session, body: dict[str, Any], param: str,
                                                      words: str) -> None:
    session.send(type="response", id="bad", body=body)
    [frame] = session.frames("bad")
    assert frame["type"] == "error" and frame["id"] == "bad"
    error = frame["error"]
    assert error["param"] == param and words in error["message"], error
    assert error["code"] == "invalid_request" and error["status"] == 400
    _, status = session.response("ok", {"input": "Hi"})  # the session serves on
    assert status == "completed"


@pytest.mark.parametrize(("extra", "param"), [
    ({"resumable": True}, "resumable"),
    ({"resume": {"request_id": "resp_1", "checkpoint": "tw1.x", "output_token_ids": [1]}}, "resume"),
])
def test_resumable_and_resume_are_refused(session: Session, extra: dict[str, Any], param: str) -> None:
    session.send(type="response", id="r", body={"input": "Hi"}, **extra)
    [frame] = session.frames("r")
    assert frame["type"] == "error" and frame["error"]["code"] == "invalid_frame"
    assert frame["error"]["param"] == param and "not resumable" in frame["error"]["message"]


def test_a_resumable_session_still_streams_responses_without_checkpoints(session: Session) -> None:
    session.send(type="session.update", session={"resumable": True})
    assert session.next()["type"] == "session.updated"
    _, status = session.response("r", {"input": "Hi"})  # response() checks the null checkpoint fields
    assert status == "completed"


def test_cancel_aborts_the_engine_request_and_ends_with_done_cancelled(front: TestClient, session: Session,
                                                                      engine: ScriptedEngine) -> None:
    engine.fault = "hang_after_one"  # one output, then the engine is silent: the response stays in progress
    aborted = len(engine.aborted)
    try:
        session.send(type="response", id="c", body={"input": "Weather?"})
        frame = session.next()
        assert frame["type"] == "response.delta" and frame["events"][0]["type"] == "response.created"
        rid = frame["events"][0]["response"]["id"]
        session.send(type="cancel", id="c")
        frames = session.frames("c")
        assert frames[-1]["type"] == "response.done" and frames[-1]["status"] == "cancelled"
        wait_until(lambda: len(engine.aborted) > aborted, "the engine request to be aborted", timeout=10,
                   interval=0.01)
        assert front.get(f"/v1/responses/{rid}").status_code == 404  # left mid-stream: nothing to chain from
    finally:
        engine.fault = None


def test_response_frames_count_towards_the_sessions_limits(engine: ScriptedEngine) -> None:
    ctx = render_context(engine, ws_max_in_flight=1)
    engine.fault = "hang_after_one"
    try:
        with TestClient(create_app(ctx)) as client, client.websocket_connect("/v1/session") as ws:
            session = Session(ws)
            assert session.created["limits"]["max_in_flight"] == 1
            session.send(type="response", id="a", body={"input": "Weather?"})
            assert session.next()["type"] == "response.delta"  # a is running
            session.send(type="chat", id="b", body={"messages": [{"role": "user", "content": "Hi"}]})
            [refused] = session.frames("b")
            assert refused["type"] == "error" and refused["error"]["code"] == "too_many_requests"
            session.send(type="cancel", id="a")
            assert session.frames("a")[-1]["status"] == "cancelled"
            engine.fault = None
            _, status = session.response("c", {"input": "Hi"})  # room again
            assert status == "completed"
    finally:
        engine.fault = None
