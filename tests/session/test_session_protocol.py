"""The session protocol end to end in memory: a client side and a server side wired together."""

from __future__ import annotations

from typing import Any

import pytest

from session import client_frames as f
from session import server_frames as sf
from session.actions import Close, Send, Start, StartGenerate, StartPipeline, StartRender
from session.errors import StateError
from session.machine import Session, SessionConfig
from session.state_ledger import StateTag
from tests.session.session_pair import ALL_FRAMES, Pair, ServerSide


def hold(start: Start) -> list[tuple[Any, ...]]:
    return [("hold",)]


def test_session_created_is_the_first_frame_with_seq_1_limits_and_enabled_frames() -> None:
    pair = Pair.open(frames=frozenset({"render", "derender"}), max_in_flight=7)
    (created,) = pair.client.received
    assert isinstance(created, sf.SessionCreated)
    assert created.seq == 1
    assert created.protocol_version == f.PROTOCOL_VERSION
    assert created.session_id.startswith("sess_")
    assert created.limits["max_in_flight"] == 7
    assert created.frames == ["session.update", "render", "derender", "cancel", "ping"]
    assert created.session == {"model": "m", "sampling": {}, "chat_template_kwargs": {}, "resumable": False}


def test_ping_is_answered_by_pong_echoing_the_event_id() -> None:
    pair = Pair.open()
    (pong,) = pair.send(f.Ping(event_id="e-1"))
    assert isinstance(pong, sf.Pong) and pong.event_id == "e-1"


def test_interleaved_requests_each_end_with_their_done_and_seq_strictly_increases() -> None:
    pair = Pair.open(script=hold)
    for i in range(5):
        pair.send(f.Chat(id=f"c{i}", event_id=f"e{i}", body={"messages": []}))
    session = pair.server.session
    for step in range(3):
        for i in reversed(range(5)):
            session.pipeline_delta(f"c{i}", [{"step": step, "req": i}], now=0.0)
    for i in range(5):
        pair.server.finish(f"c{i}")
    pair.pump()
    seqs = [fr.seq for fr in pair.client.received]
    assert seqs == list(range(1, len(seqs) + 1))
    for i in range(5):
        frames = pair.client.of(f"c{i}")
        assert [fr.type for fr in frames] == ["chat.delta"] * 3 + ["chat.done"]
        assert [fr.chunks[0]["step"] for fr in frames[:3]] == [0, 1, 2]  # type: ignore[union-attr]
        assert all(fr.event_id == f"e{i}" for fr in frames)
        assert frames[-1].status == "completed"  # type: ignore[union-attr]


def test_render_generate_derender_and_pipeline_frames_produce_their_documented_frames() -> None:
    pair = Pair.open()
    assert [fr.type for fr in pair.send(f.Render(id="r", kind="chat", body={"messages": []}))] == ["render.done"]
    generate = pair.send(f.Generate(id="g", body={"token_ids": [1], "sampling_params": {}}))
    assert [fr.type for fr in generate] == ["generate.delta", "generate.delta", "generate.done"]
    assert generate[-1].usage == {"prompt_tokens": 1, "completion_tokens": 3, "total_tokens": 4}  # type: ignore[union-attr]
    derender = pair.send(f.Derender(id="d", kind="chat", body={"generate_chunk": {"x": 1}}))
    assert [fr.type for fr in derender] == ["derender.delta"]
    assert derender[0].result == {"chunk": {"echo": {"x": 1}}, "stream_state": None}  # type: ignore[union-attr]
    for kind, frame in (("completion", f.Completion(id="k", body={})), ("messages", f.Messages(id="m", body={}))):
        out = pair.send(frame)
        assert [fr.type for fr in out] == [f"{kind}.delta", f"{kind}.delta", f"{kind}.done"]


def test_a_failed_request_ends_with_an_error_frame_naming_it_and_the_session_serves_on() -> None:
    err = sf.ErrorInfo("invalid_request", "messages: field required", status=400, param="messages")
    pair = Pair.open(script=lambda start: [("fail", err)])
    (error,) = pair.send(f.Chat(id="c", event_id="e", body={}))
    assert isinstance(error, sf.ErrorFrame)
    assert (error.id, error.event_id) == ("c", "e")
    assert error.error == {"code": "invalid_request", "message": "messages: field required", "status": 400,
                           "param": "messages"}
    assert pair.send(f.Ping())[0].type == "pong"


