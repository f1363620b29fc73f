"""What the server's own Python costs per streamed WebSocket token, in one process, without sockets.

``bench/streams_bench.py`` measures the whole server process over real sockets; its figure mixes
the server's Python with the kernel's work for every write (on loopback, the receiver's too) and
varies with the load on a shared machine. This benchmark isolates the Python: ``--streams``
WebSocket sessions, each a real session machine and :class:`server.ws.connection.Connection`
writing to a transport that only counts bytes, each with one ``chat`` request through the real
pipeline (render, admission, the engine stream's step-wise ``listen`` path, incremental derender,
``chat.delta`` frames, the end-of-tick flush). A scripted engine delivers one token per stream per
step through the same :class:`engine.outbox.OutboxStream` the engine link and the local engine use,
as a link's ``batch`` message would.

``--step-ms`` paces the steps; ``--evict-mb 64`` writes over 64 MiB between steps, so that every
step starts with cold caches as a paced step does on a shared host, whatever the neighbours do
(docs/benchmarks.md, "The server's Python per token").

Reported: CPU µs per token for the steady steps (every stream mid-stream) and for the whole run
(requests' render, admission and done frames included), the best of ``--rounds``. ``--profile``
adds a cProfile table of the steady steps (its overhead inflates the figures; read its shares).

    .venv/bin/python -m bench.fanout_bench [--streams 256] [--tokens 128] [--rounds 5] [--profile]
        [--step-ms 1 --evict-mb 64]
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import io
import pstats
import sys
import time
from pathlib import Path
from typing import Any

import anyio
import orjson

from bench.loopback import emit, model_or_default
from bench.paced_engine import word_token_ids
from engine.interface import ChoiceDelta, EngineHealth, EngineOutput, EngineStream
from engine.outbox import Outbox, OutboxStream
from engine.protocol import GenerateRequest, UsageInfo
from server.context import build_context
from server.gating import decide
from server.heap import settle_heap_for_serving
from server.services import build_services
from server.settings import Mode, Settings
from server.ws.connection import Connection
from session.machine import Session


class StepEngine:
    """Admits every request at once; :meth:`step` gives each live request its next token."""

    def __init__(self, token_ids: list[int], tokens: int) -> None:
        self.ids = token_ids
        self.tokens = tokens
        self.live: dict[str, tuple[Outbox, GenerateRequest, list[int]]] = {}

    def generate(self, request: GenerateRequest) -> EngineStream:
        rid = request.request_id or ""

        async def start() -> Outbox:
            box = Outbox()
            self.live[rid] = (box, request, [0])
            return box

        async def abort() -> None:
            self.live.pop(rid, None)

        return OutboxStream(start, forget=lambda: None, abort=abort)

    def step(self) -> int:
        for rid, (box, request, k) in list(self.live.items()):
            i = k[0] = k[0] + 1
            last = i == self.tokens
            box.push(EngineOutput(rid, [ChoiceDelta(0, [self.ids[i % len(self.ids)]],
                                                    finish_reason="length" if last else None)],
                                  finished=last, usage=UsageInfo.of(len(request.token_ids), i) if last else None))
            if last:
                del self.live[rid]
        return len(self.live)

    # the rest of the Engine protocol, unused here
    async def start(self) -> None: ...
    async def shutdown(self) -> None: ...
    async def abort(self, request_ids: list[str]) -> None: ...
    async def health(self) -> EngineHealth:
        return EngineHealth(ok=True)

    def live_sequences(self) -> int:
        return len(self.live)


class CountingTransport:
    def __init__(self) -> None:
        self.bytes = 0
        self.writes = 0

    def write(self, data: bytes) -> None:
        self.bytes += len(data)
        self.writes += 1


class CountingWriter:
    """The :class:`server.ws.transport.FrameWriter` surface a connection uses, over a counting
    transport that always takes more (the frame headers are built as the real writer does)."""

    ready = True
    backed_up = False
    closed = False

    def __init__(self, transport: CountingTransport) -> None:
        from server.ws.transport import text_frame

        self._frame = text_frame
        self._transport = transport

    def write_one(self, payload: bytes) -> None:
        self._transport.write(self._frame(payload))

    def write(self, payloads: list[bytes]) -> bool:
        self._transport.write(b"".join([self._frame(p) for p in payloads]))
        return True

    async def drained(self) -> None:
        return None


class Evictor:
    """Writes one byte of every cache line of ``mb`` MiB: whatever the steps had in the caches is
    gone afterwards (a deterministic stand-in for the neighbours of a shared host)."""

    def __init__(self, mb: int) -> None:
        self.memory = bytearray(mb << 20)
        self.zeros = bytes(len(self.memory) // 64)

    def sweep(self) -> None:
        self.memory[::64] = self.zeros


async def _round(model: Path, streams: int, tokens: int, profile: cProfile.Profile | None,
                 step_s: float = 0.0, evictor: Evictor | None = None) -> dict[str, Any]:
    settings = Settings(mode=Mode.RENDER, model_dir=model, served_model_name="bench", engine_url="ws://unused",
                        state_secret=b"bench-secret-0123456789-abcdefghijklmnopqrstuvwxyz")
    engine = StepEngine(word_token_ids(model), tokens)
    ctx = build_context(settings, decide(Mode.RENDER, {}, has_engine_url=True), engine=engine)  # type: ignore[arg-type]
    services = build_services(ctx)
    settle_heap_for_serving()  # the collector as the server sets it before its first request
    transport = CountingTransport()
    loop = asyncio.get_running_loop()
    async with anyio.create_task_group() as tg:
        conns = []
        for _ in range(streams):
            conn = Connection(None, Session(services.session, now=loop.time()), services.stages,  # type: ignore[arg-type]
                              direct=CountingWriter(transport),  # type: ignore[arg-type]
                              ticks=services.ws_ticks)  # one end-of-tick for all, as the endpoint's
            conn._loop, conn._now, conn._tg = loop, loop.time, tg  # what ``run`` binds
            conn.carry_out()  # session.created
            conns.append(conn)
        cpu0 = time.process_time()
        for i, conn in enumerate(conns):
            body = {"messages": [{"role": "user", "content": f"Tell me a story, number {i}."}],
                    "max_tokens": tokens, "ignore_eos": True}
            conn.session.receive_text(orjson.dumps({"type": "chat", "id": "c", "body": body}), now=loop.time())
            conn.carry_out()
        while len(engine.live) < streams:  # every request rendered and admitted
            await asyncio.sleep(0)
        engine.step()  # the first token: each request's task primes its stream, then listens
        for _ in range(20):
            await asyncio.sleep(0)
        steady_cpu, steady_tokens = 0.0, 0
        while engine.live:
            if profile is not None:
                profile.enable()
            t = time.process_time()
            live = len(engine.live)
            engine.step()
            await asyncio.sleep(0)  # the end-of-tick flush
            if engine.live:  # a mid-stream step (the last one also finishes every request)
                steady_cpu += time.process_time() - t
                steady_tokens += live
            if profile is not None:
                profile.disable()
            if evictor is not None:
                evictor.sweep()
            if step_s:
                await asyncio.sleep(step_s)  # paced steps: other processes run between them
        for _ in range(50):  # the requests' tasks end and send their done frames
            await asyncio.sleep(0)
        total_cpu = time.process_time() - cpu0
        done = sum(1 for conn in conns if conn.session.in_flight == 0)
        tg.cancel_scope.cancel()
    if done != streams:
        raise RuntimeError(f"only {done} of {streams} streams finished")
    return {"steady_us_per_token": round(steady_cpu / steady_tokens * 1e6, 2),
            "whole_us_per_token": round(total_cpu / (streams * tokens) * 1e6, 2),
            "bytes_per_token": round(transport.bytes / (streams * tokens), 1),
            "writes_per_token": round(transport.writes / (streams * tokens), 3)}


def run(model: Path, streams: int, tokens: int, rounds: int, profile: bool = False,
        step_ms: float = 0.0, evict_mb: int = 0) -> dict[str, Any]:
    results, prof = [], cProfile.Profile() if profile else None
    evictor = Evictor(evict_mb) if evict_mb else None
    for _ in range(rounds):
        results.append(asyncio.run(_round(model, streams, tokens, prof, step_ms / 1e3, evictor)))
    best = min(results, key=lambda r: r["steady_us_per_token"])
    out: dict[str, Any] = {"benchmark": "fanout_in_process", "model": model.name, "streams": streams,
                           "tokens_per_stream": tokens, "step_ms": step_ms, "evict_mb": evict_mb, "rounds": rounds, "best": best, "all": results}
    if prof is not None:
        text = io.StringIO()
        pstats.Stats(prof, stream=text).sort_stats("tottime").print_stats(30)
        out["profile"] = text.getvalue()
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default=None, help="model directory (tokenizer); default: the embedded SmolLM2")
    p.add_argument("--streams", type=int, default=256)
    p.add_argument("--tokens", type=int, default=128)
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--profile", action="store_true", help="print a cProfile table of the steady steps")
    p.add_argument("--step-ms", type=float, default=0.0,
                   help="sleep this long between steps (0: back to back, caches warm)")
    p.add_argument("--evict-mb", type=int, default=0,
                   help="between steps, write over this many MiB (64: every step starts with cold caches, "
                        "as on a shared host, but steadier)")
    p.add_argument("--out", default=None)
    a = p.parse_args(argv)
    model = model_or_default(a.model)
    if a.evict_mb < 0:
        p.error("--evict-mb: 0 or more")
    result = run(model, a.streams, a.tokens, a.rounds, a.profile, a.step_ms, a.evict_mb)
    profile = result.pop("profile", None)
    emit(result, a.out)
    if profile:
        print(profile, file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
