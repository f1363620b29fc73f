"""Helpers for the client SDK tests: a TCP proxy that can cut, stall or refuse connections, and the
server arguments the tests share."""

from __future__ import annotations

import asyncio
import contextlib
import threading
from pathlib import Path
from typing import Any

import httpx

from tests.support.waiting import wait_until

SECRET = "client-tests-secret-0123456789-abcdefghijklmnopqrstuvwxyz"
TOOLS = [{"type": "function", "function": {
    "name": "get_weather", "description": "Weather for a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}]
TOOL_SCRIPT = ("<think>\nThe user wants the weather.\n</think>\n\nLet me check.\n<tool_call>\n"
               '{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>')


def serve_args(model: Path, *extra: str) -> list[str]:
    return ["serve", str(model), "--enable-scale-out", "--tool-call-parser", "hermes", "--enable-auto-tool-choice",
            "--dtype", "float32", "--state-secret", SECRET, *extra]


class TcpProxy:
    """Forwards 127.0.0.1:<port> to ``target`` on its own thread and event loop.

    - :meth:`cut` aborts every live connection (as a network failure would: no closing handshake);
    - :meth:`stall` stops forwarding (bytes wait) until :meth:`release`;
    - ``refuse_websocket=True`` answers WebSocket upgrades with ``403`` and an HTML page, as a
      proxy that blocks WebSockets does, and forwards everything else.
    """

    def __init__(self, target: str, *, refuse_websocket: bool = False) -> None:
        host, _, port = target.split("//")[-1].partition(":")
        self.target = (host, int(port))
        self.refuse_websocket = refuse_websocket
        self.connections = 0
        self.refused = 0
        self.url = ""
        self._loop = asyncio.new_event_loop()
        self._writers: set[asyncio.StreamWriter] = set()
        self._flowing = asyncio.Event()
        self._server: asyncio.Server | None = None
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)

    def __enter__(self) -> TcpProxy:
        self._thread.start()
        self._call(self._start())
        return self

    def __exit__(self, *exc: object) -> None:
        self._call(self._stop())
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(5)

    def _call(self, coro: Any) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result(30)

    async def _start(self) -> None:
        self._flowing.set()
        self._server = await asyncio.start_server(self._handle, "127.0.0.1", 0)
        self.url = f"http://127.0.0.1:{self._server.sockets[0].getsockname()[1]}"

    async def _stop(self) -> None:
        await self._cut()
        if self._server is not None:
            self._server.close()

    def cut(self) -> None:
        self._call(self._cut())

    async def _cut(self) -> None:
        for writer in list(self._writers):
            writer.transport.abort()
        self._writers.clear()

    def stall(self) -> None:
        self._loop.call_soon_threadsafe(self._flowing.clear)

    def release(self) -> None:
        self._loop.call_soon_threadsafe(self._flowing.set)

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        head = await reader.readuntil(b"\r\n\r\n")
        if self.refuse_websocket and b"upgrade: websocket" in head.lower():
            self.refused += 1
            body = b"<html><body>WebSockets are not allowed here</body></html>"
            writer.write(b"HTTP/1.1 403 Forbidden\r\nContent-Type: text/html\r\nContent-Length: "
                         + str(len(body)).encode() + b"\r\nConnection: close\r\n\r\n" + body)
            await writer.drain()
            writer.close()
            return
        try:
            up_reader, up_writer = await asyncio.open_connection(*self.target)
        except OSError:
            writer.transport.abort()
            return
        self._writers.update((writer, up_writer))
        up_writer.write(head)
        await asyncio.gather(self._pipe(reader, up_writer), self._pipe(up_reader, writer))
        self._writers.discard(writer)
        self._writers.discard(up_writer)

    async def _pipe(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        with contextlib.suppress(OSError, asyncio.IncompleteReadError, ConnectionError):
            while data := await reader.read(65536):
                await self._flowing.wait()
                writer.write(data)
                await writer.drain()
        with contextlib.suppress(OSError, RuntimeError):
            writer.close()


def live_sequences(url: str) -> int:
    return int(httpx.get(url + "/health", timeout=10).json()["live_sequences"])


def wait_idle(url: str, timeout: float = 30.0) -> None:
    """Until the server's engine holds no sequence (an abort reaches it asynchronously); fails past
    ``timeout``."""
    wait_until(lambda: live_sequences(url) == 0, "the engine to hold no sequence", timeout=timeout,
               detail=lambda: f"{live_sequences(url)} live")

