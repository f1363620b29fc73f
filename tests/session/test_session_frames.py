"""Frame codecs: client frames decoded at the untrusted boundary, server frames encoded and merged."""

from __future__ import annotations

from typing import Any

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from session import client_frames as f
from session import server_frames as sf
from session.state_ledger import OutOfOrder, StateLedger, StateTag


def test_every_client_frame_round_trips_through_its_encoding() -> None:
    frames: list[f.ClientFrame] = [
        f.SessionUpdate(session=f.SessionPatch(model="m", sampling={"temperature": 0.5})),
        f.Render(id="r", kind="messages", body={"messages": []}),
        f.Generate(id="g", event_id="e", body={"token_ids": [1]}),
        f.Derender(id="d", kind="completion", body={"stream_state": None}),
        f.Chat(id="c", body={}, resumable=True, resume=f.Resume(request_id="chatcmpl-1", checkpoint="x", output_token_ids=[1])),
        f.Completion(id="k", body={"prompt": "a"}),
        f.Messages(id="m", body={}),
        f.Response(id="o", body={"input": "Hi"}),
        f.Cancel(id="c"),
        f.Ping(event_id="p"),
    ]
    assert [fr.type for fr in frames] == list(f.CLIENT_FRAME_TYPES)
    for frame in frames:
        assert f.decode_client_frame(f.encode_client_frame(frame)) == frame


def test_decode_accepts_str_as_well_as_bytes() -> None:
    assert f.decode_client_frame('{"type": "ping", "event_id": "é"}') == f.Ping(event_id="é")


@pytest.mark.parametrize(("data", "param"), [
    (b'{"type": "chat", "body": {}}', "id"),
    (b'{"type": "chat", "id": "", "body": {}}', "id"),
    (b'{"type": "chat", "id": "' + b"x" * 129 + b'", "body": {}}', "id"),
    (b'{"type": "render", "id": "r", "kind": "embeddings", "body": {}}', "kind"),
    (b'{"type": "derender", "id": "d", "kind": "messages", "body": {}}', "kind"),
    (b'{"type": "chat", "id": "c", "body": {}, "resume": {"request_id": "q", "checkpoint": "x", '
     b'"output_token_ids": [-1]}}',
     "resume.output_token_ids.0"),
    (b'{"type": "ping", "event_id": 5}', "event_id"),
])
def test_invalid_fields_name_the_field(data: bytes, param: str) -> None:
    with pytest.raises(f.FrameError) as info:
        f.decode_client_frame(data)
    assert info.value.code == "invalid_frame"
    assert info.value.param == param


def test_unknown_type_error_keeps_ids_for_the_error_frame_and_bounds_the_echoed_type() -> None:
    with pytest.raises(f.FrameError) as info:
        f.decode_client_frame(orjson.dumps({"type": "x" * 500, "event_id": "e", "id": "i"}))
    assert (info.value.code, info.value.event_id, info.value.request_id) == ("unknown_type", "e", "i")
    assert len(info.value.message) < 400


def outcome(data: bytes) -> str:
    try:
        frame = f.decode_client_frame(data)
    except f.FatalFrameError as exc:
        assert exc.code in (1002, 1007)
        return "close"
    except f.FrameError as exc:
        assert exc.code in ("unknown_type", "invalid_frame")
        return "error"
    assert frame.type in f.CLIENT_FRAME_TYPES
    return "frame"


@given(st.binary(max_size=64))
def test_any_bytes_decode_to_a_frame_an_error_or_a_close_code(data: bytes) -> None:
    assert outcome(data) in ("frame", "error", "close")


@given(st.recursive(st.none() | st.booleans() | st.integers(-(2**63), 2**63 - 1) | st.text(max_size=5),
                    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner,
                                                                                max_size=3), max_leaves=8))
def test_any_json_value_decodes_to_a_frame_an_error_or_a_close_code(value: Any) -> None:
    result = outcome(orjson.dumps(value))
    has_envelope = isinstance(value, dict) and isinstance(value.get("type"), str)
    assert (result != "close") if has_envelope else (result == "close")


SERVER_FRAMES: list[sf.ServerFrame] = [
    sf.SessionCreated(session_id="s", protocol_version=1, server={"name": "t"}, frames=["ping"],
                      limits={"max_in_flight": 1}, session={"model": "m"}),
    sf.SessionUpdated(session={"model": "m"}),
    sf.Pong(event_id="p"),
    sf.ErrorFrame(id="x", error={"code": "c", "message": "m", "status": 400, "param": None}),
    sf.RenderDone(id="r", result=[{"token_ids": [1]}]),
    sf.DerenderDelta(id="d", result={"chunk": {}, "stream_state": "s"}),
    sf.GenerateDelta(id="g", chunk={"choices": []}),
    sf.GenerateDone(id="g", status="completed", usage={"total_tokens": 1}),
    sf.ChatDelta(id="c", chunks=[{}], checkpoint="ck", output_token_ids=[1]),
    sf.ChatDone(id="c", status="cancelled"),
    sf.CompletionDelta(id="k", chunks=[{}]),
    sf.CompletionDone(id="k", status="completed"),
    sf.MessagesDelta(id="m", events=[{"type": "ping"}]),
    sf.MessagesDone(id="m", status="completed"),
]


