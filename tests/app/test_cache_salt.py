"""``cache_salt`` isolates tenants in the local engine's prefix cache (issue 39 item 6), as vLLM
does: blocks cached under one salt are never a hit under another (or under none), so a client
cannot time whether another tenant sent a prompt. The salt travels from the chat request through
render and the front end's engine link (``ws://``) or HTTP engine (``http://``) to a real
tokens-only engine (tiny-qwen3 on a socket in this process), whose prefix-cache hits show whether
it was honoured."""

from __future__ import annotations

import socket
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import uvicorn
from starlette.testclient import TestClient

from engine.local import LocalEngine
from server.app import create_app
from server.context import ServerContext, create_engine
from server.gating import decide
from server.settings import Mode, Settings
from tests.support.waiting import wait_until

MODEL = "tiny-qwen3"
SYSTEM = "You are a careful assistant for the accounts team. " * 6  # a prefix of several whole blocks


@pytest.fixture(scope="module")
def engine_tier(asset: Callable[[str], Path], tokenizer: Callable[[str], Any]) -> Iterator[tuple[str, LocalEngine]]:
    """``serve --tokens-only`` in this process, on a real socket: its address and its engine."""
    path = asset(MODEL)
    settings = Settings(mode=Mode.TOKENS_ONLY, model_dir=path, served_model_name=MODEL, environ={})
    engine = LocalEngine(path, model_name=MODEL, max_model_len=2048, dtype="float32", num_threads=1)
    ctx = ServerContext(settings=settings, gating=decide(Mode.TOKENS_ONLY, {}), tokenizer=tokenizer(MODEL),
                        max_model_len=2048, engine=engine)
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    server = uvicorn.Server(uvicorn.Config(create_app(ctx), log_level="critical", lifespan="on",
                                           timeout_graceful_shutdown=1, ws="websockets-sansio"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    try:
        wait_until(lambda: server.started, "the engine tier to start", timeout=60, interval=0.01)
        yield f"127.0.0.1:{sock.getsockname()[1]}", engine
    finally:
        server.should_exit = True
        thread.join(10)


@pytest.fixture(scope="module", params=["ws", "http"])
def front(request: pytest.FixtureRequest, engine_tier: tuple[str, LocalEngine], asset: Callable[[str], Path],
          tokenizer: Callable[[str], Any]) -> Iterator[tuple[TestClient, LocalEngine]]:
    """``launch render --engine-url ws://… / http://…`` in process, in front of the engine tier."""
    address, engine = engine_tier
    settings = Settings(mode=Mode.RENDER, model_dir=asset(MODEL), served_model_name=MODEL, environ={},
                        engine_url=f"{request.param}://{address}")
    ctx = ServerContext(settings=settings, gating=decide(Mode.RENDER, {}, has_engine_url=True),
                        tokenizer=tokenizer(MODEL), max_model_len=2048, engine=create_engine(settings, 2048))
    with TestClient(create_app(ctx)) as client:
        yield client, engine


def _chat(client: TestClient, question: str, salt: str | None, system: str = SYSTEM) -> None:
    body: dict[str, Any] = {"model": MODEL, "max_tokens": 2, "temperature": 0,
                            "messages": [{"role": "system", "content": system}, {"role": "user", "content": question}]}
    if salt is not None:
        body["cache_salt"] = salt
    r = client.post("/v1/chat/completions", json=body)
    assert r.status_code == 200, r.text


def test_a_prompt_cached_under_one_salt_is_a_hit_only_under_the_same_salt(
        front: tuple[TestClient, LocalEngine], request: pytest.FixtureRequest) -> None:
    client, engine = front
    tag = request.node.callspec.id  # a system prompt of its own per transport: the engine tier is shared
    system = f"({tag}) {SYSTEM}"
    hits = engine.prefix.hits
    _chat(client, "What is 2+2?", "tenant-a", system)  # fills the cache under tenant a
    assert engine.prefix.hits == hits
    _chat(client, "What is 3+3?", "tenant-b", system)  # another tenant: a miss (a hit before issue 39)
    assert engine.prefix.hits == hits
    _chat(client, "What is 4+4?", None, system)  # no salt: no tenant's blocks either
    assert engine.prefix.hits == hits
    _chat(client, "What is 5+5?", "tenant-a", system)  # the same tenant: its system prompt is a hit
    assert engine.prefix.hits == hits + 1
    _chat(client, "What is 6+6?", None, system)  # and requests without a salt share among themselves
    assert engine.prefix.hits == hits + 2
    assert engine.prefix.hit_tokens >= 48


def test_an_empty_cache_salt_is_refused_naming_the_field(front: tuple[TestClient, LocalEngine]) -> None:
    client, _ = front
    r = client.post("/v1/chat/completions", json={"model": MODEL, "cache_salt": "", "max_tokens": 1,
                                                  "messages": [{"role": "user", "content": "hi"}]})
    assert r.status_code == 400 and "cache_salt" in r.text, r.text
