"""RemoteEngine's own HTTP/1.1 (engine/remote.py), against engines on loopback sockets: vLLM 0.32's
recorded SSE answer read alike however it is framed (chunked, Content-Length, until close) and
however the bytes are split across reads (one byte per write), with CRLF line endings, comments and
other SSE fields; keep-alive connections reused, a full pool waited for, a kept connection the
engine closed replaced; and the events of many streams parsed together still reach each their own
request, whether or not they name it."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest

from engine.interface import EngineOutput
from engine.protocol import GenerateRequest
from engine.remote import RemoteEngine
from tests.support.http_answers import AnswerServer, stop_all

SAMPLES = json.loads((Path(__file__).parents[1] / "data" / "vllm" / "generate_samples.json").read_text())


@pytest.fixture(autouse=True)
def _servers() -> Iterator[None]:
    yield
    stop_all()


def req(max_tokens: int = 8, rid: str = "chatcmpl-x") -> GenerateRequest:
    return GenerateRequest.model_validate({**SAMPLES["generate_stream"]["request"], "request_id": rid,
                                           "sampling_params": {"max_tokens": max_tokens, "temperature": 0}})


async def collect(engine: RemoteEngine, request: GenerateRequest) -> list[EngineOutput]:
    async with engine.generate(request) as stream:
        return [out async for out in stream]


def vllm_events(eol: bytes) -> bytes:
    """The recorded stream, with a comment and other SSE fields between its events."""
    lines = [line.encode() for line in SAMPLES["generate_stream"]["raw_lines"]]
    out = b": keepalive" + eol + eol
    for line in lines:
        if line.startswith(b"data: {"):
            out += b"event: message" + eol + b"id: 1" + eol
        out += line + eol
    return out + eol


def check_vllm_outputs(outs: list[EngineOutput]) -> None:
    assert [t for o in outs for t in o.choices[0].token_ids] == [201] * 8
    assert [o.finished for o in outs] == [False] * (len(outs) - 1) + [True]
    usage = outs[-1].usage
    assert usage is not None and (usage.prompt_tokens, usage.completion_tokens) == (27, 8)
    assert outs[-1].choices[0].finish_reason == "length"


@pytest.mark.parametrize("framing", ["chunked", "content-length", "until-close"])
@pytest.mark.parametrize("eol", [b"\n", b"\r\n"], ids=["lf", "crlf"])
def test_a_vllm_stream_reads_alike_in_every_framing_split_into_single_bytes(framing: str, eol: bytes) -> None:
    body = vllm_events(eol)
    if framing == "chunked":  # chunks of 7 bytes, cutting lines, events and the chunk framing's own CRLFs
        wire = b"".join(b"%x\r\n%s\r\n" % (len(body[i:i + 7]), body[i:i + 7]) for i in range(0, len(body), 7))
        wire += b"0\r\n\r\n"
        head = b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n"
    elif framing == "content-length":
        wire = body
        head = b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ncontent-length: %d\r\n\r\n" % len(body)
    else:
        wire = body
        head = b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\nconnection: close\r\n\r\n"

    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        for byte in range(len(head + wire)):
            writer.write((head + wire)[byte:byte + 1])
            await writer.drain()
            if byte % 64 == 0:
                await asyncio.sleep(0.001)  # let the client read what came so far
        writer.close()

    async def main() -> list[EngineOutput]:
        server = await asyncio.start_server(answer, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        engine = RemoteEngine(f"http://127.0.0.1:{port}", model_name="m", max_model_len=4096)
        try:
            return await collect(engine, req())
        finally:
            await engine.close()
            server.close()

    check_vllm_outputs(asyncio.run(main()))


class Echo:
    """An engine whose answer to each request is its own ``max_tokens`` as token ids, two events of
    one token each, named after the request (or after another one, ``named_wrong``)."""

    def __init__(self, named_wrong: bool = False) -> None:
        self.named_wrong = named_wrong
        self.server = AnswerServer(self).start()

    async def __call__(self, r: httpx.Request) -> httpx.Response:
        if r.url.path == "/health":
            return httpx.Response(200, json={})
        body = json.loads(r.content)
        token = body["sampling_params"]["max_tokens"]
        name = "generate-tokens-" + ("someone-else" if self.named_wrong else body["request_id"])
        events: list[dict[str, Any]] = [{"request_id": name, "choices": [{"index": 0, "token_ids": [token], "finish_reason": f}]}
                                        for f in (None, "length")]
        usage: dict[str, Any] = {"prompt_tokens": 1, "completion_tokens": 2, "total_tokens": 3}
        events.append({"request_id": name, "choices": [], "usage": usage})
        content = b"".join(b"data: " + orjson.dumps(e) + b"\n\n" for e in events) + b"data: [DONE]\n\n"
        return httpx.Response(200, headers={"content-type": "text/event-stream"}, content=content)


@pytest.mark.parametrize("named_wrong", [False, True], ids=["named", "named-wrong"])
def test_many_streams_at_once_each_get_their_own_events(named_wrong: bool) -> None:
    echo = Echo(named_wrong)

    async def main() -> list[list[EngineOutput]]:
        engine = RemoteEngine(echo.server.url, model_name="m", max_model_len=4096)
        try:
            return await asyncio.gather(*(collect(engine, req(max_tokens=2 + k, rid=f"r{k}")) for k in range(24)))
        finally:
            await engine.close()

    for k, outs in enumerate(asyncio.run(main())):
        assert {o.request_id for o in outs} == {f"r{k}"}
        assert [t for o in outs for t in o.choices[0].token_ids] == [2 + k, 2 + k]
        assert outs[-1].finished and outs[-1].usage is not None and outs[-1].usage.total_tokens == 3


def test_keep_alive_connections_are_reused_and_a_full_pool_waits_for_room() -> None:
    echo = Echo()

    async def main() -> tuple[int, int]:
        engine = RemoteEngine(echo.server.url, model_name="m", max_model_len=4096, max_connections=3)
        try:
            for _ in range(5):
                await collect(engine, req(max_tokens=2))
            one_after_another = echo.server.connections
            outs = await asyncio.gather(*(collect(engine, req(max_tokens=2)) for _ in range(12)))
            assert all(o[-1].finished for o in outs)
            assert engine.live_sequences() == 0
            return one_after_another, echo.server.connections
        finally:
            await engine.close()

    sequential, at_most = asyncio.run(main())
    # reused: a finished stream's connection is free once its body's end came too (the next request may
    # come first and open one more)
    assert sequential <= 2 and at_most <= 3


def test_a_kept_connection_the_engine_closed_is_replaced_without_failing_the_request() -> None:
    answered = 0
    whole = orjson.dumps({"request_id": "generate-tokens-x", "choices": [
        {"index": 0, "token_ids": [201, 201, 201], "finish_reason": "length"}]})
    answer = b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: %d\r\n\r\n%s" % (
        len(whole), whole)

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        nonlocal answered
        head = await reader.readuntil(b"\r\n\r\n")
        length = next(int(line.split(b":")[1]) for line in head.split(b"\r\n")
                      if line.lower().startswith(b"content-length"))
        await reader.readexactly(length)
        writer.write(answer)
        await writer.drain()
        answered += 1
        # keep-alive said, but the next request on this connection finds it closed unread
        await reader.read(1)
        writer.transport.abort()

    async def main() -> list[list[EngineOutput]]:
        server = await asyncio.start_server(serve, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        engine = RemoteEngine(f"http://127.0.0.1:{port}", model_name="m", max_model_len=4096)
        try:
            return [await collect(engine, req(max_tokens=3)) for _ in range(3)]
        finally:
            await engine.close()
            server.close()

    results = asyncio.run(main())
    assert answered == 3 and all(outs[-1].finished and outs[-1].choices[0].token_ids == [201] * 3
                                 for outs in results)


@pytest.mark.parametrize("url", ["localhost:8000", "http://127.0.0.1:99999", "ftp://engine", "http://"])
def test_an_engine_url_the_client_cannot_reach_is_refused_at_the_command_line(
        url: str, capsys: pytest.CaptureFixture[str]) -> None:
    from server.cli_flags import build_parser

    with pytest.raises(SystemExit) as info:
        build_parser().parse_args(["launch", "render", "model", "--engine-url", url])
    assert info.value.code == 2
    err = capsys.readouterr().err
    assert "--engine-url" in err and repr(url) in err and "http://HOST[:PORT]" in err
    for fine in ("http://127.0.0.1:8000", "https://engine.internal/v", "ws://engine:8000", "wss://engine"):
        assert build_parser().parse_args(["launch", "render", "model", "--engine-url", fine]).engine_url == fine