def test_cancel_ends_a_pipeline_with_done_cancelled_and_a_render_with_error_cancelled() -> None:
    pair = Pair.open(script=hold)
    pair.send(f.Chat(id="c", body={}))
    pair.send(f.Render(id="r", kind="chat", body={}))
    (done,) = pair.send(f.Cancel(id="c"))
    assert isinstance(done, sf.ChatDone) and done.status == "cancelled"
    (error,) = pair.send(f.Cancel(id="r"))
    assert isinstance(error, sf.ErrorFrame) and error.id == "r" and error.error["code"] == "cancelled"
    assert pair.server.cancelled == ["c", "r"]


def test_cancel_of_an_unknown_id_is_a_non_fatal_error() -> None:
    pair = Pair.open()
    (error,) = pair.send(f.Cancel(id="nope", event_id="x"))
    assert isinstance(error, sf.ErrorFrame)
    assert error.error["code"] == "unknown_id" and error.error["status"] == 404
    assert pair.send(f.Ping())[0].type == "pong"


def test_a_duplicate_id_is_refused_without_naming_the_running_request() -> None:
    pair = Pair.open(script=hold)
    pair.send(f.Chat(id="c", body={}))
    (error,) = pair.send(f.Chat(id="c", event_id="dup", body={}))
    assert isinstance(error, sf.ErrorFrame)
    assert error.id is None and error.event_id == "dup" and error.error["code"] == "duplicate_id"
    assert pair.server.session.in_flight == 1


def test_requests_past_max_in_flight_are_refused_until_one_finishes() -> None:
    pair = Pair.open(script=hold, max_in_flight=2)
    pair.send(f.Chat(id="a", body={}))
    pair.send(f.Chat(id="b", body={}))
    (error,) = pair.send(f.Chat(id="c", body={}))
    assert isinstance(error, sf.ErrorFrame)
    assert error.error["code"] == "too_many_requests" and error.error["status"] == 429 and error.id == "c"
    pair.server.finish("a")
    pair.pump()
    pair.send(f.Chat(id="c", body={}))
    assert pair.server.session.in_flight == 2


def test_a_burst_past_max_in_flight_is_refused_for_load_and_never_closes_the_session() -> None:
    # 97 requests at once used to close the session (1008): the 33rd consecutive too_many_requests
    # counted as a protocol error, and the 64 accepted requests never got a final frame.
    pair = Pair.open(script=hold)  # the defaults: max_in_flight 64, 32 consecutive errors
    refused = [fr for i in range(200) for fr in pair.send(f.Chat(id=f"c{i}", body={}))]
    assert pair.server.closed is None
    assert [fr.id for fr in refused] == [f"c{i}" for i in range(64, 200)]  # type: ignore[union-attr]
    assert all(isinstance(fr, sf.ErrorFrame) and fr.error["code"] == "too_many_requests" for fr in refused)
    for i in range(64):
        pair.server.finish(f"c{i}")
    pair.pump()
    for i in range(64):
        assert [fr.type for fr in pair.client.of(f"c{i}")] == ["chat.done"]
    assert [fr.type for fr in pair.send(f.Ping())] == ["pong"]


def test_load_refusals_neither_count_nor_reset_the_invalid_frame_count() -> None:
    pair = Pair.open(script=hold, max_in_flight=1, max_consecutive_errors=3)
    pair.send(f.Chat(id="a", body={}))
    for k in range(3):
        pair.send(b'{"type": "nope"}')
        pair.send(f.Chat(id=f"busy{k}", body={}))  # too_many_requests between invalid frames
    assert pair.server.closed is None
    pair.send(b'{"type": "nope"}')  # the 4th invalid frame in a row, load refusals aside
    assert pair.server.closed == Close(1008, "too many invalid frames")


def test_a_closing_session_first_ends_every_accepted_request_with_its_final_frame() -> None:
    pair = Pair.open(script=hold)
    pair.send(f.Chat(id="c", event_id="e1", body={}))
    pair.send(f.Render(id="r", kind="chat", body={}))
    pair.send(f.Completion(id="x", body={}))
    pair.server.held.pop("x")  # its work does not stop at once when cancelled:
    pair.send(f.Cancel(id="x"))  # the client is still cancelling it at the close
    pair.server.session.pipeline_delta("c", [{"n": 1}], now=0.0)
    pair.server.run()
    pair.pump()
    frames = pair.send(b"[1, 2]")  # a violation: close 1002
    assert pair.server.closed == Close(1002, "frame is not a JSON object")
    by_id = {fr.id: fr for fr in frames}  # type: ignore[union-attr]
    assert set(by_id) == {"c", "r", "x"} and len(frames) == 3
    for rid in ("c", "r"):
        error = by_id[rid]
        assert isinstance(error, sf.ErrorFrame)
        assert (error.error["code"], error.error["status"]) == ("session_closed", 503)
        assert "close code 1002" in error.error["message"]
    assert by_id["c"].event_id == "e1"
    assert isinstance(by_id["x"], sf.CompletionDone) and by_id["x"].status == "cancelled"
    # each request got exactly one final frame, and nothing comes after the close
    assert [fr.type for fr in pair.client.of("c")] == ["chat.delta", "error"]
    pair.server.session.done("c", now=0.0)
    assert pair.pump() == []


