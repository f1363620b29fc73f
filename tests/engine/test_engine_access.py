"""The engine key and the engine request ids (engine/access.py), in process: ``RemoteEngine`` against a
scripted engine on a loopback socket (tests/support/http_answers.py), ``LinkEngine`` against a scripted ``/v1/session`` engine on a loopback socket
(websockets' own server).

- ``--engine-api-key`` is sent as ``Authorization: Bearer`` on every request and every link upgrade;
- an engine that answers 401 / 403 is a 502 whose message (and the one log line) says the engine
  refused the key and names ``--engine-api-key``, never ``InvalidStatus``;
- the engine never sees a client-visible id: every request gets ``tw-<random>-<n>``, distinct even
  when two requests carry the same id, so an abort by a visible id at the engine matches nothing;
- the CLI flag, its environment variable and its rules.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from http import HTTPStatus
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest
from websockets.asyncio.server import ServerConnection, serve
from websockets.http11 import Request, Response

from engine.errors import EngineUnavailable
from engine.interface import EngineOutput
from engine.link import LinkEngine
from engine.protocol import GenerateRequest
from engine.remote import RemoteEngine
from server.cli_flags import build_parser
from server.cli_settings import check_before_loading, settings_from_args
from server.context import create_engine
from tests.support.http_answers import serve as serve_answers
from tests.support.http_answers import stop_all

KEY = "engine-key-0123456789"


def request(rid: str = "chatcmpl-0123456789abcdef", max_tokens: int = 2) -> GenerateRequest:
    return GenerateRequest.model_validate({"request_id": rid, "token_ids": [1, 2, 3],
                                           "sampling_params": {"max_tokens": max_tokens, "temperature": 0}})


async def collect(engine: Any, req: GenerateRequest) -> list[EngineOutput]:
    return [out async for out in engine.generate(req)]


# --- RemoteEngine (http://) ----------------------------------------------------------------------

class HttpEngine:
    """A tokens-only engine that requires ``KEY`` (as ``serve --tokens-only --api-key``) and records
    every request's path, headers and body."""

    def __init__(self) -> None:
        self.seen: list[tuple[str, str | None, dict[str, Any] | None]] = []
        self.url = ""

    async def __call__(self, r: httpx.Request) -> httpx.Response:
        body = json.loads(r.content) if r.content else None
        self.seen.append((r.url.path, r.headers.get("authorization"), body))
        if r.url.path == "/health":
            return httpx.Response(200, json={"status": "ok"})
        given = r.headers.get("authorization")
        if given is None:
            return httpx.Response(401, json={"error": {"message": "Missing API key"}})
        if given != f"Bearer {KEY}":
            return httpx.Response(401, json={"error": {"message": "Invalid API key."}})
        if r.url.path.endswith("abort_requests"):
            return httpx.Response(200)
        assert body is not None
        steps = [None, "length"] if body["sampling_params"]["max_tokens"] > 2 else ["length"]
        events = [orjson.dumps({"request_id": body["request_id"],
                                "choices": [{"index": 0, "token_ids": [7, 8], "finish_reason": f}]})
                  for f in steps]
        # a longer request is still running after its first event (the client leaves it there)
        return httpx.Response(200, headers={"content-type": "text/event-stream"},
                              content=b"".join(b"data: " + e + b"\n\n" for e in events) + b"data: [DONE]\n\n",
                              extensions={"hang_after": 1} if len(steps) > 1 else {})

    def engine(self, key: str | None) -> RemoteEngine:
        self.url = self.url or serve_answers(self)
        return RemoteEngine(self.url, model_name="m", max_model_len=64, api_key=key)


@pytest.fixture(autouse=True)
def _servers() -> Any:
    yield
    stop_all()


def test_the_http_engine_gets_the_key_as_a_bearer_token_on_generate_abort_and_health() -> None:
    remote = HttpEngine()

    async def main() -> list[EngineOutput]:
        engine = remote.engine(KEY)
        outs = await collect(engine, request())
        await engine.health()
        stream = engine.generate(request(max_tokens=4))  # leaves before the end: aborted at the engine
        await anext(stream)
        await stream.aclose()
        await engine.close()
        return outs

    outs = asyncio.run(main())
    assert outs[-1].finished and outs[-1].choices[0].token_ids == [7, 8]
    assert outs[-1].request_id == "chatcmpl-0123456789abcdef"  # the front end's own id comes back
    assert {auth for _, auth, _ in remote.seen} == {f"Bearer {KEY}"}
    assert {path for path, _, _ in remote.seen} == {"/inference/v1/generate", "/health", "/abort_requests"}


