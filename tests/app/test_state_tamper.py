"""Derender-state tampering, the same table over both transports: ``POST /v1/chat/completions/derender``
(``stream: true``) and the WebSocket ``derender`` frame, in process on the apps the ``launch render``
and ``serve`` command lines build (tests/support/cli_app.py); and resume checkpoints of WebSocket
pipeline streams.

Every tampered state is refused before any of it is used, with the same message over HTTP (400,
``param: stream_state``) and WebSocket (``error`` ``bad_state`` with its ``reason``), and a refused
step does not use up the real state: the stream continues with it. Replayed and reordered states
are refused by a WebSocket session (it remembers the streams it served); over HTTP, which keeps no
memory, they are accepted and give the same continuation again (docs/derender.md), never another
request's. The codec's own unit tests (``tests/session/test_state_codec.py``) cover the same cases
without a server.
"""

from __future__ import annotations

import base64
from collections.abc import Callable, Iterator
from typing import Any

import orjson
import pytest
from starlette.testclient import TestClient

from tests.conftest import asset_path
from tests.support.cli_app import cli_client
from tests.support.session_frames import SessionFrames, open_session

DERENDER = "/v1/chat/completions/derender"
CHAT_REQUEST = {"messages": [{"role": "user", "content": "Weather in Paris?"}], "stream": True}
OUTPUT = "Sure, let me check the weather in Paris for you. It is sunny and warm today."


@pytest.fixture(scope="module")
def replica_a() -> Iterator[TestClient]:
    with cli_client(["launch", "render", str(asset_path("qwen3")), "--state-secret", "secret-a-0123456789-abcdefghijklmnopqrstuvwxyz"]) as srv:
        yield srv


@pytest.fixture(scope="module")
def replica_b() -> Iterator[TestClient]:
    with cli_client(["launch", "render", str(asset_path("qwen3")), "--state-secret", "secret-b-0123456789-abcdefghijklmnopqrstuvwxyz"]) as srv:
        yield srv


@pytest.fixture(scope="module")
def token_ids(tokenizer: Callable[[str], Any]) -> list[int]:
    return tokenizer("qwen3").encode(OUTPUT, add_special_tokens=False)  # type: ignore[no-any-return]


def body(ids: list[int], state: Any, *, request_id: str = "chatcmpl-x", index: int = 0) -> dict[str, Any]:
    return {"generate_chunk": {"request_id": request_id, "choices": [{"index": index, "token_ids": ids}]},
            "stream_state": state, "prompt_token_ids": [1, 2, 3], "chat_request": CHAT_REQUEST}


def http_step(srv: TestClient, step_body: dict[str, Any]) -> Any:
    return srv.post(DERENDER, json={**step_body, "stream": True})


def ws_step(ws: SessionFrames, rid: str, step_body: dict[str, Any]) -> dict[str, Any]:
    ws.send(type="derender", id=rid, kind="chat", body=step_body)
    while True:
        frame = ws.next()
        if frame.get("id") == rid:
            return frame


def _flip(text: str, at: int) -> str:
    return text[:at] + ("B" if text[at] == "A" else "A") + text[at + 1:]


def _swap_payload(state: str, other: str) -> str:
    head, key, _, mac = state.split(".")
    return ".".join([head, key, other.split(".")[2], mac])


def _forge_seq(state: str, seq: int) -> str:
    head, key, payload, mac = state.split(".")
    data = orjson.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
    data["s"] = seq
    forged = base64.urlsafe_b64encode(orjson.dumps(data)).rstrip(b"=").decode()
    return ".".join([head, key, forged, mac])


# (name, how to tamper (s1, s1 of another request, a state of replica B) → token, chunk overrides, reason)
TAMPERS: list[tuple[str, Callable[[str, str, str], Any], dict[str, Any], str]] = [
    ("bit flip in the payload", lambda s, o, b: _flip(s, 20), {}, "bad_signature"),
    ("bit flip in the mac", lambda s, o, b: _flip(s, len(s) - 3), {}, "bad_signature"),
    ("payload of another state, own mac", lambda s, o, b: _swap_payload(s, o), {}, "bad_signature"),
    ("sequence number forged", lambda s, o, b: _forge_seq(s, 9), {}, "bad_signature"),
    ("truncated mac", lambda s, o, b: s[:-5], {}, "malformed"),
    ("truncated to the header", lambda s, o, b: s[:12], {}, "malformed"),
    ("another request's state", lambda s, o, b: o, {}, "wrong_request"),
    ("another choice's state", lambda s, o, b: s, {"index": 1}, "wrong_choice"),
    ("oversized", lambda s, o, b: "tw1." + "A" * 70_000, {}, "too_large"),
    ("unknown version", lambda s, o, b: "tw7" + s[3:], {}, "unknown_version"),
    ("signed with another secret", lambda s, o, b: b, {}, "unknown_key"),
]


