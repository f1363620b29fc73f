"""/v1/session over real sockets against ``tokenwire serve`` (tiny-qwen3, greedy): many interleaved
requests of every kind on one socket give what the HTTP endpoints give, and a stream cut off
mid-way resumes on another replica without a duplicated or missing token."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.e2e.ws_client import SessionClient, chat_text
from tests.support.server_proc import ServerProcess

pytestmark = pytest.mark.slow  # real servers loading models: the full suite only, not the fast loop

SECRET = "e2e-replicas-0123456789-abcdefghijklmnopqrstuvwxyz"
TOOLS = [{"type": "function", "function": {
    "name": "get_weather", "description": "Weather for a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}]


def serve_args(model: Path) -> list[str]:
    return ["serve", str(model), "--enable-scale-out", "--tool-call-parser", "hermes",
            "--enable-auto-tool-choice", "--dtype", "float32", "--state-secret", SECRET]


@pytest.fixture(scope="module")
def server(asset: Callable[[str], Path]) -> Iterator[ServerProcess]:
    with ServerProcess(serve_args(asset("tiny-qwen3"))) as srv:
        yield srv


def chat_body(i: int, *, tools: bool = False, max_tokens: int = 12) -> dict[str, Any]:
    """Seeded sampling: a random-weight model's greedy output is mostly newlines; seeded samples
    differ per request and are still reproducible."""
    body: dict[str, Any] = {"model": "tiny-qwen3", "temperature": 1.0, "seed": i, "max_tokens": max_tokens,
                            "messages": [{"role": "user", "content": f"Question number {i}: what is {i} + {i}?"}]}
    if tools:
        body["tools"] = TOOLS
    return body


def accumulate_chat(frames: list[dict[str, Any]]) -> dict[str, Any]:
    """An OpenAI client's accumulation of a streamed chat: content, tool calls, finish reason."""
    content, finish = "", None
    calls: dict[int, dict[str, str]] = {}
    for frame in frames:
        if frame["type"] != "chat.delta":
            continue
        for chunk in frame["chunks"]:
            for choice in chunk.get("choices", []):
                delta = choice.get("delta", {})
                content += delta.get("content") or ""
                for call in delta.get("tool_calls") or []:
                    slot = calls.setdefault(call["index"], {"name": "", "arguments": ""})
                    slot["name"] += (call.get("function") or {}).get("name") or ""
                    slot["arguments"] += (call.get("function") or {}).get("arguments") or ""
                finish = choice.get("finish_reason") or finish
    return {"content": content or None, "tool_calls": [calls[i] for i in sorted(calls)] or None, "finish": finish}


def from_http_chat(body: dict[str, Any]) -> dict[str, Any]:
    message, finish = body["choices"][0]["message"], body["choices"][0]["finish_reason"]
    calls = [{"name": c["function"]["name"], "arguments": c["function"]["arguments"]}
             for c in message.get("tool_calls") or []] or None
    return {"content": message.get("content") or None, "tool_calls": calls, "finish": finish}


def without_ids(rendered: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in rendered.items() if k != "request_id"}


