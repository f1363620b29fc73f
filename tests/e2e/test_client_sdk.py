"""client_sdk against real server processes over a real WebSocket session: typed streaming chat
with tools, non-streaming answers equal to the HTTP endpoints', many concurrent requests on one
socket, cancellation that reaches the engine, timeouts, the primitives, errors, and the sync
client."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest

import client_sdk
from client_sdk.types import (
    ChatCompletionStreamResponse,
    ContentBlockDeltaEvent,
    ContentBlockStartEvent,
    GenerateStreamResponse,
    InputJSONDelta,
    MessageDeltaEvent,
    TextBlock,
    TextDelta,
    ThinkingBlock,
    ToolUseBlock,
)
from tests.e2e.client_support import TOOL_SCRIPT, TOOLS, TcpProxy, live_sequences, serve_args, wait_idle
from tests.support.scripted_engine import ScriptedEngine
from tests.support.server_proc import ServerProcess
from tests.support.waiting import WaitTimeout

pytestmark = pytest.mark.slow

USER = [{"role": "user", "content": "Tell me about the sea."}]
WEATHER_SCHEMA = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}


@pytest.fixture(scope="module")
def server(asset: Callable[[str], Path]) -> Iterator[ServerProcess]:
    with ServerProcess(serve_args(asset("tiny-qwen3"))) as srv:
        yield srv


@pytest.fixture(scope="module")
def tool_server(asset: Callable[[str], Path], tokenizer: Callable[[str], Any]) -> Iterator[ServerProcess]:
    ids = tokenizer("qwen3").encode(TOOL_SCRIPT, add_special_tokens=False)
    # paced as a real engine's steps are (events sent at once reach the front end in one read)
    with ScriptedEngine(ids, step=2, interval_s=0.05) as engine, ServerProcess(
            ["launch", "render", str(asset("qwen3")), "--engine-url", engine.url, "--tool-call-parser", "hermes",
             "--enable-auto-tool-choice", "--reasoning-parser", "qwen3"]) as srv:
        yield srv


def chat_body(i: int, max_tokens: int = 12) -> dict[str, Any]:
    return {"messages": [{"role": "user", "content": f"Question {i}: what is {i} + {i}?"}], "max_tokens": max_tokens,
            "temperature": 1.0, "seed": i}


def without_ids(data: dict[str, Any]) -> dict[str, Any]:
    """Ids and timestamps differ per request (tool-call ids derive from the request id)."""
    out = {k: v for k, v in data.items() if k not in ("id", "created")}
    for choice in out.get("choices") or ():
        for call in (choice.get("message") or {}).get("tool_calls") or ():
            call.pop("id", None)
    for block in out.get("content") or ():
        block.pop("id", None)
    return out


def test_streaming_chat_with_tools_yields_typed_chunks_and_the_http_answer(tool_server: ServerProcess) -> None:
    body: dict[str, Any] = {"messages": [{"role": "user", "content": "Weather in Paris?"}], "tools": TOOLS,
                            "max_tokens": 200}

    async def main() -> tuple[list[ChatCompletionStreamResponse], Any]:
        async with client_sdk.connect(tool_server.url) as client:
            assert client.transport == "websocket"
            stream = await client.chat.completions.create(**body, stream=True)
            chunks = [chunk async for chunk in stream]
            assert stream.status == "completed"
            whole = await client.chat.completions.create(**body)
            return chunks, whole

    chunks, whole = asyncio.run(main())
    assert all(isinstance(c, ChatCompletionStreamResponse) for c in chunks)
    reasoning = "".join(c.choices[0].delta.reasoning or "" for c in chunks if c.choices)
    calls = [tc for c in chunks if c.choices for tc in c.choices[0].delta.tool_calls or ()]
    assert "wants the weather" in reasoning
    assert calls[0].id and calls[0].function is not None and calls[0].function.name == "get_weather"
    assert len(calls) > 1  # the arguments arrived in pieces
    assert orjson.loads("".join(tc.function.arguments or "" for tc in calls if tc.function)) == {"city": "Paris"}
    assert [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason] == ["tool_calls"]
    http = httpx.post(tool_server.url + "/v1/chat/completions", json=body, timeout=60).json()
    assert without_ids(whole.model_dump(mode="json", exclude_unset=True)) == without_ids(http)


def test_messages_with_reasoning_and_a_tool_call_are_typed_down_to_each_block(tool_server: ServerProcess) -> None:
    body: dict[str, Any] = {"messages": [{"role": "user", "content": "Weather in Paris?"}], "max_tokens": 200,
                            "tools": [{"name": "get_weather", "description": "Weather for a city",
                                       "input_schema": WEATHER_SCHEMA}]}
    with client_sdk.Client(tool_server.url) as client:
        message = client.messages.create(**body)
        events = list(client.messages.create(**body, stream=True))
    thinking, text, tool = message.content
    assert isinstance(thinking, ThinkingBlock) and "wants the weather" in thinking.thinking
    assert isinstance(text, TextBlock) and message.content[1].text == text.text
    assert text.text.strip() == "Let me check."
    assert isinstance(tool, ToolUseBlock) and tool.name == "get_weather" and tool.input == {"city": "Paris"}
    assert message.stop_reason == "tool_use"
    starts = [e.content_block for e in events if isinstance(e, ContentBlockStartEvent)]
    assert [type(b) for b in starts] == [ThinkingBlock, TextBlock, ToolUseBlock]
    deltas = [e.delta for e in events if isinstance(e, ContentBlockDeltaEvent)]
    assert "".join(d.text for d in deltas if isinstance(d, TextDelta)) == text.text
    assert orjson.loads("".join(d.partial_json for d in deltas if isinstance(d, InputJSONDelta))) == {"city": "Paris"}
    (end,) = [e for e in events if isinstance(e, MessageDeltaEvent)]
    assert end.delta.stop_reason == "tool_use" and end.usage is not None and end.usage.output_tokens > 0


def test_non_streaming_answers_equal_the_http_endpoints(server: ServerProcess) -> None:
    chat: dict[str, Any] = chat_body(1)
    comp: dict[str, Any] = {"prompt": "Once upon a time", "max_tokens": 10, "seed": 5, "temperature": 1.0}
    msgs: dict[str, Any] = {"messages": USER, "max_tokens": 8, "temperature": 0}

    async def main() -> tuple[Any, Any, Any]:
        async with client_sdk.connect(server.url) as client:
            return (await client.chat.completions.create(**chat), await client.completions.create(**comp),
                    await client.messages.create(**msgs))

    got_chat, got_comp, got_msg = asyncio.run(main())
    http = httpx.Client(base_url=server.url, timeout=60)
    assert without_ids(got_chat.model_dump(mode="json", exclude_unset=True)) == without_ids(http.post("/v1/chat/completions", json=chat).json())
    assert without_ids(got_comp.model_dump(mode="json", exclude_unset=True)) == without_ids(http.post("/v1/completions", json=comp).json())
    assert without_ids(got_msg.model_dump(mode="json", exclude_unset=True)) == without_ids(http.post("/v1/messages", json=msgs).json())


def test_many_concurrent_requests_share_one_socket_and_match_their_solo_runs(server: ServerProcess) -> None:
    http = httpx.Client(base_url=server.url, timeout=120)
    expected = [http.post("/v1/chat/completions", json=chat_body(i)).json()["choices"][0]["message"]["content"]
                for i in range(24)]
    rendered = http.post("/v1/chat/completions/render", json=chat_body(99)).json()
    gen_body = {"token_ids": rendered["token_ids"], "sampling_params": {"seed": 3, "max_tokens": 10}}
    expected_gen = http.post("/inference/v1/generate", json=gen_body).json()["choices"][0]["token_ids"]

    async def chat(client: client_sdk.AsyncClient, i: int) -> str:
        stream = await client.chat.completions.create(**chat_body(i), stream=True)
        return "".join([c.choices[0].delta.content or "" async for c in stream if c.choices])

    async def generate(client: client_sdk.AsyncClient) -> list[int]:
        stream = await client.generate(gen_body)
        return [t async for step in stream for t in step.choices[0].token_ids or ()]

    async def main() -> tuple[list[str], list[list[int]], str | None]:
        async with client_sdk.connect(proxy.url) as client:
            session = client.info.session_id
            texts, gens = await asyncio.gather(
                asyncio.gather(*(chat(client, i) for i in range(24))),
                asyncio.gather(*(generate(client) for _ in range(8))))
            assert client.info.session_id == session
            return list(texts), list(gens), session

    with TcpProxy(server.url) as proxy:
        texts, gens, session = asyncio.run(main())
        assert proxy.connections == 1  # 32 requests, one socket
    assert session is not None and session.startswith("sess_")
    assert texts == expected
    assert gens == [expected_gen] * 8


def test_cancelling_the_task_cancels_the_request_at_the_server(server: ServerProcess) -> None:
    async def main() -> tuple[int, str | None, str | None]:
        async with client_sdk.connect(server.url) as client:
            seen = asyncio.Event()

            async def consume() -> None:
                stream = await client.chat.completions.create(messages=USER, max_tokens=3000, stream=True)
                async for _ in stream:
                    seen.set()

            task = asyncio.create_task(consume())
            await seen.wait()
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
            await asyncio.to_thread(wait_idle, server.url)
            freed = live_sequences(server.url)
            # stream.cancel(): the stream ends with status "cancelled" after what was already sent
            stream = await client.chat.completions.create(messages=USER, max_tokens=3000, stream=True)
            count = 0
            async for _ in stream:
                count += 1
                if count == 2:
                    stream.cancel()
            # client.cancel(id) on a non-streaming call: RequestCancelled
            waiting = asyncio.create_task(client.chat.completions.create(messages=USER, max_tokens=3000))
            await asyncio.sleep(0)
            while not any(k.startswith("chat-") for k in client._live._channels):  # type: ignore[attr-defined]
                await asyncio.sleep(0.01)
            await client.cancel(next(iter(client._live._channels)))  # type: ignore[attr-defined]
            with pytest.raises(client_sdk.RequestCancelled):
                await waiting
            return freed, stream.status, None

    freed, status, _ = asyncio.run(main())
    assert freed == 0
    assert status == "cancelled"
    wait_idle(server.url)


def test_a_request_without_an_answer_in_time_raises_request_timeout(server: ServerProcess) -> None:
    async def main() -> None:
        with TcpProxy(server.url) as proxy:
            async with client_sdk.connect(proxy.url, keepalive_interval=0) as client:
                proxy.stall()
                with pytest.raises(client_sdk.RequestTimeout):
                    await client.chat.completions.create(messages=USER, max_tokens=4, timeout=0.5)
                proxy.release()
                answer = await client.chat.completions.create(messages=USER, max_tokens=4)
                assert answer.choices[0].finish_reason in ("length", "stop")

    asyncio.run(main())


def test_render_generate_and_the_state_carrying_derenderer_equal_the_chat_pipeline(server: ServerProcess) -> None:
    body = chat_body(42, max_tokens=10)

    async def main() -> tuple[str, str, list[GenerateStreamResponse]]:
        async with client_sdk.connect(server.url) as client:
            request = await client.render("chat", body)
            stream = await client.generate(request)
            derenderer = client.derenderer("chat", request=body, prompt_token_ids=request.token_ids)
            steps: list[GenerateStreamResponse] = []
            pieces = []
            async for step in stream:
                steps.append(step)
                pieces += await derenderer.push(step)
            assert stream.usage is not None and stream.usage.completion_tokens == sum(
                len(s.choices[0].token_ids or ()) for s in steps)
            assert derenderer.states[0]
            piped = await client.chat.completions.create(**body)
            text = "".join((p.choices[0].delta.reasoning or "") + (p.choices[0].delta.content or "")  # type: ignore[union-attr]
                           for p in pieces if p.choices)
            return text, (piped.choices[0].message.reasoning or "") + (piped.choices[0].message.content or ""), steps

    text, piped, steps = asyncio.run(main())
    assert text == piped and text
    assert all(isinstance(s, GenerateStreamResponse) for s in steps)


def test_server_errors_are_typed_exceptions_and_the_session_lives_on(server: ServerProcess) -> None:
    async def main() -> None:
        async with client_sdk.connect(server.url) as client:
            with pytest.raises(client_sdk.BadRequestError) as bad:
                await client.chat.completions.create(messages=[], max_tokens=4)
            assert bad.value.code == "invalid_request" and bad.value.status == 400 and bad.value.param == "messages"
            with pytest.raises(client_sdk.NotFoundError) as missing:
                await client.chat.completions.create(messages=USER, model="no-such-model", max_tokens=4)
            assert missing.value.status == 404
            with pytest.raises(client_sdk.BadStateError) as state:
                await client.derender("chat", {"generate_chunk": {"request_id": "x", "choices": [
                    {"index": 0, "token_ids": [1]}]}, "stream_state": "tw1.00000000.e30.AAAA", "prompt_token_ids": [1, 2], "chat_request": {
                    "messages": USER}})
            assert state.value.reason
            resumable = await client.messages.create(messages=USER, max_tokens=4, resumable=True)
            assert resumable.type == "message"  # messages streams are resumable too (checkpoints carry events)
            settings = await client.update_session(sampling={"max_tokens": 3})
            assert settings["sampling"] == {"max_tokens": 3}
            short = await client.chat.completions.create(messages=USER)
            assert short.usage.completion_tokens is not None and short.usage.completion_tokens <= 3
            with pytest.raises(client_sdk.BadRequestError):
                await client.update_session(sampling={"temperature": -1})

    asyncio.run(main())


def test_the_upgrade_refusals_are_final_typed_errors(asset: Callable[[str], Path]) -> None:
    async def main(url: str) -> None:
        with pytest.raises(client_sdk.AuthenticationError):
            await client_sdk.connect(url)
        with pytest.raises(client_sdk.PermissionDeniedError):
            await client_sdk.connect(url, api_key="wrong")
        async with client_sdk.connect(url, api_key="sekret") as client:
            assert client.transport == "websocket"
            with pytest.raises(client_sdk.NotEnabledError):  # plain serve: no primitive frames
                await client.render("chat", messages=USER)

    with ServerProcess(["serve", str(asset("tiny-qwen3")), "--dtype", "float32", "--api-key", "sekret"],
                       env={"TOKENWIRE_API_KEY": None}) as srv:
        asyncio.run(main(srv.url))


def test_the_sync_client_wraps_the_same_api(server: ServerProcess) -> None:
    with client_sdk.Client(server.url) as client:
        assert client.transport == "websocket"
        chunks = list(client.chat.completions.create(**chat_body(3), stream=True))
        whole = client.chat.completions.create(**chat_body(3))
        text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
        assert text == whole.choices[0].message.content and text
        events = list(client.messages.create(messages=USER, max_tokens=5, stream=True))
        assert events[0].type == "message_start" and events[-1].type == "message_stop"
        assert any(isinstance(e, ContentBlockDeltaEvent) for e in events)
        with client.chat.completions.create(messages=USER, max_tokens=3000, stream=True) as stream:
            next(iter(stream))
        wait_idle(server.url)  # leaving `with` cancelled it
        request = client.render("chat", chat_body(4))
        steps = list(client.generate(request))
        assert sum(len(s.choices[0].token_ids or ()) for s in steps) == 12


def test_keepalive_pings_hold_an_idle_session_open_and_a_closed_one_reopens(asset: Callable[[str], Path]) -> None:
    async def main(url: str) -> tuple[bool, bool, str | None]:
        async with client_sdk.connect(url, keepalive_interval=0.2) as kept, \
                client_sdk.connect(url, keepalive_interval=0) as idle:
            kept_id, idle_id = kept.info.session_id, idle.info.session_id
            # The server closes the silent session (1001 idle timeout); the client reopens it.
            for _ in range(600):
                if idle.info.session_id != idle_id:
                    break
                await asyncio.sleep(0.05)
            else:
                raise WaitTimeout("waited 30 s for the idle session to be closed and reopened")
            reopened = idle.info.session_id != idle_id
            answer = await idle.chat.completions.create(messages=USER, max_tokens=2)
            return reopened, kept.info.session_id == kept_id, answer.choices[0].finish_reason

    with ServerProcess(["serve", str(asset("tiny-qwen3")), "--dtype", "float32", "--ws-idle-timeout", "1"]) as srv:
        reopened, kept_same, finish = asyncio.run(main(srv.url))
    assert reopened
    assert kept_same  # the pinging session outlived an idle timeout
    assert finish in ("length", "stop")