@pytest.mark.parametrize(("key", "says"), [(None, "sent none"), ("wrong-key", "refused this front end's")])
def test_an_http_engine_that_refuses_the_key_is_a_502_that_names_the_flag(
        key: str | None, says: str, caplog: pytest.LogCaptureFixture) -> None:
    remote = HttpEngine()

    async def main() -> None:
        engine = remote.engine(key)
        try:
            await collect(engine, request())
        finally:
            await engine.close()

    with caplog.at_level(logging.WARNING, logger="tokenwire.remote"), pytest.raises(EngineUnavailable) as info:
        asyncio.run(main())
    message = info.value.message
    assert info.value.status == 502 and says in message and "(HTTP 401)" in message
    assert "--engine-api-key" in message and "TOKENWIRE_ENGINE_API_KEY" in message
    address = remote.url.split("//")[1]
    assert address not in message  # the engine's address stays in the log
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 1 and "--engine-api-key" in lines[0] and address in lines[0]


def test_http_engine_ids_are_namespaced_and_never_the_client_visible_one() -> None:
    remote = HttpEngine()

    async def main() -> tuple[list[EngineOutput], str, str]:
        a, b = remote.engine(KEY), remote.engine(KEY)
        outs = await asyncio.gather(collect(a, request("same")), collect(a, request("same")),
                                    collect(b, request("same")))
        await a.close()
        await b.close()
        return [o for out in outs for o in out], a._ids.prefix, b._ids.prefix

    outs, prefix_a, prefix_b = asyncio.run(main())
    ids = [body["request_id"] for path, _, body in remote.seen if path == "/inference/v1/generate" and body]
    assert len(ids) == len(set(ids)) == 3
    assert "same" not in ids and all(i.startswith("tw-") for i in ids)
    assert prefix_a != prefix_b and sum(i.startswith(prefix_a + "-") for i in ids) == 2
    assert {o.request_id for o in outs} == {"same"}


def test_an_early_close_aborts_only_its_own_engine_id() -> None:
    remote = HttpEngine()

    async def main() -> None:
        engine = remote.engine(KEY)
        done = await collect(engine, request("same"))  # the same visible id, finished
        assert done[-1].finished
        stream = engine.generate(request("same", max_tokens=4))
        await anext(stream)
        await stream.aclose()
        await engine.abort(["same"])  # nothing of "same" is in flight any more: nothing is sent
        await engine.close()

    asyncio.run(main())
    generated = [body["request_id"] for path, _, body in remote.seen if path == "/inference/v1/generate" and body]
    aborted = [body["request_ids"] for path, _, body in remote.seen if path.endswith("abort_requests") and body]
    assert aborted == [[generated[1]]]


# --- LinkEngine (ws://) ---------------------------------------------------------------------------

class WsEngine:
    """A scripted ``serve --tokens-only --api-key KEY`` link end: 401 without a key, 403 with a
    wrong one (as server/ws/upgrade.py answers), else a session whose generate frames each get one
    delta and a done."""

    def __init__(self) -> None:
        self.upgrades: list[str | None] = []
        self.frames: list[dict[str, Any]] = []
        self.url = ""

    def check(self, connection: ServerConnection, req: Request) -> Response | None:
        given = req.headers.get("Authorization")
        self.upgrades.append(given)
        if given is None:
            return connection.respond(HTTPStatus.UNAUTHORIZED, "Missing API key\n")
        if given != f"Bearer {KEY}":
            return connection.respond(HTTPStatus.FORBIDDEN, "Invalid API key.\n")
        return None

    async def session(self, ws: ServerConnection) -> None:
        await ws.send(orjson.dumps({"type": "session.created", "seq": 1, "frames": ["generate"],
                                    "limits": {"max_in_flight": 8}}).decode())
        async for text in ws:
            frame = orjson.loads(text)
            self.frames.append(frame)
            if frame["type"] != "generate":
                continue
            chunk = {"request_id": frame["body"]["request_id"],
                     "choices": [{"index": 0, "token_ids": [7, 8], "finish_reason": "length"}]}
            await ws.send(orjson.dumps({"type": "generate.delta", "id": frame["id"], "chunk": chunk}).decode())
            await ws.send(orjson.dumps({"type": "generate.done", "id": frame["id"], "status": "completed",
                                        "usage": {"prompt_tokens": 3, "completion_tokens": 2,
                                                  "total_tokens": 5}}).decode())


