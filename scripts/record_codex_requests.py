"""Record what Codex CLI sends to a self-hosted Responses API provider.

    .venv/bin/python scripts/record_codex_requests.py [--codex PATH] [--out tests/data/codex]

Starts a stand-in server on 127.0.0.1 that logs every HTTP request and every WebSocket message (with
headers and bodies) and answers just enough for Codex to complete a turn: a ``POST .../responses`` gets
a minimal valid Responses SSE stream (``response.created``, ``response.in_progress``, one assistant
``message`` item with one ``output_text`` part, ``response.completed`` with usage); over the WebSocket
mode (``GET .../responses`` upgraded) each ``response.create`` event is answered with the same events
as WebSocket text messages, and a ``generate: false`` warm-up with ``response.created`` and a
``response.completed`` without output. Anything else is a 404 (logged like the rest).

Then it drives Codex (``codex exec --json``, ``CODEX_HOME`` and the working directory in a fresh
temporary folder, a ``[model_providers.tokenwire]`` pointed at the stand-in with
``wire_api = "responses"``) through two scenarios, each a first turn and a second turn with
``codex exec resume --last``:

- ``http``: the provider as Codex users configure a plain server;
- ``websocket``: the same with ``supports_websockets = true``.

Each scenario's exchanges go to ``OUT/<scenario>.json`` (with Codex's own JSONL events of each turn),
the temporary paths replaced by ``$CODEX_HOME`` and ``$WORKDIR`` so the recordings do not depend on the
machine that made them. Codex comes from ``scripts/install-agent-clis.sh`` unless ``--codex`` names
one. ``--serve PORT`` only runs the stand-in server (logging to stdout) for driving Codex by hand.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route, WebSocketRoute
from starlette.websockets import WebSocket, WebSocketDisconnect

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from tests.support.agent_clis import CODEX_QUIET_TOML  # noqa: E402

MODEL = "tiny-qwen3"
API_KEY = "tokenwire-test-key"
REPLY = "Hello from the stand-in."
PROMPTS = ("Say hello in five words.", "Now say goodbye.")


# --- the stand-in server --------------------------------------------------------------------------


class Log:
    """Every exchange in arrival order (thread-safe: uvicorn runs in its own thread)."""

    def __init__(self, echo: bool = False) -> None:
        self.entries: list[dict[str, Any]] = []
        self.lock = threading.Lock()
        self.echo = echo
        self.counter = 0

    def add(self, entry: dict[str, Any]) -> None:
        with self.lock:
            entry = {"seq": len(self.entries), **entry}
            self.entries.append(entry)
        if self.echo:
            print(json.dumps(entry), flush=True)

    def next_id(self, prefix: str) -> str:
        with self.lock:
            self.counter += 1
            return f"{prefix}_standin{self.counter:04d}"

    def take(self) -> list[dict[str, Any]]:
        with self.lock:
            out, self.entries = self.entries, []
        return out


def decoded(body: bytes) -> Any:
    try:
        return json.loads(body)
    except ValueError:
        return body.decode("utf-8", "replace")


def response_object(rid: str, status: str, request: dict[str, Any], output: list[dict[str, Any]],
                    usage: dict[str, Any] | None) -> dict[str, Any]:
    return {
        "id": rid, "object": "response", "created_at": int(time.time()), "status": status,
        "model": request.get("model", MODEL), "output": output, "usage": usage, "error": None,
        "incomplete_details": None, "instructions": request.get("instructions"),
        "parallel_tool_calls": request.get("parallel_tool_calls", True), "tool_choice": request.get("tool_choice", "auto"),
        "tools": [], "previous_response_id": request.get("previous_response_id"), "store": request.get("store", True),
        "metadata": {}, "text": {"format": {"type": "text"}}, "truncation": "disabled", "temperature": 1.0,
        "top_p": 1.0,
    }


def events_for(request: dict[str, Any], log: Log) -> list[dict[str, Any]]:
    """The minimal event sequence of one response (every event with its ``sequence_number``)."""
    rid, mid = log.next_id("resp"), log.next_id("msg")
    if request.get("generate") is False:
        done = response_object(rid, "completed", request, [], {
            "input_tokens": 0, "input_tokens_details": {"cached_tokens": 0}, "output_tokens": 0,
            "output_tokens_details": {"reasoning_tokens": 0}, "total_tokens": 0})
        events: list[dict[str, Any]] = [
            {"type": "response.created", "response": response_object(rid, "in_progress", request, [], None)},
            {"type": "response.completed", "response": done}]
    else:
        part = {"type": "output_text", "text": "", "annotations": [], "logprobs": []}
        item = {"id": mid, "type": "message", "status": "in_progress", "role": "assistant", "content": []}
        full = {**item, "status": "completed", "content": [{**part, "text": REPLY}]}
        usage = {"input_tokens": 100, "input_tokens_details": {"cached_tokens": 0}, "output_tokens": 6,
                 "output_tokens_details": {"reasoning_tokens": 0}, "total_tokens": 106}
        pos = {"item_id": mid, "output_index": 0, "content_index": 0}
        events = [
            {"type": "response.created", "response": response_object(rid, "in_progress", request, [], None)},
            {"type": "response.in_progress", "response": response_object(rid, "in_progress", request, [], None)},
            {"type": "response.output_item.added", "output_index": 0, "item": item},
            {"type": "response.content_part.added", **pos, "part": part},
            *({"type": "response.output_text.delta", **pos, "delta": d, "logprobs": []}
              for d in re.findall(r"\S+\s*", REPLY)),
            {"type": "response.output_text.done", **pos, "text": REPLY, "logprobs": []},
            {"type": "response.content_part.done", **pos, "part": {**part, "text": REPLY}},
            {"type": "response.output_item.done", "output_index": 0, "item": full},
            {"type": "response.completed", "response": response_object(rid, "completed", request, [full], usage)},
        ]
    return [{**e, "sequence_number": i} for i, e in enumerate(events)]


def make_app(log: Log) -> Starlette:
    async def http(request: Request) -> Response:
        body = await request.body()
        entry = {"kind": "http", "method": request.method, "path": request.url.path,
                 "query": request.url.query, "headers": dict(request.headers), "body": decoded(body) if body else None}
        log.add(entry)
        if request.method == "POST" and request.url.path.endswith("/responses"):
            payload = entry["body"] if isinstance(entry["body"], dict) else {}
            events = events_for(payload, log)

            async def sse() -> Any:
                for e in events:
                    yield f"event: {e['type']}\ndata: {json.dumps(e)}\n\n".encode()

            return StreamingResponse(sse(), media_type="text/event-stream")
        return JSONResponse({"error": {"message": f"the stand-in has no {request.method} {request.url.path}",
                                       "type": "invalid_request_error"}}, status_code=404)

    async def ws(websocket: WebSocket) -> None:
        conn = log.next_id("ws")
        log.add({"kind": "ws_open", "conn": conn, "path": websocket.url.path, "headers": dict(websocket.headers)})
        await websocket.accept()
        try:
            while True:
                text = await websocket.receive_text()
                event = decoded(text.encode())
                log.add({"kind": "ws_recv", "conn": conn, "message": event})
                if isinstance(event, dict) and event.get("type") == "response.create":
                    for e in events_for(event, log):
                        await websocket.send_text(json.dumps(e))
                else:
                    await websocket.send_text(json.dumps({"type": "error", "sequence_number": 0, "error": {
                        "type": "invalid_request_error", "message": "the stand-in only answers response.create"}}))
        except WebSocketDisconnect as exc:
            log.add({"kind": "ws_close", "conn": conn, "code": exc.code})

    routes = [WebSocketRoute("/{path:path}", ws),
              Route("/{path:path}", http, methods=["GET", "POST", "PUT", "DELETE", "PATCH", "HEAD", "OPTIONS"])]
    return Starlette(routes=routes)


class StandIn:
    """The stand-in server on a free 127.0.0.1 port, in a thread of its own."""

    def __init__(self, log: Log, port: int = 0) -> None:
        self.sock = socket.socket()
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(("127.0.0.1", port))
        self.port = self.sock.getsockname()[1]
        config = uvicorn.Config(make_app(log), log_level="warning", ws="websockets-sansio", ws_per_message_deflate=True)
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=lambda: asyncio.run(self.server.serve(sockets=[self.sock])), daemon=True)

    def __enter__(self) -> StandIn:
        self.thread.start()
        deadline = time.monotonic() + 10
        while not self.server.started:
            if time.monotonic() > deadline:
                raise RuntimeError("the stand-in server did not start")
            time.sleep(0.02)
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.should_exit = True
        self.thread.join(10)


# --- driving Codex --------------------------------------------------------------------------------


def codex_config(port: int, websockets: bool) -> str:
    """The provider as a self-hosted server's users configure it, with Codex kept off the network
    otherwise (tests/support/agent_clis.py: no update check, analytics, feedback or plugin sync)."""
    lines = [
        f'model = "{MODEL}"',
        'model_provider = "tokenwire"',
        'approval_policy = "never"',
        'sandbox_mode = "read-only"',
        CODEX_QUIET_TOML,
        "[model_providers.tokenwire]",
        'name = "tokenwire"',
        f'base_url = "http://127.0.0.1:{port}/v1"',
        'wire_api = "responses"',
        'env_key = "TOKENWIRE_API_KEY"',
        "request_max_retries = 0",
        "stream_max_retries = 0",
    ]
    if websockets:
        lines.append("supports_websockets = true")
    return "\n".join(lines) + "\n"


def codex_env(home: Path) -> dict[str, str]:
    keep = {k: v for k, v in os.environ.items() if k in ("PATH", "LANG", "LC_ALL", "TERM", "TMPDIR")}
    return {**keep, "HOME": str(home), "CODEX_HOME": str(home / ".codex"), "TOKENWIRE_API_KEY": API_KEY,
            "NO_COLOR": "1", "RUST_LOG": "error"}


def run_codex(codex: str, home: Path, work: Path, args: list[str]) -> dict[str, Any]:
    cmd = [codex, "exec", "--json", "--skip-git-repo-check", "--color", "never", *args]
    done = subprocess.run(cmd, cwd=work, env=codex_env(home), stdin=subprocess.DEVNULL, capture_output=True, text=True,
                          timeout=180)
    events = []
    for line in done.stdout.splitlines():
        try:
            events.append(json.loads(line))
        except ValueError:
            events.append({"unparsed": line})
    return {"argv": ["codex", *cmd[1:]], "returncode": done.returncode, "events": events,
            "stderr": done.stderr.strip().splitlines()[-20:]}


def scrub(value: Any, paths: dict[str, str]) -> Any:
    if isinstance(value, str):
        for real, name in paths.items():
            value = value.replace(real, name)
        return value
    if isinstance(value, list):
        return [scrub(v, paths) for v in value]
    if isinstance(value, dict):
        return {k: scrub(v, paths) for k, v in value.items()}
    return value


def record(codex: str, scenario: str, websockets: bool) -> dict[str, Any]:
    log = Log()
    with tempfile.TemporaryDirectory(prefix="codex-rec-") as tmp, StandIn(log) as server:
        home = Path(tmp) / "home"
        work = Path(tmp) / "work"
        (home / ".codex").mkdir(parents=True)
        work.mkdir()
        (home / ".codex" / "config.toml").write_text(codex_config(server.port, websockets))
        turns = []
        for i, args in enumerate(([PROMPTS[0]], ["resume", "--last", PROMPTS[1]])):
            result = run_codex(codex, home, work, args)
            result["exchanges"] = log.take()
            turns.append(result)
            print(f"{scenario} turn {i + 1}: codex exited {result['returncode']}, "
                  f"{len(result['exchanges'])} exchanges", file=sys.stderr)
        paths = {str(work): "$WORKDIR", str(home / ".codex"): "$CODEX_HOME", str(home): "$HOME",
                 f"127.0.0.1:{server.port}": "127.0.0.1:$PORT"}
        config = codex_config(server.port, websockets)
        out: dict[str, Any] = scrub({"scenario": scenario, "codex_version": version(codex), "config_toml": config,
                                     "turns": turns}, paths)
        return out


def version(codex: str) -> str:
    return subprocess.run([codex, "--version"], capture_output=True, text=True, check=True).stdout.strip()


def installed_codex() -> str:
    done = subprocess.run(["bash", str(ROOT / "scripts" / "install-agent-clis.sh")], capture_output=True, text=True)
    if done.returncode != 0:
        sys.exit(done.stderr.strip() or f"scripts/install-agent-clis.sh exited {done.returncode}")
    return str(Path(done.stdout.strip().splitlines()[-1]) / "codex")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--codex", help="the codex command (default: scripts/install-agent-clis.sh's)")
    parser.add_argument("--out", type=Path, default=ROOT / "tests" / "data" / "codex")
    parser.add_argument("--serve", type=int, metavar="PORT", help="only run the stand-in server, logging to stdout")
    args = parser.parse_args()
    if args.serve is not None:
        with StandIn(Log(echo=True), args.serve) as server:
            print(f"stand-in listening on http://127.0.0.1:{server.port}/v1", file=sys.stderr, flush=True)
            while True:
                time.sleep(3600)
    codex = args.codex or installed_codex()
    args.out.mkdir(parents=True, exist_ok=True)
    for scenario, websockets in (("http", False), ("websocket", True)):
        data = record(codex, scenario, websockets)
        (args.out / f"{scenario}.json").write_text(json.dumps(data, indent=1, ensure_ascii=False) + "\n")
        print(f"wrote {args.out / (scenario + '.json')}", file=sys.stderr)


if __name__ == "__main__":
    main()
