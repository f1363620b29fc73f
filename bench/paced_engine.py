"""A fast, paced tokens-only engine for benchmarking the server in front of it.

It speaks vLLM 0.32's ``/inference/v1/generate`` (SSE, usage chunk, ``[DONE]``; JSON too), so
``tokenwire launch render --engine-url`` (or a client) talks to it as to ``serve --tokens-only``
or vLLM, but it runs no model: every request gets exactly ``max_tokens`` tokens, one per engine
step, on a global step clock (``--step-ms``) shared by all streams, as a batched engine would
emit them. Token ids are single-token words of the model's tokenizer, so the text derenders
without hold-back. The server's own cost and latency are what a benchmark then sees.

It also serves tokenwire's engine link (``/v1/session`` with ``generate`` / ``cancel`` frames, the
``tokenwire.batch`` subprotocol: docs/protocol.md), as ``serve --tokens-only`` does, so a front end
started with ``--engine-url ws://…`` reads one batch message per step and socket; the pacing and
the recorded emissions are the same on both wires.

Each emitted chunk's ``time.monotonic_ns()`` (CLOCK_MONOTONIC, comparable across processes on one
Linux machine) is recorded under the request id, as is each request's arrival time; ``GET /bench/emissions`` returns
them (``?clear=1`` forgets them), so a client can measure one-way latency to the engine and from it.

A copy of ``tests/support/scripted_engine.py`` with pacing instead of faults, run as its own
process (so its work does not share the benchmark client's interpreter):

    .venv/bin/python -m bench.paced_engine --model DIR [--step-ms 50] [--port 0]

prints ``paced engine: listening on http://127.0.0.1:PORT`` once it serves.
"""

from __future__ import annotations

import argparse
import asyncio
import math
import socket
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import orjson
import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse
from starlette.routing import Route, WebSocketRoute
from starlette.websockets import WebSocket, WebSocketDisconnect

WORDS = tuple("""
the of and to in is was for on that with as by at from his her which or had are this but not one all
were when there can more an been would who will their has if no so out up said what its about into
than them only other new some could time these two may then do first any my now such like our over
man me even most made after also did many before must through back years where much your way well
down should because each just those people how too little state good very make world still own see
men work long get here between both life being under never day same another know while last might
us great old year off come since against go came right used take three
""".split())  # noqa: SIM905 (a word list reads better as text)


def word_token_ids(model_dir: Path) -> list[int]:
    """Ids of ``" word"`` pieces that are one token each in the model's tokenizer."""
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(str(model_dir / "tokenizer.json"))
    ids = []
    for w in WORDS:
        enc = tok.encode(" " + w, add_special_tokens=False).ids
        if len(enc) == 1:
            ids.append(enc[0])
    if len(ids) < 16:
        raise SystemExit(f"{model_dir}: too few single-token words for a paced engine ({len(ids)})")
    return ids


