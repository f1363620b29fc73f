"""The HTTP derender routes (``"stream": true``) and the WebSocket ``derender`` frames make one and
the same call, ``DerenderService.step``, on the body as sent, and answer alike (issue 21 item 14)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest
from starlette.testclient import TestClient

from server.app import create_app
from server.context import ServerContext
from server.gating import decide
from server.settings import Mode, Settings
from session.derender import DerenderService

SECRET = b"one-step-secret-0123456789-abcdefghijklmnopqrstuvwxyz"
WEATHER = {"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}}
REQUESTS = {"chat": {"messages": [{"role": "user", "content": "Weather in Paris?"}], "tools": [WEATHER]},
            "completion": {"prompt": "The weather", "stop": ["!"]}}
PATHS = {"chat": "/v1/chat/completions/derender", "completion": "/v1/completions/derender"}
OUTPUT = ('<think>\nThe user wants 天气.\n</think>\n\nSure.<tool_call>\n'
          '{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>')


@pytest.fixture
def steps(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The kinds ``DerenderService.step`` is called with, in order (the real step runs)."""
    seen: list[str] = []
    real = DerenderService.step

    def spy(self: DerenderService, kind: str, body: Any, *, now: int) -> dict[str, Any]:
        seen.append(kind)
        return real(self, kind, body, now=now)

    monkeypatch.setattr(DerenderService, "step", spy)
    return seen


@pytest.fixture
def client(asset: Callable[[str], Path], tokenizer: Callable[[str], Any], steps: list[str]) -> Iterator[TestClient]:
    settings = Settings(mode=Mode.RENDER, model_dir=asset("qwen3"), served_model_name="tiny-model", environ={},
                        state_secret=SECRET, tool_call_parser="hermes", reasoning_parser="qwen3",
                        enable_auto_tool_choice=True)
    ctx = ServerContext(settings=settings, gating=decide(Mode.RENDER, {}), tokenizer=tokenizer("qwen3"),
                        max_model_len=4096)
    with TestClient(create_app(ctx)) as c:
        yield c


def _without_created(answer: dict[str, Any]) -> dict[str, Any]:
    # ``created`` is the clock at a stream's first step: the two transports may start in two seconds
    return {**answer, "chunk": {k: v for k, v in answer["chunk"].items() if k != "created"}}


@pytest.mark.parametrize("kind", ["chat", "completion"])
def test_http_and_websocket_steps_are_one_call_with_one_answer(client: TestClient, steps: list[str],
                                                                tokenizer: Callable[[str], Any], kind: str) -> None:
    tok = tokenizer("qwen3")
    ids = tok._tokenizer.encode(OUTPUT, add_special_tokens=False).ids
    prompt = tok._tokenizer.encode("<|im_start|>assistant\n", add_special_tokens=False).ids
    pieces = [(ids[k:k + 4], None) for k in range(0, len(ids), 4)] + [([tok.eos_token_id], "stop")]
    http_state = ws_state = None
    answers = 0
    with client.websocket_connect("/v1/session", subprotocols=["tokenwire.v1"]) as ws:
        assert orjson.loads(ws.receive_text())["type"] == "session.created"
        for n, (piece, finish) in enumerate(pieces):
            body = {"prompt_token_ids": prompt, f"{kind}_request": REQUESTS[kind],
                    "generate_chunk": {"request_id": f"{kind}-one-step",
                                       "choices": [{"index": 0, "token_ids": piece, "finish_reason": finish}]}}
            r = client.post(PATHS[kind], json={**body, "stream": True, "stream_state": http_state})
            assert r.status_code == 200, r.text
            by_http = r.json()
            ws.send_text(orjson.dumps({"type": "derender", "id": f"d{n}", "kind": kind,
                                       "body": {**body, "stream_state": ws_state}}).decode())
            frame = orjson.loads(ws.receive_text())
            assert frame["type"] == "derender.delta", frame
            by_ws = frame["result"]
            assert _without_created(by_ws) == _without_created(by_http)
            http_state, ws_state = by_http["stream_state"], by_ws["stream_state"]
            answers += 1
            if by_http["chunk"]["choices"][0]["finish_reason"]:
                break
    assert answers >= 2
    assert steps == [kind] * (2 * answers)  # each answer: one step over HTTP, one over the WebSocket
