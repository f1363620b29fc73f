"""The /v1/session WebSocket in process (Starlette TestClient) against a scripted pipeline."""

from __future__ import annotations

from typing import Any

import orjson
import pytest
from starlette.testclient import TestClient, WebSocketDenialResponse
from starlette.websockets import WebSocketDisconnect

from server.gating import RouteGroup
from server.ws.upgrade import auth_subprotocol
from tests.app.ws_fakes import FakePipeline, session_client
from tests.support.waiting import wait_until


class Frames:
    """Reads frames from a TestClient socket, checking that ``seq`` strictly increases."""

    def __init__(self, ws: Any) -> None:
        self.ws = ws
        self.seq = 0

    def next(self) -> dict[str, Any]:
        frame: dict[str, Any] = orjson.loads(self.ws.receive_text())
        assert frame["seq"] > self.seq
        self.seq = frame["seq"]
        return frame

    def send(self, **frame: Any) -> None:
        self.ws.send_text(orjson.dumps(frame).decode())

    def until(self, request_id: str, final: str) -> list[dict[str, Any]]:
        out = []
        while True:
            frame = self.next()
            if frame.get("id") == request_id:
                out.append(frame)
                if frame["type"] in (final, "error"):
                    return out


def open_session(client: TestClient, **kwargs: Any) -> Any:
    return client.websocket_connect("/v1/session", **kwargs)


def test_session_created_lists_the_frames_enabled_by_the_gating(monkeypatch: pytest.MonkeyPatch) -> None:
    groups = frozenset({RouteGroup.ALWAYS, RouteGroup.WEBSOCKET, RouteGroup.PIPELINE})
    with session_client(monkeypatch, groups=groups) as (client, _), open_session(client) as ws:
        created = Frames(ws).next()
        assert created["type"] == "session.created" and created["seq"] == 1
        assert created["frames"] == ["session.update", "chat", "completion", "messages", "response", "cancel",
                                     "ping"]
        assert created["session"]["model"] == "tiny"


def test_primitive_frames_of_disabled_groups_are_refused_per_frame(monkeypatch: pytest.MonkeyPatch) -> None:
    groups = frozenset({RouteGroup.ALWAYS, RouteGroup.WEBSOCKET, RouteGroup.PIPELINE})
    with session_client(monkeypatch, groups=groups) as (client, pipeline), open_session(client) as ws:
        frames = Frames(ws)
        frames.next()
        for kind in ("render", "derender"):
            frames.send(type=kind, id=kind, kind="chat", body={})
            error = frames.next()
            assert (error["type"], error["id"], error["error"]["code"]) == ("error", kind, "not_enabled")
        frames.send(type="generate", id="g", body={"token_ids": [1], "sampling_params": {}})
        assert frames.next()["error"]["code"] == "not_enabled"
        frames.send(type="chat", id="c", body={"messages": []})
        assert frames.until("c", "chat.done")[-1]["status"] == "completed"
        assert pipeline.started == [("chat", {"messages": [], "model": "tiny"})]


def test_the_version_subprotocol_is_selected_when_offered(monkeypatch: pytest.MonkeyPatch) -> None:
    with session_client(monkeypatch) as (client, _):
        with open_session(client, subprotocols=["other", "tokenwire.v1"]) as ws:
            assert ws.accepted_subprotocol == "tokenwire.v1"
        with open_session(client) as ws:
            assert ws.accepted_subprotocol is None


@pytest.mark.parametrize(("kwargs", "status"), [
    ({"subprotocols": ["tokenwire.v9"]}, 400),
    ({"params": {"v": "2"}}, 400),
])
def test_unsupported_protocol_versions_are_refused_at_the_upgrade(monkeypatch: pytest.MonkeyPatch,
                                                                   kwargs: dict[str, Any], status: int) -> None:
    with session_client(monkeypatch) as (client, _):
        url = "/v1/session" + ("?v=" + kwargs.pop("params")["v"] if "params" in kwargs else "")
        with pytest.raises(WebSocketDenialResponse) as info, client.websocket_connect(url, **kwargs):
            pass
        assert info.value.status_code == status
        assert "not supported" in info.value.json()["error"]["message"]