@pytest.mark.parametrize("frame", [
    f.Render(id="r", kind="chat", body={}), f.Derender(id="d", kind="chat", body={}),
    f.Generate(id="g", body={}), f.Chat(id="c", body={}),
])
def test_frames_of_disabled_route_groups_get_not_enabled_and_the_session_serves_on(frame: Any) -> None:
    pair = Pair.open(frames=frozenset({"messages"}))
    (error,) = pair.send(frame)
    assert isinstance(error, sf.ErrorFrame)
    assert error.error["code"] == "not_enabled" and error.id == frame.id
    assert pair.server.started == []
    assert pair.send(f.Ping())[0].type == "pong"


def test_an_unknown_frame_type_is_an_error_frame_not_a_disconnect() -> None:
    pair = Pair.open()
    (error,) = pair.send(b'{"type": "response.create", "event_id": "new", "id": "x"}')
    assert isinstance(error, sf.ErrorFrame)
    assert error.error["code"] == "unknown_type" and error.event_id == "new" and error.id == "x"
    assert pair.server.closed is None
    assert pair.send(f.Ping())[0].type == "pong"


def test_a_known_frame_with_bad_fields_is_an_invalid_frame_error_naming_the_field() -> None:
    pair = Pair.open()
    (error,) = pair.send(b'{"type": "chat", "id": "c", "event_id": "e", "body": [1]}')
    assert isinstance(error, sf.ErrorFrame)
    assert error.error["code"] == "invalid_frame" and error.error["param"] == "body"
    assert (error.id, error.event_id) == ("c", "e")
    assert pair.server.closed is None


@pytest.mark.parametrize(("data", "code"), [
    (b"{not json", 1007), (b'"a string"', 1002), (b"[1, 2]", 1002), (b'{"id": "x"}', 1002),
    (b'{"type": 5}', 1002),
])
def test_envelope_violations_close_with_their_code(data: bytes, code: int) -> None:
    pair = Pair.open(script=hold)
    pair.send(f.Chat(id="c", body={}))
    (final,) = pair.send(data)  # the request in flight gets its final frame before the close
    assert isinstance(final, sf.ErrorFrame) and (final.id, final.error["code"]) == ("c", "session_closed")
    assert pair.server.closed is not None and pair.server.closed.code == code
    assert pair.server.session.in_flight == 0
    assert pair.send(f.Ping()) == []  # a closing session answers nothing


def test_an_oversized_frame_closes_with_1009_before_it_is_parsed() -> None:
    pair = Pair.open(max_frame_bytes=100)
    pair.send(b'{"type": "ping", "event_id": "' + b"x" * 100 + b'"}')
    assert pair.server.closed == Close(1009, "frame exceeds max_frame_bytes")


def test_a_binary_frame_closes_with_1003() -> None:
    s = Session(SessionConfig(model="m", frames=ALL_FRAMES), now=0.0)
    s.actions()
    s.receive_binary(now=0.0)
    assert s.actions() == [Close(1003, "binary frames are not supported")]


def test_too_many_consecutive_frame_errors_close_with_1008_and_a_valid_frame_resets_the_count() -> None:
    pair = Pair.open(max_consecutive_errors=3)
    for _ in range(3):
        pair.send(b'{"type": "nope"}')
    pair.send(f.Ping())
    for _ in range(3):
        pair.send(b'{"type": "nope"}')
    assert pair.server.closed is None
    pair.send(b'{"type": "nope"}')
    assert pair.server.closed == Close(1008, "too many invalid frames")


