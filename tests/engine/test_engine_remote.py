"""RemoteEngine against scripted remotes on a loopback socket (tests/support/http_answers.py):
vLLM 0.32's real answers are understood, cancelling aborts at the remote, every failure is a clear
engine error, and the client's own HTTP/1.1 (keep-alive pool, chunked and Content-Length bodies,
answers split anywhere across reads) reads them all alike."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from engine.errors import (
    EngineOverloaded,
    EngineProtocolError,
    EngineTimeout,
    EngineUnavailable,
    InvalidGenerateRequest,
)
from engine.interface import EngineOutput
from engine.protocol import GenerateRequest
from engine.remote import RemoteEngine
from tests.support.http_answers import AnswerServer, refused_url, stop_all

SAMPLES = json.loads((Path(__file__).parents[1] / "data" / "vllm" / "generate_samples.json").read_text())


@pytest.fixture(autouse=True)
def _servers() -> Iterator[None]:
    yield
    stop_all()

Handler = Callable[[httpx.Request], Awaitable[httpx.Response]]


class Remote:
    """A scripted remote engine that records what it was asked."""

    def __init__(self, generate: Handler, *, abort_status: dict[str, int] | None = None) -> None:
        self.generate = generate
        self.abort_status = abort_status or {}
        self.generate_bodies: list[dict[str, Any]] = []
        self.aborts: list[tuple[str, list[str]]] = []
        self.server: AnswerServer | None = None

    async def __call__(self, request: httpx.Request) -> httpx.Response:
        path = request.url.path
        if path == "/inference/v1/generate":
            self.generate_bodies.append(json.loads(request.content))
            return await self.generate(request)
        if path.endswith("abort_requests"):
            self.aborts.append((path, json.loads(request.content)["request_ids"]))
            return httpx.Response(self.abort_status.get(path, 200))
        if path == "/health":
            return httpx.Response(200, json={"status": "ok"})
        return httpx.Response(404)

    def engine(self, **kw: Any) -> RemoteEngine:
        if self.server is None:
            self.server = AnswerServer(self).start()
        return RemoteEngine(self.server.url, model_name="m", max_model_len=4096, **kw)


def sse(*events: Any) -> httpx.Response:
    body = b"".join(b"data: " + (e if isinstance(e, bytes) else json.dumps(e).encode()) + b"\n\n" for e in events)
    return httpx.Response(200, headers={"content-type": "text/event-stream; charset=utf-8"}, content=body)


def vllm_stream(request: httpx.Request) -> Awaitable[httpx.Response]:
    raw = "\n".join(SAMPLES["generate_stream"]["raw_lines"]) + "\n"
    return _ready(httpx.Response(200, headers={"content-type": "text/event-stream; charset=utf-8"},
                                 content=raw.encode()))


def vllm_stream_running(request: httpx.Request) -> Awaitable[httpx.Response]:
    """vLLM's stream, its first two events: the engine is still generating when the client leaves."""
    raw = "\n".join(SAMPLES["generate_stream"]["raw_lines"]) + "\n"
    return _ready(httpx.Response(200, headers={"content-type": "text/event-stream; charset=utf-8"},
                                 content=raw.encode(), extensions={"hang_after": 2}))


async def _ready(r: httpx.Response) -> httpx.Response:
    return r


def fixed(r: httpx.Response) -> Handler:
    async def handler(request: httpx.Request) -> httpx.Response:
        return r
    return handler


def run(engine: RemoteEngine, req: GenerateRequest, stop_after: int | None = None) -> list[EngineOutput]:
    async def main() -> list[EngineOutput]:
        outs: list[EngineOutput] = []
        try:
            agen = engine.generate(req)
            async for out in agen:
                outs.append(out)
                if stop_after is not None and len(outs) >= stop_after:
                    await agen.aclose()
                    break
        finally:
            await engine.close()
        return outs
    return asyncio.run(main())


def req(**sp: Any) -> GenerateRequest:
    return GenerateRequest.model_validate({**SAMPLES["generate_stream"]["request"], "stream": False,
                                           "sampling_params": {"max_tokens": 8, "temperature": 0, **sp}})


