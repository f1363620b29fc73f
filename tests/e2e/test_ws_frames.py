"""/v1/session over real sockets: the upgrade checks and the frame-level errors and close codes.

One ``tokenwire launch render`` process (render + derender frames, no engine) with an API key, an
Origin allowlist and a small frame limit."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed, InvalidStatus

from tests.e2e.ws_client import SessionClient
from tests.support.server_proc import ServerProcess
from tests.support.ws_fuzz import auth_subprotocol

pytestmark = pytest.mark.slow  # a real server process: the full suite only, not the fast loop

KEY = "e2e key/+="  # not a valid subprotocol token as is: the browser form base64url-encodes it
MAX_FRAME = 64 * 1024
HEADERS = {"Authorization": f"Bearer {KEY}"}


@pytest.fixture(scope="module")
def server(asset: Callable[[str], Path]) -> Iterator[ServerProcess]:
    args = ["launch", "render", str(asset("tiny-qwen3")), "--allowed-origin", "https://app.example",
            "--ws-max-frame-bytes", str(MAX_FRAME), "--state-secret", "e2e-secret-0123456789-abcdefghijklmnopqrstuvwxyz"]
    with ServerProcess(args, env={"TOKENWIRE_API_KEY": KEY}) as srv:
        yield srv


def run(coro: Any) -> Any:
    return asyncio.run(coro)


async def refused_status(url: str, **kwargs: Any) -> int:
    with pytest.raises(InvalidStatus) as info:
        async with connect(url + "/v1/session", **kwargs):
            pass
    return info.value.response.status_code


def test_a_missing_key_is_refused_with_401_and_a_wrong_one_with_403_before_accepting(
        server: ServerProcess) -> None:
    async def main() -> None:
        assert await refused_status(server.ws_url) == 401
        assert await refused_status(server.ws_url, additional_headers={"Authorization": "Bearer nope"}) == 403
        assert await refused_status(server.ws_url, subprotocols=["tokenwire.v1", auth_subprotocol("nope")]) == 403
    run(main())


def test_the_key_works_in_the_header_and_in_the_browser_subprotocol_form(server: ServerProcess) -> None:
    async def main() -> None:
        client = await SessionClient.open(server.ws_url, additional_headers=HEADERS)
        assert client.ws.subprotocol == "tokenwire.v1"
        await client.close()
        client = await SessionClient.open(server.ws_url, subprotocols=["tokenwire.v1", auth_subprotocol(KEY)],
                                          origin="https://app.example")
        assert client.ws.subprotocol == "tokenwire.v1"
        assert client.created["frames"] == ["session.update", "render", "derender", "cancel", "ping"]
        await client.close()
    run(main())


def test_a_disallowed_origin_is_refused_with_403(server: ServerProcess) -> None:
    assert run(refused_status(server.ws_url, additional_headers=HEADERS, origin="https://evil.example")) == 403


def test_an_unsupported_protocol_version_is_refused_with_400(server: ServerProcess) -> None:
    assert run(refused_status(server.ws_url, additional_headers=HEADERS, subprotocols=["tokenwire.v7"])) == 400


async def closed_with(client: SessionClient) -> tuple[int, str]:
    with pytest.raises(ConnectionClosed) as info:
        while True:
            await client.next()
    assert info.value.rcvd is not None
    return info.value.rcvd.code, info.value.rcvd.reason


@pytest.mark.parametrize(("message", "code"), [
    ("{not json", 1007), ("[1, 2]", 1002), ('{"id": "no type"}', 1002), (b"\x01\x02", 1003),
    ("x" * (MAX_FRAME + 1), 1009),
])
def test_envelope_violations_close_with_their_code(server: ServerProcess, message: str | bytes, code: int) -> None:
    async def main() -> None:
        client = await SessionClient.open(server.ws_url, additional_headers=HEADERS)
        await client.send(type="ping", event_id="before")
        assert (await client.next())["type"] == "pong"
        await client.ws.send(message)
        assert (await closed_with(client))[0] == code
    run(main())


def chat_request() -> dict[str, Any]:
    return {"model": "tiny-qwen3", "messages": [{"role": "user", "content": "Say hello"}]}


async def derender(client: SessionClient, rid: str, prompt: list[int], ids: list[int],
                   state: str | None) -> dict[str, Any]:
    await client.send(type="derender", id=rid, kind="chat", body={
        "generate_chunk": {"request_id": "generate-tokens-x", "choices": [{"index": 0, "token_ids": ids}]},
        "stream_state": state, "prompt_token_ids": prompt, "chat_request": chat_request()})
    (frame,) = await client.until(rid, "derender.delta")
    return frame


def test_frame_errors_are_error_frames_and_the_session_keeps_serving(server: ServerProcess,
                                                                     tokenizer: Callable[[str], Any]) -> None:
    tok = tokenizer("qwen3")
    ids = tok.encode("Hello there, how are you today?", add_special_tokens=False)

    async def main() -> None:
        client = await SessionClient.open(server.ws_url, additional_headers=HEADERS)
        await client.send(type="conversation.item.create", event_id="future", id="x")
        error = await client.next()
        assert (error["type"], error["event_id"], error["id"], error["error"]["code"]) == \
            ("error", "future", "x", "unknown_type")
        await client.send(type="chat", id="c", body={})
        error = await client.next()
        assert (error["id"], error["error"]["code"]) == ("c", "not_enabled")
        await client.send(type="render", id="r", kind="chat")
        error = await client.next()
        assert (error["error"]["code"], error["error"]["param"]) == ("invalid_frame", "body")

        await client.send(type="render", id="r", kind="chat", body=chat_request())
        (rendered,) = await client.until("r", "render.done")
        prompt = rendered["result"]["token_ids"]

        first = await derender(client, "d1", prompt, ids[:3], None)
        s1 = first["result"]["stream_state"]
        second = await derender(client, "d2", prompt, ids[3:5], s1)
        s2 = second["result"]["stream_state"]
        bad = await derender(client, "d3", prompt, ids[5:7], "tw1.00000000.e30." + "A" * 43)
        assert (bad["type"], bad["error"]["code"]) == ("error", "bad_state")
        assert bad["error"]["reason"] in ("unknown_key", "bad_signature")
        replayed = await derender(client, "d4", prompt, ids[3:5], s1)
        assert (replayed["error"]["code"], replayed["error"]["reason"]) == ("bad_state", "replayed")
        third = await derender(client, "d5", prompt, ids[5:], s2)
        reordered = await derender(client, "d6", prompt, ids[3:5], s1)
        assert (reordered["error"]["code"], reordered["error"]["reason"]) == ("bad_state", "reordered")
        again = await derender(client, "d7", prompt, ids[5:], s2)
        assert again["error"]["reason"] == "replayed"
        text = "".join(f["result"]["chunk"]["choices"][0]["delta"].get("content") or ""
                       for f in (first, second, third))
        assert text == tok.decode(ids)
        await client.send(type="ping", event_id="alive")
        assert (await client.next())["event_id"] == "alive"
        await client.close()
    run(main())


def test_derender_frames_give_what_the_http_endpoint_gives(server: ServerProcess,
                                                            tokenizer: Callable[[str], Any]) -> None:
    import httpx

    tok = tokenizer("qwen3")
    ids = tok.encode(" streaming derender", add_special_tokens=False)
    body = {"generate_chunk": {"request_id": "generate-tokens-x", "choices": [{"index": 0, "token_ids": ids}]},
            "stream_state": None, "prompt_token_ids": [1, 2, 3], "chat_request": chat_request()}
    http = httpx.post(server.url + "/v1/chat/completions/derender", json={**body, "stream": True},
                      headers=HEADERS).json()

    async def main() -> dict[str, Any]:
        client = await SessionClient.open(server.ws_url, additional_headers=HEADERS)
        await client.send(type="derender", id="d", kind="chat", body=body)
        (frame,) = await client.until("d", "derender.delta")
        await client.close()
        return frame["result"]  # type: ignore[no-any-return]

    ws = run(main())
    for result in (http, ws):
        result["chunk"].pop("id"), result["chunk"].pop("created"), result.pop("stream_state")
    assert ws == http


def test_permessage_deflate_is_off_by_default_and_on_with_the_flag(server: ServerProcess,
                                                                   asset: Callable[[str], Path]) -> None:
    async def extensions(url: str, **kwargs: Any) -> list[str]:
        client = await SessionClient.open(url, compression="deflate", **kwargs)
        names = [str(ext.name) for ext in client.ws.protocol.extensions]
        await client.send(type="ping")
        assert (await client.next())["type"] == "pong"
        await client.close()
        return names

    assert run(extensions(server.ws_url, additional_headers=HEADERS)) == []
    with ServerProcess(["launch", "render", str(asset("tiny-qwen3")), "--ws-per-message-deflate"]) as deflating:
        assert run(extensions(deflating.ws_url)) == ["permessage-deflate"]
