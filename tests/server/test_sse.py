"""The one SSE framing (server/sse.py) every SSE route writes with: OpenAI / vLLM data-only events,
Anthropic named events, ``[DONE]``, and an error event in each shape."""

from __future__ import annotations

from server.sse import DONE, sse


def test_data_only_events_and_done() -> None:
    assert sse({"id": "x", "choices": []}) == b'data: {"id":"x","choices":[]}\n\n'
    assert DONE == b"data: [DONE]\n\n"
    error = {"error": {"message": "boom", "type": "InternalServerError", "param": None, "code": 500}}
    assert sse(error) == (b'data: {"error":{"message":"boom","type":"InternalServerError","param":null,'
                          b'"code":500}}\n\n')


def test_named_events_take_their_name_from_the_type() -> None:
    assert sse({"type": "message_stop"}, named=True) == b'event: message_stop\ndata: {"type":"message_stop"}\n\n'
    error = {"type": "error", "error": {"type": "api_error", "message": "boom"}}
    assert sse(error, named=True) == (b'event: error\ndata: {"type":"error","error":{"type":"api_error",'
                                      b'"message":"boom"}}\n\n')
