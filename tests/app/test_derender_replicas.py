"""Client-carried derender state across replicas: the apps of ``tokenwire launch render`` command
lines, each built in process (tests/support/cli_app.py) with its own services and state codec, as
each process builds its own, with ``torch`` unimportable while they run.

Two ``tokenwire launch render`` apps share ``--state-secret``; a third has its own (random)
secret. A streaming derender started on one continues on the other, switching in the middle of a
tool call, and the result equals a stream on one process and the one-shot derender. The third
process refuses the state, and says it was signed with another key. A fourth is the first two
restarted for a secret rotation (``--state-secret NEW --state-secret OLD``): a stream in flight
alternates between it and a replica still on the old secret alone.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import ExitStack
from typing import Any

import httpx
import pytest

from tests.conftest import asset_path
from tests.support.cli_app import cli_client, logged_lines, torch_unimportable

CHAT = "/v1/chat/completions/derender"
WEATHER = {"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}}
CHAT_REQUEST = {"model": "qwen3", "messages": [{"role": "user", "content": "Weather in Paris and Tōkyō?"}],
                "tools": [WEATHER], "stream": True, "stop": ["<|fin|>"]}
OUTPUT = ('<think>\nTwo cities: Paris 🇫🇷 and 東京. I will call the tool twice.\n</think>\n\n'
          'Checking both.<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris", "unit": "°C"}}\n'
          '</tool_call>\n<tool_call>\n{"name": "get_weather", "arguments": {"city": "東京", "note": "🌸"}}\n</tool_call>')


def _args(secret: str | None) -> list[str]:
    return ["--tool-call-parser", "hermes", "--reasoning-parser", "qwen3", "--enable-auto-tool-choice",
            *(["--state-secret", secret] if secret else [])]


OLD = "replica-secret-0123456789-abcdefghijklmnopqrstuvwxyz"
NEW = "rotated-secret-9876543210-zyxwvutsrqponmlkjihgfedcba"


@pytest.fixture(scope="module")
def no_torch() -> Iterator[None]:
    with torch_unimportable():
        yield


@pytest.fixture(scope="module")
def servers(no_torch: None) -> Iterator[tuple[httpx.Client, httpx.Client, httpx.Client, list[str]]]:
    """Replicas a and b (the same secret), c (none: a random one) and what c logged as it started."""
    model = str(asset_path("qwen3"))
    with ExitStack() as apps:
        ca = apps.enter_context(cli_client(["launch", "render", model, *_args(OLD)]))
        cb = apps.enter_context(cli_client(["launch", "render", model, *_args(OLD)]))
        with logged_lines() as c_output:  # what c logs as it starts, and only that
            cc = apps.enter_context(cli_client(["launch", "render", model, *_args(None)]))
        yield ca, cb, cc, list(c_output)


@pytest.fixture(scope="module")
def ids(tokenizer: Callable[[str], Any]) -> dict[str, list[int]]:
    tok = tokenizer("qwen3")
    enc = tok._tokenizer.encode
    return {"output": [*enc(OUTPUT, add_special_tokens=False).ids, tok.eos_token_id],
            "prompt": enc("<|im_start|>user\nWeather?<|im_end|>\n<|im_start|>assistant\n",
                          add_special_tokens=False).ids}


def _step(client: httpx.Client, ids: dict[str, list[int]], state: str | None, piece: list[int],
          finish: str | None) -> httpx.Response:
    return client.post(CHAT, json={
        "stream": True, "model": "qwen3", "stream_state": state, "prompt_tokens": 20, "prompt_token_ids": ids["prompt"],
        "chat_request": CHAT_REQUEST,
        "generate_chunk": {"request_id": "chatcmpl-replicas", "output_mode": "tokens",
                           "choices": [{"index": 0, "token_ids": piece, "finish_reason": finish}]}})


def _stream(pick: Callable[[int, str], httpx.Client], ids: dict[str, list[int]], size: int = 3) -> list[dict[str, Any]]:
    tokens, state, chunks = ids["output"], None, []
    streamed = ""
    for k in range(0, len(tokens), size):
        client = pick(k, streamed)
        r = _step(client, ids, state, tokens[k:k + size], "stop" if k + size >= len(tokens) else None)
        assert r.status_code == 200, r.text
        chunks.append(r.json()["chunk"])
        state = r.json()["stream_state"]
        streamed += "".join(tc["function"]["arguments"] for tc in chunks[-1]["choices"][0]["delta"].get("tool_calls", []))
    return chunks


def _deltas(chunks: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [c["choices"][0] | {"delta": c["choices"][0]["delta"]} for c in chunks]


def test_a_stream_continues_on_another_replica_mid_tool_call_with_identical_output(
        servers: tuple[httpx.Client, httpx.Client, httpx.Client, list[str]], ids: dict[str, list[int]]) -> None:
    a, b, _, _ = servers
    alone = _stream(lambda k, args: a, ids)
    # switch replica inside the first tool call's arguments, then on every call
    switched = _stream(lambda k, args: b if '"Par' in args or k % 2 else a, ids)
    assert any('"Par' in "".join(tc["function"]["arguments"] for c in switched[: i + 1]
                                  for tc in c["choices"][0]["delta"].get("tool_calls", []))
               for i in range(len(switched) - 1))
    assert _deltas(switched) == _deltas(alone)
    one_shot = a.post(CHAT, json={"model": "qwen3", "prompt_tokens": 20, "prompt_token_ids": ids["prompt"],
                                  "chat_request": {**CHAT_REQUEST, "stream": False},
                                  "generate_response": {"request_id": "chatcmpl-replicas", "choices": [
                                      {"index": 0, "finish_reason": "stop", "token_ids": ids["output"]}]}}).json()
    message = one_shot["choices"][0]["message"]
    deltas = [c["choices"][0]["delta"] for c in switched]
    assert "".join(d["content"] or "" for d in deltas) == message["content"]
    assert "".join(d["reasoning"] or "" for d in deltas) == message["reasoning"]
    calls: dict[int, str] = {}
    for d in deltas:
        for tc in d.get("tool_calls", []):
            calls[tc["index"]] = calls.get(tc["index"], "") + tc["function"]["arguments"]
    assert [calls[i] for i in sorted(calls)] == [c["function"]["arguments"] for c in message["tool_calls"]]
    assert switched[-1]["choices"][0]["finish_reason"] == one_shot["choices"][0]["finish_reason"] == "tool_calls"


def test_a_replica_with_another_secret_refuses_the_state_and_warned_at_startup(
        servers: tuple[httpx.Client, httpx.Client, httpx.Client, list[str]], ids: dict[str, list[int]]) -> None:
    a, _, c, c_output = servers
    state = _step(a, ids, None, ids["output"][:4], None).json()["stream_state"]
    r = _step(c, ids, state, ids["output"][4:8], None)
    assert r.status_code == 400
    err = r.json()["error"]
    assert err["param"] == "stream_state"
    assert "--state-secret" in err["message"]
    assert "random per-process secret" in "\n".join(c_output)


@pytest.fixture(scope="module")
def rotated(no_torch: None) -> Iterator[httpx.Client]:
    """A replica restarted with the new secret first and the old one second (issue 23 item 3)."""
    args = ["launch", "render", str(asset_path("qwen3")), *_args(NEW), "--state-secret", OLD]
    with cli_client(args) as cd:
        yield cd


def _key_id(state: str) -> str:
    return state.split(".")[1]


def test_a_rolling_secret_rotation_keeps_streams_going_across_old_and_rotated_replicas(
        servers: tuple[httpx.Client, httpx.Client, httpx.Client, list[str]], rotated: httpx.Client,
        ids: dict[str, list[int]]) -> None:
    old, _, _, _ = servers  # a replica not restarted yet: OLD alone
    alone = _stream(lambda k, args: old, ids)
    # a stream in flight (begun on an old replica) alternates between the rotated one and an old one
    # at every call, through the tool call, and ends exactly as on one replica
    assert _deltas(_stream(lambda k, args: rotated if (k // 3) % 2 else old, ids)) == _deltas(alone)
    old_kid = _key_id(_step(old, ids, None, ids["output"][:3], None).json()["stream_state"])
    # the rotated replica signs a new stream with the new secret, and verifies it
    first = _step(rotated, ids, None, ids["output"][:3], None).json()["stream_state"]
    assert _key_id(first) != old_kid
    assert _step(rotated, ids, first, ids["output"][3:6], None).status_code == 200
    # an old replica does not have the new key yet: unknown_key, which the client retries elsewhere
    r = _step(old, ids, first, ids["output"][3:6], None)
    assert r.status_code == 400 and "signed with a key this server does not have" in r.json()["error"]["message"]
    # a stream begun on the old replica goes on with the old key on the rotated one
    state = _step(old, ids, None, ids["output"][:3], None).json()["stream_state"]
    on_rotated = _step(rotated, ids, state, ids["output"][3:6], None).json()["stream_state"]
    assert _key_id(on_rotated) == old_kid