def test_idle_timeout_counts_only_while_nothing_is_in_flight() -> None:
    s = Session(SessionConfig(model="m", frames=ALL_FRAMES, idle_timeout=10, max_lifetime=None), now=0.0)
    s.actions()
    assert s.next_deadline() == 10
    s.receive_frame(f.Chat(id="c", body={}), now=5.0)
    assert s.next_deadline() is None
    s.tick(now=100.0)
    assert [type(a).__name__ for a in s.actions()] == ["StartPipeline"]
    s.done("c", now=50.0)
    s.actions()
    assert s.next_deadline() == 60.0
    s.tick(now=59.9)
    assert s.actions() == []
    s.tick(now=60.0)
    assert s.actions() == [Close(1001, "idle timeout")]


def test_a_ping_keeps_an_idle_session_open() -> None:
    s = Session(SessionConfig(model="m", frames=ALL_FRAMES, idle_timeout=10, max_lifetime=None), now=0.0)
    s.receive_frame(f.Ping(), now=9.0)
    s.tick(now=12.0)
    assert not any(isinstance(a, Close) for a in s.actions())
    assert s.next_deadline() == 19.0


def test_max_lifetime_closes_even_with_requests_in_flight() -> None:
    s = Session(SessionConfig(model="m", frames=ALL_FRAMES, idle_timeout=None, max_lifetime=30), now=0.0)
    s.receive_frame(f.Chat(id="c", body={}), now=1.0)
    s.actions()
    assert s.next_deadline() == 30
    s.tick(now=30.0)
    final, close = s.actions()
    assert close == Close(1001, "session lifetime reached")
    # the request in flight ends with its final frame first, telling the client to send it again
    assert isinstance(final, Send) and isinstance(final.frame, sf.ErrorFrame)
    assert (final.frame.id, final.frame.error["code"], final.frame.error["status"]) == ("c", "session_closed", 503)
    assert s.in_flight == 0


# -- session.update ---------------------------------------------------------------------------


def test_session_update_merges_partially_and_answers_with_the_full_settings() -> None:
    pair = Pair.open(models=frozenset({"m", "other"}))
    (updated,) = pair.send(f.SessionUpdate(event_id="u1", session=f.SessionPatch(
        model="other", sampling={"temperature": 0.2, "max_tokens": 5},
        chat_template_kwargs={"enable_thinking": False})))
    assert isinstance(updated, sf.SessionUpdated) and updated.event_id == "u1"
    assert updated.session == {"model": "other", "sampling": {"temperature": 0.2, "max_tokens": 5},
                               "chat_template_kwargs": {"enable_thinking": False}, "resumable": False}
    (updated,) = pair.send(b'{"type": "session.update", "session": {"sampling": {"max_tokens": null, '
                           b'"top_p": 0.5}, "model": null, "resumable": true}}')
    assert updated.session == {"model": "m", "sampling": {"temperature": 0.2, "top_p": 0.5},  # type: ignore[union-attr]
                               "chat_template_kwargs": {"enable_thinking": False}, "resumable": True}


@pytest.mark.parametrize(("patch", "code", "param"), [
    (b'{"model": "gpt-4"}', "model_not_found", "session.model"),
    (b'{"sampling": {"temperature": -1}}', "invalid_frame", "session.sampling.temperature"),
    (b'{"sampling": {"warp": 9}}', "invalid_frame", "session.sampling.warp"),
    (b'{"colour": "red"}', "invalid_frame", "session.colour"),
])
def test_a_bad_session_update_is_an_error_and_changes_nothing(patch: bytes, code: str, param: str) -> None:
    pair = Pair.open()
    before = pair.server.session.settings
    (error,) = pair.send(b'{"type": "session.update", "session": ' + patch + b"}")
    assert isinstance(error, sf.ErrorFrame)
    assert (error.error["code"], error.error["param"]) == (code, param)
    assert pair.server.session.settings == before


def test_session_settings_are_bounded_a_larger_update_is_refused_and_the_session_lives_on() -> None:
    # chat_template_kwargs merged key by key used to grow without bound, and session.updated echoed it all.
    pair = Pair.open(max_settings_bytes=10_000)
    assert pair.client.received[0].limits["max_settings_bytes"] == 10_000  # type: ignore[union-attr]
    answers = [fr for k in range(10) for fr in pair.send(f.SessionUpdate(
        event_id=f"u{k}", session=f.SessionPatch(chat_template_kwargs={f"k{k}": "x" * 3000})))]
    assert [fr.type for fr in answers] == ["session.updated"] * 3 + ["error"] * 7
    for error in answers[3:]:
        assert isinstance(error, sf.ErrorFrame) and error.id is None
        assert (error.error["code"], error.error["param"]) == ("invalid_frame", "session.chat_template_kwargs")
        assert "max_settings_bytes" in error.error["message"]
    assert sorted(pair.server.session.settings.chat_template_kwargs) == ["k0", "k1", "k2"]
    assert all(len(fr.encode()) < 10_000 + 200 for fr in answers)
    # removing keys makes room again; a large stop list counts too
    (updated,) = pair.send(f.SessionUpdate(session=f.SessionPatch(chat_template_kwargs={"k0": None, "k1": None})))
    assert updated.type == "session.updated"
    (error,) = pair.send(f.SessionUpdate(session=f.SessionPatch(sampling={"stop": ["y" * 100] * 100})))
    assert isinstance(error, sf.ErrorFrame) and error.error["param"] == "session.sampling"
    assert [fr.type for fr in pair.send(f.Ping())] == ["pong"]