def without_call_ids(choices: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Tool-call ids are random per derender: compare everything else."""
    out = []
    for choice in choices:
        calls = choice.get("delta", {}).get("tool_calls")
        if calls:
            choice = {**choice, "delta": {**choice["delta"], "tool_calls": [
                {k: v for k, v in call.items() if k != "id"} for call in calls]}}
        out.append(choice)
    return out


TOOL_CALL_TEXT = '<tool_call>\n{{"name": "get_weather", "arguments": {{"city": "Paris {i}"}}}}\n</tool_call>'


def test_fifty_interleaved_requests_of_mixed_kinds_match_the_http_endpoints(
        server: ServerProcess, tokenizer: Callable[[str], Any]) -> None:
    tok = tokenizer("qwen3")
    http = httpx.Client(base_url=server.url, timeout=120)
    tool_calls_seen = 0
    plan: list[tuple[str, dict[str, Any]]] = []
    expected: dict[str, Any] = {}
    for i in range(50):
        rid, kind = f"q{i}", i % 6
        if kind == 0:  # render
            body = chat_body(i, tools=i % 12 == 0)
            plan.append((rid, {"type": "render", "kind": "chat", "body": body}))
            expected[rid] = without_ids(http.post("/v1/chat/completions/render", json=body).json())
        elif kind == 1:  # generate from a rendered prompt
            rendered = http.post("/v1/chat/completions/render", json=chat_body(i)).json()
            gen = {"request_id": f"gen-{i}", "token_ids": rendered["token_ids"],
                   "sampling_params": {"seed": i, "max_tokens": 8}}
            plan.append((rid, {"type": "generate", "body": gen}))
            out = http.post("/inference/v1/generate", json={**gen, "request_id": f"ref-{i}"}).json()
            expected[rid] = out["choices"][0]["token_ids"]
        elif kind == 2:  # derender one chunk: generated tokens, or a hermes tool call
            body = chat_body(i, tools=True)
            rendered = http.post("/v1/chat/completions/render", json=body).json()
            if i % 4 == 0:
                ids = tok.encode(TOOL_CALL_TEXT.format(i=i), add_special_tokens=False)
            else:
                ids = http.post("/inference/v1/generate", json={
                    "token_ids": rendered["token_ids"], "sampling_params": {"seed": i, "max_tokens": 6}},
                ).json()["choices"][0]["token_ids"]
            step = {"generate_chunk": {"request_id": "generate-tokens-d", "choices": [{"index": 0, "token_ids": ids}]},
                    "stream_state": None, "prompt_token_ids": rendered["token_ids"], "chat_request": body}
            plan.append((rid, {"type": "derender", "kind": "chat", "body": step}))
            ref = http.post("/v1/chat/completions/derender", json={**step, "stream": True}).json()
            expected[rid] = without_call_ids(ref["chunk"]["choices"])
        elif kind in (3, 4):  # chat, with tools every other time
            body = chat_body(i, tools=kind == 4)
            plan.append((rid, {"type": "chat", "body": body}))
            expected[rid] = from_http_chat(http.post("/v1/chat/completions", json=body).json())
        else:  # a long chat, cancelled midway
            plan.append((rid, {"type": "chat", "body": chat_body(i, max_tokens=400)}))
            expected[rid] = "cancelled"

    async def main() -> dict[str, list[dict[str, Any]]]:
        client = await SessionClient.open(server.ws_url)
        for rid, frame in plan:
            await client.send(id=rid, event_id=f"e-{rid}", **frame)
        by_id: dict[str, list[dict[str, Any]]] = {}
        finals = {"render.done", "generate.done", "derender.delta", "chat.done", "error"}
        cancelled: set[str] = set()
        while len([r for r in by_id.values() if r[-1]["type"] in finals]) < len(plan):
            frame = await client.next()
            frames = by_id.setdefault(frame["id"], [])
            frames.append(frame)
            if expected[frame["id"]] == "cancelled" and frame["id"] not in cancelled:
                cancelled.add(frame["id"])
                await client.send(type="cancel", id=frame["id"])
        await client.close()
        return by_id

    by_id = asyncio.run(main())
    for rid, frames in by_id.items():
        assert all(f["event_id"] == f"e-{rid}" for f in frames), rid
        assert frames[-1]["type"] != "error", (rid, frames[-1])
        want = expected[rid]
        if want == "cancelled":
            assert (frames[-1]["type"], frames[-1]["status"]) == ("chat.done", "cancelled")
        elif frames[-1]["type"] == "render.done":
            assert without_ids(frames[-1]["result"]) == want
        elif frames[-1]["type"] == "generate.done":
            assert [t for f in frames[:-1] for t in f["chunk"]["choices"][0]["token_ids"]] == want
        elif frames[-1]["type"] == "derender.delta":
            assert without_call_ids(frames[-1]["result"]["chunk"]["choices"]) == want
            tool_calls_seen += bool(want[0]["delta"].get("tool_calls"))
        else:
            assert frames[-1]["status"] == "completed"
            assert accumulate_chat(frames) == want, rid
    assert tool_calls_seen >= 2  # the tool-call path was exercised, not just plain text


def test_a_stream_cut_off_midway_resumes_on_another_replica_without_gap_or_duplicate(
        server: ServerProcess, asset: Callable[[str], Path]) -> None:
    body = chat_body(7, max_tokens=24)
    reference = httpx.post(server.url + "/v1/chat/completions", json=body, timeout=120).json()
    want = reference["choices"][0]["message"]["content"]

    async def first_part() -> tuple[str, dict[str, Any], list[int]]:
        client = await SessionClient.open(server.ws_url)
        await client.send(type="chat", id="c", body=body, resumable=True)
        frames: list[dict[str, Any]] = []
        while sum(len(f["output_token_ids"]) for f in frames) < 8:
            frame = await client.next()
            assert frame["type"] == "chat.delta"
            frames.append(frame)
        client.ws.transport.abort()  # the connection is lost, no closing handshake
        text = chat_text(frames)
        last = next(f for f in reversed(frames) if f["checkpoint"])
        ids = [t for f in frames[:frames.index(last) + 1] for t in f["output_token_ids"]]
        covered = chat_text(frames[:frames.index(last) + 1])
        assert text.startswith(covered)
        return covered, {"request_id": last["stream_id"], "checkpoint": last["checkpoint"],
                         "output_token_ids": ids}, ids

    async def second_part(url: str, resume: dict[str, Any]) -> list[dict[str, Any]]:
        client = await SessionClient.open(url)
        await client.send(type="chat", id="c2", body=body, resume=resume)
        frames = await client.until("c2", "chat.done")
        await client.close()
        return frames

    covered, resume, _ = asyncio.run(first_part())
    with ServerProcess(serve_args(asset("tiny-qwen3"))) as replica:
        frames = asyncio.run(second_part(replica.ws_url, resume))
    assert frames[-1]["type"] == "chat.done", frames[-1]
    assert covered + chat_text(frames) == want
    assert {f["stream_id"] for f in frames[:-1]} == {resume["request_id"]}


def _message_text(frames: list[dict[str, Any]]) -> str:
    return "".join(ev["delta"].get("text", "") for fr in frames if fr["type"] == "messages.delta"
                   for ev in fr["events"] if ev["type"] == "content_block_delta")


def test_a_messages_stream_resumes_on_another_replica_continuing_the_same_event_sequence(
        server: ServerProcess, asset: Callable[[str], Path]) -> None:
    body = {"model": "tiny-qwen3", "max_tokens": 24, "temperature": 0,
            "messages": [{"role": "user", "content": "Tell me about lighthouses."}]}
    reference = httpx.post(server.url + "/v1/messages", json=body, timeout=120).json()
    want = "".join(b["text"] for b in reference["content"] if b["type"] == "text")

    async def first_part() -> tuple[list[dict[str, Any]], dict[str, Any]]:
        client = await SessionClient.open(server.ws_url)
        await client.send(type="messages", id="m", body=body, resumable=True)
        frames: list[dict[str, Any]] = []
        while sum(len(f["output_token_ids"] or []) for f in frames) < 8:
            frame = await client.next()
            assert frame["type"] == "messages.delta"
            frames.append(frame)
        client.ws.transport.abort()
        last = next(f for f in reversed(frames) if f["checkpoint"])
        kept = frames[:frames.index(last) + 1]
        ids = [t for f in kept for t in f["output_token_ids"] or []]
        return kept, {"request_id": last["stream_id"], "checkpoint": last["checkpoint"], "output_token_ids": ids}

    async def second_part(url: str, resume: dict[str, Any]) -> list[dict[str, Any]]:
        client = await SessionClient.open(url)
        await client.send(type="messages", id="m2", body=body, resume=resume)
        frames = await client.until("m2", "messages.done")
        await client.close()
        return frames

    kept, resume = asyncio.run(first_part())
    with ServerProcess(serve_args(asset("tiny-qwen3"))) as replica:
        rest = asyncio.run(second_part(replica.ws_url, resume))
    assert rest[-1]["type"] == "messages.done", rest[-1]
    events = [ev for fr in kept + rest if fr["type"] == "messages.delta" for ev in fr["events"]]
    types = [ev["type"] for ev in events]
    assert types.count("message_start") == 1 and types[0] == "message_start"
    assert types.count("message_stop") == 1 and types[-1] == "message_stop"
    starts = [ev["index"] for ev in events if ev["type"] == "content_block_start"]
    assert starts == list(range(len(starts)))  # no block reopened after the resume
    assert _message_text(kept) + _message_text(rest) == want
