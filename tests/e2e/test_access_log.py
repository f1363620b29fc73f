"""The access log: every HTTP request (the OpenAI and Anthropic APIs included) and every WebSocket
connection is one INFO line, as uvicorn writes them; ``--disable-access-log`` drops both kinds."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

import httpx
import pytest

import client_sdk
from tests.support.server_proc import ServerProcess

pytestmark = pytest.mark.slow

CHAT = {"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 2}


def wait_for_line(srv: ServerProcess, text: str, timeout: float = 30.0) -> str:
    """The first line of the server's output that contains ``text``; fails if none comes in time."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = next((line for line in list(srv.lines) if text in line), None)
        if found is not None:
            return found
        time.sleep(0.05)
    raise AssertionError(f"no line with {text!r} in the server output within {timeout} s:\n{srv.output()}")


def use_every_api(url: str) -> None:
    assert httpx.post(url + "/v1/chat/completions", json=CHAT, timeout=60).status_code == 200
    assert httpx.post(url + "/v1/completions", json={"prompt": "Hi", "max_tokens": 2}, timeout=60).status_code == 200
    assert httpx.post(url + "/v1/messages", json=CHAT, timeout=60).status_code == 200
    with client_sdk.Client(url, timeout=60) as client:
        assert client.transport == "websocket"
        client.chat.completions.create(**CHAT)


def test_http_api_requests_and_websocket_sessions_are_both_in_the_access_log(asset: Callable[[str], Path]) -> None:
    with ServerProcess(["serve", asset("tiny-qwen3"), "--dtype", "float32"]) as srv:
        use_every_api(srv.url)
        for path in ("/v1/chat/completions", "/v1/completions", "/v1/messages"):
            line = wait_for_line(srv, f'"POST {path} HTTP/1.1" 200')
            assert line.startswith("INFO:") and "127.0.0.1:" in line
        assert wait_for_line(srv, '"WebSocket /v1/session" [accepted]').startswith("INFO:")
        assert '"GET /health HTTP/1.1" 200' in srv.output()  # the start-up health checks
        assert "Loading weights" not in srv.output()  # transformers' progress bar is no log line


def test_disable_access_log_drops_http_and_websocket_lines(asset: Callable[[str], Path]) -> None:
    with ServerProcess(["serve", asset("tiny-qwen3"), "--dtype", "float32", "--disable-access-log"]) as srv:
        use_every_api(srv.url)
    wait_for_line(srv, "Finished server process")  # everything it wrote has been read
    out = srv.output()
    assert "HTTP/1.1" not in out
    assert "WebSocket /v1/session" not in out and "connection open" not in out