def test_refused_session_updates_count_as_invalid_frames() -> None:
    pair = Pair.open(max_settings_bytes=1000, max_consecutive_errors=2)
    big = f.SessionUpdate(session=f.SessionPatch(chat_template_kwargs={"k": "x" * 2000}))
    for _ in range(3):
        pair.send(big)
    assert pair.server.closed == Close(1008, "too many invalid frames")


def test_session_defaults_fill_unset_body_fields_and_never_override_the_request() -> None:
    pair = Pair.open(script=hold, models=frozenset({"m", "n"}))
    pair.send(f.SessionUpdate(session=f.SessionPatch(
        model="n", sampling={"temperature": 0.1, "max_tokens": 9, "stop": "END"},
        chat_template_kwargs={"enable_thinking": False, "x": 1})))
    pair.send(f.Chat(id="c", body={"messages": [], "temperature": 0.7,
                                   "chat_template_kwargs": {"x": 2}, "max_completion_tokens": 3}))
    pair.send(f.Messages(id="m", body={"messages": [], "model": "m"}))
    pair.send(f.Render(id="r", kind="completion", body={"prompt": "hi"}))
    pair.send(f.Generate(id="g", body={"token_ids": [1], "sampling_params": {}}))
    chat, messages, render, generate = pair.server.started
    assert isinstance(chat, StartPipeline) and isinstance(render, StartRender)
    assert chat.body == {"messages": [], "temperature": 0.7, "max_completion_tokens": 3, "model": "n",
                         "stop": "END", "chat_template_kwargs": {"enable_thinking": False, "x": 2}}
    assert messages.body == {"messages": [], "model": "m", "temperature": 0.1, "max_tokens": 9,
                             "stop_sequences": ["END"]}
    assert render.body == {"prompt": "hi", "model": "n", "temperature": 0.1, "max_tokens": 9, "stop": "END"}
    assert isinstance(generate, StartGenerate)
    assert generate.body == {"token_ids": [1], "sampling_params": {}}  # the raw engine frame is untouched


def test_resumable_comes_from_the_frame_then_the_session_and_a_resume_implies_it() -> None:
    pair = Pair.open(script=hold)
    pair.send(f.Chat(id="a", body={}))
    pair.send(f.Chat(id="b", body={}, resumable=True))
    resume = f.Resume(request_id="chatcmpl-1", checkpoint="ck", output_token_ids=[1, 2])
    pair.send(f.Chat(id="c", body={}, resume=resume))
    pair.send(f.Chat(id="d", body={}, resume=resume, resumable=False))
    a, b, c, d = pair.server.started
    assert [s.checkpoints for s in (a, b, c, d)] == [False, True, True, False]  # type: ignore[union-attr]
    assert c.resume == {"request_id": "chatcmpl-1", "checkpoint": "ck", "output_token_ids": [1, 2]}  # type: ignore[union-attr]


def test_resumable_deltas_carry_the_checkpoint_and_output_token_ids() -> None:
    pair = Pair.open()
    frames = pair.send(f.Chat(id="c", body={}, resumable=True))
    delta = frames[0]
    assert isinstance(delta, sf.ChatDelta)
    assert (delta.checkpoint, delta.output_token_ids, delta.stream_id) == ("ck", [7], "chatcmpl-7")


# -- derender states --------------------------------------------------------------------------


def tagger(state: str) -> StateTag:
    kind, stream, seq = state.split(":")
    if kind != "ok":
        raise StateError("The stream_state signature does not match; send the state unchanged.",
                         reason="bad_signature")
    return StateTag(stream, int(seq))


