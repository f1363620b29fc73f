"""The browser client in headless Chromium against real servers: the ES module's own protocol tests
run in the page, and the playground at ``/`` streams, stops, and shows reasoning, content and tool
calls. A screenshot of the playground is saved to ``tests/artifacts/playground.png``."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest

from tests.e2e.browser_cdp import Browser, Page, chromium_path
from tests.support.scripted_engine import ScriptedEngine
from tests.support.server_proc import ServerProcess

pytestmark = [pytest.mark.browser, pytest.mark.slow]

KEY = "browser-test-key"
ARTIFACTS = Path(__file__).resolve().parents[1] / "artifacts"
TOOLS = [{"type": "function", "function": {
    "name": "get_weather", "description": "Weather for a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}]
SCRIPT = ("<think>\nThe user asks about the weather in Paris. I should call the weather tool.\n</think>\n\n"
          "Let me check the weather in Paris for you.\n<tool_call>\n"
          '{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>')


@pytest.fixture(scope="module", autouse=True)
def _needs_chromium() -> None:
    if chromium_path() is None:
        pytest.fail("chromium is not installed: run scripts/install-browser.sh (scripts/test.sh does)")


@pytest.fixture(scope="module")
def server(asset: Callable[[str], Path]) -> Iterator[ServerProcess]:
    with ServerProcess(["serve", str(asset("tiny-qwen3")), "--enable-scale-out", "--api-key", KEY, "--dtype", "float32",
                        "--reasoning-parser", "qwen3", "--tool-call-parser", "hermes", "--enable-auto-tool-choice",
                        "--state-secret", "browser-tests-0123456789-abcdefghijklmnopqrstuvwxyz"]) as srv:
        yield srv


@pytest.fixture(scope="module")
def tool_server(asset: Callable[[str], Path], tokenizer: Callable[[str], Any]) -> Iterator[ServerProcess]:
    ids = tokenizer("qwen3").encode(SCRIPT, add_special_tokens=False)
    with ScriptedEngine(ids, step=1) as engine, ServerProcess(
            ["launch", "render", str(asset("qwen3")), "--engine-url", engine.url, "--tool-call-parser", "hermes",
             "--enable-auto-tool-choice", "--reasoning-parser", "qwen3"]) as srv:
        yield srv


async def open_page(browser: Browser, url: str, *, key: str | None) -> Page:
    page = await browser.page()
    await page.goto(url + "/static/playground.css")  # same origin: set the key before the app starts
    await page.evaluate(f"localStorage.setItem('tokenwire.apiKey', {orjson.dumps(key or '').decode()})")
    return page


async def wait_connected(page: Page) -> None:
    """Wait for the "connected" pill; from that moment Send must work (a click on a still-disabled
    Send is silently lost: the pill once turned before the model list had loaded and Send was enabled)."""
    await page.wait_for("document.getElementById('conn').dataset.state === 'open'")
    assert await page.evaluate("document.getElementById('send').disabled") is False


def test_the_es_module_protocol_tests_pass_in_the_page(server: ServerProcess) -> None:
    async def main() -> list[dict[str, Any]]:
        async with Browser() as browser:
            page = await open_page(browser, server.url, key=KEY)
            await page.goto(server.url + "/static/test.html")
            await page.wait_for("window.tokenwireTests && window.tokenwireTests.done", timeout=240)
            results: list[dict[str, Any]] = await page.evaluate("window.tokenwireTests.results")
            await page.screenshot(ARTIFACTS / "tokenwire-js-tests.png")
            assert page.errors == []
            return results

    results = asyncio.run(main())
    failed = [r for r in results if not r["ok"]]
    assert failed == [], failed
    assert [r for r in results if r["skipped"]] == []  # scale-out and a key: every test runs here
    assert len(results) >= 10
    assert any("cancel" in r["name"] for r in results)
    assert any("share one socket" in r["name"] for r in results)


def test_on_a_default_server_the_self_test_skips_what_is_not_enabled_and_fails_nothing(
        asset: Callable[[str], Path]) -> None:
    # serve as serve.sh starts it: no scale-out frames, no API key
    with ServerProcess(["serve", str(asset("tiny-qwen3")), "--dtype", "float32"]) as srv:
        async def main() -> tuple[list[dict[str, Any]], str, Any]:
            async with Browser() as browser:
                page = await browser.page()
                await page.goto(srv.url + "/static/test.html")
                await page.wait_for("window.tokenwireTests && window.tokenwireTests.done", timeout=240)
                results: list[dict[str, Any]] = await page.evaluate("window.tokenwireTests.results")
                summary: str = await page.evaluate("document.getElementById('summary').textContent")
                icon = await page.evaluate("fetch(document.querySelector('link[rel=icon]').href)"
                                           ".then(r => [r.status, r.headers.get('content-type')])")
                await page.screenshot(ARTIFACTS / "tokenwire-js-tests-default-server.png")
                assert page.errors == [] and page.browser_errors == []  # no console error: the favicon loads
                return results, summary, icon

        results, summary, icon = asyncio.run(main())
    assert [r for r in results if not r["ok"]] == []
    skipped = {r["name"]: r["skipped"] for r in results if r["skipped"]}
    assert skipped == {"render, generate and derender give the text the chat pipeline gives": "not enabled on this server",
                       "a wrong key is refused at the upgrade": "no API key on this server"}
    assert summary == f"{len(results) - 2} passed, 0 failed, 2 skipped"
    assert icon == [200, "image/svg+xml"]


def test_on_a_default_server_the_playground_hides_tools_and_says_why(asset: Callable[[str], Path]) -> None:
    # serve as serve.sh starts it: no tool-call parser, so every request with tools would be a 400
    with ServerProcess(["serve", str(asset("tiny-qwen3")), "--dtype", "float32"]) as srv:
        async def main() -> dict[str, Any]:
            async with Browser() as browser:
                page = await browser.page()
                await page.goto(srv.url + "/")
                await wait_connected(page)
                shown: dict[str, Any] = await page.evaluate("""({
                    features: window.playground.session.features,
                    boxHeight: document.getElementById('tools-box').getBoundingClientRect().height,
                    note: document.getElementById('tools-off').textContent,
                    noteHeight: document.getElementById('tools-off').getBoundingClientRect().height })""")
                await page.type_into("#max_tokens", "4")
                await page.type_into("#prompt", "Hi")
                await page.click("#send")  # no tools in the request: it completes
                await page.wait_for("document.querySelector('.msg.assistant')?.dataset.status === 'completed'")
                await page.screenshot(ARTIFACTS / "playground-default-server.png")
                assert page.errors == []
                return shown

        shown = asyncio.run(main())
    assert shown["features"] == {"tool_call_parser": None, "auto_tool_choice": False, "reasoning_parser": None}
    assert shown["boxHeight"] == 0 and shown["noteHeight"] > 0
    assert shown["note"].startswith("Tools are off: this server parses no tool calls: start it with "
                                    "--tool-call-parser NAME")
    assert "--enable-auto-tool-choice" in shown["note"]


def test_the_playground_streams_text_and_stop_ends_the_generation(server: ServerProcess) -> None:
    async def main() -> dict[str, Any]:
        async with Browser() as browser:
            page = await open_page(browser, server.url, key=KEY)
            await page.goto(server.url + "/")
            await wait_connected(page)
            assert await page.evaluate("document.getElementById('model-name').textContent") == "tiny-qwen3"
            # A short answer, without thinking: content streams into the assistant message.
            await page.evaluate("document.getElementById('thinking').checked = false")
            await page.type_into("#max_tokens", "16")
            await page.type_into("#seed", "3")
            await page.type_into("#prompt", "Say hello.")
            await page.click("#send")
            await page.wait_for("document.querySelector('.msg.assistant')?.dataset.status === 'completed'")
            first = await page.evaluate("""({
                content: document.querySelector('.msg.assistant .content').textContent,
                tokens: Number(document.getElementById('tokens').textContent),
                tps: Number(document.getElementById('tps').textContent),
                meta: document.querySelector('.msg.assistant .meta').textContent })""")
            # A long answer: text appears while it streams; Stop ends it.
            await page.type_into("#max_tokens", "3000")
            await page.type_into("#prompt", "Now tell me a very long story.")
            await page.click("#send")
            await page.wait_for("document.body.dataset.state === 'streaming' && "
                                "document.querySelectorAll('.msg.assistant')[1]?.querySelector('.content')"
                                ".textContent.length > 0")
            streaming_text = await page.evaluate(
                "document.querySelectorAll('.msg.assistant')[1].querySelector('.content').textContent")
            await page.click("#stop")
            await page.wait_for("document.querySelectorAll('.msg.assistant')[1].dataset.status === 'cancelled'")
            await page.wait_for("document.body.dataset.state === 'idle'")
            second = await page.evaluate("""({
                content: document.querySelectorAll('.msg.assistant')[1].querySelector('.content').textContent,
                tokens: Number(document.getElementById('tokens').textContent),
                meta: document.querySelectorAll('.msg.assistant')[1].querySelector('.meta').textContent,
                stopDisabled: document.getElementById('stop').disabled,
                sendDisabled: document.getElementById('send').disabled })""")
            assert page.errors == []
            return {"first": first, "streaming_text": streaming_text, "second": second}

    seen = asyncio.run(main())
    first, second = seen["first"], seen["second"]
    assert first["content"] and 0 < first["tokens"] <= 16 and first["tps"] > 0, first
    assert first["meta"].startswith(("length", "stop")), first
    assert seen["streaming_text"] and second["content"].startswith(seen["streaming_text"])
    assert second["meta"].startswith("stopped") and second["tokens"] < 3000, second
    assert second["stopDisabled"] and not second["sendDisabled"]
    health = httpx.get(server.url + "/health", timeout=10).json()
    assert health["live_sequences"] == 0  # the stop reached the engine: nothing is still generating


def test_the_playground_shows_reasoning_content_and_a_streamed_tool_call(tool_server: ServerProcess) -> None:
    async def main() -> dict[str, Any]:
        async with Browser() as browser:
            page = await open_page(browser, tool_server.url, key=None)
            await page.goto(tool_server.url + "/")
            await wait_connected(page)
            # hermes with --enable-auto-tool-choice: the Tools box is offered
            assert await page.evaluate("[document.getElementById('tools-box').getBoundingClientRect().height > 0, "
                                       "document.getElementById('tools-off').hidden]") == [True, True]
            await page.type_into("#tools", orjson.dumps(TOOLS, option=orjson.OPT_INDENT_2).decode())
            await page.type_into("#system", "You are a helpful assistant with a weather tool.")
            await page.type_into("#prompt", "What is the weather in Paris?")
            # Record every value the tool call's arguments take on screen (text nodes keep the
            # value they were created with), to see them grow while the answer streams.
            await page.evaluate("""window.argsSeen = []; new MutationObserver((records) => {
                for (const r of records) for (const n of r.addedNodes)
                    if (n.nodeType === 3 && n.parentElement?.matches('.tool pre')) window.argsSeen.push(n.data);
            }).observe(document.getElementById('messages'), {childList: true, subtree: true});""")
            await page.click("#send")
            await page.wait_for("document.querySelector('.msg.assistant')?.dataset.status === 'completed'")
            shown: dict[str, Any] = await page.evaluate("""({
                reasoning: document.querySelector('.msg.assistant .reasoning').textContent,
                content: document.querySelector('.msg.assistant .content').textContent,
                tool: document.querySelector('.tool .name').textContent,
                args: document.querySelector('.tool pre').textContent,
                meta: document.querySelector('.msg.assistant .meta').textContent })""")
            await page.screenshot(ARTIFACTS / "playground.png")
            shown["seen"] = await page.evaluate("window.argsSeen")
            assert page.errors == []
            return shown

    shown = asyncio.run(main())
    assert "weather tool" in shown["reasoning"]
    assert shown["content"].strip() == "Let me check the weather in Paris for you."
    assert shown["tool"] == "get_weather"
    assert orjson.loads(shown["args"]) == {"city": "Paris"}
    seen = shown["seen"]
    assert len(seen) > 1 and seen[-1] == shown["args"]  # streamed in pieces, not at once
    assert all(shown["args"].startswith(value) for value in seen)
    assert shown["meta"].startswith("tool_calls")
    assert (ARTIFACTS / "playground.png").stat().st_size > 10_000


LAYOUT = """(() => {
    const box = (id) => document.getElementById(id).getBoundingClientRect();
    const root = document.documentElement;
    const assistant = document.querySelector('.msg.assistant').getBoundingClientRect();
    const style = getComputedStyle(root);
    return {
        viewport: window.innerWidth,
        overflow: Math.max(root.scrollWidth, document.body.scrollWidth) - window.innerWidth,
        headerOverflow: document.querySelector('header').scrollWidth - document.querySelector('header').clientWidth,
        messages: box('messages').width, messagesHeight: box('messages').height,
        assistant: assistant.width, prompt: box('prompt').width,
        settings: box('model').width, settingsTop: box('model').top, messagesBottom: box('messages').bottom,
        colorScheme: style.colorScheme, scrollbarColor: getComputedStyle(document.getElementById('messages')).scrollbarColor,
        widest: Math.max(...[...document.querySelectorAll('body *')].map((el) => el.getBoundingClientRect().right)),
    };
})()"""


@pytest.mark.parametrize("width", [375, 800, 1280])
def test_the_playground_lays_out_at_phone_tablet_and_desktop_widths(tool_server: ServerProcess, width: int) -> None:
    # At 375 px the chat column once collapsed to one character per line beside a 21rem settings
    # column; and the light default scrollbars stood out on the dark theme.
    async def main() -> dict[str, Any]:
        async with Browser(width=width, height=800) as browser:
            page = await open_page(browser, tool_server.url, key=None)
            await page.send("Emulation.setDeviceMetricsOverride", width=width, height=800, deviceScaleFactor=1,
                            mobile=width < 600)
            await page.goto(tool_server.url + "/")
            await wait_connected(page)
            await page.type_into("#tools", orjson.dumps(TOOLS).decode())
            await page.type_into("#prompt", "What is the weather in Paris? https://example.com/" + "a" * 90)
            await page.click("#send")
            await page.wait_for("document.querySelector('.msg.assistant')?.dataset.status === 'completed'")
            layout: dict[str, Any] = await page.evaluate(LAYOUT)
            await page.screenshot(ARTIFACTS / f"playground-{width}.png")
            assert page.errors == []
            return layout

    layout = asyncio.run(main())
    assert layout["viewport"] == width
    assert layout["overflow"] <= 0 and layout["headerOverflow"] <= 0, layout  # nothing scrolls sideways
    assert layout["widest"] <= width + 0.5, layout  # no element pokes out (a long word wraps)
    if width < 600:  # the chat takes the width; the settings follow below it, as wide
        assert layout["messages"] >= width - 1 and layout["assistant"] >= width - 60, layout
        assert layout["settings"] >= width - 60 and layout["settingsTop"] >= layout["messagesBottom"], layout
        assert layout["messagesHeight"] >= 300, layout
    else:  # side by side: the chat keeps most of the width
        assert layout["messages"] >= 0.6 * width and layout["settings"] >= 200, layout
    assert layout["prompt"] >= 0.45 * width, layout
    assert layout["colorScheme"] == "dark"  # native scrollbars and form controls in dark
    assert layout["scrollbarColor"] not in ("", "auto"), layout
