"""WebSocket frame fuzzing against a real server (``serve tiny-qwen3 --enable-scale-out``: every frame
type enabled).

Hypothesis draws sessions' worth of messages (``tests/support/ws_strategies.py``): frames with wrong
types, missing and extra fields, huge numbers, deep nesting, lone surrogates, unknown types, valid
frames in illegal orders (duplicate ids, cancels of idle ids, stale derender states), and
sometimes a violation at the end (binary, invalid UTF-8, random bytes, non-JSON, non-objects).
Each session must keep the protocol (``tests/support/ws_fuzz.py``: seq, error frames without
internals, the promised close code, a probe answered after non-fatal errors), while a bystander
session on the same server keeps answering, and at the end the server is alive, has no sequence
left in the engine, and logged no traceback.

Bounded for CI by ``TOKENWIRE_WS_FUZZ_EXAMPLES`` (default 40); ``python -m bench.fuzz ws`` runs the long form.
"""

from __future__ import annotations

import itertools
import os
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from websockets.sync.client import ClientConnection

from tests.support.server_proc import ServerProcess
from tests.support.ws_fuzz import exercise, open_session, ping
from tests.support.ws_strategies import Message, deep_frame, frame_message, sequences

pytestmark = pytest.mark.slow

EXAMPLES = int(os.environ.get("TOKENWIRE_WS_FUZZ_EXAMPLES", "40"))
SERVER_ARGS = ["--enable-scale-out", "--dtype", "float32", "--max-model-len", "256", "--state-secret", "fuzz-secret-0123456789-abcdefghijklmnopqrstuvwxyz",
               "--ws-max-frame-bytes", str(1024 * 1024)]


@pytest.fixture(scope="module")
def server(asset: Callable[[str], Path]) -> Iterator[ServerProcess]:
    with ServerProcess(["serve", str(asset("tiny-qwen3")), *SERVER_ARGS], startup_timeout=180) as srv:
        yield srv


@pytest.fixture(scope="module")
def bystander(server: ServerProcess) -> Iterator[ClientConnection]:
    ws = open_session(server.ws_url)
    yield ws
    ws.close()


def assert_server_clean(server: ServerProcess) -> None:
    assert server.proc is not None and server.proc.poll() is None, server.output()[-3000:]
    deadline = time.monotonic() + 30
    while True:
        health = httpx.get(server.url + "/health", timeout=10).json()
        if health["live_sequences"] == 0 or time.monotonic() > deadline:
            break
        time.sleep(0.1)
    assert health["status"] == "ok" and health["live_sequences"] == 0, health
    assert "Traceback" not in server.output(), server.output()[-6000:]


_round = itertools.count()


@given(messages=sequences)
@settings(max_examples=EXAMPLES, deadline=None, database=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.function_scoped_fixture])
def test_any_messages_keep_the_protocol_and_the_server(server: ServerProcess, bystander: ClientConnection,
                                                       messages: list[Message]) -> None:
    exercise(server.ws_url, messages)
    ping(bystander, f"bystander-{next(_round)}")


def test_after_the_fuzzing_the_server_is_clean_and_still_serves_chats(server: ServerProcess,
                                                                      bystander: ClientConnection) -> None:
    chat = {"type": "chat", "id": "after", "body": {"messages": [{"role": "user", "content": "Hi"}],
                                                     "max_tokens": 5, "temperature": 0}}
    bystander.send(orjson.dumps(chat).decode())
    while True:
        frame = orjson.loads(bystander.recv(timeout=60))
        if frame.get("id") == "after" and frame["type"] in ("chat.done", "error"):
            break
    assert frame == {**frame, "type": "chat.done", "status": "completed"}
    assert_server_clean(server)


# -- regressions the fuzzing found (docs/reliability.md) ------------------------------------------------
def test_lone_surrogates_in_echoed_fields_do_not_break_the_session(server: ServerProcess) -> None:
    messages = [frame_message({"type": "ping", "event_id": "\ud800"}),
                frame_message({"type": "cancel", "id": "\udfff", "event_id": "x\ud83d"}),
                frame_message({"type": "bogus\ud800", "id": "\ud800"})]
    outcome = exercise(server.ws_url, messages)  # fixed: these closed the session with 1007
    errors, probe = outcome.frames[:3], outcome.frames[3]
    assert [(f["type"], f["error"]["code"], f["event_id"], f["id"]) for f in errors] == [
        ("error", "invalid_frame", None, None)] * 3
    assert probe["type"] == "pong"


def test_json_nested_past_the_parser_limit_closes_with_1007(server: ServerProcess) -> None:
    outcome = exercise(server.ws_url, [deep_frame(1000), deep_frame(5000)])
    assert outcome.close_code == 1007


def test_invalid_utf8_closes_1007_without_a_traceback_in_the_server_log(server: ServerProcess) -> None:
    before = server.output().count("Traceback")
    for _ in range(3):
        outcome = exercise(server.ws_url, [Message(b'{"type": "ping", "event_id": "\xff\xfe"}', True, 1007)])
        assert outcome.close_code == 1007
    time.sleep(0.5)
    assert server.output().count("Traceback") == before  # was: one logged traceback per such message
    assert "Invalid UTF-8 sequence received from client." in server.output()


def test_integers_past_64_bits_do_not_break_the_session(server: ServerProcess) -> None:
    # Found by the long form: pydantic read {"x": -2**63 - 1} as a Python int, the session.updated
    # echo could not be encoded, and the session died without a close frame (1006). Frames are now
    # read by the HTTP bodies' JSON reader (orjson: such a number is read as a float).
    ws = open_session(server.ws_url)
    try:
        ws.send(b'{"type": "session.update", "event_id": "u", "session": {"chat_template_kwargs": '
                b'{"x": -9223372036854775809}}}', text=True)
        updated = orjson.loads(ws.recv(timeout=30))
        assert updated["type"] == "session.updated" and updated["session"]["chat_template_kwargs"]["x"] <= -2**63
        ws.send(b'{"type": "render", "id": "r", "kind": "chat", "body": {"messages": [{"role": "user", '
                b'"content": "hi"}], "seed": 18446744073709551616}}', text=True)
        final = orjson.loads(ws.recv(timeout=30))
        assert final["id"] == "r" and final["type"] in ("render.done", "error"), final
        ping(ws, "alive")
    finally:
        ws.close()
