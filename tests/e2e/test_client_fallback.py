"""client_sdk's HTTP fallback on real servers: the same API over the HTTP endpoints, forced
(``transport="http"``) and chosen automatically when a proxy refuses the WebSocket upgrade —
streaming chat with tools, non-streaming answers, render → generate → streaming derender through
the HTTP ``stream: true`` derender route, cancellation that reaches the engine, typed errors."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest

import client_sdk
from tests.e2e.client_support import TOOL_SCRIPT, TOOLS, TcpProxy, serve_args, wait_idle
from tests.support.scripted_engine import ScriptedEngine
from tests.support.server_proc import ServerProcess

pytestmark = pytest.mark.slow

USER = [{"role": "user", "content": "Describe a lighthouse."}]
BODY: dict[str, Any] = {"messages": USER, "max_tokens": 12, "temperature": 1.0, "seed": 9}


@pytest.fixture(scope="module")
def server(asset: Callable[[str], Path]) -> Iterator[ServerProcess]:
    with ServerProcess(serve_args(asset("tiny-qwen3"))) as srv:
        yield srv


@pytest.fixture(scope="module")
def tool_server(asset: Callable[[str], Path], tokenizer: Callable[[str], Any]) -> Iterator[ServerProcess]:
    ids = tokenizer("qwen3").encode(TOOL_SCRIPT, add_special_tokens=False)
    with ScriptedEngine(ids, step=2) as engine, ServerProcess(
            ["launch", "render", str(asset("qwen3")), "--engine-url", engine.url, "--tool-call-parser", "hermes",
             "--enable-auto-tool-choice", "--reasoning-parser", "qwen3"]) as srv:
        yield srv


def test_forced_http_streams_chat_with_tools_like_the_session(tool_server: ServerProcess) -> None:
    body: dict[str, Any] = {"messages": [{"role": "user", "content": "Weather in Paris?"}], "tools": TOOLS,
                            "max_tokens": 200}

    async def run(transport: str) -> tuple[list[Any], Any]:
        async with client_sdk.connect(tool_server.url, transport=transport) as client:  # type: ignore[arg-type]
            assert client.transport == transport
            stream = await client.chat.completions.create(**body, stream=True)
            return [c async for c in stream], await client.chat.completions.create(**body)

    http_chunks, http_whole = asyncio.run(run("http"))
    ws_chunks, ws_whole = asyncio.run(run("websocket"))

    # The chunk boundaries are not compared: they follow how the engine's events arrive (the SSE route
    # reads what the engine link has buffered as one output, as vLLM's output collector merges what
    # its consumer has not taken; the session hands each on). What the chunks add up to is the same.
    def folded(chunks: list[Any]) -> dict[str, Any]:
        out: dict[str, Any] = {"role": None, "content": "", "reasoning": "", "calls": {}, "finish": [], "fields": set()}
        for c in chunks:
            out["fields"].add((c.object, c.model))
            for choice in c.choices:
                delta = choice.delta
                out["role"] = out["role"] or delta.role
                out["content"] += delta.content or ""
                out["reasoning"] += delta.reasoning or ""
                for call in delta.tool_calls or ():
                    name, args = out["calls"].get(call.index, ("", ""))
                    out["calls"][call.index] = (name + (call.function.name or ""),
                                                args + (call.function.arguments or ""))
                if choice.finish_reason is not None:
                    out["finish"].append(choice.finish_reason)
        return out

    assert folded(http_chunks) == folded(ws_chunks)
    assert folded(http_chunks)["finish"] == ["tool_calls"] and folded(http_chunks)["role"] == "assistant"
    assert folded(http_chunks)["reasoning"] == "\nThe user wants the weather.\n"
    calls = [tc for c in http_chunks if c.choices for tc in c.choices[0].delta.tool_calls or ()]
    assert orjson.loads("".join(tc.function.arguments or "" for tc in calls if tc.function)) == {"city": "Paris"}
    assert http_whole.choices[0].message.tool_calls[0].function.name == "get_weather"
    assert http_whole.choices[0].message.content == ws_whole.choices[0].message.content


def test_forced_http_runs_the_primitives_with_streaming_derender(server: ServerProcess) -> None:
    async def main() -> tuple[str, str, int]:
        async with client_sdk.connect(server.url, transport="http") as client:
            request = await client.render("chat", BODY)
            stream = await client.generate(request)
            derenderer = client.derenderer("chat", request=BODY, prompt_token_ids=request.token_ids)
            pieces = [p async for p in derenderer.feed(stream)]
            assert stream.usage is not None and derenderer.states[0]
            whole = await client.chat.completions.create(**BODY)
            completions = await client.completions.create(prompt="Lighthouses", max_tokens=5, seed=1, temperature=1)
            text = "".join(p.choices[0].delta.content or "" for p in pieces if p.choices)  # type: ignore[union-attr]
            return text, whole.choices[0].message.content or "", len(completions.choices[0].text)

    text, whole, completion_chars = asyncio.run(main())
    assert text == whole and text
    assert completion_chars > 0
    direct = httpx.post(server.url + "/v1/chat/completions", json=BODY, timeout=60).json()
    assert direct["choices"][0]["message"]["content"] == whole


def test_forced_http_cancellation_closes_the_response_and_the_engine_stops(server: ServerProcess) -> None:
    async def main() -> str | None:
        async with client_sdk.connect(server.url, transport="http") as client:
            stream = await client.chat.completions.create(messages=USER, max_tokens=3000, stream=True)
            count = 0
            async for _ in stream:
                count += 1
                if count == 3:
                    stream.cancel()
            return stream.status

    assert asyncio.run(main()) == "cancelled"
    wait_idle(server.url)


def test_forced_http_errors_and_session_defaults(server: ServerProcess, asset: Callable[[str], Path]) -> None:
    async def main(plain_url: str) -> None:
        async with client_sdk.connect(server.url, transport="http") as client:
            with pytest.raises(client_sdk.BadRequestError) as bad:
                await client.chat.completions.create(messages=[], max_tokens=3)
            assert bad.value.status == 400 and bad.value.param == "messages"
            with pytest.raises(client_sdk.UnsupportedError):
                await client.chat.completions.create(messages=USER, max_tokens=3, resumable=True)
            settings = await client.update_session(sampling={"max_tokens": 2})
            assert settings["sampling"] == {"max_tokens": 2}
            short = await client.chat.completions.create(messages=USER)
            assert short.usage.completion_tokens is not None and short.usage.completion_tokens <= 2
        async with client_sdk.connect(plain_url, transport="http") as plain:
            with pytest.raises(client_sdk.NotEnabledError):
                await plain.render("chat", messages=USER)

    with ServerProcess(["serve", str(asset("tiny-qwen3")), "--dtype", "float32"]) as plain:
        asyncio.run(main(plain.url))


def test_a_proxy_refusing_websockets_makes_the_client_fall_back_to_http(server: ServerProcess) -> None:
    async def main(url: str) -> tuple[str, str]:
        with pytest.raises(client_sdk.UpgradeRefused):
            await client_sdk.connect(url, transport="websocket")
        async with client_sdk.connect(url) as client:
            stream = await client.chat.completions.create(**BODY, stream=True)
            streamed = "".join([c.choices[0].delta.content or "" async for c in stream if c.choices])
            return client.transport, streamed

    with TcpProxy(server.url, refuse_websocket=True) as proxy:
        transport, streamed = asyncio.run(main(proxy.url))
        assert proxy.refused == 2
    assert transport == "http"
    assert streamed == httpx.post(server.url + "/v1/chat/completions", json=BODY, timeout=60).json()[
        "choices"][0]["message"]["content"]


def test_the_sync_client_falls_back_too(server: ServerProcess) -> None:
    with TcpProxy(server.url, refuse_websocket=True) as proxy, client_sdk.Client(proxy.url) as client:
        assert client.transport == "http"
        answer = client.chat.completions.create(**BODY)
        chunks = list(client.chat.completions.create(**BODY, stream=True))
    assert answer.choices[0].message.content == "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
