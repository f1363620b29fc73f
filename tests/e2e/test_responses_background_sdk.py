"""Background responses through the official ``openai`` SDK against a real ``tokenwire serve``
process on the tiny qwen3 model (greedy text): a background response polled to its end, and a
background stream dropped after a few events, resumed with ``responses.retrieve(stream=True,
starting_after=N)``, giving exactly the rest: sequence numbers continuous, the text of an
uninterrupted stream; and a background response counted by the shutdown drain."""

from __future__ import annotations

import signal
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import openai
import pytest
from openai.types.responses import ResponseCreatedEvent, ResponseTextDeltaEvent

from tests.support.server_proc import ServerProcess

pytestmark = pytest.mark.slow

KWARGS: dict[str, Any] = {"model": "tiny-qwen3", "input": "Tell me a story about a robot.", "max_output_tokens": 48,
                          "temperature": 0}


@pytest.fixture(scope="module")
def oai(asset: Callable[[str], Path]) -> Iterator[openai.OpenAI]:
    with ServerProcess(["serve", asset("tiny-qwen3")]) as srv:
        yield openai.OpenAI(base_url=srv.url + "/v1", api_key="none", max_retries=0)


def text_of(events: list[Any]) -> str:
    return "".join(e.delta for e in events if isinstance(e, ResponseTextDeltaEvent))


def test_a_background_response_polls_to_the_json_answer(oai: openai.OpenAI) -> None:
    full = oai.responses.create(**KWARGS)
    first = oai.responses.create(**KWARGS, background=True)
    assert first.background is True and first.status in ("queued", "in_progress")
    deadline = time.monotonic() + 60
    final = oai.responses.retrieve(first.id)
    while final.status in ("queued", "in_progress"):
        assert time.monotonic() < deadline, "the background response did not end within 60 s"
        time.sleep(0.05)
        final = oai.responses.retrieve(first.id)
    assert final.status == full.status and final.output_text == full.output_text and final.background is True


def test_a_dropped_background_stream_resumes_where_it_left_off(oai: openai.OpenAI) -> None:
    whole = list(oai.responses.create(**KWARGS, stream=True))
    seen: list[Any] = []
    with oai.responses.create(**KWARGS, stream=True, background=True) as stream:
        for event in stream:
            seen.append(event)
            if len(seen) == 5:
                break  # the connection is closed here
    created = seen[0]
    assert isinstance(created, ResponseCreatedEvent)
    rest = list(oai.responses.retrieve(created.response.id, stream=True, starting_after=seen[-1].sequence_number))
    events = [*seen, *rest]
    # continuous, nothing twice (the engine's steps may batch tokens differently from one run to
    # another, so the number of deltas is not compared: the text is)
    assert [e.sequence_number for e in events] == list(range(len(events)))
    assert text_of(events) == text_of(whole) != ""
    assert rest[-1].type == whole[-1].type and rest[-1].type in ("response.completed", "response.incomplete")
    stored = oai.responses.retrieve(created.response.id)
    assert stored.output_text == text_of(whole)


def test_a_background_response_is_work_in_flight_for_the_shutdown_drain(asset: Callable[[str], Path]) -> None:
    """No request is open at SIGTERM, only a background response: the drain waits for it up to
    ``--shutdown-timeout``, then ends it as the engine closes, and the process exits 0."""
    srv = ServerProcess(["serve", asset("tiny-qwen3"), "--dtype", "float32", "--max-model-len", "4096",
                         "--shutdown-timeout", "1"], startup_timeout=180).start()
    try:
        client = openai.OpenAI(base_url=srv.url + "/v1", api_key="none", max_retries=0)
        first = client.responses.create(model="tiny-qwen3", input="Tell me a long story.", max_output_tokens=3500,
                                        temperature=0, background=True, extra_body={"ignore_eos": True})
        assert first.status == "in_progress"
        srv.proc.send_signal(signal.SIGTERM)  # type: ignore[union-attr]
        assert srv.proc.wait(60) == 0  # type: ignore[union-attr]
    finally:
        srv.stop()
    log = srv.output()
    assert "draining: 1 request(s) in flight" in log, log[-2000:]
    assert "shutdown timeout: ending 1 request(s) still in flight" in log, log[-2000:]
    assert "Traceback" not in log, log[-4000:]