def test_interleaved_requests_of_every_kind_complete_on_one_socket(monkeypatch: pytest.MonkeyPatch) -> None:
    with session_client(monkeypatch) as (client, _), open_session(client) as ws:
        frames = Frames(ws)
        frames.next()
        frames.send(type="chat", id="c", event_id="e-c", body={"messages": [], "n": 4})
        frames.send(type="messages", id="m", body={"messages": [], "max_tokens": 4})
        frames.send(type="completion", id="k", body={"prompt": "hi"})
        frames.send(type="render", id="r", kind="completion", body={"prompt": ["a", "b"]})
        frames.send(type="generate", id="g", body={"token_ids": [5, 6], "sampling_params": {"max_tokens": 3}})
        frames.send(type="derender", id="d", kind="chat", body={"generate_chunk": {"choices": [{"token_ids": [1, 2]}]},
                                                              "stream_state": None})
        by_id: dict[str, list[dict[str, Any]]] = {}
        finals = {"c": "chat.done", "m": "messages.done", "k": "completion.done", "r": "render.done",
                  "g": "generate.done", "d": "derender.delta"}
        while len([i for i, fs in by_id.items() if fs[-1]["type"] == finals[i]]) < len(finals):
            frame = frames.next()
            by_id.setdefault(frame["id"], []).append(frame)
    text = "".join(ch["choices"][0]["delta"]["content"] for fr in by_id["c"][:-1] for ch in fr["chunks"])
    assert text == "text-0text-1text-2text-3"
    assert all(fr["event_id"] == "e-c" for fr in by_id["c"])
    assert [ev["delta"]["text"] for fr in by_id["m"][:-1] for ev in fr["events"]] == ["text-0", "text-1", "text-2"]
    assert [r["token_ids"] for r in by_id["r"][0]["result"]] == [[1, 2, 3], [1, 2, 4]]
    ids = [t for fr in by_id["g"][:-1] for t in fr["chunk"]["choices"][0]["token_ids"]]
    assert ids == [100, 101, 102]
    assert by_id["g"][-1]["usage"] == {"prompt_tokens": 2, "completion_tokens": 3, "total_tokens": 5}
    assert by_id["d"][0]["result"]["stream_state"] == "state-after-2"


def test_render_of_a_chat_returns_the_single_generate_request_like_the_http_route(
        monkeypatch: pytest.MonkeyPatch) -> None:
    with session_client(monkeypatch) as (client, _), open_session(client) as ws:
        frames = Frames(ws)
        frames.next()
        frames.send(type="render", id="r", kind="chat", body={"messages": []})
        result = frames.next()["result"]
        assert isinstance(result, dict) and result["token_ids"] == [1, 2, 3] and result["model"] == "tiny"


def test_cancel_midway_aborts_the_stream_and_ends_with_done_cancelled(monkeypatch: pytest.MonkeyPatch) -> None:
    with session_client(monkeypatch) as (client, pipeline), open_session(client) as ws:
        frames = Frames(ws)
        frames.next()
        frames.send(type="chat", id="c", body={"messages": [], "hang": True, "name": "slow"})
        assert frames.next()["type"] == "chat.delta"
        frames.send(type="cancel", id="c", event_id="x")
        done = frames.next()
        assert (done["type"], done["id"], done["status"]) == ("chat.done", "c", "cancelled")
        assert pipeline.closed == ["slow"]
        frames.send(type="ping")
        assert frames.next()["type"] == "pong"


def test_cancel_midway_aborts_a_generate_at_the_engine(monkeypatch: pytest.MonkeyPatch) -> None:
    with session_client(monkeypatch) as (client, pipeline), open_session(client) as ws:
        frames = Frames(ws)
        frames.next()
        frames.send(type="generate", id="g", body={"request_id": "eng-1", "token_ids": [1], "hang": True,
                                                   "sampling_params": {"max_tokens": 50}})
        assert frames.next()["type"] == "generate.delta"
        frames.send(type="cancel", id="g")
        assert frames.next()["status"] == "cancelled"
        assert pipeline.closed == ["eng-1"]


def test_closing_the_socket_aborts_every_request_in_flight(monkeypatch: pytest.MonkeyPatch) -> None:
    with session_client(monkeypatch) as (client, pipeline):
        with open_session(client) as ws:
            frames = Frames(ws)
            frames.next()
            for i in range(3):
                frames.send(type="chat", id=f"c{i}", body={"messages": [], "hang": True, "name": f"s{i}"})
            seen = {frames.next()["id"] for _ in range(3)}
            assert seen == {"c0", "c1", "c2"}
        wait_until(lambda: len(pipeline.closed) >= 3, "the three pipelines to be closed", timeout=10, interval=0.01,
                   detail=lambda: f"closed: {pipeline.closed}")
        assert sorted(pipeline.closed) == ["s0", "s1", "s2"]