class PacedEngine:
    def __init__(self, token_ids: list[int], step_s: float) -> None:
        self.token_ids = token_ids
        self.step_s = step_s
        self.emissions: dict[str, list[int]] = {}
        self.arrivals: dict[str, int] = {}
        self.aborted = 0
        self._links: set[_LinkSocket] = set()
        self._ticker: asyncio.Task[None] | None = None

    def _next_tick(self, after: int) -> int:
        """The index of the first step boundary after now, and after step ``after``."""
        return max(after + 1, math.floor(time.monotonic() / self.step_s) + 1)

    def _ids(self, n: int, offset: int) -> list[int]:
        words = self.token_ids
        return [words[(offset + k) % len(words)] for k in range(n)]

    def app(self) -> Starlette:
        async def generate(request: Request) -> Response:
            arrived = time.monotonic_ns()
            body = orjson.loads(await request.body())
            rid = str(body.get("request_id") or f"paced-{arrived}")
            self.arrivals[rid] = arrived
            sp = body.get("sampling_params") or {}
            n_tokens = int(sp.get("max_tokens") or 16)
            prompt = body.get("token_ids") or [0]
            ids = self._ids(n_tokens, len(prompt))
            usage = {"prompt_tokens": len(prompt), "completion_tokens": n_tokens,
                     "total_tokens": len(prompt) + n_tokens}
            wire_id = "generate-tokens-" + rid
            if not body.get("stream"):
                await asyncio.sleep(self.step_s * n_tokens)
                return Response(orjson.dumps({
                    "request_id": wire_id, "model": "paced", "created": int(time.time()), "usage": usage,
                    "output_mode": "tokens", "choices": [{"index": 0, "finish_reason": "length", "stop_reason": None,
                                                          "token_ids": ids, "logprobs": None}]}),
                                media_type="application/json")
            stamps = self.emissions.setdefault(rid, [])

            async def events() -> AsyncIterator[bytes]:
                tick = -1
                for k, tid in enumerate(ids):
                    # one token per step boundary: never two in one step (a timer may fire a little
                    # early), and a stream that fell behind skips to the next step, as an engine would
                    tick = self._next_tick(tick)
                    delay = tick * self.step_s - time.monotonic()
                    if delay > 0:
                        await asyncio.sleep(delay)
                    last = k == len(ids) - 1
                    chunk = b"data: " + orjson.dumps({
                        "request_id": wire_id, "usage": None, "output_mode": "tokens",
                        "choices": [{"index": 0, "finish_reason": "length" if last else None, "stop_reason": None,
                                     "token_ids": [tid], "logprobs": None}]}) + b"\n\n"
                    stamps.append(time.monotonic_ns())
                    yield chunk
                yield b"data: " + orjson.dumps({"request_id": wire_id, "usage": usage, "output_mode": "tokens",
                                                "choices": []}) + b"\n\n"
                yield b"data: [DONE]\n\n"

            return StreamingResponse(events(), media_type="text/event-stream")

        async def abort(request: Request) -> Response:
            self.aborted += len(orjson.loads(await request.body()).get("request_ids", []))
            return Response(b"")

        async def health(request: Request) -> Response:
            return Response(b"{}", media_type="application/json")

        async def emissions(request: Request) -> Response:
            out = orjson.dumps({"emissions": self.emissions, "arrivals": self.arrivals, "aborted": self.aborted})
            if request.query_params.get("clear"):
                self.emissions = {}
                self.arrivals = {}
                self.aborted = 0
            return Response(out, media_type="application/json")

        async def session(ws: WebSocket) -> None:
            offered = ws.scope.get("subprotocols") or []
            await ws.accept(subprotocol="tokenwire.v1" if "tokenwire.v1" in offered else None)
            link = _LinkSocket(self, ws, batch="tokenwire.batch" in offered)
            await ws.send_text(orjson.dumps({
                "type": "session.created", "seq": 0, "event_id": None, "session_id": f"paced-{id(link)}",
                "protocol": 1, "server": {"name": "paced"}, "frames": ["generate", "cancel"],
                "limits": {"max_frame_bytes": 1 << 24, "max_in_flight": 4096}, "session": {}}).decode())
            self._links.add(link)
            if self._ticker is None:
                self._ticker = asyncio.get_running_loop().create_task(self._tick_forever())
            try:
                while True:
                    frame = orjson.loads(await ws.receive_text())
                    link.receive(frame)
            except WebSocketDisconnect:
                pass
            finally:
                self._links.discard(link)

        return Starlette(routes=[WebSocketRoute("/v1/session", session),
                                 Route("/inference/v1/generate", generate, methods=["POST"]),
                                 Route("/abort_requests", abort, methods=["POST"]),
                                 Route("/health", health, methods=["GET"]),
                                 Route("/bench/emissions", emissions, methods=["GET"])])


    async def _tick_forever(self) -> None:
        """The engine's step clock for link sockets: at each step boundary every active request of
        every socket gets its next token, each socket's frames leaving as one message."""
        tick = -1
        while True:
            tick = self._next_tick(tick)
            delay = tick * self.step_s - time.monotonic()
            if delay > 0:
                await asyncio.sleep(delay)
            for link in list(self._links):
                await link.step(tick)


