"""A small headless-Chromium driver over the DevTools protocol (CDP), for the browser tests.

Debian's ``chromium`` (installed by ``scripts/install-browser.sh``) is started with a fresh profile
and ``--remote-debugging-port=0``; the port it picked is read from ``DevToolsActivePort``, a page
target is opened, and commands go over its WebSocket with the ``websockets`` package the project
already has (no browser download, no Playwright). Page exceptions and console errors are
collected so a test can assert there were none.
"""

from __future__ import annotations

import asyncio
import base64
import itertools
import shutil
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx
import orjson
from websockets.asyncio.client import ClientConnection, connect

FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--disable-dev-shm-usage", "--hide-scrollbars", "--mute-audio"]


def chromium_path() -> str | None:
    return shutil.which("chromium") or shutil.which("chromium-browser")


class Browser:
    """``async with Browser() as b: page = await b.page(); await page.goto(url)``"""

    def __init__(self, *, width: int = 1280, height: int = 820) -> None:
        self.width, self.height = width, height
        self.proc: subprocess.Popen[bytes] | None = None
        self.profile = ""
        self.port = 0

    async def __aenter__(self) -> Browser:
        exe = chromium_path()
        if exe is None:
            raise RuntimeError("chromium is not installed; run scripts/install-browser.sh")
        self.profile = tempfile.mkdtemp(prefix="tokenwire-chromium-")
        self.proc = subprocess.Popen(
            [exe, *FLAGS, f"--user-data-dir={self.profile}", "--remote-debugging-port=0",
             f"--window-size={self.width},{self.height}", "about:blank"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        marker = Path(self.profile) / "DevToolsActivePort"
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if marker.exists() and marker.read_text().strip():
                self.port = int(marker.read_text().split()[0])
                return self
            if self.proc.poll() is not None:
                raise RuntimeError(f"chromium exited with {self.proc.returncode}")
            await asyncio.sleep(0.1)
        raise RuntimeError("chromium did not open its DevTools port in time")

    async def __aexit__(self, *exc: object) -> None:
        if self.proc is not None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
        shutil.rmtree(self.profile, ignore_errors=True)

    async def page(self) -> Page:
        async with httpx.AsyncClient() as http:
            target = (await http.put(f"http://127.0.0.1:{self.port}/json/new?about:blank")).json()
        page = Page(await connect(target["webSocketDebuggerUrl"], max_size=64 * 1024 * 1024))
        await page.start(self.width, self.height)
        return page


class Page:
    def __init__(self, ws: ClientConnection) -> None:
        self.ws = ws
        self._ids = itertools.count(1)
        self._pending: dict[int, asyncio.Future[dict[str, Any]]] = {}
        self.errors: list[str] = []  # uncaught exceptions and console.error lines
        # the browser's own console errors: a resource that failed to load (a 404 favicon), a
        # refused WebSocket upgrade
        self.browser_errors: list[str] = []
        self.console: list[str] = []
        self._reader = asyncio.get_running_loop().create_task(self._read())

    async def start(self, width: int, height: int) -> None:
        await self.send("Page.enable")
        await self.send("Runtime.enable")
        await self.send("Log.enable")  # for browser_errors
        await self.send("Emulation.setDeviceMetricsOverride",
                        width=width, height=height, deviceScaleFactor=1, mobile=False)

    async def _read(self) -> None:
        async for message in self.ws:
            data = orjson.loads(message)
            if "id" in data:
                fut = self._pending.pop(data["id"], None)
                if fut is not None and not fut.done():
                    fut.set_result(data)
            elif data.get("method") == "Runtime.exceptionThrown":
                details = data["params"]["exceptionDetails"]
                self.errors.append(str((details.get("exception") or {}).get("description") or details.get("text")))
            elif data.get("method") == "Log.entryAdded":
                entry = data["params"]["entry"]
                if entry.get("level") == "error":
                    self.browser_errors.append(f"{entry.get('text')} ({entry.get('url', '')})")
            elif data.get("method") == "Runtime.consoleAPICalled":
                params = data["params"]
                text = " ".join(str(a.get("value", a.get("description", ""))) for a in params.get("args", []))
                self.console.append(f"{params['type']}: {text}")
                if params["type"] == "error":
                    self.errors.append(text)

    async def send(self, method: str, **params: Any) -> dict[str, Any]:
        msg_id = next(self._ids)
        fut: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        self._pending[msg_id] = fut
        await self.ws.send(orjson.dumps({"id": msg_id, "method": method, "params": params}).decode())
        reply = await asyncio.wait_for(fut, 120)
        if "error" in reply:
            raise RuntimeError(f"{method}: {reply['error']}")
        return reply.get("result", {})  # type: ignore[no-any-return]

    async def goto(self, url: str) -> None:
        await self.send("Page.navigate", url=url)
        await self.wait_for("document.readyState === 'complete'")

    async def evaluate(self, expression: str) -> Any:
        result = await self.send("Runtime.evaluate", expression=expression, awaitPromise=True, returnByValue=True)
        if "exceptionDetails" in result:
            raise RuntimeError(f"{expression!r} threw: {result['exceptionDetails'].get('text')} "
                               f"{(result['exceptionDetails'].get('exception') or {}).get('description')}")
        return result["result"].get("value")

    async def wait_for(self, expression: str, *, timeout: float = 60.0) -> Any:
        deadline = time.monotonic() + timeout
        while True:
            value = await self.evaluate(expression)
            if value:
                return value
            if time.monotonic() > deadline:
                raise TimeoutError(f"waited {timeout:.0f} s for {expression}; console: {self.console[-10:]}")
            await asyncio.sleep(0.05)

    async def click(self, selector: str) -> None:
        await self.evaluate(f"document.querySelector({orjson.dumps(selector).decode()}).click()")

    async def type_into(self, selector: str, text: str) -> None:
        """Set a field's value as typing would (an ``input`` event)."""
        sel, value = orjson.dumps(selector).decode(), orjson.dumps(text).decode()
        await self.evaluate(f"(() => {{ const el = document.querySelector({sel}); el.value = {value}; "
                            "el.dispatchEvent(new Event('input', {bubbles: true})); "
                            "el.dispatchEvent(new Event('change', {bubbles: true})); })()")

    async def screenshot(self, path: Path) -> None:
        data = await self.send("Page.captureScreenshot", format="png")
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(base64.b64decode(data["data"]))

    async def close(self) -> None:
        self._reader.cancel()
        await self.ws.close()
