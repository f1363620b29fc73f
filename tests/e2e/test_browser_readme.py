"""The README's browser-module example, run as written in headless Chromium on a page served by a
real server (its static import becomes a dynamic one so the page can evaluate it)."""

from __future__ import annotations

import asyncio
import re
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.e2e.browser_cdp import Browser, chromium_path
from tests.e2e.client_support import serve_args
from tests.e2e.test_readme import readme_blocks
from tests.support.server_proc import ServerProcess

pytestmark = [pytest.mark.browser, pytest.mark.slow]


@pytest.fixture(scope="module")
def server(asset: Callable[[str], Path]) -> Iterator[ServerProcess]:
    if chromium_path() is None:
        pytest.fail("chromium is not installed: run scripts/install-browser.sh (scripts/test.sh does)")
    with ServerProcess(serve_args(asset("tiny-qwen3"))) as srv:
        yield srv


def as_evaluable(module_code: str) -> str:
    """``import { a, b } from "x";`` → ``const { a, b } = await import("x");``, inside an async function."""
    code = re.sub(r'import\s*\{([^}]*)\}\s*from\s*("[^"]+");', r"const {\1} = await import(\2);", module_code)
    return f"(async () => {{\n{code}\n}})()"


def test_the_readme_browser_example_runs_in_the_page(server: ServerProcess) -> None:
    blocks = readme_blocks("Browser client", "js")
    assert len(blocks) == 1

    async def main() -> tuple[list[str], list[str]]:
        async with Browser() as browser:
            page = await browser.page()
            await page.goto(server.url + "/static/playground.css")  # a document of the server's origin
            await page.evaluate(as_evaluable(blocks[0]))
            return page.console, page.errors

    console, errors = asyncio.run(main())
    assert errors == []
    assert console[0].startswith("log: completed ") and len(console[0]) > len("log: completed ")
    assert console[1] == "log: message_start" and console[-1] == "log: message_stop"
