"""``/inference/v1/generate`` and ``/abort_requests`` in-process, on a real LocalEngine: vLLM
0.32's request accepted verbatim, its JSON and SSE shapes given back, errors as 4xx envelopes,
and the routes present only where the gating says."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from starlette.testclient import TestClient

from engine.local import LocalEngine
from server.app import create_app
from server.context import ServerContext
from server.gating import decide
from server.settings import Mode, Settings

MODEL = "tiny-qwen3"
SAMPLES = json.loads((Path(__file__).parents[1] / "data" / "vllm" / "generate_samples.json").read_text())
GENERATE = "/inference/v1/generate"


def _ctx(asset: Callable[[str], Path], tokenizer: Callable[[str], Any], mode: Mode = Mode.TOKENS_ONLY,
         environ: dict[str, str] | None = None, engine: bool = True) -> ServerContext:
    path = asset(MODEL)
    settings = Settings(mode=mode, model_dir=path, served_model_name="tiny-model", environ={})
    eng = LocalEngine(path, model_name="tiny-model", max_model_len=4096, dtype="float32", num_threads=1) \
        if engine else None
    return ServerContext(settings=settings, gating=decide(mode, environ or {}), tokenizer=tokenizer(MODEL),
                         max_model_len=4096, engine=eng)


@pytest.fixture(scope="module")
def client(asset: Callable[[str], Path], tokenizer: Callable[[str], Any]) -> Iterator[TestClient]:
    with TestClient(create_app(_ctx(asset, tokenizer))) as c:
        yield c


def sample_request(**changes: Any) -> dict[str, Any]:
    body: dict[str, Any] = json.loads(json.dumps(SAMPLES["generate_nonstream"]["request"]))
    sp = changes.pop("sampling_params", {})
    body["sampling_params"].update(sp)
    body.update(changes)
    return body


def sse_events(text: str) -> list[Any]:
    assert text.endswith("\n\n")
    events = text.strip("\n").split("\n\n")
    assert all(e.startswith("data: ") and "\n" not in e for e in events)
    return [e[len("data: "):] if e == "data: [DONE]" else json.loads(e[len("data: "):]) for e in events]


def test_vllm_render_output_is_generated_in_vllm_json_shape(client: TestClient) -> None:
    r = client.post(GENERATE, json=sample_request())
    assert r.status_code == 200
    body = r.json()
    vllm = SAMPLES["generate_nonstream"]["response"]
    assert body["request_id"] == vllm["request_id"] == "generate-tokens-chatcmpl-9e1da87220c00168"
    assert {"request_id", "model", "created", "usage", "output_mode", "choices"} <= set(body)
    assert set(body["choices"][0]) == {"index", "finish_reason", "stop_reason", "token_ids", "logprobs"}
    choice = body["choices"][0]
    assert (choice["finish_reason"], len(choice["token_ids"]), choice["logprobs"]) == ("length", 8, None)
    assert body["usage"]["prompt_tokens"] == 27 and body["usage"]["completion_tokens"] == 8
    assert body["model"] == "tiny-model" and body["output_mode"] == "tokens"


def test_minimal_body_gets_a_fresh_id(client: TestClient) -> None:
    r = client.post(GENERATE, json=SAMPLES["generate_minimal"]["request"])
    assert r.status_code == 200
    assert r.json()["request_id"].startswith("generate-tokens-") and len(r.json()["choices"][0]["token_ids"]) == 4


def test_sse_has_one_chunk_per_step_then_usage_then_done(client: TestClient) -> None:
    plain = client.post(GENERATE, json=sample_request()).json()["choices"][0]["token_ids"]
    body = sample_request(stream=True, stream_options={"include_usage": True},
                          sampling_params={"output_kind": 1})
    r = client.post(GENERATE, json=body)
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream")
    events = sse_events(r.text)
    assert events[-1] == "[DONE]"
    chunks, usage = events[:-2], events[-2]
    vllm_chunk = json.loads(SAMPLES["generate_stream"]["raw_lines"][0][len("data: "):])
    assert list(chunks[0]) == ["request_id", "usage", "output_mode", "choices"]
    assert set(chunks[0]["choices"][0]) <= set(vllm_chunk["choices"][0])
    assert [len(c["choices"][0]["token_ids"]) for c in chunks] == [1] * 8
    assert [t for c in chunks for t in c["choices"][0]["token_ids"]] == plain
    assert [c["choices"][0]["finish_reason"] for c in chunks] == [None] * 7 + ["length"]
    assert all(c["usage"] is None and c["request_id"] == vllm_chunk["request_id"] for c in chunks)
    assert usage == {"request_id": vllm_chunk["request_id"], "output_mode": "tokens", "choices": [],
                     "usage": {"prompt_tokens": 27, "completion_tokens": 8, "total_tokens": 35}}


def test_sse_without_include_usage_ends_with_done(client: TestClient) -> None:
    r = client.post(GENERATE, json=sample_request(stream=True, sampling_params={"max_tokens": 2}))
    events = sse_events(r.text)
    assert events[-1] == "[DONE]" and all(e["choices"] for e in events[:-1])


def test_logprobs_in_json_are_vllm_integer_entries(client: TestClient) -> None:
    r = client.post(GENERATE, json=sample_request(sampling_params={"max_tokens": 3, "logprobs": 2}))
    content = r.json()["choices"][0]["logprobs"]["content"]
    vllm = SAMPLES["generate_logprobs"]["response"]["choices"][0]["logprobs"]["content"][0]
    assert len(content) == 3 and set(content[0]) == set(vllm)
    assert [set(t) for t in content[0]["top_logprobs"]] == [set(t) for t in vllm["top_logprobs"]]
    assert [t["rank"] for t in content[0]["top_logprobs"]] == [1, 2]


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize(("change", "param"), [
    ({"sampling_params": {"temperature": -1}}, "sampling_params.temperature"),
    ({"sampling_params": {"top_p": 0}}, "sampling_params.top_p"),
    ({"sampling_params": {"max_tokens": 0}}, "sampling_params.max_tokens"),
    ({"token_ids": list(range(1, 4097))}, "token_ids"),
    ({"token_ids": [1, 2, 999999]}, "token_ids"),
    ({"token_ids": []}, "token_ids"),
])
def test_bad_requests_are_400_naming_the_field(client: TestClient, change: dict[str, Any], param: str,
                                               stream: bool) -> None:
    r = client.post(GENERATE, json=sample_request(stream=stream, **change))
    assert r.status_code == 400 and r.headers["content-type"] == "application/json"
    err = r.json()["error"]
    assert err["param"] == param and err["type"] == "BadRequestError" and err["code"] == 400


@pytest.mark.parametrize("max_tokens", [5000, None])
def test_max_tokens_past_the_context_generates_up_to_the_context_length(client: TestClient,
                                                                        max_tokens: int | None) -> None:
    # vLLM 0.32: max_tokens is an upper bound; the output ends with "length" at the context length
    prompt = [(i * 7919) % 150_000 + 10 for i in range(4090)]
    r = client.post(GENERATE, json=sample_request(token_ids=prompt, sampling_params={
        "max_tokens": max_tokens, "ignore_eos": True, "logprobs": None}))
    assert r.status_code == 200, r.text
    (choice,) = r.json()["choices"]
    assert len(choice["token_ids"]) == 6 and choice["finish_reason"] == "length"


def test_unknown_model_is_404_like_vllm_naming_the_served_model(client: TestClient) -> None:
    r = client.post(GENERATE, json=sample_request(model="other"))
    assert r.status_code == 404
    assert r.json()["error"] == {"message": "The model `other` does not exist. This server serves `tiny-model`.",
                                 "type": "NotFoundError",
                                 "param": "model", "code": 404}


def test_abort_requests_answers_200_empty_for_any_id(client: TestClient) -> None:
    for path in ("/abort_requests", "/inference/v1/abort_requests"):
        r = client.post(path, json={"request_ids": ["nonexistent", "generate-tokens-x"]})
        assert (r.status_code, r.content) == (200, b"")
    assert client.post("/abort_requests", json={"ids": []}).status_code == 400


def test_engine_stats_show_no_live_sequence_when_idle(client: TestClient) -> None:
    client.post(GENERATE, json=sample_request(sampling_params={"max_tokens": 2}))
    body = client.get("/engine/stats").json()
    assert body["engine"] == "LocalEngine" and body["ok"] is True
    assert body["live_sequences"] == 0 and body["stats"]["dtype"] == "float32"


def test_plain_serve_has_no_generate_routes_unless_scale_out(asset: Callable[[str], Path],
                                                             tokenizer: Callable[[str], Any]) -> None:
    closed = TestClient(create_app(_ctx(asset, tokenizer, Mode.SERVE, engine=False)))
    assert closed.post(GENERATE, json=sample_request()).status_code == 404
    assert closed.post("/abort_requests", json={"request_ids": []}).status_code == 404
    opened = TestClient(create_app(_ctx(asset, tokenizer, Mode.SERVE, {"TOKENWIRE_ENABLE_SCALE_OUT_ENDPOINTS": "1"},
                                        engine=False)))
    assert opened.post(GENERATE, json=sample_request()).status_code == 503  # the route exists; no engine here
    assert opened.post("/abort_requests", json={"request_ids": []}).status_code == 404  # tokens-only only
