"""The front end the Responses tests in tests/app/ share: ``launch render --engine-url`` in process
over the scripted engine of tests/support/scripted_engine.py (the qwen3 tokenizer, split by the
hermes and qwen3 parsers), as a TestClient or served by uvicorn on a thread; the scripts and tools
they send, and the checks they make of events and output items (docs/responses.md).

A test module takes the fixtures by name, ``engine = responses_front.engine``: pytest finds a
fixture as an attribute of the module (module-scoped ones are made once a module, as if defined
there)."""

from __future__ import annotations

import json
import socket
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import openai
import orjson
import pytest
import uvicorn
from openai.types.responses import ResponseStreamEvent
from pydantic import TypeAdapter
from starlette.applications import Starlette
from starlette.testclient import TestClient

from server.app import create_app
from server.context import ServerContext, create_engine
from server.gating import decide
from server.settings import Mode, Settings
from tests.conftest import asset_path, tokenizer_of
from tests.support.scripted_engine import ScriptedEngine
from tests.support.waiting import wait_until

SECRET = b"test-state-secret-0123456789-abcdefghijklmnopqrstuvwxyz"
OTHER_SECRET = b"another-state-secret-9876543210-zyxwvutsrqponmlkjihgfedcba"
EVENTS: TypeAdapter[Any] = TypeAdapter(ResponseStreamEvent)
THINK = "<think>\nThe user wants the weather.\n</think>\n\n"
CALL = ("Let me check.\n<tool_call>\n"
        '{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call><|im_end|>')
THINK_CALL = THINK + CALL  # the engine's script unless a test sets another
ANSWER = "<think>\nThey have the weather.\n</think>\n\nIt is sunny in Paris.<|im_end|>"
NAMESPACED = ('<tool_call>\n{"name": "shell__exec", "arguments": {"cmd": "ls"}}\n</tool_call><|im_end|>')
WEATHER = {"type": "function", "name": "get_weather", "description": "Get the weather",
           "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}
SHELL = {"type": "namespace", "name": "shell", "description": "Shell tools",
         "tools": [{"type": "function", "name": "exec", "parameters": {"type": "object",
                                                                       "properties": {"cmd": {"type": "string"}}}}]}


def ids_of(text: str) -> list[int]:
    return list(tokenizer_of("qwen3").encode(text, add_special_tokens=False))


def render_context(engine: ScriptedEngine, secret: bytes = SECRET, max_model_len: int = 4096,
                   **settings: Any) -> ServerContext:
    """The context of ``launch render --engine-url`` in front of ``engine`` (``settings``: more fields)."""
    config = Settings(mode=Mode.RENDER, model_dir=asset_path("qwen3"), served_model_name="qwen3", environ={},
                      engine_url=engine.url, tool_call_parser="hermes", enable_auto_tool_choice=True,
                      reasoning_parser="qwen3", state_secret=secret, **settings)
    return ServerContext(settings=config, gating=decide(Mode.RENDER, {}, has_engine_url=True),
                         tokenizer=tokenizer_of("qwen3"), max_model_len=max_model_len,
                         engine=create_engine(config, max_model_len))


def front_of(engine: ScriptedEngine, secret: bytes, max_model_len: int = 4096) -> TestClient:
    return TestClient(create_app(render_context(engine, secret, max_model_len)))


@contextmanager
def on_socket(app: Starlette) -> Iterator[str]:
    """``app`` served by uvicorn on a thread, on a free local port: its ``http://`` address."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    server = uvicorn.Server(uvicorn.Config(app, log_level="critical", lifespan="on", timeout_graceful_shutdown=1))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    try:
        wait_until(lambda: server.started, "the front end to start", timeout=60, interval=0.01)
        yield f"http://127.0.0.1:{sock.getsockname()[1]}"
    finally:
        server.should_exit = True
        thread.join(10)


def sdk(client: TestClient) -> openai.OpenAI:
    return openai.OpenAI(base_url=str(client.base_url) + "/v1", api_key="none", http_client=client, max_retries=0)


def prompt_text(engine: ScriptedEngine) -> str:
    return str(tokenizer_of("qwen3").decode(engine.requests[-1]["token_ids"]))


def sse_events(text: str) -> list[dict[str, Any]]:
    names = [line[7:] for line in text.split("\n") if line.startswith("event: ")]
    events = [orjson.loads(line[6:]) for line in text.split("\n") if line.startswith("data: ")]
    assert names == [e["type"] for e in events]  # each event named by its type, as OpenAI's
    return events


def shape(items: list[Any]) -> list[tuple[Any, ...]]:
    """Output items without their ids (each request makes its own, call ids too)."""
    out = []
    for item in items:
        d = item if isinstance(item, dict) else item.model_dump(exclude_none=True)
        out.append((d["type"], d.get("status"), json.dumps(d.get("content")), d.get("name"), d.get("namespace"),
                    d.get("arguments"), str(d.get("call_id"))[:5]))
    return out


@pytest.fixture(scope="module")
def engine() -> Iterator[ScriptedEngine]:
    """The scripted engine on its socket, answering :data:`THINK_CALL` two tokens a step."""
    with ScriptedEngine(ids_of(THINK_CALL), step=2) as scripted:
        yield scripted


@pytest.fixture
def script(engine: ScriptedEngine) -> Iterator[Callable[[str], None]]:
    """A setter of the engine's script (text, tokenized); the script before comes back at the end."""
    before = engine.token_ids

    def set_script(text: str) -> None:
        engine.token_ids = ids_of(text)
    yield set_script
    engine.token_ids = before


@pytest.fixture(scope="module")
def front(engine: ScriptedEngine) -> Iterator[TestClient]:
    with front_of(engine, SECRET) as client:
        yield client


@pytest.fixture(scope="module")
def served(engine: ScriptedEngine) -> Iterator[str]:
    """The front end on a real socket (a TestClient answers a stream only once it has ended)."""
    with on_socket(create_app(render_context(engine))) as url:
        yield url