@pytest.fixture(scope="module")
def states(replica_a: TestClient, replica_b: TestClient, token_ids: list[int]) -> dict[str, str]:
    s1 = http_step(replica_a, body(token_ids[:3], None)).json()["stream_state"]
    other = http_step(replica_a, body(token_ids[:3], None, request_id="chatcmpl-other")).json()["stream_state"]
    b1 = http_step(replica_b, body(token_ids[:3], None)).json()["stream_state"]
    return {"s1": s1, "other": other, "b1": b1}


@pytest.mark.parametrize(("name", "tamper", "overrides", "reason"), TAMPERS, ids=[t[0] for t in TAMPERS])
def test_a_tampered_state_is_refused_alike_over_http_and_websocket_and_the_stream_continues(
        replica_a: TestClient, states: dict[str, str], token_ids: list[int], name: str,
        tamper: Callable[[str, str, str], Any], overrides: dict[str, Any], reason: str) -> None:
    bad = tamper(states["s1"], states["other"], states["b1"])
    step = body(token_ids[3:6], bad, **overrides)
    r = http_step(replica_a, step)
    assert r.status_code == 400, r.text
    http_error = r.json()["error"]
    assert http_error["param"] == "stream_state"

    with open_session(replica_a) as ws:
        frame = ws_step(ws, "bad", step)
        assert (frame["type"], frame["error"]["code"], frame["error"]["reason"]) == ("error", "bad_state", reason)
        assert frame["error"]["message"] == http_error["message"]
        assert frame["error"]["status"] == 400
        good = ws_step(ws, "good", body(token_ids[3:6], states["s1"]))  # the real state still works
        assert good["type"] == "derender.delta"
    assert http_step(replica_a, body(token_ids[3:6], states["s1"])).status_code == 200


def test_replayed_and_reordered_states_are_refused_by_a_session_and_repeat_over_http(
        replica_a: TestClient, token_ids: list[int]) -> None:
    with open_session(replica_a) as ws:
        first = ws_step(ws, "1", body(token_ids[:3], None))["result"]
        second = ws_step(ws, "2", body(token_ids[3:6], first["stream_state"]))["result"]
        replayed = ws_step(ws, "3", body(token_ids[3:6], first["stream_state"]))
        assert (replayed["error"]["code"], replayed["error"]["reason"]) == ("bad_state", "replayed")
        third = ws_step(ws, "4", body(token_ids[6:9], second["stream_state"]))
        assert third["type"] == "derender.delta"
        reordered = ws_step(ws, "5", body(token_ids[6:9], first["stream_state"]))
        assert (reordered["error"]["code"], reordered["error"]["reason"]) == ("bad_state", "reordered")
    # HTTP keeps no memory: the same state twice gives the same continuation, byte for byte
    again = [http_step(replica_a, body(token_ids[3:6], first["stream_state"])).json() for _ in range(2)]
    assert again[0]["chunk"]["choices"] == again[1]["chunk"]["choices"] == second["chunk"]["choices"]


def test_a_restarted_stream_is_accepted_at_every_step_over_websocket(
        replica_a: TestClient, token_ids: list[int]) -> None:
    # Restarting under the same request id used to be accepted at step 1 (stream_state null) and
    # refused at step 2 as reordered: the session still remembered the earlier stream.
    pieces = [token_ids[:3], token_ids[3:6], token_ids[6:9]]
    with open_session(replica_a) as ws:
        for run in ("first", "restarted"):
            state, used, text = None, None, ""
            for k, piece in enumerate(pieces):
                frame = ws_step(ws, f"{run}{k}", body(piece, state))
                assert frame["type"] == "derender.delta", frame
                used, state = state, frame["result"]["stream_state"]
                text += frame["result"]["chunk"]["choices"][0]["delta"].get("content") or ""
            assert text == OUTPUT[:len(text)] and text
        # within the restarted stream, the usual rule: a state it used already is a replay
        again = ws_step(ws, "again", body(pieces[2], used))
        assert (again["error"]["code"], again["error"]["reason"]) == ("bad_state", "replayed")


