"""Shared pieces of the loopback benchmarks: processes (a paced engine, a render server in front
of it), what the kernel says about a process (RSS, CPU time), thin streaming HTTP (SSE) and
WebSocket clients, and percentiles. Everything binds and connects to 127.0.0.1 only."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import hashlib
import json
import os
import re
import resource
import subprocess
import sys
import threading
import time
from collections import deque
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from tests.support.server_proc import ServerProcess  # noqa: E402

_CLK_TCK = os.sysconf("SC_CLK_TCK")


# --- the kernel's view of a process ---------------------------------------------------------------

def rss_bytes(pid: int) -> int:
    """Resident set size (``VmRSS``) in bytes."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise RuntimeError(f"no VmRSS for pid {pid}")


def cpu_seconds(pid: int) -> float:
    """CPU time of a process's live threads, in seconds, to the nanosecond (``schedstat``; ``stat``'s
    utime + stime count in 10 ms ticks, too coarse for one short stream). A thread that ended between
    two readings takes its time with it: the servers measured here keep their threads."""
    total = 0
    try:
        for task in Path(f"/proc/{pid}/task").iterdir():
            with contextlib.suppress(OSError):
                total += int((task / "schedstat").read_text().split()[0])
        return total / 1e9
    except OSError:
        stat = Path(f"/proc/{pid}/stat").read_text()
        fields = stat[stat.rindex(")") + 2:].split()
        return (int(fields[11]) + int(fields[12])) / _CLK_TCK  # utime, stime (fields 14 and 15 of stat)


def kernel_seconds(pid: int) -> float:
    """The process's CPU time in the kernel (``stat``'s stime, 10 ms ticks): its system calls, and on
    loopback the receiving side's network processing that runs in the sender's context."""
    stat = Path(f"/proc/{pid}/stat").read_text()
    return int(stat[stat.rindex(")") + 2:].split()[12]) / _CLK_TCK


def model_or_default(arg: str | None) -> Path:
    """A benchmark's ``--model`` directory, or the embedded SmolLM2 (built from the asset cache)."""
    if arg:
        return Path(arg)
    from server.assets import ensure

    return ensure("smollm2-135m-instruct")


def emit(result: Any, out: str | None) -> None:
    """Print a benchmark's JSON document, and write it to ``out`` too when given."""
    text = json.dumps(result, indent=2)
    print(text)
    if out:
        Path(out).parent.mkdir(parents=True, exist_ok=True)
        Path(out).write_text(text + "\n")


def raise_fd_limit(want: int) -> int:
    """Raise this process's open-file limit (children inherit it) towards ``want``; returns the limit."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = want if hard == resource.RLIM_INFINITY else min(want, hard)
    if soft < target:
        resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
        soft = target
    return soft


def pct(values: list[float], q: float) -> float:
    """The ``q`` quantile (nearest rank), NaN for no values."""
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


# --- processes -------------------------------------------------------------------------------------

class PacedEngineProcess:
    """``with PacedEngineProcess(model_dir, step_ms=50) as eng: eng.url`` (see bench/paced_engine.py)."""

    def __init__(self, model_dir: Path, *, step_ms: float) -> None:
        self.args = [sys.executable, "-m", "bench.paced_engine", "--model", str(model_dir), "--step-ms", str(step_ms)]
        self.proc: subprocess.Popen[str] | None = None
        self.url = ""
        self.lines: deque[str] = deque(maxlen=200)

    def __enter__(self) -> PacedEngineProcess:
        self.proc = subprocess.Popen(self.args, cwd=str(ROOT), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                     text=True, bufsize=1)
        ready = threading.Event()

        def pump() -> None:
            assert self.proc is not None and self.proc.stdout is not None
            for line in self.proc.stdout:
                self.lines.append(line.rstrip("\n"))
                m = re.search(r"listening on (http://\S+)", line)
                if m and not self.url:
                    self.url = m.group(1)
                    ready.set()

        threading.Thread(target=pump, daemon=True).start()
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not ready.wait(0.05):
            if self.proc.poll() is not None:
                raise RuntimeError("paced engine exited:\n" + "\n".join(self.lines))
        for _ in range(200):
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(self.url + "/health", timeout=2).status_code == 200:
                    return self
            time.sleep(0.05)
        self.__exit__()
        raise RuntimeError("paced engine did not become healthy:\n" + "\n".join(self.lines))

    def __exit__(self, *exc: object) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def emissions(self) -> tuple[dict[str, int], dict[str, list[int]]]:
        """Arrival time and token emission times (monotonic ns) per engine request id since the last
        call; then forgets them."""
        data = httpx.get(self.url + "/bench/emissions?clear=1", timeout=30).json()
        return data["arrivals"], data["emissions"]


def render_server(model_dir: Path, engine_url: str, *, extra: list[str] | None = None) -> ServerProcess:
    """``tokenwire launch render MODEL --engine-url URL`` (no torch), sessions that outlive the run."""
    args = ["launch", "render", str(model_dir), "--engine-url", engine_url, "--served-model-name", "bench",
            "--log-level", "warning", "--ws-idle-timeout", "3600", *(extra or [])]
    return ServerProcess(args, preamble="import sys\nsys.modules['torch'] = None\n", startup_timeout=120)


# --- a thin HTTP/1.1 streaming client --------------------------------------------------------------

class SseStream:
    """One POST whose answer is an SSE stream, on a connection of its own, with as little client work
    as possible (chunked transfer decoding and event splitting by hand): the figures are the server's."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, host: str) -> None:
        self.reader, self.writer, self.host = reader, writer, host

    @classmethod
    async def connect(cls, base_url: str) -> SseStream:
        hostport = base_url.split("://", 1)[1].rstrip("/")
        host, port = hostport.rsplit(":", 1)
        reader, writer = await asyncio.open_connection(host, int(port), limit=1 << 20)
        return cls(reader, writer, hostport)

    def send(self, path: str, body: bytes) -> None:
        self.writer.write((f"POST {path} HTTP/1.1\r\nHost: {self.host}\r\nContent-Type: application/json\r\n"
                           f"Accept: text/event-stream\r\nContent-Length: {len(body)}\r\n\r\n").encode() + body)

    async def events(self) -> AsyncIterator[bytes]:
        """The ``data:`` payloads of the answer, as they arrive (``[DONE]`` included)."""
        head = await self.reader.readuntil(b"\r\n\r\n")
        if head[9:12] != b"200":
            rest = await self.reader.read(2000)
            raise RuntimeError(f"HTTP {head[9:12].decode()}: {(head + rest)[:600]!r}")
        chunked = b"transfer-encoding: chunked" in head.lower()
        buf = b""
        while True:
            if chunked:
                size = int((await self.reader.readuntil(b"\r\n")).strip(), 16)
                if size == 0:
                    await self.reader.readuntil(b"\r\n")
                    return
                buf += await self.reader.readexactly(size + 2)
                buf = buf[:-2]
            else:
                data = await self.reader.read(65536)
                if not data:
                    return
                buf += data
            while b"\n\n" in buf:
                event, buf = buf.split(b"\n\n", 1)
                for line in event.split(b"\n"):
                    if line.startswith(b"data: "):
                        yield line[6:]

    def close(self) -> None:
        self.writer.close()


