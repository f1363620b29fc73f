"""A scripted tokens-only engine on a real socket, over both engine transports, for tests that need
specific model output (tool calls, reasoning) which the tiny random models cannot produce, or an
engine that misbehaves on cue: the project's fake-engine suite (issue 39).

- ``http://`` (:attr:`ScriptedEngine.url`): the real ``/inference/v1/generate`` protocol (JSON and
  SSE, usage chunk, ``[DONE]``), ``/abort_requests`` and ``/health``, so ``RemoteEngine`` and
  ``tokenwire launch render --engine-url`` talk to it exactly as to ``serve --tokens-only`` or vLLM;
- ``ws://`` (:attr:`ScriptedEngine.ws_url`): the engine link, a ``/v1/session`` WebSocket that
  announces ``generate`` frames and answers each with ``generate.delta`` frames and a
  ``generate.done`` (the last two as one ``batch`` message, as ``serve --tokens-only`` writes a
  step), ``cancel`` recorded in :attr:`aborted`, so ``LinkEngine`` talks to it as to a tokenwire engine.

Only the token ids are scripted: every request gets the script, cut at ``max_tokens``, ``step`` ids
per event. It runs on a thread of the test process (uvicorn), so an in-process front end (Starlette's
TestClient, tests/app) can use it as well as a front-end process.

Faults (set :attr:`ScriptedEngine.fault` at any time; ``None`` behaves). Each means the same on
both transports where it can:

- ``"hang"``: accepts the request and never answers (its WebSocket pings go on, every 0.1 s: a link
  that looks alive is no progress for a request);
  ``"hang_after_one"`` (alias ``"hang_mid_stream"``): one event, then nothing;
- ``"wrong_id"``: the outputs name another request (a frame ``id`` the link never sent: its request
  hears nothing; over HTTP the connection, not the id, says whose answer it is);
  ``"crossed_id"``: the right frame ``id`` but a chunk whose ``request_id`` is another request's;
- malformed outputs, in the first event: ``"ids_string"``, ``"ids_float"``, ``"ids_nested"``,
  ``"ids_null"`` (one token id is ``"42"``, ``42.0``, ``[42]``, ``null``), ``"ids_negative"``,
  ``"ids_out_of_vocab"``, ``"index_string"`` (``"index": "0"``), ``"index_out_of_range"``,
  ``"too_many_tokens"`` (past ``max_tokens``), ``"finish_reason_text"`` (a finish reason that is
  free text, :data:`LEAK`), ``"bad_usage"`` (counts that are strings);
- ``"oversized"``: a first event of :data:`OVERSIZED` bytes (past what the request may receive,
  under the link's 16 MiB); ``"oversized_huge"``: one of :data:`HUGE` bytes (past 16 MiB);
- error answers whose text carries internal addresses (:data:`LEAK`): ``"leaky_400"``,
  ``"leaky_503"``, ``"leaky_500"`` (an HTTP status, or an ``error`` frame with that status), and
  ``"leaky_mid_stream"`` (one event, then an SSE error event / an ``error`` frame);
- ``"status_500"``: generate answers HTTP 500 (over the link: an ``error`` frame, status 500);
- ``"garbage"``: a first event that is not JSON (over the link: a message that is not JSON);
  ``"wrong_shape"``: JSON that is not a generate chunk;
- ``"die_mid_stream"``: one event, then the connection drops;
- ``"unhealthy"``: ``/health`` answers 503.

:meth:`stop` and :meth:`start` take the engine down and bring it back on the same port (a remote
engine that dies and returns).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import socket
import threading
import time
from collections.abc import AsyncIterator
from typing import Any

import orjson
import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse
from starlette.routing import Route, WebSocketRoute
from starlette.websockets import WebSocket, WebSocketDisconnect

from tests.support.waiting import wait_until

# Internal addresses and paths an engine's error text may carry; a client must never see any of them.
LEAK = "upstream 10.20.30.40:8000 (engine-7.cluster.internal) failed: see /srv/engine/worker.py line 12"
LEAK_MARKERS = ("10.20.30.40", "engine-7.cluster.internal", "/srv/engine")
OVERSIZED = 2 * 1024 * 1024  # bytes of the "oversized" event: past any small request's bound
HUGE = 17 * 1024 * 1024  # bytes of the "oversized_huge" message: past the link's 16 MiB

MALFORMED = ("ids_string", "ids_float", "ids_nested", "ids_null", "ids_negative", "ids_out_of_vocab",
             "index_string", "index_out_of_range", "too_many_tokens", "finish_reason_text", "bad_usage")
FAULTS = ("status_500", "garbage", "wrong_shape", "hang", "hang_after_one", "hang_mid_stream", "die_mid_stream",
          "unhealthy", "wrong_id", "crossed_id", *MALFORMED, "oversized", "oversized_huge", "leaky_400", "leaky_503",
          "leaky_500", "leaky_mid_stream")
_LEAKY_STATUS = {"leaky_400": 400, "leaky_503": 503, "leaky_500": 500, "status_500": 500}


class EngineDied(Exception):
    """Raised inside a streaming answer: uvicorn drops the connection mid-stream."""


class ScriptedEngine:
    def __init__(self, token_ids: list[int], *, step: int = 3, fault: str | None = None,
                 interval_s: float = 0.0) -> None:
        self.token_ids = token_ids
        self.step = step
        self.interval_s = interval_s  # a pause after each chunk, as a real engine's steps are paced
        self.fault = fault
        self.requests: list[dict[str, Any]] = []
        self.aborted: list[str] = []  # engine request ids aborted (HTTP) or cancelled (link)
        self.url = ""
        self.ws_url = ""
        self.port = 0
        self._server: uvicorn.Server | None = None
        self._thread: threading.Thread | None = None

    # --- what every request gets, with the fault applied ------------------------------------------
    def _events(self, body: dict[str, Any], fault: str | None) -> tuple[list[dict[str, Any]], dict[str, Any], str]:
        """The chunks of one request (the first one broken for a malformed fault), its usage, its
        response id."""
        rid = "generate-tokens-" + (body.get("request_id") or "x")
        sp = body.get("sampling_params") or {}
        ids = self.token_ids[: sp.get("max_tokens") or len(self.token_ids)]
        finish = "stop" if len(ids) == len(self.token_ids) else "length"
        if fault == "too_many_tokens":
            ids = ids + ids + [ids[0]] * (sp.get("max_tokens") or 16)
        chunks: list[dict[str, Any]] = []
        for start in range(0, len(ids), self.step):
            part = ids[start:start + self.step]
            last = start + self.step >= len(ids)
            chunks.append({"request_id": rid, "usage": None, "output_mode": "tokens",
                           "choices": [{"index": 0, "finish_reason": finish if last else None, "stop_reason": None,
                                        "token_ids": part, "logprobs": None}]})
        if fault == "too_many_tokens":
            chunks = [{**chunks[0], "choices": [{**chunks[0]["choices"][0], "token_ids": ids}]}]
        if fault == "crossed_id":
            chunks[0] = {**chunks[0], "request_id": "generate-tokens-someone-else"}
        if fault == "wrong_id":
            chunks = [{**c, "request_id": "generate-tokens-someone-else"} for c in chunks]
        if fault in MALFORMED and fault != "too_many_tokens":
            chunks[0] = _malformed(chunks[0], fault)
        if fault == "oversized":
            chunks[0] = {**chunks[0], "padding": "x" * OVERSIZED}
        prompt = len(body.get("token_ids") or ())
        usage: dict[str, Any] = {"prompt_tokens": prompt, "completion_tokens": len(ids), "total_tokens": prompt + len(ids)}
        if fault == "bad_usage":
            usage = {"prompt_tokens": "many", "completion_tokens": "some", "total_tokens": None}
        return chunks, usage, rid

    # --- http:// -----------------------------------------------------------------------------------
    def _app(self) -> Starlette:
        async def generate(request: Request) -> Response:
            body = orjson.loads(await request.body())
            self.requests.append(body)
            fault = self.fault
            if fault in _LEAKY_STATUS:
                message = "boom" if fault == "status_500" else LEAK
                return Response(orjson.dumps({"error": {"message": message, "type": "X", "param": "token_ids",
                                                        "code": _LEAKY_STATUS[fault]}}),
                                status_code=_LEAKY_STATUS[fault], media_type="application/json")
            if fault == "hang":
                await asyncio.sleep(3600)
            chunks, usage, rid = self._events(body, fault)
            if not body.get("stream"):
                whole = {**chunks[0], "model": "scripted", "created": int(time.time()), "usage": usage}
                whole["choices"] = [{**chunks[0]["choices"][0],
                                     "token_ids": [t for c in chunks for t in c["choices"][0]["token_ids"]],
                                     "finish_reason": chunks[-1]["choices"][0]["finish_reason"]}]
                return Response(orjson.dumps(whole), media_type="application/json")

            async def events() -> AsyncIterator[bytes]:
                if fault == "garbage":
                    yield b"data: this is not json\n\n"
                    return
                if fault == "wrong_shape":
                    yield b'data: {"tokens": [1, 2, 3]}\n\n'
                    return
                if fault == "oversized_huge":
                    yield b"data: " + orjson.dumps({**chunks[0], "padding": "x" * HUGE}) + b"\n\n"
                for chunk in chunks:
                    yield b"data: " + orjson.dumps(chunk) + b"\n\n"
                    if self.interval_s:
                        await asyncio.sleep(self.interval_s)
                    if fault in ("hang_after_one", "hang_mid_stream"):
                        await asyncio.sleep(3600)
                    if fault == "die_mid_stream":
                        raise EngineDied("scripted engine died mid-stream")
                    if fault == "leaky_mid_stream":
                        yield b"data: " + orjson.dumps({"error": {"message": LEAK, "code": 500}}) + b"\n\n"
                        return
                yield b"data: " + orjson.dumps({"request_id": rid, "usage": usage, "output_mode": "tokens",
                                                "choices": []}) + b"\n\n"
                yield b"data: [DONE]\n\n"

            return StreamingResponse(events(), media_type="text/event-stream")

        async def abort(request: Request) -> Response:
            self.aborted.extend(orjson.loads(await request.body()).get("request_ids", []))
            return Response(b"")

        async def health(request: Request) -> Response:
            if self.fault == "unhealthy":
                return Response(b"{}", status_code=503, media_type="application/json")
            return Response(b"{}", media_type="application/json")

        return Starlette(routes=[Route("/inference/v1/generate", generate, methods=["POST"]),
                                 Route("/abort_requests", abort, methods=["POST"]),
                                 Route("/health", health, methods=["GET"]),
                                 WebSocketRoute("/v1/session", self._session)])

    # --- ws:// (the engine link) ----------------------------------------------------------------------
    async def _session(self, ws: WebSocket) -> None:
        offered = ws.scope.get("subprotocols") or []
        await ws.accept(subprotocol="tokenwire.batch" if "tokenwire.batch" in offered else None)
        lock = asyncio.Lock()
        running: dict[str, asyncio.Task[None]] = {}
        engine_ids: dict[str, str] = {}  # frame id -> the engine request id it carried

        async def send(frame: dict[str, Any] | bytes) -> None:
            async with lock:
                await ws.send_text((frame if isinstance(frame, bytes) else orjson.dumps(frame)).decode())

        async def answer(fid: str, body: dict[str, Any], fault: str | None) -> None:
            if fault in _LEAKY_STATUS:
                await send({"type": "error", "id": fid, "error": {"code": "x", "status": _LEAKY_STATUS[fault],
                                                                  "message": LEAK, "param": "token_ids"}})
                return
            if fault == "hang":
                await asyncio.sleep(3600)
            if fault == "garbage":
                await send(b"this is not json")
                return
            if fault == "wrong_shape":
                await send({"type": "generate.delta", "id": fid, "chunk": [1, 2, 3]})
                return
            chunks, usage, _ = self._events(body, fault)
            frame_id = fid + "000" if fault == "wrong_id" else fid
            if fault == "oversized_huge":
                await send({"type": "generate.delta", "id": frame_id, "chunk": {**chunks[0], "padding": "x" * HUGE}})
            for k, chunk in enumerate(chunks):
                delta = {"type": "generate.delta", "id": frame_id, "chunk": chunk}
                if k < len(chunks) - 1:
                    await send(delta)
                    if self.interval_s:
                        await asyncio.sleep(self.interval_s)
                else:  # the last delta and the done: one step's batch message
                    await send({"type": "batch", "frames": [delta, {"type": "generate.done", "id": frame_id,
                                                                    "status": "completed", "usage": usage}]})
                if fault in ("hang_after_one", "hang_mid_stream"):
                    await asyncio.sleep(3600)
                if fault == "die_mid_stream":
                    await ws.close()
                    return
                if fault == "leaky_mid_stream":
                    await send({"type": "error", "id": fid, "error": {"code": "internal_error", "status": 500,
                                                                      "message": LEAK}})
                    return

        await send({"type": "session.created", "seq": 1, "frames": ["generate"], "limits": {"max_in_flight": 8}})
        try:
            while True:
                frame = orjson.loads(await ws.receive_text())
                fid = frame.get("id")
                if frame.get("type") == "generate":
                    body = frame["body"]
                    self.requests.append(body)
                    task = asyncio.get_running_loop().create_task(answer(fid, body, self.fault))
                    running[fid] = task
                    engine_ids[fid] = body.get("request_id") or ""
                    task.add_done_callback(functools.partial(_forget, running, fid))
                elif frame.get("type") == "cancel" and fid in engine_ids:
                    self.aborted.append(engine_ids[fid])
                    left = running.pop(fid, None)
                    if left is not None:
                        left.cancel()
                        with contextlib.suppress(Exception):
                            await send({"type": "generate.done", "id": fid, "status": "cancelled"})
        except (WebSocketDisconnect, RuntimeError):
            pass
        finally:
            for task in running.values():
                task.cancel()

    # --- lifecycle -----------------------------------------------------------------------------------
    def start(self) -> ScriptedEngine:
        """Serve (again, on the same port after :meth:`stop`)."""
        sock = socket.socket()
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(("127.0.0.1", self.port))
        self.port = sock.getsockname()[1]
        self._server = uvicorn.Server(uvicorn.Config(self._app(), log_level="critical", lifespan="off",
                                                     timeout_graceful_shutdown=1, ws="websockets-sansio",
                                                     ws_max_size=64 * 1024 * 1024, ws_ping_interval=0.1))
        self._thread = threading.Thread(target=self._server.run, kwargs={"sockets": [sock]}, daemon=True)
        self._thread.start()
        self.url = f"http://127.0.0.1:{self.port}"
        self.ws_url = f"ws://127.0.0.1:{self.port}"
        server = self._server
        wait_until(lambda: server.started, "the scripted engine's server to start", timeout=10, interval=0.01)
        return self

    def stop(self) -> None:
        """Go down: stop listening and drop every connection (a dead engine)."""
        assert self._server is not None and self._thread is not None
        self._server.should_exit = True
        self._server.force_exit = True
        self._thread.join(10)
        self._server = None

    def __enter__(self) -> ScriptedEngine:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        if self._server is not None:
            self.stop()


def _forget(running: dict[str, asyncio.Task[None]], fid: str, _task: object) -> None:
    running.pop(fid, None)


def _malformed(chunk: dict[str, Any], fault: str) -> dict[str, Any]:
    choice = dict(chunk["choices"][0])
    ids = list(choice["token_ids"])
    broken: dict[str, Any] = {"ids_string": "42", "ids_float": 42.0, "ids_nested": [42], "ids_null": None,
                              "ids_negative": -1, "ids_out_of_vocab": 2**40}
    if fault in broken:
        ids[-1] = broken[fault]
        choice["token_ids"] = ids
    elif fault == "index_string":
        choice["index"] = "0"
    elif fault == "index_out_of_range":
        choice["index"] = 3
    elif fault == "finish_reason_text":
        choice["finish_reason"] = LEAK
    return {**chunk, "choices": [choice]}