# -- resume checkpoints of pipeline streams (WebSocket) ----------------------------------------------------
@pytest.fixture(scope="module")
def engine_server() -> Iterator[TestClient]:
    args = ["serve", str(asset_path("tiny-qwen3")), "--dtype", "float32", "--max-model-len", "256",
            "--state-secret", "secret-a-0123456789-abcdefghijklmnopqrstuvwxyz"]
    with cli_client(args) as srv:
        yield srv


CHAT = {"messages": [{"role": "user", "content": "Count to ten."}], "max_tokens": 12, "temperature": 0,
        "ignore_eos": True}


def run_chat(ws: SessionFrames, rid: str, chat: dict[str, Any], **extra: Any) -> list[dict[str, Any]]:
    ws.send(type="chat", id=rid, body=chat, **extra)
    frames = []
    while True:
        frame = ws.next()
        if frame.get("id") == rid:
            frames.append(frame)
            if frame["type"] in ("chat.done", "error"):
                return frames


@pytest.mark.slow  # the local engine on tiny-qwen3 (model loading): not the fast loop
def test_a_tampered_resume_checkpoint_is_refused_and_the_real_one_resumes(
        engine_server: TestClient, tokenizer: Callable[[str], Any]) -> None:
    tok = tokenizer("qwen3")
    im_end, im_start = tok.convert_tokens_to_ids("<|im_end|>"), tok.convert_tokens_to_ids("<|im_start|>")
    with open_session(engine_server) as ws:
        frames = run_chat(ws, "c", CHAT, resumable=True)
        deltas = [f for f in frames if f["type"] == "chat.delta"]
        cut = next(i for i, f in enumerate(deltas) if f["checkpoint"] and i >= 2)
        ids = [t for f in deltas[:cut + 1] for t in f["output_token_ids"]]
        resume = {"request_id": deltas[0]["stream_id"], "checkpoint": deltas[cut]["checkpoint"], "output_token_ids": ids}
        other = run_chat(ws, "o", {**CHAT, "max_tokens": 4}, resumable=True)
        other_checkpoint = next(f["checkpoint"] for f in other if f.get("checkpoint"))
        cases = [
            ({**resume, "checkpoint": _flip(resume["checkpoint"], 25)}, CHAT, "bad_signature"),
            ({**resume, "output_token_ids": ids[:-1]}, CHAT, "wrong_request"),
            # as many ids as the checkpoint covers, but not the ones the stream produced: one id
            # changed, and special tokens put into the model's context (the checkpoint used to
            # check only how many ids were sent)
            ({**resume, "output_token_ids": [*ids[:-1], ids[-1] + 1]}, CHAT, "wrong_request"),
            ({**resume, "output_token_ids": [*ids[:-2], im_end, im_start]}, CHAT, "wrong_request"),
            ({**resume, "checkpoint": other_checkpoint}, CHAT, "wrong_request"),
            (resume, {**CHAT, "messages": [{"role": "user", "content": "Something else."}]}, "wrong_request"),
        ]
        for k, (bad, chat, reason) in enumerate(cases):
            (error,) = run_chat(ws, f"bad{k}", chat, resume=bad)
            assert (error["type"], error["error"]["code"], error["error"].get("reason")) == (
                "error", "bad_state", reason), error
        resumed = run_chat(ws, "r", CHAT, resume=resume)
        assert resumed[-1] == {**resumed[-1], "type": "chat.done", "status": "completed"}
        full = "".join(ch["choices"][0]["delta"].get("content") or "" for f in deltas for ch in f["chunks"]
                       if ch.get("choices"))
        head = "".join(ch["choices"][0]["delta"].get("content") or "" for f in deltas[:cut + 1]
                       for ch in f["chunks"] if ch.get("choices"))
        tail = "".join(ch["choices"][0]["delta"].get("content") or "" for f in resumed if f["type"] == "chat.delta"
                       for ch in f["chunks"] if ch.get("choices"))
        assert head + tail == full
