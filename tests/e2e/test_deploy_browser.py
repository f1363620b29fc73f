"""The browser client on the reference deployment (issue 23 item 2): a page served through the front
HAProxy streams a resumable chat, completion or messages stream over a WebSocket session; the front end holding that session is
SIGKILLed mid-stream; tokenwire.js reconnects through the balancer (so to the other front end),
resumes from its last checkpoint, and the text equals an uninterrupted greedy run."""

from __future__ import annotations

import asyncio
import signal
from typing import Any

import httpx
import orjson
import pytest

from tests.e2e.browser_cdp import Browser, chromium_path
from tests.e2e.deploy_support import Topology
from tests.e2e.test_browser_resume import CASES, PAGE_RUN

pytestmark = [pytest.mark.browser, pytest.mark.slow]

CUT_AFTER = 6  # chunks the page has read before its front end is killed


def reference(url: str, kind: str, body: dict[str, Any]) -> tuple[str, str]:
    """(text, reasoning) of the same request answered whole: the front ends run a reasoning parser."""
    path, _ = CASES[kind]
    r = httpx.post(url + path, json={k: v for k, v in body.items() if k != "stream_options"}, timeout=120)
    assert r.status_code == 200, r.text
    answer = r.json()
    if kind == "chat":
        message = answer["choices"][0]["message"]
        return message.get("content") or "", message.get("reasoning") or ""
    if kind == "completion":
        return answer["choices"][0]["text"], ""
    blocks = answer["content"]
    return ("".join(b["text"] for b in blocks if b["type"] == "text"),
            "".join(b["thinking"] for b in blocks if b["type"] == "thinking"))


def streamed(kind: str, items: list[dict[str, Any]]) -> tuple[str, str]:
    if kind == "chat":
        deltas = [c["choices"][0]["delta"] for c in items if c["choices"]]
        return "".join(d.get("content") or "" for d in deltas), "".join(d.get("reasoning") or "" for d in deltas)
    if kind == "completion":
        return "".join(c["choices"][0]["text"] for c in items if c["choices"]), ""
    deltas = [e["delta"] for e in items if e["type"] == "content_block_delta"]
    return ("".join(d["text"] for d in deltas if d["type"] == "text_delta"),
            "".join(d["thinking"] for d in deltas if d["type"] == "thinking_delta"))


@pytest.fixture(scope="module")
def topo(request: pytest.FixtureRequest) -> Topology:
    if chromium_path() is None:
        pytest.fail("chromium is not installed: run scripts/install-browser.sh (scripts/test.sh does)")
    topology: Topology = request.getfixturevalue("reference_topology")  # tests/e2e/conftest.py
    return topology


@pytest.mark.parametrize("kind", list(CASES))
def test_the_browser_client_resumes_on_the_other_front_end_when_its_own_is_killed(topo: Topology, kind: str) -> None:
    _, body = CASES[kind]
    if kind == "messages":
        body = {**body, "model": httpx.get(topo.url + "/v1/models", timeout=10).json()["data"][0]["id"]}
    want = reference(topo.url, kind, body)
    assert len("".join(want)) > 400  # a long answer: the kill comes mid-stream
    killed: list[int] = []

    async def main() -> tuple[dict[str, Any], list[dict[str, Any]], list[str]]:
        async with Browser() as browser:
            page = await browser.page()
            await page.goto(topo.url + "/static/playground.css")  # same origin as the session URL
            await page.evaluate(PAGE_RUN % {"kind": orjson.dumps(kind).decode(), "body": orjson.dumps(body).decode()})
            await page.wait_for(f"window.got.length >= {CUT_AFTER} || window.done", timeout=120)
            i = await asyncio.to_thread(topo.frontend_with_session)
            await asyncio.to_thread(topo.frontends[i].stop, signal.SIGKILL)
            killed.append(i)
            done: dict[str, Any] = await page.wait_for("window.done", timeout=180)
            return done, await page.evaluate("window.got"), page.errors

    try:
        done, items, errors = asyncio.run(main())
    finally:
        for i in killed:
            topo.restart_frontend(i)
    assert killed, "no front end held the page's session"
    assert errors == []
    assert "error" not in done, done
    assert done["status"] == "completed" and done["resumes"] == 1 and done["reconnects"] == 1, done
    assert streamed(kind, items) == want