class _LinkSocket:
    """One engine-link socket of the paced engine: its requests and its outgoing frames."""

    def __init__(self, engine: PacedEngine, ws: WebSocket, *, batch: bool) -> None:
        self.engine = engine
        self.ws = ws
        self.batch = batch
        self.seq = 0
        self.active: dict[str, dict[str, Any]] = {}  # frame id → {ids, k, wire_id, stamps, prompt, start}
        self.out: list[dict[str, Any]] = []

    def receive(self, frame: dict[str, Any]) -> None:
        kind, fid = frame.get("type"), str(frame.get("id"))
        if kind == "generate":
            body = frame.get("body") or {}
            arrived = time.monotonic_ns()
            rid = str(body.get("request_id") or f"paced-{arrived}")
            self.engine.arrivals[rid] = arrived
            prompt = body.get("token_ids") or [0]
            n_tokens = int((body.get("sampling_params") or {}).get("max_tokens") or 16)
            self.active[fid] = {"ids": self.engine._ids(n_tokens, len(prompt)), "k": 0, "prompt": len(prompt),
                                "wire_id": "generate-tokens-" + rid, "stamps": self.engine.emissions.setdefault(rid, []),
                                "start": math.floor(time.monotonic() / self.engine.step_s) + 1}
        elif kind == "cancel" and fid in self.active:
            del self.active[fid]
            self.engine.aborted += 1
            self.out.append({"type": "generate.done", "id": fid, "status": "cancelled", "usage": None})

    async def step(self, tick: int) -> None:
        for fid, req in list(self.active.items()):
            if tick < req["start"]:
                continue
            k, ids = req["k"], req["ids"]
            last = k == len(ids) - 1
            self.out.append({"type": "generate.delta", "id": fid, "chunk": {
                "request_id": req["wire_id"], "usage": None, "output_mode": "tokens",
                "choices": [{"index": 0, "finish_reason": "length" if last else None, "stop_reason": None,
                             "token_ids": [ids[k]], "logprobs": None}]}})
            req["stamps"].append(time.monotonic_ns())
            req["k"] = k + 1
            if last:
                del self.active[fid]
                n = len(ids)
                self.out.append({"type": "generate.done", "id": fid, "status": "completed", "usage": {
                    "prompt_tokens": req["prompt"], "completion_tokens": n, "total_tokens": req["prompt"] + n}})
        if not self.out:
            return
        frames, self.out = self.out, []
        for frame in frames:
            self.seq += 1
            frame["seq"] = self.seq
            frame["event_id"] = None
        try:
            if self.batch and len(frames) > 1:
                await self.ws.send_text(orjson.dumps({"type": "batch", "frames": frames}).decode())
            else:
                for frame in frames:
                    await self.ws.send_text(orjson.dumps(frame).decode())
        except (WebSocketDisconnect, RuntimeError, OSError):
            self.active.clear()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    p.add_argument("--model", required=True, help="model directory whose tokenizer.json names the token ids")
    p.add_argument("--step-ms", type=float, default=50.0, help="engine step: one token per stream per step")
    p.add_argument("--port", type=int, default=0)
    args = p.parse_args(argv)
    engine = PacedEngine(word_token_ids(Path(args.model)), args.step_ms / 1e3)
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", args.port))
    config = uvicorn.Config(engine.app(), log_level="warning", lifespan="off", backlog=4096,
                            timeout_keep_alive=600)
    server = uvicorn.Server(config)
    print(f"paced engine: listening on http://127.0.0.1:{sock.getsockname()[1]}", flush=True)
    server.run(sockets=[sock])
    return 0


if __name__ == "__main__":
    sys.exit(main())
