"""The browser playground on gpt-oss, in headless Chromium: a harmony answer (an ``analysis``
message, then the ``final`` one) streamed by the scripted tokens-only engine
(tests/support/scripted_engine.py) behind ``tokenwire launch render --engine-url`` on the tiny
gpt-oss model directory, derendered by the harmony parsers; the reasoning appears in the message's
reasoning display while it streams, before the answer, and the answer in its content (issue 36).
A screenshot is saved to ``tests/artifacts/playground-gpt-oss.png``."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.browser_cdp import Browser, chromium_path
from tests.e2e.test_browser_playground import ARTIFACTS, open_page, wait_connected
from tests.support.scripted_engine import ScriptedEngine
from tests.support.server_proc import ServerProcess

pytestmark = [pytest.mark.browser, pytest.mark.slow]

MODEL = "tiny-gpt-oss"
PARSERS = ["--tool-call-parser", "openai", "--reasoning-parser", "openai_gptoss", "--enable-auto-tool-choice"]
REASONING = "The user says hello. A short, friendly greeting back is enough."
ANSWER = "Hello! How can I help you today?"
SCRIPT = (f"<|channel|>analysis<|message|>{REASONING}<|end|>"
          f"<|start|>assistant<|channel|>final<|message|>{ANSWER}<|return|>")


@pytest.fixture(scope="module", autouse=True)
def _needs_chromium() -> None:
    if chromium_path() is None:
        pytest.fail("chromium is not installed: run scripts/install-browser.sh (scripts/test.sh does)")


@pytest.fixture(scope="module")
def harmony_server(asset: Callable[[str], Path], tokenizer: Callable[[str], Any]) -> Iterator[ServerProcess]:
    ids = tokenizer(MODEL).encode(SCRIPT, add_special_tokens=False)
    # paced as a real engine's steps are: events sent at once reach the front end in one read,
    # and a session sends what one turn of its loop derendered as one frame
    with ScriptedEngine(ids, step=1, interval_s=0.02) as engine, ServerProcess(
            ["launch", "render", str(asset(MODEL)), "--engine-url", engine.url, *PARSERS]) as srv:
        yield srv


def test_the_playground_shows_gpt_oss_reasoning_then_the_answer(harmony_server: ServerProcess) -> None:
    async def main() -> dict[str, Any]:
        async with Browser() as browser:
            page = await open_page(browser, harmony_server.url, key=None)
            await page.goto(harmony_server.url + "/")
            await wait_connected(page)
            # which part of the message each streamed piece of text went into, in order
            await page.evaluate("""window.seen = []; new MutationObserver((records) => {
                for (const r of records) for (const n of r.addedNodes) {
                    const part = n.nodeType === 3 ? n.parentElement : null;
                    if (part?.matches('.msg.assistant .reasoning, .msg.assistant .content'))
                        window.seen.push([part.className, n.data]);
                }
            }).observe(document.getElementById('messages'), {childList: true, subtree: true});""")
            await page.type_into("#prompt", "Hello!")
            await page.click("#send")
            await page.wait_for("document.querySelector('.msg.assistant')?.dataset.status === 'completed'")
            shown: dict[str, Any] = await page.evaluate("""(() => {
                const msg = document.querySelector('.msg.assistant');
                const reasoning = msg.querySelector('.reasoning');
                return {
                    features: window.playground.session.features,
                    reasoning: reasoning.textContent,
                    reasoningHeight: reasoning.getBoundingClientRect().height,
                    reasoningLabel: getComputedStyle(reasoning, '::before').content,
                    content: msg.querySelector('.content').textContent,
                    tools: msg.querySelectorAll('.tool').length,
                    meta: msg.querySelector('.meta').textContent,
                    seen: window.seen,
                };
            })()""")
            await page.screenshot(ARTIFACTS / "playground-gpt-oss.png")
            assert page.errors == []
            return shown

    shown = asyncio.run(main())
    assert shown["features"]["tool_call_parser"] == "openai" and shown["features"]["reasoning_parser"] == "openai_gptoss"
    assert shown["reasoning"] == REASONING  # the analysis channel, in the reasoning display, shown
    assert shown["reasoningHeight"] > 0 and shown["reasoningLabel"] == '"reasoning"'
    assert shown["content"] == ANSWER  # the final channel, in the content
    assert shown["tools"] == 0 and shown["meta"].startswith("stop")
    parts = [cls for cls, _ in shown["seen"]]
    assert parts.count("reasoning") > 1 and parts.count("content") > 1  # both streamed in pieces
    assert parts.index("content") > max(i for i, cls in enumerate(parts) if cls == "reasoning")  # thought first
    for cls, text in shown["seen"]:  # every value on screen is a prefix of the final text (no markup leaks)
        assert (REASONING if cls == "reasoning" else ANSWER).startswith(text.strip()), (cls, text)
    assert (ARTIFACTS / "playground-gpt-oss.png").stat().st_size > 10_000
