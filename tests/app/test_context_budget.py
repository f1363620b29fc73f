"""``max_tokens`` past the room the prompt leaves, on every path of the in-process app (issue 20
item 3), with the real LocalEngine on tiny-qwen3 and a 48-token context: vLLM 0.32 clamps the
output budget to what is left (and the output ends with "length" at the context length), refuses a
``max_tokens`` larger than the whole context, and errors of an Anthropic request name its fields."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest
from starlette.testclient import TestClient

from engine.local import LocalEngine
from server.app import create_app
from server.context import ServerContext
from server.gating import decide
from server.settings import Mode, Settings

pytestmark = pytest.mark.slow  # the default model generating to its context length: not the fast loop

MODEL = "tiny-qwen3"
CONTEXT = 48
USER = [{"role": "user", "content": "Hi"}]


@pytest.fixture(scope="module")
def client(asset: Callable[[str], Path], tokenizer: Callable[[str], Any]) -> Iterator[TestClient]:
    model_dir = asset(MODEL)
    settings = Settings(mode=Mode.SERVE, model_dir=model_dir, served_model_name=MODEL, environ={}, state_secret=b"test-state-secret-0123456789-abcdefghijklmnopqrstuvwxyz",
                        dtype="float32")
    engine = LocalEngine(model_dir, model_name=MODEL, max_model_len=CONTEXT, dtype="float32", num_threads=1)
    ctx = ServerContext(settings=settings, gating=decide(Mode.SERVE, {"TOKENWIRE_ENABLE_SCALE_OUT_ENDPOINTS": "1"}),
                        tokenizer=tokenizer(MODEL), max_model_len=CONTEXT, engine=engine)
    with TestClient(create_app(ctx)) as c:
        yield c


def sse(text: str) -> list[Any]:
    return [orjson.loads(line[6:]) for line in text.splitlines() if line.startswith("data: {")]


@pytest.mark.parametrize("field", ["max_tokens", "max_completion_tokens"])
def test_chat_generates_up_to_the_context_length(client: TestClient, field: str) -> None:
    r = client.post("/v1/chat/completions", json={"messages": USER, field: CONTEXT - 1, "ignore_eos": True})
    assert r.status_code == 200, r.text
    usage, choice = r.json()["usage"], r.json()["choices"][0]
    assert usage["prompt_tokens"] + usage["completion_tokens"] == CONTEXT
    assert choice["finish_reason"] == "length"


def test_a_chat_stream_and_a_completion_do_too(client: TestClient) -> None:
    r = client.post("/v1/chat/completions", json={"messages": USER, "max_tokens": CONTEXT - 1, "ignore_eos": True,
                                                  "stream": True, "stream_options": {"include_usage": True}})
    assert r.status_code == 200, r.text
    events = sse(r.text)
    assert events[-1]["usage"]["total_tokens"] == CONTEXT
    assert [c["choices"][0]["finish_reason"] for c in events if c["choices"]][-1] == "length"
    r = client.post("/v1/completions", json={"prompt": "Once upon a time", "max_tokens": CONTEXT, "ignore_eos": True})
    assert r.status_code == 200, r.text
    assert r.json()["usage"]["total_tokens"] == CONTEXT and r.json()["choices"][0]["finish_reason"] == "length"


def test_anthropic_messages_generate_up_to_the_context_length(client: TestClient) -> None:
    r = client.post("/v1/messages", json={"messages": USER, "max_tokens": CONTEXT - 1})
    assert r.status_code == 200, r.text
    usage = r.json()["usage"]
    assert usage["input_tokens"] + usage["output_tokens"] <= CONTEXT
    assert usage["output_tokens"] == CONTEXT - usage["input_tokens"] or r.json()["stop_reason"] == "end_turn"


def test_a_websocket_chat_is_clamped_too(client: TestClient) -> None:
    with client.websocket_connect("/v1/session", subprotocols=["tokenwire.v1"]) as ws:
        ws.receive_json()  # session.created
        ws.send_json({"type": "chat", "id": "c", "body": {"messages": USER, "max_tokens": CONTEXT - 1,
                                                           "ignore_eos": True}})
        frames = [ws.receive_json()]
        while frames[-1]["type"] not in ("chat.done", "error"):
            frames.append(ws.receive_json())
    assert frames[-1]["type"] == "chat.done", frames[-1]
    assert frames[-1]["status"] == "completed"


def test_the_rendered_request_runs_on_generate(client: TestClient) -> None:
    rendered = client.post("/v1/chat/completions/render", json={"messages": USER, "max_tokens": CONTEXT - 1})
    assert rendered.status_code == 200, rendered.text
    body = rendered.json()
    assert body["sampling_params"]["max_tokens"] == CONTEXT - len(body["token_ids"])
    body["sampling_params"].update(ignore_eos=True, max_tokens=CONTEXT - 1)  # a client's own, unclamped
    r = client.post("/inference/v1/generate", json=body)
    assert r.status_code == 200, r.text
    assert len(r.json()["choices"][0]["token_ids"]) == CONTEXT - len(body["token_ids"])


def test_max_tokens_above_the_context_is_400_naming_the_request_field(client: TestClient) -> None:
    r = client.post("/v1/chat/completions", json={"messages": USER, "max_completion_tokens": CONTEXT + 1})
    assert r.status_code == 400 and r.json()["error"]["param"] == "max_completion_tokens"
    r = client.post("/v1/messages", json={"messages": USER, "max_tokens": 99999999})
    assert r.status_code == 400
    assert r.json() == {"type": "error", "error": {"type": "invalid_request_error", "message": (
        f"`max_tokens` (99999999) is greater than the model's maximum context length ({CONTEXT} tokens). "
        "Please request fewer output tokens.")}}