def test_request_errors_are_error_frames_with_the_http_status_and_never_exception_text(
        monkeypatch: pytest.MonkeyPatch) -> None:
    with session_client(monkeypatch) as (client, _), open_session(client) as ws:
        frames = Frames(ws)
        frames.next()
        frames.send(type="chat", id="bad", body={"fail": "render"})
        error = frames.next()
        assert (error["id"], error["error"]["code"], error["error"]["status"]) == ("bad", "invalid_request", 400)
        assert error["error"]["param"] == "messages"
        frames.send(type="chat", id="boom", body={"fail": "internal"})
        error = frames.next()
        assert (error["error"]["code"], error["error"]["status"]) == ("internal_error", 500)
        assert "secret" not in orjson.dumps(error).decode()
        frames.send(type="derender", id="d", kind="chat", body={"fail": "state"})
        error = frames.next()
        assert (error["error"]["code"], error["error"]["reason"]) == ("bad_state", "bad_signature")
        frames.send(type="generate", id="g", body={"token_ids": []})
        error = frames.next()
        assert error["error"]["code"] == "invalid_request" and "token_ids" in error["error"]["message"]
        frames.send(type="ping")
        assert frames.next()["type"] == "pong"


def test_resumable_streams_carry_checkpoints_and_a_resume_reaches_the_pipeline(
        monkeypatch: pytest.MonkeyPatch) -> None:
    with session_client(monkeypatch) as (client, pipeline), open_session(client) as ws:
        frames = Frames(ws)
        frames.next()
        frames.send(type="chat", id="c", body={"messages": []}, resumable=True)
        deltas = frames.until("c", "chat.done")[:-1]
        assert [(d["checkpoint"], d["output_token_ids"]) for d in deltas] == [("ck-0", [0]), ("ck-1", [1]),
                                                                           ("ck-2", [2])]
        assert {d["stream_id"] for d in deltas} == {"chatcmpl-1"}
        frames.send(type="chat", id="c2", body={"messages": []},
                    resume={"request_id": "chatcmpl-1", "checkpoint": "ck-1", "output_token_ids": [0, 1]})
        frames.until("c2", "chat.done")
        assert pipeline.resumes == [None, {"request_id": "chatcmpl-1", "checkpoint": "ck-1",
                                           "output_token_ids": [0, 1]}]


@pytest.mark.parametrize(("message", "code"), [
    ("{oops", 1007), ("[1]", 1002), ('{"id": "x"}', 1002), (b"\x00binary", 1003),
])
def test_envelope_violations_close_the_session_with_their_code(monkeypatch: pytest.MonkeyPatch,
                                                                message: str | bytes, code: int) -> None:
    with session_client(monkeypatch) as (client, _), open_session(client) as ws:
        Frames(ws).next()
        if isinstance(message, bytes):
            ws.send_bytes(message)
        else:
            ws.send_text(message)
        with pytest.raises(WebSocketDisconnect) as info:
            ws.receive_text()
        assert info.value.code == code


def test_an_oversized_frame_closes_with_1009(monkeypatch: pytest.MonkeyPatch) -> None:
    with session_client(monkeypatch, ws_max_frame_bytes=1000) as (client, _), open_session(client) as ws:
        Frames(ws).next()
        ws.send_text(orjson.dumps({"type": "chat", "id": "c", "body": {"x": "é" * 600}}).decode())
        with pytest.raises(WebSocketDisconnect) as info:
            ws.receive_text()
        assert info.value.code == 1009


def test_an_unknown_frame_type_gets_an_error_frame_and_the_session_serves_on(
        monkeypatch: pytest.MonkeyPatch) -> None:
    with session_client(monkeypatch) as (client, _), open_session(client) as ws:
        frames = Frames(ws)
        frames.next()
        frames.send(type="conversation.item.create", event_id="future")
        error = frames.next()
        assert (error["type"], error["event_id"], error["error"]["code"]) == ("error", "future", "unknown_type")
        frames.send(type="ping", event_id="still-here")
        assert frames.next()["event_id"] == "still-here"


def test_an_idle_session_is_closed_with_1001(monkeypatch: pytest.MonkeyPatch) -> None:
    with session_client(monkeypatch, ws_idle_timeout=0.2) as (client, _), open_session(client) as ws:
        Frames(ws).next()
        with pytest.raises(WebSocketDisconnect) as info:
            ws.receive_text()
        assert (info.value.code, info.value.reason) == (1001, "idle timeout")


def test_session_update_defaults_reach_the_pipeline(monkeypatch: pytest.MonkeyPatch) -> None:
    with session_client(monkeypatch) as (client, pipeline), open_session(client) as ws:
        frames = Frames(ws)
        frames.next()
        frames.send(type="session.update", event_id="u",
                    session={"sampling": {"temperature": 0}, "chat_template_kwargs": {"enable_thinking": False}})
        updated = frames.next()
        assert updated["type"] == "session.updated" and updated["event_id"] == "u"
        frames.send(type="chat", id="c", body={"messages": []})
        frames.until("c", "chat.done")
        assert pipeline.started[-1][1] == {"messages": [], "model": "tiny", "temperature": 0,
                                           "chat_template_kwargs": {"enable_thinking": False}}


