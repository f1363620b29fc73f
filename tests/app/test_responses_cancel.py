"""Cancelling and deleting a running Responses stream over HTTP, on a real socket (a TestClient
answers a stream only once it has ended): tests/support/responses_front.py's front end served by
uvicorn over its scripted engine, made to hang after one output."""

from __future__ import annotations

import httpx
import orjson

from tests.support import responses_front
from tests.support.responses_front import EVENTS
from tests.support.scripted_engine import ScriptedEngine
from tests.support.waiting import wait_until

engine, served = responses_front.engine, responses_front.served  # the shared fixtures, by name


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
