"""Scripted HTTP answers on a real loopback socket, for tests of ``RemoteEngine`` (engine/remote.py)
that need an engine answering one exact way: a handler ``async (httpx.Request) -> httpx.Response``
(httpx only builds the values; nothing here is an httpx transport) is served by a small HTTP/1.1
server on a thread with its own event loop, keep-alive, as uvicorn serves: an ``text/event-stream``
answer goes out chunked, one chunk per event (each written and drained on its own, so a client reads
them as they come), any other with a ``Content-Length``. A handler that raises drops the connection
without an answer; an event-stream answer with ``extensions={"hang_after": k}`` stops after its
first ``k`` events and says nothing more (an engine still generating), until the client leaves.
:func:`refused_url` is an address where nothing listens.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import threading
from collections.abc import Awaitable, Callable

import httpx

Handler = Callable[[httpx.Request], Awaitable[httpx.Response]]
_SERVERS: list[AnswerServer] = []


class AnswerServer:
    def __init__(self, handler: Handler) -> None:
        self.handler = handler
        self.url = ""
        self.connections = 0  # TCP connections accepted (keep-alive reuses them)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._server: asyncio.Server | None = None
        self._thread: threading.Thread | None = None

    def start(self) -> AnswerServer:
        ready = threading.Event()

        def main() -> None:
            loop = self._loop = asyncio.new_event_loop()
            self._server = loop.run_until_complete(asyncio.start_server(self._serve, "127.0.0.1", 0))
            port = self._server.sockets[0].getsockname()[1]
            self.url = f"http://127.0.0.1:{port}"
            ready.set()
            loop.run_forever()
            self._server.close()
            for task in asyncio.all_tasks(loop):
                task.cancel()
            with contextlib.suppress(Exception):
                loop.run_until_complete(asyncio.sleep(0))
            loop.close()

        self._thread = threading.Thread(target=main, daemon=True, name="scripted HTTP answers")
        self._thread.start()
        ready.wait(10)
        _SERVERS.append(self)
        return self

    def stop(self) -> None:
        if self._loop is not None and self._thread is not None:
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(10)
            self._loop = None

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        try:
            while True:
                try:
                    head = await reader.readuntil(b"\r\n\r\n")
                except (asyncio.IncompleteReadError, ConnectionError):
                    return
                lines = head.decode("latin-1").split("\r\n")
                method, target, _ = lines[0].split(" ", 2)
                headers = [(name.strip(), value.strip()) for name, _, value in
                           (line.partition(":") for line in lines[1:] if line)]
                length = int(next((v for k, v in headers if k.lower() == "content-length"), "0"))
                body = await reader.readexactly(length) if length else b""
                request = httpx.Request(method, self.url + target, headers=headers, content=body)
                try:
                    response = await self.handler(request)
                except Exception:
                    return  # a dropped connection, no answer
                await _write(writer, response)
        finally:
            writer.close()


async def _write(writer: asyncio.StreamWriter, response: httpx.Response) -> None:
    content = response.content
    skip = {"content-length", "transfer-encoding", "connection"}
    head = f"HTTP/1.1 {response.status_code} {response.reason_phrase}\r\n" + "".join(
        f"{k}: {v}\r\n" for k, v in response.headers.items() if k.lower() not in skip)
    if "text/event-stream" in response.headers.get("content-type", ""):
        writer.write((head + "transfer-encoding: chunked\r\n\r\n").encode("latin-1"))
        await writer.drain()
        events = [e + b"\n\n" for e in content.split(b"\n\n") if e]
        hang_after = response.extensions.get("hang_after")
        for k, event in enumerate(events):
            if k == hang_after:
                await asyncio.sleep(3600)
            writer.write(b"%x\r\n%s\r\n" % (len(event), event))
            await writer.drain()
        writer.write(b"0\r\n\r\n")
    else:
        writer.write((head + f"content-length: {len(content)}\r\n\r\n").encode("latin-1") + content)
    await writer.drain()


def serve(handler: Handler) -> str:
    """``handler`` on a loopback socket until :func:`stop_all`; its base URL."""
    return AnswerServer(handler).start().url


def stop_all() -> None:
    while _SERVERS:
        _SERVERS.pop().stop()


def refused_url() -> str:
    """An address on this machine where nothing listens (a connection to it is refused)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return f"http://127.0.0.1:{port}"
