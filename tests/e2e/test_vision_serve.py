"""Images end to end against a real ``tokenwire serve tiny-qwen2-vl`` process (fp32, greedy): over
HTTP (chat completions, Anthropic messages, render → generate) and over the WebSocket session
(``chat`` frame, resumed ``chat`` frame, ``generate`` frame) the output tokens equal
``model.generate`` on ``Qwen2VLProcessor``'s tensors; bad images are 400s."""

from __future__ import annotations

import asyncio
import base64
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.e2e.ws_client import SessionClient
from tests.support.server_proc import ServerProcess
from tests.support.vision import (
    VL_MODEL,
    VisionReference,
    data_url,
    encoded,
    image,
    openai_content,
    png_header,
    reference_content,
)

pytestmark = pytest.mark.slow  # real servers loading models: the full suite only, not the fast loop

NEW = 12
IMAGES = [image(10, 60, 45), image(11, 30, 120)]


@pytest.fixture(scope="module")
def server(asset: Callable[[str], Path]) -> Iterator[ServerProcess]:
    args = ["serve", str(asset(VL_MODEL)), "--enable-scale-out", "--dtype", "float32", "--max-model-len", "2048",
            "--state-secret", "e2e-vision-0123456789-abcdefghijklmnopqrstuvwxyz"]
    with ServerProcess(args) as srv:
        yield srv


@pytest.fixture(scope="module")
def http(server: ServerProcess) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=server.url, timeout=120) as client:
        yield client


@pytest.fixture(scope="module")
def want(asset: Callable[[str], Path]) -> dict[int, list[int]]:
    """Greedy tokens of ``model.generate`` for one image and for two."""
    ref = VisionReference(asset(VL_MODEL), "float32")
    return {k: ref.greedy([{"role": "user", "content": reference_content(IMAGES[:k])}], NEW) for k in (1, 2)}


def chat_body(count: int, **extra: Any) -> dict[str, Any]:
    return {"model": VL_MODEL, "max_tokens": NEW, "temperature": 0, "return_token_ids": True,
            "messages": [{"role": "user", "content": openai_content([data_url(im) for im in IMAGES[:count]])}],
            **extra}


def test_http_chat_completions_with_images_equal_model_generate(http: httpx.Client,
                                                                want: dict[int, list[int]]) -> None:
    assert want[1] != want[2]
    for k in (1, 2):
        r = http.post("/v1/chat/completions", json=chat_body(k))
        assert r.status_code == 200, r.text
        assert r.json()["choices"][0]["token_ids"] == want[k]


def test_http_render_then_generate_with_images_equals_model_generate(http: httpx.Client,
                                                                     want: dict[int, list[int]]) -> None:
    rendered = http.post("/v1/chat/completions/render", json=chat_body(2))
    assert rendered.status_code == 200, rendered.text
    body = rendered.json()
    assert body["features"]["mm_placeholders"]["image"][1]["length"] > 0
    out = http.post("/inference/v1/generate", json=body)
    assert out.status_code == 200, out.text
    assert out.json()["choices"][0]["token_ids"] == want[2]