@asynccontextmanager
async def ws_engine() -> AsyncIterator[WsEngine]:
    fake = WsEngine()
    async with serve(fake.session, "127.0.0.1", 0, process_request=fake.check) as server:
        port = next(iter(server.sockets)).getsockname()[1]
        fake.url = f"ws://127.0.0.1:{port}"
        yield fake


def test_the_link_sends_the_key_and_namespaced_engine_ids() -> None:
    async def main() -> tuple[WsEngine, list[list[EngineOutput]], str]:
        async with ws_engine() as fake:
            engine = LinkEngine(fake.url, model_name="m", max_model_len=64, api_key=KEY)
            outs = await asyncio.gather(*(collect(engine, request("same")) for _ in range(3)))
            prefix = engine._ids.prefix
            await engine.close()
            return fake, list(outs), prefix

    fake, outs, prefix = asyncio.run(main())
    assert fake.upgrades and set(fake.upgrades) == {f"Bearer {KEY}"}
    ids = [f["body"]["request_id"] for f in fake.frames if f["type"] == "generate"]
    assert len(ids) == len(set(ids)) == 3 and all(i.startswith(prefix + "-") for i in ids)
    assert "same" not in ids
    for out in outs:
        assert out[-1].finished and [o.request_id for o in out] == ["same"] * len(out)


@pytest.mark.parametrize(("key", "status", "says"), [(None, 401, "sent none"),
                                                     ("wrong-key", 403, "refused this front end's")])
def test_a_link_engine_that_refuses_the_key_is_a_502_that_names_the_flag(
        key: str | None, status: int, says: str, caplog: pytest.LogCaptureFixture) -> None:
    async def main() -> EngineUnavailable:
        async with ws_engine() as fake:
            engine = LinkEngine(fake.url, model_name="m", max_model_len=64, api_key=key)
            try:
                with pytest.raises(EngineUnavailable) as info:
                    await collect(engine, request())
                health = await engine.health()
                assert not health.ok and "--engine-api-key" in health.detail
            finally:
                await engine.close()
            return info.value

    with caplog.at_level(logging.WARNING, logger="tokenwire.link"):
        err = asyncio.run(main())
    assert err.status == 502 and says in err.message and f"(HTTP {status})" in err.message
    assert "--engine-api-key" in err.message and "127.0.0.1" not in err.message
    lines = [r.getMessage() for r in caplog.records]
    assert lines and all("--engine-api-key" in line and "InvalidStatus" not in line for line in lines)


# --- the flag ---------------------------------------------------------------------------------------

def test_the_flag_and_its_environment_variable_reach_the_engine_clients(tmp_path: Path) -> None:
    parser = build_parser()
    ws = parser.parse_args(["launch", "render", str(tmp_path), "--engine-url", "ws://e:1", "--engine-api-key", KEY])
    settings = settings_from_args(ws, {})
    assert settings.engine_api_key == KEY and KEY not in repr(settings)
    link = create_engine(settings, 64)
    assert isinstance(link, LinkEngine) and link.api_key == KEY
    http = parser.parse_args(["serve", str(tmp_path), "--engine-url", "http://e:1"])
    remote = create_engine(settings_from_args(http, {"TOKENWIRE_ENGINE_API_KEY": KEY}), 64)
    assert isinstance(remote, RemoteEngine) and remote.api_key == KEY
    engine = parser.parse_args(["serve", str(tmp_path), "--tokens-only"])  # an engine's own environment
    assert settings_from_args(engine, {"TOKENWIRE_ENGINE_API_KEY": KEY}).engine_api_key is None


@pytest.mark.parametrize(("argv", "says"), [
    (["launch", "render", "M", "--engine-api-key", KEY], "--engine-api-key needs --engine-url"),
    (["serve", "M", "--engine-url", "ws://e:1", "--engine-api-key", "two words"], "printable ASCII"),
])
def test_flag_errors_are_found_before_anything_loads(argv: list[str], says: str) -> None:
    args = build_parser().parse_args(argv)
    with pytest.raises(ValueError, match=says):  # main() prints it as one line and exits 2
        check_before_loading(args, {})


@pytest.mark.parametrize("command", [["serve"], ["launch", "render"]])
def test_help_documents_the_flag(command: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        build_parser().parse_args([*command, "--help"])
    out = capsys.readouterr().out
    assert "--engine-api-key" in out and "TOKENWIRE_ENGINE_API_KEY" in out