# -- the upgrade ------------------------------------------------------------------------------


def refused(client: TestClient, **kwargs: Any) -> WebSocketDenialResponse:
    with pytest.raises(WebSocketDenialResponse) as info, open_session(client, **kwargs):
        pass
    return info.value


def test_a_missing_key_is_refused_with_401_and_a_wrong_one_with_403(monkeypatch: pytest.MonkeyPatch) -> None:
    with session_client(monkeypatch, api_keys=("sekrit",)) as (client, _):
        missing = refused(client)
        assert missing.status_code == 401 and missing.headers["www-authenticate"].startswith("Bearer")
        assert missing.json()["error"]["type"] == "AuthenticationError"
        assert refused(client, headers={"Authorization": "Bearer nope"}).status_code == 403
        assert refused(client, subprotocols=["tokenwire.v1", auth_subprotocol("nope")]).status_code == 403


def test_the_key_works_in_a_header_and_in_the_browser_subprotocol(monkeypatch: pytest.MonkeyPatch) -> None:
    with session_client(monkeypatch, api_keys=("sekrit",)) as (client, _):
        with open_session(client, headers={"Authorization": "Bearer sekrit"}) as ws:
            assert Frames(ws).next()["type"] == "session.created"
        with open_session(client, headers={"x-api-key": "sekrit"}) as ws:
            assert Frames(ws).next()["type"] == "session.created"
        with open_session(client, subprotocols=["tokenwire.v1", auth_subprotocol("sekrit")]) as ws:
            assert ws.accepted_subprotocol == "tokenwire.v1"  # the key is never echoed back
            assert Frames(ws).next()["type"] == "session.created"
        assert refused(client, subprotocols=[auth_subprotocol("sekrit")]).status_code == 400


def test_origins_must_match_the_host_or_the_allowlist(monkeypatch: pytest.MonkeyPatch) -> None:
    with session_client(monkeypatch) as (client, _):
        assert refused(client, headers={"Origin": "https://evil.example"}).status_code == 403
        with open_session(client, headers={"Origin": "http://testserver"}) as ws:
            assert Frames(ws).next()["type"] == "session.created"
    with session_client(monkeypatch, allowed_origins=("https://app.example",)) as (client, _):
        assert refused(client, headers={"Origin": "http://testserver"}).status_code == 403
        with open_session(client, headers={"Origin": "https://app.example"}) as ws:
            assert Frames(ws).next()["type"] == "session.created"


def test_requests_past_the_in_flight_limit_are_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    pipeline = FakePipeline()
    with session_client(monkeypatch, pipeline, ws_max_in_flight=2) as (client, _), open_session(client) as ws:
        frames = Frames(ws)
        frames.next()
        for i in range(2):
            frames.send(type="chat", id=f"c{i}", body={"hang": True})
        assert {frames.next()["id"] for _ in range(2)} == {"c0", "c1"}
        frames.send(type="chat", id="c2", body={})
        error = frames.next()
        assert (error["id"], error["error"]["code"]) == ("c2", "too_many_requests")


def test_an_internal_error_of_the_session_layer_closes_with_1011_without_its_text(
        monkeypatch: pytest.MonkeyPatch) -> None:
    from session.machine import Session

    def broken(self: Session, data: Any, *, now: float) -> None:
        raise RuntimeError("secret detail of a bug")

    with session_client(monkeypatch) as (client, _), open_session(client) as ws:
        Frames(ws).next()
        monkeypatch.setattr(Session, "receive_text", broken)
        ws.send_text('{"type": "ping"}')
        with pytest.raises(WebSocketDisconnect) as info:
            ws.receive_text()
        assert (info.value.code, info.value.reason) == (1011, "internal error")


def test_a_long_prompt_frame_is_decoded_and_served(monkeypatch: pytest.MonkeyPatch) -> None:
    content = "word " * 100_000  # 500 KB: decoded on a worker thread
    with session_client(monkeypatch) as (client, pipeline), open_session(client) as ws:
        frames = Frames(ws)
        frames.next()
        frames.send(type="chat", id="long", body={"messages": [{"role": "user", "content": content}]})
        assert frames.until("long", "chat.done")[-1]["status"] == "completed"
        assert pipeline.started[-1][1]["messages"][0]["content"] == content