class WsStream:
    """One WebSocket on a connection of its own, with as little client work as :class:`SseStream`:
    the upgrade and the frames (RFC 6455) by hand, no library between the socket and the payload,
    so the figures are the server's (the ``websockets`` client costs several times more per frame).
    Text messages only; pings are answered; a close frame ends :meth:`recv` with None."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer = reader, writer

    @classmethod
    async def connect(cls, ws_url: str, subprotocol: str) -> WsStream:
        hostport, _, path = ws_url.split("://", 1)[1].partition("/")
        host, port = hostport.rsplit(":", 1)
        reader, writer = await asyncio.open_connection(host, int(port), limit=1 << 24)
        key = base64.b64encode(os.urandom(16)).decode()
        writer.write((f"GET /{path} HTTP/1.1\r\nHost: {hostport}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
                      f"Sec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n"
                      f"Sec-WebSocket-Protocol: {subprotocol}\r\n\r\n").encode())
        head = await reader.readuntil(b"\r\n\r\n")
        accept = base64.b64encode(hashlib.sha1((key + _WS_GUID).encode()).digest())
        if head[9:12] != b"101" or b"sec-websocket-accept: " + accept.lower() not in head.lower():
            writer.close()
            raise RuntimeError(f"WebSocket upgrade refused: {head[:300]!r}")
        return cls(reader, writer)

    async def send(self, payload: bytes) -> None:
        """Send one text message (written at once; a coroutine only to match a library client)."""
        self.writer.write(_client_frame(0x1, payload))

    async def recv(self) -> bytes | None:
        """The next text (or binary) message's payload; None once the server closed."""
        parts: list[bytes] = []
        read = self.reader.readexactly
        while True:
            b0, b1 = await read(2)
            n = b1 & 0x7F
            if n == 126:
                n = int.from_bytes(await read(2), "big")
            elif n == 127:
                n = int.from_bytes(await read(8), "big")
            payload = await read(n) if n else b""
            op = b0 & 0x0F
            if op == 0x8:  # close: answer it, as the RFC asks
                with contextlib.suppress(OSError):
                    self.writer.write(_client_frame(0x8, payload[:2]))
                return None
            if op == 0x9:
                self.writer.write(_client_frame(0xA, payload))
                continue
            if op == 0xA:
                continue
            parts.append(payload)
            if b0 & 0x80:  # FIN: the message is whole
                return parts[0] if len(parts) == 1 else b"".join(parts)

    async def close(self) -> None:
        with contextlib.suppress(OSError):
            self.writer.write(_client_frame(0x8, (1000).to_bytes(2, "big")))
        self.writer.close()


_WS_GUID = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"


def _client_frame(opcode: int, payload: bytes) -> bytes:
    """One final client frame: masked, as RFC 6455 §5.3 requires of a client."""
    n = len(payload)
    if n < 126:
        head = bytes((0x80 | opcode, 0x80 | n))
    elif n < 65536:
        head = bytes((0x80 | opcode, 0x80 | 126)) + n.to_bytes(2, "big")
    else:
        head = bytes((0x80 | opcode, 0x80 | 127)) + n.to_bytes(8, "big")
    mask = os.urandom(4)
    key = (mask * (n // 4 + 1))[:n]
    masked = (int.from_bytes(payload, "big") ^ int.from_bytes(key, "big")).to_bytes(n, "big") if n else b""
    return head + mask + masked


@contextlib.contextmanager
def event_loop_policy() -> Iterator[str]:
    """uvloop for the benchmark client when installed (less client overhead); yields its name."""
    try:
        import uvloop
    except ImportError:
        yield "asyncio"
        return
    old = asyncio.get_event_loop_policy()
    asyncio.set_event_loop_policy(uvloop.EventLoopPolicy())
    try:
        yield "uvloop"
    finally:
        asyncio.set_event_loop_policy(old)