def test_vllm_stream_becomes_outputs_with_usage_at_the_end() -> None:
    remote = Remote(vllm_stream)
    outs = run(remote.engine(), req())
    # one output per event, merged where they arrived before the reader took them (engine/outbox.py)
    assert [t for o in outs for t in o.choices[0].token_ids] == [201] * 8
    assert [o.finished for o in outs] == [False] * (len(outs) - 1) + [True]
    last = outs[-1]
    assert last.choices[0].finish_reason == "length" and last.usage is not None
    assert (last.usage.prompt_tokens, last.usage.completion_tokens) == (27, 8)
    sent = remote.generate_bodies[0]
    assert sent["stream"] is True and sent["stream_options"]["include_usage"] is True
    # the engine's id for it, never the client-visible one (engine/access.py)
    assert sent["request_id"].startswith("tw-") and "chatcmpl" not in sent["request_id"]
    assert sent["sampling_params"]["max_tokens"] == 8 and sent["sampling_params"]["output_kind"] == 1
    assert not remote.aborts


def test_a_plain_json_answer_is_accepted_too() -> None:
    remote = Remote(fixed(httpx.Response(200, json=SAMPLES["generate_logprobs"]["response"])))
    outs = run(remote.engine(), req(logprobs=2))
    assert len(outs) == 1 and outs[0].finished
    choice = outs[0].choices[0]
    assert choice.token_ids == [201, 201, 201] and choice.logprobs is not None
    assert choice.logprobs[0].top_logprobs[1].token_id == 19437


def test_older_vllm_logprob_strings_are_read_as_token_ids() -> None:
    chunk = {"request_id": "x", "choices": [{"index": 0, "token_ids": [5], "finish_reason": "length",
                                             "logprobs": {"content": [{"token": "token_id:5", "logprob": -1.0,
                                                                       "top_logprobs": [{"token": "token_id:5",
                                                                                         "logprob": -1.0}]}]}}]}
    outs = run(Remote(fixed(sse(chunk, b"[DONE]"))).engine(), req(max_tokens=1, logprobs=1))
    lp = outs[0].choices[0].logprobs
    assert lp is not None and lp[0].token_id == 5 and lp[0].top_logprobs[0].token_id == 5


def test_n_choices_finish_only_when_all_have_finished() -> None:
    def chunk(*choices: tuple[int, int, str | None]) -> dict[str, Any]:
        return {"request_id": "x", "usage": None,
                "choices": [{"index": i, "token_ids": [t], "finish_reason": f} for i, t, f in choices]}
    remote = Remote(fixed(sse(chunk((0, 1, None), (1, 2, None)), chunk((0, 3, "stop")), chunk((1, 4, "length")),
                              {"request_id": "x", "usage": {"prompt_tokens": 3, "completion_tokens": 4,
                                                            "total_tokens": 7}, "choices": []}, b"[DONE]")))
    outs = run(remote.engine(), req(n=2))
    assert [o.finished for o in outs] == [False] * (len(outs) - 1) + [True]
    tokens: dict[int, list[int]] = {0: [], 1: []}
    reasons: dict[int, str | None] = {}
    for o in outs:
        for c in o.choices:
            tokens[c.index] += c.token_ids
            reasons[c.index] = c.finish_reason or reasons.get(c.index)
    assert tokens == {0: [1, 3], 1: [2, 4]} and reasons == {0: "stop", 1: "length"}
    assert outs[-1].usage is not None and outs[-1].usage.total_tokens == 7


def test_leaving_early_aborts_at_the_remote() -> None:
    remote = Remote(vllm_stream_running)
    outs = run(remote.engine(), req(), stop_after=1)
    assert len(outs) == 1 and not outs[0].finished
    assert remote.aborts == [("/abort_requests", [remote.generate_bodies[0]["request_id"]])]


