"""/v1/session in process: the upgrade checks and the frame-level errors and close codes, on the app
that ``tokenwire launch render`` (render + derender frames, no engine) builds with an API key, an
Origin allowlist and a small frame limit (tests/support/cli_app.py), through Starlette's TestClient.

What needs uvicorn's socket stays in the process ring: permessage-deflate
(tests/e2e/test_ws_frames.py) and the frame limit uvicorn enforces before a message is read
(tests/e2e/test_limits.py)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest
from starlette.testclient import TestClient, WebSocketDenialResponse

from tests.conftest import asset_path
from tests.support.cli_app import cli_client
from tests.support.session_frames import SessionFrames, connect, open_session
from tests.support.ws_fuzz import auth_subprotocol

KEY = "e2e key/+="  # not a valid subprotocol token as is: the browser form base64url-encodes it
MAX_FRAME = 64 * 1024
HEADERS = {"Authorization": f"Bearer {KEY}"}


@pytest.fixture(scope="module")
def client() -> Iterator[TestClient]:
    args = ["launch", "render", str(asset_path("tiny-qwen3")), "--allowed-origin", "https://app.example",
            "--ws-max-frame-bytes", str(MAX_FRAME), "--state-secret", "e2e-secret-0123456789-abcdefghijklmnopqrstuvwxyz"]
    with cli_client(args, {"TOKENWIRE_API_KEY": KEY}) as c:
        yield c


def refused_status(client: TestClient, **kwargs: Any) -> int:
    with pytest.raises(WebSocketDenialResponse) as info, connect(client, **kwargs):
        pass
    return info.value.status_code


def test_a_missing_key_is_refused_with_401_and_a_wrong_one_with_403_before_accepting(client: TestClient) -> None:
    assert refused_status(client) == 401
    assert refused_status(client, headers={"Authorization": "Bearer nope"}) == 403
    assert refused_status(client, subprotocols=["tokenwire.v1", auth_subprotocol("nope")]) == 403


def test_the_key_works_in_the_header_and_in_the_browser_subprotocol_form(client: TestClient) -> None:
    with open_session(client, headers=HEADERS) as session:
        assert session.subprotocol == "tokenwire.v1"
    with open_session(client, subprotocols=["tokenwire.v1", auth_subprotocol(KEY)],
                      headers={"Origin": "https://app.example"}) as session:
        assert session.subprotocol == "tokenwire.v1"
        assert session.created["frames"] == ["session.update", "render", "derender", "cancel", "ping"]


def test_a_disallowed_origin_is_refused_with_403(client: TestClient) -> None:
    assert refused_status(client, headers={**HEADERS, "Origin": "https://evil.example"}) == 403


def test_an_unsupported_protocol_version_is_refused_with_400(client: TestClient) -> None:
    assert refused_status(client, headers=HEADERS, subprotocols=["tokenwire.v7"]) == 400


@pytest.mark.parametrize(("message", "code"), [
    ("{not json", 1007), ("[1, 2]", 1002), ('{"id": "no type"}', 1002), (b"\x01\x02", 1003),
    ("x" * (MAX_FRAME + 1), 1009),
])
def test_envelope_violations_close_with_their_code(client: TestClient, message: str | bytes, code: int) -> None:
    with open_session(client, headers=HEADERS) as session:
        session.send(type="ping", event_id="before")
        assert session.next()["type"] == "pong"
        if isinstance(message, bytes):
            session.ws.send_bytes(message)
        else:
            session.ws.send_text(message)
        assert session.closed_with()[0] == code


def chat_request() -> dict[str, Any]:
    return {"model": "tiny-qwen3", "messages": [{"role": "user", "content": "Say hello"}]}


def derender(session: SessionFrames, rid: str, prompt: list[int], ids: list[int], state: str | None) -> dict[str, Any]:
    session.send(type="derender", id=rid, kind="chat", body={
        "generate_chunk": {"request_id": "generate-tokens-x", "choices": [{"index": 0, "token_ids": ids}]},
        "stream_state": state, "prompt_token_ids": prompt, "chat_request": chat_request()})
    (frame,) = session.until(rid, "derender.delta")
    return frame


def test_frame_errors_are_error_frames_and_the_session_keeps_serving(client: TestClient,
                                                                     tokenizer: Callable[[str], Any]) -> None:
    tok = tokenizer("qwen3")
    ids = tok.encode("Hello there, how are you today?", add_special_tokens=False)
    with open_session(client, headers=HEADERS) as session:
        session.send(type="conversation.item.create", event_id="future", id="x")
        error = session.next()
        assert (error["type"], error["event_id"], error["id"], error["error"]["code"]) == \
            ("error", "future", "x", "unknown_type")
        session.send(type="chat", id="c", body={})
        error = session.next()
        assert (error["id"], error["error"]["code"]) == ("c", "not_enabled")
        session.send(type="render", id="r", kind="chat")
        error = session.next()
        assert (error["error"]["code"], error["error"]["param"]) == ("invalid_frame", "body")

        session.send(type="render", id="r", kind="chat", body=chat_request())
        (rendered,) = session.until("r", "render.done")
        prompt = rendered["result"]["token_ids"]

        first = derender(session, "d1", prompt, ids[:3], None)
        s1 = first["result"]["stream_state"]
        second = derender(session, "d2", prompt, ids[3:5], s1)
        s2 = second["result"]["stream_state"]
        bad = derender(session, "d3", prompt, ids[5:7], "tw1.00000000.e30." + "A" * 43)
        assert (bad["type"], bad["error"]["code"]) == ("error", "bad_state")
        assert bad["error"]["reason"] in ("unknown_key", "bad_signature")
        replayed = derender(session, "d4", prompt, ids[3:5], s1)
        assert (replayed["error"]["code"], replayed["error"]["reason"]) == ("bad_state", "replayed")
        third = derender(session, "d5", prompt, ids[5:], s2)
        reordered = derender(session, "d6", prompt, ids[3:5], s1)
        assert (reordered["error"]["code"], reordered["error"]["reason"]) == ("bad_state", "reordered")
        again = derender(session, "d7", prompt, ids[5:], s2)
        assert again["error"]["reason"] == "replayed"
        text = "".join(f["result"]["chunk"]["choices"][0]["delta"].get("content") or ""
                       for f in (first, second, third))
        assert text == tok.decode(ids)
        session.send(type="ping", event_id="alive")
        assert session.next()["event_id"] == "alive"


def test_derender_frames_give_what_the_http_endpoint_gives(client: TestClient,
                                                            tokenizer: Callable[[str], Any]) -> None:
    tok = tokenizer("qwen3")
    ids = tok.encode(" streaming derender", add_special_tokens=False)
    body = {"generate_chunk": {"request_id": "generate-tokens-x", "choices": [{"index": 0, "token_ids": ids}]},
            "stream_state": None, "prompt_token_ids": [1, 2, 3], "chat_request": chat_request()}
    http = client.post("/v1/chat/completions/derender", json={**body, "stream": True}, headers=HEADERS).json()
    with open_session(client, headers=HEADERS) as session:
        session.send(type="derender", id="d", kind="chat", body=body)
        (frame,) = session.until("d", "derender.delta")
    ws = frame["result"]
    for result in (http, ws):
        result["chunk"].pop("id"), result["chunk"].pop("created"), result.pop("stream_state")
    assert ws == http