def test_anthropic_messages_with_an_image_block_answer_like_the_chat(http: httpx.Client) -> None:
    data = base64.b64encode(encoded(IMAGES[0])).decode()
    msg = {"model": VL_MODEL, "max_tokens": NEW, "temperature": 0, "messages": [{"role": "user", "content": [
        {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": data}},
        {"type": "text", "text": "What is in the picture?"}]}]}
    a = http.post("/v1/messages", json=msg)
    assert a.status_code == 200, a.text
    chat = http.post("/v1/chat/completions", json=chat_body(1)).json()
    text = "".join(b.get("text", "") for b in a.json()["content"] if b["type"] == "text")
    assert text == (chat["choices"][0]["message"]["content"] or "")


def test_websocket_chat_and_generate_frames_with_images_equal_model_generate(
        server: ServerProcess, http: httpx.Client, want: dict[int, list[int]]) -> None:
    rendered = http.post("/v1/chat/completions/render", json=chat_body(1)).json()

    async def main() -> tuple[list[int], list[int], list[int]]:
        client = await SessionClient.open(server.ws_url)
        await client.send(type="chat", id="c", body=chat_body(2), resumable=True)
        await client.send(type="generate", id="g", body={**rendered, "request_id": "ws-gen"})
        chat = await client.until("c", "chat.done")
        gen = [f for f in client.frames if f.get("id") == "g"]
        if not gen or gen[-1]["type"] not in ("generate.done", "error"):
            gen += await client.until("g", "generate.done")
        await client.close()
        assert chat[-1]["type"] == "chat.done" and chat[-1]["status"] == "completed", chat[-1]
        assert gen[-1]["type"] == "generate.done", gen[-1]
        chat_ids = [t for f in chat if f["type"] == "chat.delta" for t in f["output_token_ids"]]
        chunk_ids = [t for f in chat if f["type"] == "chat.delta" for ch in f["chunks"]
                     for c in ch.get("choices", []) for t in c.get("token_ids") or []]
        gen_ids = [t for f in gen if f["type"] == "generate.delta" for t in f["chunk"]["choices"][0]["token_ids"]]
        return chat_ids, chunk_ids, gen_ids

    chat_ids, chunk_ids, gen_ids = asyncio.run(main())
    assert chat_ids == chunk_ids == want[2]
    assert gen_ids == want[1]


def test_a_websocket_chat_with_images_resumes_without_gap_or_duplicate(server: ServerProcess,
                                                                      want: dict[int, list[int]]) -> None:
    """The resumed request re-renders the images and continues from prompt + output (M-RoPE
    positions of the earlier output included)."""
    body = chat_body(2)

    async def main() -> list[int]:
        client = await SessionClient.open(server.ws_url)
        await client.send(type="chat", id="c", body=body, resumable=True)
        frames: list[dict[str, Any]] = []
        while sum(len(f["output_token_ids"]) for f in frames) < 4:
            frame = await client.next()
            assert frame["type"] == "chat.delta", frame
            frames.append(frame)
        client.ws.transport.abort()
        last = next(f for f in reversed(frames) if f["checkpoint"])
        ids = [t for f in frames[:frames.index(last) + 1] for t in f["output_token_ids"]]
        again = await SessionClient.open(server.ws_url)
        await again.send(type="chat", id="c2", body=body, resume={
            "request_id": last["stream_id"], "checkpoint": last["checkpoint"], "output_token_ids": ids})
        rest = await again.until("c2", "chat.done")
        await again.close()
        assert rest[-1]["type"] == "chat.done", rest[-1]
        return ids + [t for f in rest if f["type"] == "chat.delta" for t in f["output_token_ids"]]

    assert asyncio.run(main()) == want[2]


PNG = encoded(IMAGES[0])


def url_of(data: bytes, media: str = "image/png") -> str:
    return f"data:{media};base64,{base64.b64encode(data).decode()}"


@pytest.mark.parametrize(("url", "expected"), [
    (url_of(PNG[: len(PNG) // 2]), "corrupt or truncated"),
    (url_of(png_header(60_000, 60_000)), "pixels"),
    (url_of(b"GIF89a\x01\x00\x01\x00\x00\x00\x00;", "image/gif"), "unsupported image type"),
    ("data:image/png;base64,***", "not valid base64"),
    ("https://example.com/cat.png", "does not fetch images"),
], ids=["truncated", "huge", "wrong type", "not base64", "url"])
def test_bad_images_are_400s_over_http(http: httpx.Client, url: str, expected: str) -> None:
    body = {**chat_body(1), "messages": [{"role": "user", "content": openai_content([url])}]}
    for path in ("/v1/chat/completions", "/v1/chat/completions/render"):
        r = http.post(path, json=body)
        assert r.status_code == 400, r.text
        err = r.json()["error"]
        assert err["param"] == "messages.0.content.0.image_url" and expected in err["message"], err
    source = {"type": "base64", "media_type": url[5:url.index(";")] if url.startswith("data:") else "image/png",
              "data": url.partition(",")[2]} if url.startswith("data:") else {"type": "url", "url": url}
    r = http.post("/v1/messages", json={"model": VL_MODEL, "max_tokens": 4, "messages": [
        {"role": "user", "content": [{"type": "image", "source": source}]}]})
    assert r.status_code == 400, r.text
    assert r.json()["type"] == "error" and expected in r.json()["error"]["message"]


def test_bad_features_on_generate_are_400s(http: httpx.Client) -> None:
    body = http.post("/v1/chat/completions/render", json=chat_body(1)).json()
    body["features"]["mm_placeholders"]["image"][0]["offset"] += 1
    r = http.post("/inference/v1/generate", json=body)
    assert r.status_code == 400, r.text
    assert r.json()["error"]["param"] == "features.mm_placeholders"


def test_launch_render_renders_images_without_torch(asset: Callable[[str], Path], http: httpx.Client) -> None:
    from tests.e2e.test_cli import BREAK_TORCH

    want = http.post("/v1/chat/completions/render", json=chat_body(2)).json()
    with ServerProcess(["launch", "render", str(asset(VL_MODEL)), "--max-model-len", "2048"],
                       preamble=BREAK_TORCH) as render:
        got = httpx.post(render.url + "/v1/chat/completions/render", json=chat_body(2), timeout=60)
    assert got.status_code == 200, got.text
    assert {k: v for k, v in got.json().items() if k != "request_id"} == \
        {k: v for k, v in want.items() if k != "request_id"}