@pytest.mark.parametrize("frame", SERVER_FRAMES, ids=lambda fr: fr.type)
def test_every_server_frame_encodes_type_and_seq_first_and_decodes_back(frame: sf.ServerFrame) -> None:
    data = frame.encode(42)
    assert data == frame.stamped(42).encode()  # the hot path's encoding equals the plain one
    assert list(orjson.loads(data))[:3] == ["type", "seq", "event_id"]
    assert sf.decode_server_frame(data) == frame.stamped(42)


def test_generate_deltas_merge_by_choice_concatenating_ids_and_logprobs() -> None:
    lp = {"content": [{"token_id": 1, "logprob": -0.1}]}
    a = sf.GenerateDelta(id="g", chunk={"request_id": "q", "choices": [
        {"index": 0, "token_ids": [1], "logprobs": lp, "finish_reason": None},
        {"index": 1, "token_ids": [5], "finish_reason": None}]})
    b = sf.GenerateDelta(id="g", chunk={"request_id": "q", "choices": [
        {"index": 0, "token_ids": [2, 3], "logprobs": lp, "finish_reason": "stop", "stop_reason": 7}]})
    merged = a.merge(b).chunk
    assert merged["choices"][0]["token_ids"] == [1, 2, 3]
    assert len(merged["choices"][0]["logprobs"]["content"]) == 2
    assert (merged["choices"][0]["finish_reason"], merged["choices"][0]["stop_reason"]) == ("stop", 7)
    assert merged["choices"][1]["token_ids"] == [5]
    assert a.chunk["choices"][0]["token_ids"] == [1]  # merging never mutates the inputs


def test_pipeline_deltas_merge_in_order_keeping_the_latest_checkpoint() -> None:
    a = sf.ChatDelta(id="c", chunks=[{"n": 1}], checkpoint="c1", output_token_ids=[1])
    b = sf.ChatDelta(id="c", chunks=[{"n": 2}, {"n": 3}], checkpoint="c2", output_token_ids=[2, 3])
    assert a.merge(b) == sf.ChatDelta(id="c", chunks=[{"n": 1}, {"n": 2}, {"n": 3}], checkpoint="c2",
                                      output_token_ids=[1, 2, 3])
    m = sf.MessagesDelta(id="m", events=[{"a": 1}]).merge(sf.MessagesDelta(id="m", events=[{"b": 2}]))
    assert m.events == [{"a": 1}, {"b": 2}] and m.output_token_ids is None


def test_the_state_ledger_is_bounded_and_forgets_the_least_recent_stream() -> None:
    ledger = StateLedger(size=2)
    ledger.consume(StateTag("a", 1))
    ledger.consume(StateTag("b", 1))
    ledger.consume(StateTag("a", 2))
    ledger.consume(StateTag("c", 1))  # evicts b
    assert len(ledger) == 2
    ledger.consume(StateTag("b", 1))  # b was forgotten: accepted as a new stream
    with pytest.raises(OutOfOrder):
        ledger.consume(StateTag("c", 1))


# -- found by the WebSocket fuzzing (docs/reliability.md) -----------------------------------------
@pytest.mark.parametrize("text", [
    '{"type": "ping", "event_id": "\\ud800"}',
    '{"type": "chat", "id": "a", "body": {"messages": [{"role": "user", "content": "half \\ud83d"}]}}',
    '{"type": "bogus", "x": "\\udfff"}',
])
def test_unpaired_surrogate_escapes_are_a_frame_error_not_a_broken_connection(text: str) -> None:
    with pytest.raises(f.FrameError) as info:
        f.decode_client_frame(text)
    assert info.value.code == "invalid_frame" and "surrogate" in info.value.message


def test_a_frame_error_never_echoes_an_id_that_cannot_be_encoded() -> None:
    with pytest.raises(f.FrameError) as info:
        f.decode_client_frame('{"type": "cancel", "id": "\\udfff", "event_id": "e\\ud800"}')
    assert (info.value.request_id, info.value.event_id) == (None, None)


@pytest.mark.parametrize("text", ["NaN", '{"type": Infinity}', "[" * 5000 + "]" * 5000])
def test_non_json_constants_and_runaway_nesting_stay_fatal(text: str) -> None:
    with pytest.raises(f.FatalFrameError) as info:
        f.decode_client_frame(text)
    assert info.value.code == 1007