def test_abort_falls_back_to_vllm_032_path() -> None:
    remote = Remote(vllm_stream_running, abort_status={"/abort_requests": 404})

    async def main() -> None:
        engine = remote.engine()
        for _ in range(2):  # two requests that leave early
            stream = engine.generate(req())
            await anext(stream)
            await stream.aclose()
        await engine.close()

    asyncio.run(main())
    a, b = (body["request_id"] for body in remote.generate_bodies)
    assert remote.aborts == [("/abort_requests", [a]), ("/inference/v1/abort_requests", [a]),
                             ("/inference/v1/abort_requests", [b])]


@pytest.mark.parametrize(("response", "error", "text"), [
    (httpx.Response(400, json={"error": {"message": "sampling_params.top_p must be in (0, 1]", "type": "BadRequestError",
                                         "param": "sampling_params.top_p", "code": 400}}),
     InvalidGenerateRequest, "refused the request as invalid (HTTP 400)"),
    (httpx.Response(503, json={"error": {"message": "busy"}}), EngineOverloaded, "overloaded"),
    (httpx.Response(500, text="Traceback (most recent call last): secret"), EngineUnavailable, "HTTP 500"),
    (httpx.Response(404, json={"error": {"message": "The model `m` does not exist."}}), EngineUnavailable,
     "(HTTP 404)"),
    (httpx.Response(200, headers={"content-type": "text/html"}, text="<html>hello</html>"), EngineProtocolError,
     "invalid answer"),
    (sse(b"{not json"), EngineProtocolError, "not JSON"),
    (sse({"request_id": "x", "choices": "nope"}), EngineProtocolError, "choices is not a list"),
    (sse({"request_id": "x", "tokens": [1]}), EngineProtocolError, "not a generate stream chunk"),
    (sse({"request_id": "x", "choices": [{"index": 0, "token_ids": [1], "finish_reason": None}]}),
     EngineUnavailable, "ended the stream"),
    (sse({"error": {"message": "engine died", "code": 500}}), EngineUnavailable, "failed mid-stream"),
])
def test_failures_are_clear_engine_errors(response: httpx.Response, error: type[Exception], text: str) -> None:
    with pytest.raises(error) as info:
        run(Remote(fixed(response)).engine(), req())
    assert text in str(info.value)
    # the engine's own text is logged, never passed on (issue 39 item 8)
    for theirs in ("Traceback", "top_p must be", "busy", "does not exist", "hello", "engine died"):
        assert theirs not in str(info.value)


def test_400_keeps_the_remote_param_when_it_is_a_field_path() -> None:
    body = {"error": {"message": "bad", "type": "BadRequestError", "param": "token_ids", "code": 400}}
    with pytest.raises(InvalidGenerateRequest) as info:
        run(Remote(fixed(httpx.Response(400, json=body))).engine(), req())
    assert info.value.param == "token_ids"
    body["error"]["param"] = "see http://10.0.0.7:8000/debug"
    with pytest.raises(InvalidGenerateRequest) as info:
        run(Remote(fixed(httpx.Response(400, json=body))).engine(), req())
    assert info.value.param is None


def test_unreachable_and_hanging_remotes() -> None:
    async def hang(request: httpx.Request) -> httpx.Response:
        await asyncio.sleep(30)
        raise AssertionError("the client waits no longer")

    url = refused_url()
    with pytest.raises(EngineUnavailable) as down:
        run(RemoteEngine(url, model_name="m", max_model_len=4096), req())
    assert down.value.message == "Cannot reach the remote engine (connection failed)."
    assert "127.0.0.1" not in down.value.message  # the engine's address is internal
    with pytest.raises(EngineTimeout) as slow:
        run(Remote(hang).engine(read_timeout=0.3), req())
    assert "did not answer within 0.3 s" in slow.value.message and slow.value.status == 504


def test_health_reports_an_unreachable_remote() -> None:
    async def main() -> tuple[bool, bool, str]:
        up = Remote(vllm_stream).engine()
        down = RemoteEngine(refused_url(), model_name="m", max_model_len=10)
        a, b = await up.health(), await down.health()
        await up.close()
        await down.close()
        return a.ok, b.ok, b.detail

    ok_up, ok_down, detail = asyncio.run(main())
    assert ok_up and not ok_down and "unreachable" in detail
