"""tokenwire.js reconnect-and-resume in headless Chromium against a real server (issue 23 item 2):
the page loads through a TCP proxy, starts a resumable stream, and the proxy aborts the socket
mid-stream (no closing handshake, as a network failure would). The module opens a new session and
resumes from its last checkpoint; the text equals an uninterrupted greedy run, for chat,
completion and messages. A server started with ``--ws-max-lifetime 2`` ends the session itself
(``session_closed``, then close 1001) under a 4 s stream: the stream resumes on each new session. Streams send ``vllm_xargs: {"resume_replay": false}`` with ``--dtype
float32`` (client_support.serve_args) so that they can be long enough to be cut mid-way."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest

from tests.e2e.browser_cdp import Browser, chromium_path
from tests.e2e.client_support import TcpProxy, serve_args
from tests.support.server_proc import ServerProcess

pytestmark = [pytest.mark.browser, pytest.mark.slow]

CUT_AFTER = 6  # items the page has read before the socket is cut
PROMPT = [{"role": "user", "content": "Write a long poem about rivers."}]
COMMON = {"max_tokens": 400, "temperature": 0, "ignore_eos": True, "vllm_xargs": {"resume_replay": False}}
CASES: dict[str, tuple[str, dict[str, Any]]] = {
    "chat": ("/v1/chat/completions", {"messages": PROMPT, "stream_options": {"include_usage": True}, **COMMON}),
    "completion": ("/v1/completions", {"prompt": "The river", **COMMON}),
    "messages": ("/v1/messages", {"messages": PROMPT, **COMMON}),
}
# the page: read the stream into window.got; the result (or the error) lands in window.done
PAGE_RUN = """
window.got = []; window.done = null;
(async () => {
  const { connect } = await import("/static/tokenwire.js");
  const session = await connect({});
  const stream = session[%(kind)s](%(body)s, { resumable: true });
  for await (const item of stream) window.got.push(item);
  const out = { status: stream.status, resumes: stream.resumes, reconnects: session.reconnects, closed: session.closed };
  session.close();
  return out;
})().then((r) => { window.done = r; }, (e) => { window.done = { error: `${e.name}: ${e.code}: ${e.message}` }; });
0;  // not the promise: evaluate() would wait for it
"""


@pytest.fixture(scope="module", autouse=True)
def _needs_chromium() -> None:
    if chromium_path() is None:
        pytest.fail("chromium is not installed: run scripts/install-browser.sh (scripts/test.sh does)")


@pytest.fixture(scope="module")
def server(asset: Callable[[str], Path]) -> Iterator[ServerProcess]:
    with ServerProcess(serve_args(asset("tiny-qwen3"))) as srv:
        yield srv


def reference_text(url: str, kind: str) -> str:
    path, body = CASES[kind]
    body = {k: v for k, v in body.items() if k != "stream_options"}
    if kind == "messages":
        body["model"] = httpx.get(url + "/v1/models", timeout=10).json()["data"][0]["id"]
    r = httpx.post(url + path, json=body, timeout=120)
    assert r.status_code == 200, r.text
    answer = r.json()
    if kind == "chat":
        return str(answer["choices"][0]["message"]["content"])
    if kind == "completion":
        return str(answer["choices"][0]["text"])
    return "".join(block["text"] for block in answer["content"] if block["type"] == "text")


def streamed_text(kind: str, items: list[dict[str, Any]]) -> str:
    if kind == "chat":
        return "".join(c["choices"][0]["delta"].get("content") or "" for c in items if c["choices"])
    if kind == "completion":
        return "".join(c["choices"][0]["text"] for c in items if c["choices"])
    return "".join(e["delta"]["text"] for e in items
                   if e["type"] == "content_block_delta" and e["delta"]["type"] == "text_delta")


@pytest.mark.parametrize("kind", list(CASES))
def test_a_stream_whose_socket_is_cut_resumes_with_the_uninterrupted_text(server: ServerProcess, kind: str) -> None:
    want = reference_text(server.url, kind)
    _, body = CASES[kind]
    if kind == "messages":
        body = {**body, "model": httpx.get(server.url + "/v1/models", timeout=10).json()["data"][0]["id"]}

    async def main(proxy: TcpProxy) -> tuple[dict[str, Any], list[dict[str, Any]], list[str]]:
        async with Browser() as browser:
            page = await browser.page()
            await page.goto(proxy.url + "/static/playground.css")  # same origin as the session URL
            await page.evaluate(PAGE_RUN % {"kind": orjson.dumps(kind).decode(), "body": orjson.dumps(body).decode()})
            await page.wait_for(f"window.got.length >= {CUT_AFTER} || window.done", timeout=120)
            await asyncio.to_thread(proxy.cut)
            done: dict[str, Any] = await page.wait_for("window.done", timeout=180)
            items: list[dict[str, Any]] = await page.evaluate("window.got")
            return done, items, page.errors

    with TcpProxy(server.url) as proxy:
        done, items, errors = asyncio.run(main(proxy))
        ws_connections = proxy.connections
    assert errors == []
    assert "error" not in done, done
    assert done["status"] == "completed"
    assert done["resumes"] == 1 and done["reconnects"] == 1, done  # cut once, resumed once
    assert ws_connections >= 3  # the page, the first socket, the second socket
    assert streamed_text(kind, items) == want
    if kind == "messages":
        types = [e["type"] for e in items]
        assert types.count("message_start") == 1 and types.count("message_stop") == 1 and types[-1] == "message_stop"
        assert len({e["message"]["id"] for e in items if e["type"] == "message_start"}) == 1
    else:
        assert len({c["id"] for c in items}) == 1  # one stream, one id, before and after the cut
        finishes = [c["choices"][0]["finish_reason"] for c in items if c["choices"] and c["choices"][0]["finish_reason"]]
        assert finishes == ["length"]
    if kind == "chat":
        assert items[-1]["choices"] == [] and items[-1]["usage"]["completion_tokens"] == 400


def test_a_stream_outlives_its_sessions_lifetime(asset: Callable[[str], Path]) -> None:
    # the server ends the session itself (session_closed on the stream, then close 1001): the
    # module resumes on a new session, as many times as the stream needs, each with progress
    _, body = CASES["chat"]
    with ServerProcess(serve_args(asset("tiny-qwen3"), "--ws-max-lifetime", "2")) as srv:
        want = reference_text(srv.url, "chat")

        async def main() -> tuple[dict[str, Any], list[dict[str, Any]], list[str]]:
            async with Browser() as browser:
                page = await browser.page()
                await page.goto(srv.url + "/static/playground.css")
                await page.evaluate(PAGE_RUN % {"kind": '"chat"', "body": orjson.dumps(body).decode()})
                done: dict[str, Any] = await page.wait_for("window.done", timeout=180)
                return done, await page.evaluate("window.got"), page.errors

        done, items, errors = asyncio.run(main())
    assert errors == []
    assert "error" not in done, done
    assert done["status"] == "completed" and done["resumes"] >= 1 and done["reconnects"] == done["resumes"], done
    assert streamed_text("chat", items) == want
    assert items[-1]["usage"]["completion_tokens"] == 400
