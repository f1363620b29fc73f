"""The Responses event sequence (session/responses/events.py) for any chunking of a chat stream:
consecutive sequence numbers, every event valid for the ``openai`` SDK's types, each item added
once and done once in output order, deltas that add up to the done texts, and a final response
whose output equals the non-streaming answer's (:func:`output_from_chat`), ids aside."""

from __future__ import annotations

import itertools
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st
from openai.types.responses import Response, ResponseStreamEvent
from pydantic import TypeAdapter

from session.responses.events import ResponseEvents, output_from_chat, usage_of

EVENTS: TypeAdapter[Any] = TypeAdapter(ResponseStreamEvent)
SHAPE: dict[str, Any] = {"instructions": None, "max_output_tokens": None, "max_tool_calls": None, "metadata": {}, "model": "m",
         "parallel_tool_calls": True, "previous_response_id": None, "prompt_cache_key": None,
         "reasoning": {"effort": None, "summary": None}, "safety_identifier": None, "service_tier": "auto",
         "store": False, "temperature": None, "text": {"format": {"type": "text"}, "verbosity": "medium"},
         "tool_choice": "auto", "tools": [], "top_logprobs": 0, "top_p": None, "truncation": "disabled", "user": None}
NAMES = {"ns__run": ("ns", "run"), "get": (None, "get")}
text = st.text(alphabet="ab \n{}\"é", min_size=1, max_size=12)


def cuts(data: st.DataObject, s: str) -> list[str]:
    points = sorted(set(data.draw(st.lists(st.integers(1, max(1, len(s) - 1)), max_size=4)))) if len(s) > 1 else []
    bounds = [0, *points, len(s)]
    return [s[a:b] for a, b in itertools.pairwise(bounds) if s[a:b]]


def chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
    return {"choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}]}


@settings(max_examples=150, deadline=None)
@given(reasoning=st.none() | text, content=st.none() | text,
       calls=st.lists(st.tuples(st.sampled_from(["ns__run", "get"]), text), max_size=3),
       finish=st.sampled_from(["stop", "length", "tool_calls"]), data=st.data())
def test_any_chunking_gives_a_valid_sequence_and_the_json_answers_output(
        reasoning: str | None, content: str | None, calls: list[tuple[str, str]], finish: str,
        data: st.DataObject) -> None:
    chunks: list[dict[str, Any]] = []
    for piece in cuts(data, reasoning or ""):
        chunks.append(chunk({"reasoning": piece}))
    for piece in cuts(data, content or ""):
        chunks.append(chunk({"content": piece}))
    for k, (name, args) in enumerate(calls):
        pieces = cuts(data, args)
        chunks.append(chunk({"tool_calls": [{"index": k, "id": f"chatcmpl-tool-{k:016x}", "type": "function",
                                             "function": {"name": name, "arguments": pieces[0]}}]}))
        for piece in pieces[1:]:
            chunks.append(chunk({"tool_calls": [{"index": k, "function": {"arguments": piece}}]}))
    chunks.append(chunk({}, finish))
    rs = ResponseEvents(SHAPE, names=NAMES)
    events = rs.start()
    for c in chunks:
        events += rs.push(c)
    events += rs.finish(usage_of(5, 7))
    assert [e["sequence_number"] for e in events] == list(range(len(events)))
    for e in events:
        EVENTS.validate_python(e)
    final = events[-1]["response"]
    Response.model_validate(final)
    assert events[-1]["type"] == ("response.incomplete" if finish == "length" else "response.completed")
    added = [e["output_index"] for e in events if e["type"] == "response.output_item.added"]
    done = [e["output_index"] for e in events if e["type"] == "response.output_item.done"]
    assert added == done == list(range(len(final["output"])))
    message = {"reasoning": reasoning, "content": content,
               "tool_calls": [{"id": f"chatcmpl-tool-{k:016x}", "function": {"name": n, "arguments": a}}
                              for k, (n, a) in enumerate(calls)] or None}
    expected, _ = output_from_chat({"choices": [{"message": message, "finish_reason": finish}]}, NAMES)
    assert _without_ids(final["output"]) == _without_ids(expected)
    for item in final["output"]:
        deltas = [e["delta"] for e in events if e.get("item_id") == item["id"] and e["type"].endswith(".delta")]
        whole = item["arguments"] if item["type"] == "function_call" else item["content"][0]["text"]
        assert "".join(deltas) == whole


def _without_ids(items: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [{k: v for k, v in item.items() if k != "id"} for item in items]


def test_a_failure_closes_the_open_item_and_ends_with_response_failed() -> None:
    rs = ResponseEvents(SHAPE)
    events = [*rs.start(), *rs.push(chunk({"content": "Hel"})), *rs.fail("the engine went away")]
    assert [e["type"] for e in events[-4:]] == ["response.output_text.done", "response.content_part.done",
                                                "response.output_item.done", "response.failed"]
    assert events[-2]["item"]["status"] == "incomplete"
    assert events[-1]["response"]["status"] == "failed"
    assert events[-1]["response"]["error"] == {"code": "server_error", "message": "the engine went away"}
    for e in events:
        EVENTS.validate_python(e)
    assert rs.finish(usage_of(1, 1)) == []  # the sequence has ended