def derender_pair(script: Any = None) -> Pair:
    cfg = SessionConfig(model="m", frames=ALL_FRAMES)
    pair = Pair(ServerSide(cfg, tagger=tagger, **({"script": script} if script else {})))
    pair.pump()
    return pair


def derender(pair: Pair, state: str | None, rid: str = "d") -> sf.AnyServerFrame:
    (frame,) = pair.send(f.Derender(id=rid, kind="chat", body={"generate_chunk": {}, "stream_state": state}))
    return frame


def test_derender_states_must_advance_replayed_and_reordered_ones_are_refused() -> None:
    pair = derender_pair()
    assert derender(pair, None).type == "derender.delta"
    assert derender(pair, "ok:s:1").type == "derender.delta"
    assert derender(pair, "ok:s:2").type == "derender.delta"
    replayed = derender(pair, "ok:s:2")
    reordered = derender(pair, "ok:s:1")
    for frame, reason in ((replayed, "replayed"), (reordered, "reordered")):
        assert isinstance(frame, sf.ErrorFrame)
        assert frame.id == "d"
        assert frame.error["code"] == "bad_state" and frame.error["reason"] == reason
        assert frame.error["param"] == "body.stream_state"
    assert derender(pair, "ok:s:3").type == "derender.delta"  # the session keeps serving
    assert derender(pair, "ok:other:9").type == "derender.delta"  # another stream is independent


def test_a_forged_state_is_refused_with_the_codecs_reason() -> None:
    frame = derender(derender_pair(), "forged:s:1")
    assert isinstance(frame, sf.ErrorFrame)
    assert frame.error["code"] == "bad_state" and frame.error["reason"] == "bad_signature"


def test_a_failed_derender_step_does_not_burn_its_state() -> None:
    failures = iter([True, False])

    def script(start: Start) -> list[tuple[Any, ...]]:
        if next(failures):
            return [("fail", sf.ErrorInfo("invalid_request", "bad chunk"))]
        return [("done", {"chunk": {}, "stream_state": None})]

    pair = derender_pair(script)
    assert derender(pair, "ok:s:4").type == "error"
    assert derender(pair, "ok:s:4").type == "derender.delta"


def test_two_concurrent_steps_with_the_same_state_are_a_replay() -> None:
    pair = derender_pair(hold)
    pair.send(f.Derender(id="d1", kind="chat", body={"stream_state": "ok:s:1"}))
    frame = derender(pair, "ok:s:1", rid="d2")
    assert isinstance(frame, sf.ErrorFrame) and frame.error["reason"] == "replayed"


def stepping(start: Start) -> list[tuple[Any, ...]]:
    """A derender step that returns the next state of its stream ("ok:s:1" after null)."""
    state = start.body.get("stream_state")
    seq = int(state.rsplit(":", 1)[1]) if isinstance(state, str) else 0
    return [("done", {"chunk": {}, "stream_state": f"ok:s:{seq + 1}"})]


def test_a_stream_restarted_under_the_same_request_is_checked_afresh_at_every_step() -> None:
    # It used to be accepted at its first step (stream_state null) and refused at its second as
    # reordered / replayed, the session still remembering the earlier stream.
    pair = derender_pair(stepping)
    state = None
    for _ in range(3):
        state = derender(pair, state).result["stream_state"]  # type: ignore[union-attr]
    assert state == "ok:s:3"
    state = None  # restart the stream from its start
    for _ in range(4):
        frame = derender(pair, state)
        assert frame.type == "derender.delta", frame
        state = frame.result["stream_state"]
    assert state == "ok:s:4"
    # within the restarted stream the rule is the usual one
    replayed = derender(pair, "ok:s:3")
    assert isinstance(replayed, sf.ErrorFrame) and replayed.error["reason"] == "replayed"
    reordered = derender(pair, "ok:s:2")
    assert isinstance(reordered, sf.ErrorFrame) and reordered.error["reason"] == "reordered"


def test_a_failed_restart_changes_nothing() -> None:
    outcomes = iter([False, False, True])

    def script(start: Start) -> list[tuple[Any, ...]]:
        if next(outcomes):
            return [("fail", sf.ErrorInfo("invalid_request", "bad chunk"))]
        return stepping(start)

    pair = derender_pair(script)
    s1 = derender(pair, None).result["stream_state"]  # type: ignore[union-attr]
    assert derender(pair, s1).type == "derender.delta"
    assert derender(pair, None).type == "error"  # the restart failed: the stream is still remembered
    replayed = derender(pair, s1)
    assert isinstance(replayed, sf.ErrorFrame) and replayed.error["reason"] == "replayed"
